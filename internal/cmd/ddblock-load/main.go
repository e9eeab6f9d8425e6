// Command ddblock-load measures how many locks one ddblock client keeps
// alive against a DynamoDB-compatible server, and how fast that server
// takes conditional writes at all, so that one can be read as a share of
// the other. It is a measuring tool, not a test: it asserts nothing, and
// prints what it saw.
//
// By default it starts dynalite itself (internal/testserver.Start, which the
// tests' ddbtest.Start wraps), on a free loopback port, and stops it at
// the end; --server dynamodb-local starts Amazon's DynamoDB Local instead,
// and --endpoint points it at a server that is already running.
//
// A run has two parts:
//
//   - the server's ceiling: 8, 16 and 32 goroutines (--ceiling-writers)
//     each rewrite keys of their own with the heartbeat's conditional
//     UpdateItem, as fast as the server answers, for --ceiling-duration;
//   - one scenario per entry of --locks: a fresh client (through a
//     wrapper that records every successful write per lock key) acquires
//     that many locks with --acquire-workers goroutines, holds them for
//     --settle unmeasured, then for the --duration of the measured window
//     while a probe acquires and releases fresh locks. It reports late
//     rounds, the largest gap between two successful heartbeats of each
//     lock (and, apart, from each acquire to its first heartbeat), early
//     repeats (a heartbeat less than half a period after the lock's
//     previous successful write), locks in danger, goroutines, heap per
//     held lock, the probe's acquire latency, and the CPU used by the
//     client, the server and the rest of the machine.
//
// With --session the client holds its locks through one session item
// (ddblock.WithSessionLease): the locks are written once and only the
// session item is heartbeated, so the heartbeat figures are the session
// item's, and each lock's gaps are those of its session's heartbeats.
//
// Examples (see doc/benchmarks.md for the figures):
//
//	go run ./internal/cmd/ddblock-load --ceiling-only
//	go run ./internal/cmd/ddblock-load --locks 1000,10000 --period 5s
//	go run ./internal/cmd/ddblock-load --locks 1000,2000,3000,4000,5000,6000,8000 --period 1s --duration 25s
//	go run ./internal/cmd/ddblock-load --json --locks 1000,10000 --period 5s > runs.jsonl
//	go run ./internal/cmd/ddblock-load --server dynamodb-local --locks 1000 --period 1s
//	go run ./internal/cmd/ddblock-load --session --json --no-ceiling --locks 100000 --period 1s
//
// With --scenario contention it measures instead how the waiters of one
// key are served (see contention.go): --contenders clients, spread over
// --procs worker processes (copies of this command), loop acquire, hold
// for --hold, release on one key (or --keys keys) for --duration, waiting
// with a --retry-period in the --wait-mode given. It reports acquisitions
// per contender with Jain's fairness index, the waits, the longest streak
// by one contender, the handoffs from one holder to the next, and the
// reads and writes per second each key cost on the wire:
//
//	go run ./internal/cmd/ddblock-load --scenario contention --contenders 12 --procs 3 --hold 30ms --retry-period 50ms --duration 45s
//
// With --json, each scenario is also printed as one JSON object a line on
// standard output (the text report moves to standard error): its fields
// are documented on jsonResult.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/testserver"
)

// config is the command line.
type config struct {
	locks          []int
	period         time.Duration
	safe, lease    time.Duration
	duration       time.Duration
	settle         time.Duration
	concurrency    int
	tps            int
	acquireWorkers int
	probeEvery     time.Duration
	ceiling        bool
	ceilingOnly    bool
	ceilingWriters []int
	ceilingFor     time.Duration
	ceilingWarmUp  time.Duration
	server         testserver.Kind // the server to start, unless endpoint is set
	endpoint       string
	cpuProfile     string
	memProfile     string
	json           bool
	session        bool // the client holds its locks through a session item (WithSessionLease)
	scenario       string
	contention     contentionConfig
}

func main() {
	if isWorker() {
		os.Exit(workerMain(os.Stdin, os.Stdout))
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ddblock-load:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("ddblock-load", flag.ContinueOnError)
	cfg := &config{}
	locks := fs.String("locks", "1000,10000", "comma-separated numbers of locks: one scenario each")
	fs.DurationVar(&cfg.period, "period", ddblock.DefaultHeartbeatPeriod, "heartbeat period")
	fs.DurationVar(&cfg.safe, "safe", 0, "safe period (default 4 × period, the library's default ratio)")
	fs.DurationVar(&cfg.lease, "lease", 0, "lease duration (default 6 × period, the library's default ratio)")
	fs.DurationVar(&cfg.duration, "duration", 0, "how long each scenario holds its locks (default 4 × period, at least 20s); with --scenario contention, the measured window (default 45s)")
	fs.DurationVar(&cfg.settle, "settle", -1, "how long to hold the locks, unmeasured, between the last acquire and the window (default one period), so that the window sees full rounds; the first heartbeat of each lock is reported either way")
	fs.IntVar(&cfg.concurrency, "concurrency", ddblock.DefaultHeartbeatConcurrency, "the client's HeartbeatConcurrency")
	fs.IntVar(&cfg.tps, "tps", ddblock.DefaultHeartbeatTPS, "the client's HeartbeatTPS (-1: adaptive)")
	fs.IntVar(&cfg.acquireWorkers, "acquire-workers", 32, "goroutines acquiring the locks")
	fs.DurationVar(&cfg.probeEvery, "probe-every", 200*time.Millisecond, "how often the probe acquires a fresh lock while heartbeats run (0: no probe)")
	noCeiling := fs.Bool("no-ceiling", false, "skip the server-ceiling measurement")
	fs.BoolVar(&cfg.ceilingOnly, "ceiling-only", false, "measure only the server's ceiling")
	writers := fs.String("ceiling-writers", "8,16,32", "comma-separated numbers of concurrent writers for the ceiling")
	fs.DurationVar(&cfg.ceilingFor, "ceiling-duration", 10*time.Second, "how long each ceiling measurement runs")
	fs.DurationVar(&cfg.ceilingWarmUp, "ceiling-warmup", 5*time.Second, "load the server this long, unmeasured, before the ceiling")
	server := fs.String("server", string(testserver.Dynalite), "the server to start on a loopback port: dynalite or dynamodb-local")
	fs.StringVar(&cfg.endpoint, "endpoint", "", "a running server's URL, used instead of starting one")
	fs.BoolVar(&cfg.session, "session", false, "the client holds its locks through one session item (ddblock.WithSessionLease): one heartbeat write a period whatever the number of locks")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per scenario on standard output, and the text report on standard error")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&cfg.scenario, "scenario", scenarioHeartbeats, "what to measure: heartbeats (the server's ceiling and one client holding --locks), or contention (contenders waiting for one key: --contenders, --procs, --keys, --hold, --retry-period, --wait-mode)")
	addContentionFlags(fs, &cfg.contention)
	fs.StringVar(&cfg.memProfile, "memprofile", "", "write heap profiles to this prefix: <prefix>-<locks>-held.pprof once the locks are held, <prefix>-<locks>-end.pprof at the end of the window")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch k := testserver.Kind(*server); k {
	case testserver.Dynalite, testserver.DynamoDBLocal:
		cfg.server = k
	default:
		return nil, fmt.Errorf("--server %q: want %s or %s", *server, testserver.Dynalite, testserver.DynamoDBLocal)
	}
	serverSet := false
	fs.Visit(func(f *flag.Flag) { serverSet = serverSet || f.Name == "server" })
	if serverSet && cfg.endpoint != "" {
		return nil, errors.New("--server and --endpoint: give one (--server starts a server, --endpoint names a running one)")
	}
	var err error
	if cfg.locks, err = parseInts("--locks", *locks); err != nil {
		return nil, err
	}
	if cfg.ceilingWriters, err = parseInts("--ceiling-writers", *writers); err != nil {
		return nil, err
	}
	cfg.ceiling = !*noCeiling || cfg.ceilingOnly
	if cfg.safe == 0 {
		cfg.safe = 4 * cfg.period
	}
	if cfg.lease == 0 {
		cfg.lease = 6 * cfg.period
	}
	if cfg.settle < 0 {
		cfg.settle = cfg.period
	}
	var problems []string
	switch cfg.scenario {
	case scenarioHeartbeats:
		if cfg.duration == 0 {
			cfg.duration = max(4*cfg.period, 20*time.Second)
		}
	case scenarioContention:
		if cfg.duration == 0 {
			cfg.duration = 45 * time.Second
		}
		problems = append(problems, cfg.contention.check()...)
	default:
		problems = append(problems, fmt.Sprintf("--scenario %q: want %s or %s", cfg.scenario, scenarioHeartbeats, scenarioContention))
	}
	if cfg.period <= 0 || cfg.duration <= 0 || cfg.ceilingFor <= 0 {
		problems = append(problems, "--period, --duration and --ceiling-duration must be positive")
	}
	if cfg.acquireWorkers <= 0 {
		problems = append(problems, "--acquire-workers must be positive")
	}
	if cfg.probeEvery < 0 {
		problems = append(problems, "--probe-every must not be negative")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return cfg, nil
}

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flagName, f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no numbers given", flagName)
	}
	return out, nil
}

func run(args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	// The text report goes to stdout, or to stderr when stdout carries
	// the JSON objects.
	out := stdout
	if cfg.json {
		out = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	var srv *testserver.Server
	endpoint, serverName := cfg.endpoint, string(testserver.External)
	if endpoint == "" {
		fmt.Fprintf(out, "starting %s on a loopback port...\n", cfg.server)
		srv, err = testserver.Start(cfg.server)
		if err != nil {
			return err
		}
		defer srv.Stop()
		// DDBLOCK_TEST_ENDPOINT, if set, names the server instead.
		endpoint, serverName = srv.Endpoint, string(srv.Kind)
	}
	// No SDK retries beyond its default: a heartbeat that needs a retry is
	// part of what is measured.
	ddb := testserver.NewClient(endpoint, cfg.endpoint != "" && !isLoopback(endpoint), 0)

	printMachine(out, endpoint, serverName, srv != nil && !srv.External)
	if cfg.scenario == scenarioContention {
		// The workers sign as this server's clients do.
		env := os.Environ()
		if srv != nil {
			env = srv.ChildEnv(env)
		}
		return contentionMain(ctx, ddb, endpoint, env, serverName, cfg, out, stdout)
	}

	var ceilings []ceilingResult
	if cfg.ceiling {
		fmt.Fprintf(out, "\n== server ceiling: conditional UpdateItem on distinct keys, %v per point ==\n", cfg.ceilingFor)
		// A fresh server (Node.js or a JVM) runs slower until its JIT has
		// compiled the hot paths: warm it up first, and throw that away.
		if cfg.ceilingWarmUp > 0 {
			w := slices.Max(cfg.ceilingWriters)
			if _, err := measureCeiling(ctx, ddb, w, cfg.ceilingWarmUp); err != nil {
				return fmt.Errorf("warming the server up: %w", err)
			}
		}
		for _, w := range cfg.ceilingWriters {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := measureCeiling(ctx, ddb, w, cfg.ceilingFor)
			if err != nil {
				return fmt.Errorf("ceiling with %d writers: %w", w, err)
			}
			r.print(out)
			fmt.Fprintf(out, "   (load average %s)\n", loadAverage())
			ceilings = append(ceilings, r)
		}
	}
	if cfg.ceilingOnly {
		return nil
	}

	var results []*scenarioResult
	for _, n := range cfg.locks {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mode := "per-lock heartbeats"
		if cfg.session {
			mode = "session lease"
		}
		fmt.Fprintf(out, "\n== %d locks, %s, heartbeat %v (safe %v, lease %v), HeartbeatConcurrency %d, HeartbeatTPS %d, settle %v, window %v ==\n",
			n, mode, cfg.period, cfg.safe, cfg.lease, cfg.concurrency, cfg.tps, cfg.settle, cfg.duration)
		load := loadAverage()
		fmt.Fprintf(out, "load average at the start: %s\n", load)
		r, err := runScenario(ctx, ddb, cfg, n)
		if err != nil {
			return fmt.Errorf("%d locks: %w", n, err)
		}
		r.loadStart = load
		r.print(out, ceilings)
		if cfg.json {
			if err := printJSON(stdout, r.json(serverName, cfg.lease, cfg.tps, ceilings)); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "load average at the end: %s\n", loadAverage())
		results = append(results, r)
		runtime.GC()
	}
	printSummary(out, results, ceilings)
	return nil
}

// isLoopback reports whether an endpoint is a local server, which needs
// no credentials from the SDK's chain.
func isLoopback(endpoint string) bool {
	return strings.Contains(endpoint, "://127.0.0.1") || strings.Contains(endpoint, "://localhost") || strings.Contains(endpoint, "://[::1]")
}

// loadAverage is the machine's load average (1, 5, 15 minutes): the
// machine is shared, and the figures mean little when it is busy.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func printMachine(out io.Writer, endpoint, server string, ours bool) {
	load := loadAverage()
	who := server
	if ours {
		who += ", started by this command"
	}
	fmt.Fprintf(out, "server %s (%s)\n", endpoint, who)
	fmt.Fprintf(out, "machine: %d CPUs (GOMAXPROCS %d), %s, %s/%s, load average %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, load)
}

// ddbClient is the raw SDK client the tool talks to.
type ddbClient = *dynamodb.Client
