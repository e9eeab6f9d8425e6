package reliability

// `ddblock run` is a way to hold a lock too: its command works under the
// lock, kept to the lock's safe period by a guard process. Here it
// contends with the library's clients on the same keys, under network
// faults, while its ddblock processes are paused alone (SIGSTOP, the
// case the guard exists for) and killed, and its guards are killed and
// paused. The command is a stepper (this test binary, see stepperMain)
// that records its steps for the mutual-exclusion checker, exactly as a
// library holder does, and stops stepping on SIGTERM, or, for some, only
// dies of SIGKILL.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// stepperArg, as the test binary's first argument, runs the stepper
// instead of the tests.
const stepperArg = "ddblock-run-stepper"

func init() {
	if len(os.Args) > 1 && os.Args[1] == stepperArg {
		os.Exit(stepperMain(os.Args[2:]))
	}
}

// stepperMain is the command under `ddblock run`: LOG TENURE HOLD STEP
// [ignore-term|escape]. It records its tenure from the lock in its
// environment, then a step every STEP until HOLD has passed. Each step
// reads the clock, then checks that no SIGTERM came, and only then is
// recorded with that time: a recorded step marks a moment at which the
// command had not been told to stop. On SIGTERM it records its end and
// exits; with ignore-term only SIGKILL stops it. With escape it is the
// careless command the checker must catch: it leaves its process group
// and session, so that nothing stops it, and goes on stepping after
// `ddblock run` has ended and released the lock.
func stepperMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "stepper: LOG TENURE HOLD STEP [ignore-term|escape]")
		return 2
	}
	logPath, tenure := args[0], args[1]
	hold, err1 := time.ParseDuration(args[2])
	step, err2 := time.ParseDuration(args[3])
	mode := ""
	if len(args) > 4 {
		mode = args[4]
	}
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "stepper:", err)
		return 2
	}
	if mode == "escape" && os.Getenv("STEPPER_ESCAPED") == "" {
		cmd := exec.Command(os.Args[0], os.Args[1:]...)
		cmd.Env = append(os.Environ(), "STEPPER_ESCAPED=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "stepper:", err)
			return 2
		}
		// Wait for its first step, so that it surely works under the lock.
		for !strings.Contains(readOr(logPath), "S "+tenure+" ") {
			time.Sleep(time.Millisecond)
		}
		fmt.Printf("escaped %d\n", cmd.Process.Pid)
		return 0
	}
	term := make(chan os.Signal, 1)
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM)
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepper:", err)
		return 2
	}
	log := mutexcheck.NewLog(f)
	token, _ := strconv.ParseInt(os.Getenv("DDBLOCK_FENCING_TOKEN"), 10, 64)
	// Under `run --slots`, the lock is one slot of the semaphore KEY,
	// which the checker knows as "KEY/slot-I".
	key := os.Getenv("DDBLOCK_KEY")
	if slot := os.Getenv("DDBLOCK_SLOT"); slot != "" {
		key += "/slot-" + slot
	}
	start := mutexcheck.Now()
	log.Acquired(tenure, key, start, os.Getenv("DDBLOCK_RECORD_VERSION_NUMBER"), token,
		os.Getenv("DDBLOCK_TAKEN_OVER_FROM"))
	deadline := start + int64(hold)
	for {
		t := mutexcheck.Now()
		select {
		case <-term:
			log.Ended(tenure, mutexcheck.Now(), "SIGTERM")
			return 128 + int(syscall.SIGTERM)
		default:
		}
		log.Step(tenure, t)
		if t >= deadline {
			log.Ended(tenure, mutexcheck.Now(), "done")
			return 0
		}
		time.Sleep(step)
	}
}

func readOr(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// ddblockBinary builds cmd/ddblock into the test's temp dir, with the
// race detector when this test binary has it.
func ddblockBinary(t *testing.T) string {
	t.Helper()
	return goBuild(t, "github.com/ddblock/ddblock/cmd/ddblock", "ddblock")
}

// ddblockEnv is the environment of the ddblock processes: what reaches
// the server (srv.ChildEnv: the fixed credentials of a started server, the
// caller's AWS settings for an external one), one attempt per call (the
// library retries), and a race detector that stops at the first race.
func ddblockEnv(srv *ddbtest.Server) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DDBLOCK_") {
			env = append(env, kv)
		}
	}
	env = append(env, "GORACE=halt_on_error=1 atexit_sleep_ms=0")
	return append(srv.ChildEnv(env), "AWS_MAX_ATTEMPTS=1")
}

// cliChaosConfig sizes one run of TestMutualExclusionWithRun.
type cliChaosConfig struct {
	Duration time.Duration
	Keys     int
	// InProcess library holders and Runs slots of `ddblock run`, each
	// behind a fault proxy of its own.
	InProcess, Runs int
	// Slots makes each key a semaphore of that many slots as well: the
	// `run --slots` holders take its slots, the library's plain holders
	// take its first slots directly now and then (DirectSlots), and the
	// checker counts its holders against the limit.
	Slots                  int
	Heartbeat, Safe, Lease time.Duration
	HoldMin, HoldMax, Step time.Duration
	LongShare              float64
	LongMin, LongMax       time.Duration
	// RunHoldMin and RunHoldMax bound a ddblock run's command: long
	// enough, mostly, to be struck while it works.
	RunHoldMin, RunHoldMax           time.Duration
	FaultEvery, DisturbEvery         time.Duration
	IgnoreTermShare                  float64
	MaxClockSkew                     time.Duration
	Seed                             uint64
	RetryPeriod, InProcAcquireWithin time.Duration
}

// cliChaos is one run in progress.
type cliChaos struct {
	t       *testing.T
	cfg     cliChaosConfig
	env     *env
	srv     *ddbtest.Server
	bin     string // ddblock
	self    string // this test binary: the stepper
	dir     string
	keys    []string
	events  *mutexcheck.Log // in-process holders, and the run slots' failures
	proxies []*faultproxy.Proxy
	targets []string // whom each proxy's faults strike (see chaos.targets)
	slots   []*runSlot

	problemsMu sync.Mutex
	problems   []string

	// What happened to the run slots, by kind.
	ddblockPauses, ddblockLongPauses, ddblockKills, guardKills, guardPauses atomic.Int64
	exits                                                                   sync.Map // exit status -> *atomic.Int64
	notRenewed                                                              atomic.Int64
}

func (c *cliChaos) problem(format string, args ...any) {
	c.problemsMu.Lock()
	defer c.problemsMu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *cliChaos) countExit(code int) {
	v, _ := c.exits.LoadOrStore(code, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// TestMutualExclusionWithRun runs the checker over library holders and
// `ddblock run` holders on the same keys, under faults, with ddblock
// processes paused alone and killed, and guards killed and paused.
func TestMutualExclusionWithRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := cliChaosConfig{
		Duration: 20 * time.Second,
		Keys:     3,
		// Every library flavour (plain, fencing, fast, session,
		// session-fast) and every kind of run: plain, fencing tokens, fast
		// takeover, a session, a slot, a slot on a session.
		InProcess: 5, Runs: 6, Slots: 2,
		// A lease of a second leaves the guard 300 ms between its SIGKILL
		// (safe + grace) and the earliest takeover, however loaded the
		// machine.
		Heartbeat: 100 * time.Millisecond, Safe: 500 * time.Millisecond, Lease: time.Second,
		HoldMin: 5 * time.Millisecond, HoldMax: 60 * time.Millisecond, Step: 2 * time.Millisecond,
		LongShare: 0.2, LongMin: 300 * time.Millisecond, LongMax: 1500 * time.Millisecond,
		RunHoldMin: 20 * time.Millisecond, RunHoldMax: 2 * time.Second,
		FaultEvery: 300 * time.Millisecond, DisturbEvery: 500 * time.Millisecond,
		IgnoreTermShare:     0.3,
		MaxClockSkew:        50 * time.Millisecond,
		Seed:                uint64(time.Now().UnixNano()),
		RetryPeriod:         50 * time.Millisecond,
		InProcAcquireWithin: 3 * time.Second,
	}
	rep, c := runWithRun(t, cfg)
	t.Logf("\n%s", c.summary(rep))
	// The run must have done what it claims, or a zero proves nothing.
	for _, kind := range []string{"session", "session-fast", "slots", "slots-session"} {
		if rep.ByKind[kind] == 0 {
			t.Errorf("no working tenure of %s holders (%v): the run never mixed them in", kind, rep.ByKind)
		}
	}
	if len(rep.Limits) != cfg.Keys {
		t.Errorf("limits declared for %v; want every key as a semaphore of %d slots", rep.Limits, cfg.Slots)
	}
	if c.ddblockLongPauses.Load() == 0 || c.ddblockKills.Load() == 0 || c.guardKills.Load() == 0 || c.guardPauses.Load() == 0 {
		t.Errorf("every kind of trouble must strike a holding ddblock run at least once: long pauses of ddblock %d, ddblock kills %d, guard kills %d, guard pauses %d",
			c.ddblockLongPauses.Load(), c.ddblockKills.Load(), c.guardKills.Load(), c.guardPauses.Load())
	}
	if c.notRenewed.Load() == 0 {
		t.Error("no guard ever stopped a command for want of a heartbeat: the pauses never tested the guard")
	}
	runTenures, libTenures := c.tenures()
	if runTenures < 10 || libTenures < 20 {
		t.Errorf("%d ddblock run tenures and %d library tenures: too few to show anything", runTenures, libTenures)
	}
	if rep.Handoffs < 50 {
		t.Errorf("only %d handoffs: too little contention", rep.Handoffs)
	}
}

// The checker sees a `ddblock run` command that escapes its process group
// and goes on working after its run released the lock: the next holder's
// steps fall inside its tenure. The harness can fail.
func TestCheckerCatchesEscapedCommand(t *testing.T) {
	e := newEnv(t)
	srv := ddbtest.Shared(t)
	bin := ddblockBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logPath := filepath.Join(dir, "run.log")
	// Files, not pipes: the escaped command keeps its descriptors.
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// ddblock's own log (a slow heartbeat round, say) goes apart from
	// the stepper's word.
	errOut, err := os.Create(filepath.Join(dir, "err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errOut.Close()
	cmd := exec.Command(bin, "run", "--endpoint", srv.Endpoint, "--table", e.table, "--lease", "1s", "--heartbeat", "100ms",
		"k", "--", self, stepperArg, logPath, "run#1", "10s", "5ms", "escape")
	cmd.Env = ddblockEnv(srv)
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("ddblock run: %v\n%s%s", err, readOr(out.Name()), readOr(errOut.Name()))
	}
	var escaped int
	if _, err := fmt.Sscanf(readOr(out.Name()), "escaped %d", &escaped); err != nil || escaped <= 0 {
		t.Fatalf("the stepper did not say where it escaped to: %q (stderr %q)", readOr(out.Name()), readOr(errOut.Name()))
	}
	defer func() { _ = syscall.Kill(escaped, syscall.SIGKILL) }()
	// ddblock run ended and released the lock; a library holder takes it.
	var buf bytes.Buffer
	log := mutexcheck.NewLog(&buf)
	c := e.client(e.direct, times(100*time.Millisecond, 500*time.Millisecond, time.Second)...)
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	log.Acquired("lib#1", "k", mutexcheck.Now(), lock.RecordVersionNumber(), 0, "")
	for range 20 {
		t0 := mutexcheck.Now()
		if lock.Err() == nil {
			log.Step("lib#1", t0)
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = lock.Release(context.Background())
	events, err := mutexcheck.Parse(strings.NewReader(readOr(logPath) + buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	rep := mutexcheck.Check(events)
	if len(rep.Violations) == 0 {
		t.Fatalf("the checker missed the escaped command working beside the next holder:\n%s", rep.Summary())
	}
	t.Logf("caught: %s", rep.Violations[0])
}

// runWithRun runs the mixed checker and returns its report; it fails the
// test on any violation, unclear error, harness problem, or unexpected
// exit of a ddblock process.
func runWithRun(t *testing.T, cfg cliChaosConfig) (mutexcheck.Report, *cliChaos) {
	c := &cliChaos{t: t, cfg: cfg, env: newEnv(t), srv: ddbtest.Shared(t), bin: ddblockBinary(t), dir: t.TempDir()}
	var err error
	if c.self, err = os.Executable(); err != nil {
		t.Fatal(err)
	}
	if *logDir != "" {
		c.dir = filepath.Join(*logDir, fmt.Sprintf("%s-%d", t.Name(), time.Now().Unix()))
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("event logs in %s", c.dir)
	}
	for i := range cfg.Keys {
		c.keys = append(c.keys, fmt.Sprintf("key-%d", i))
	}
	f, err := os.Create(filepath.Join(c.dir, "inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.events = mutexcheck.NewLog(f)

	holders, stopHolders := context.WithCancel(context.Background())
	defer stopHolders()
	var wg sync.WaitGroup
	flavours := mutexcheck.Flavours(cfg.MaxClockSkew)
	wg.Go(func() { mutexcheck.WatchStalls(holders, c.events, "inproc") })
	for i := range cfg.InProcess {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		fl := flavours[i%len(flavours)]
		name := fmt.Sprintf("lib%d-%s", i, fl.Name)
		c.targets = append(c.targets, name)
		opts := append(append(times(cfg.Heartbeat, cfg.Safe, cfg.Lease), ddblock.WithOwnerName(name)), fl.Options...)
		api := &mutexcheck.Recorder{API: ddbtest.NewClient(p.URL(), c.srv.External, 1), Client: name, Log: c.events}
		client := c.env.client(api, opts...)
		h := &mutexcheck.Holder{
			ID: name, Client: client, Keys: c.keys, Log: c.events,
			HoldMin: cfg.HoldMin, HoldMax: cfg.HoldMax, StepEvery: cfg.Step,
			LongShare: cfg.LongShare, LongMin: cfg.LongMin, LongMax: cfg.LongMax,
			AcquireTimeout: cfg.InProcAcquireWithin,
			AcquireOptions: []ddblock.AcquireOption{ddblock.WithRetryPeriod(cfg.RetryPeriod)},
			UseWithLock:    i%2 == 1,
			Seed:           cfg.Seed + uint64(i),
			CallsRecorded:  true,
		}
		if !h.UseWithLock {
			h.DirectSlots = cfg.Slots
		}
		wg.Go(func() {
			if err := h.Run(holders); err != nil {
				c.problem("holder %s: %v", name, err)
			}
		})
	}
	if cfg.Slots > 0 {
		for _, key := range c.keys {
			c.events.Limit("harness", key, mutexcheck.Now(), cfg.Slots)
		}
	}
	slots := strconv.Itoa(cfg.Slots)
	runFlavours := []struct {
		kind  string
		flags []string
	}{
		{"plain", nil},
		{"fencing", []string{"--fencing-token"}},
		{"fast", []string{"--max-clock-skew", cfg.MaxClockSkew.String()}},
		{"session", []string{"--session"}},
		{"slots", []string{"--slots", slots}},
		{"slots-session", []string{"--slots", slots, "--session"}},
	}
	for i := range cfg.Runs {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		fl := runFlavours[i%len(runFlavours)]
		if cfg.Slots == 0 && strings.HasPrefix(fl.kind, "slots") {
			fl = runFlavours[i%3]
		}
		s := &runSlot{c: c, name: fmt.Sprintf("run%d-%s", i, fl.kind), proxy: p, flags: fl.flags,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))}
		c.targets = append(c.targets, s.name+"*")
		// A run waits as AcquireLock does by default: it looks every
		// heartbeat period.
		flags := []string{"cli"}
		if slices.Contains(fl.flags, "--session") {
			flags = append(flags, "session")
		}
		c.events.Params(s.name, s.name, s.name, mutexcheck.Now(), cfg.Lease, cfg.Heartbeat, cfg.Heartbeat, flags...)
		c.slots = append(c.slots, s)
		wg.Go(func() { s.loop(holders) })
	}

	chaos, stopChaos := context.WithTimeout(context.Background(), cfg.Duration)
	defer stopChaos()
	var chaosDone sync.WaitGroup
	chaosDone.Go(func() { c.injectFaults(chaos) })
	chaosDone.Go(func() { c.disturb(chaos) })
	<-chaos.Done()
	chaosDone.Wait()
	for _, p := range c.proxies {
		p.Clear()
	}
	stopHolders()
	wg.Wait()

	rep := mutexcheck.Check(c.allEvents())
	for _, p := range c.problems {
		t.Errorf("harness: %s", p)
	}
	for _, v := range rep.Violations {
		t.Errorf("MUTUAL EXCLUSION VIOLATED: %s", v)
	}
	for _, u := range rep.Unclear {
		t.Errorf("unclear error from %s (%s): %s", u.Tenure, u.Key, u.Detail)
	}
	for _, p := range rep.Problems {
		t.Errorf("inconsistent record: %s", p)
	}
	for _, v := range rep.FencingViolations {
		t.Errorf("FENCING TOKENS OUT OF ORDER: %s", v)
	}
	reportProgress(t, rep)
	c.checkKeysFree(rep.MaxToken)
	return rep, c
}

// allEvents reads every event log of the run.
func (c *cliChaos) allEvents() []mutexcheck.Event {
	files, err := filepath.Glob(filepath.Join(c.dir, "*.log"))
	if err != nil || len(files) == 0 {
		c.t.Fatalf("no event logs in %s: %v", c.dir, err)
	}
	var events []mutexcheck.Event
	for _, name := range files {
		evs, err := mutexcheck.Parse(strings.NewReader(readOr(name)))
		if err != nil {
			c.t.Errorf("%s: %v", name, err)
		}
		events = append(events, evs...)
	}
	return events
}

// checkKeysFree checks that no lock item was lost or corrupted: a fresh
// client without faults takes every key within a lease and more, with a
// fencing token above every one of the run, and releases it.
func (c *cliChaos) checkKeysFree(maxToken map[string]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fresh := c.env.client(c.env.direct, append(times(c.cfg.Heartbeat, c.cfg.Safe, c.cfg.Lease), ddblock.WithFencingTokens())...)
	for _, key := range c.keys {
		// Each key's plain lock, and each slot of the semaphore of the
		// same name, logged as "KEY/slot-I".
		sortKeys := map[string]string{key: ddblock.DefaultSortKey}
		for i := range c.cfg.Slots {
			sortKeys[fmt.Sprintf("%s/slot-%d", key, i)] = fmt.Sprintf("slot-%d", i)
		}
		for logKey, sk := range sortKeys {
			lock, err := fresh.AcquireLock(ctx, key, ddblock.WithSortKeyValue(sk),
				ddblock.WithRetryPeriod(c.cfg.RetryPeriod), ddblock.WithRetryTimeout(c.cfg.Lease+5*time.Second))
			if err != nil {
				c.t.Errorf("after the run, %s could not be acquired: %v", logKey, err)
				continue
			}
			if tok := lock.FencingToken(); tok <= maxToken[logKey] {
				c.t.Errorf("after the run, %s got fencing token %d, not above the run's %d", logKey, tok, maxToken[logKey])
			}
			if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				c.t.Errorf("after the run, %s could not be released: %v", logKey, err)
			}
		}
	}
}

// injectFaults switches a random fault on at a random proxy every so
// often, for a random while: slow calls, spikes past the safe period,
// errors, dropped connections and replies, partitions.
func (c *cliChaos) injectFaults(ctx context.Context) {
	injectFaultsEvery(ctx, faultPlan{
		seed: c.cfg.Seed, every: c.cfg.FaultEvery, proxies: c.proxies, targets: c.targets, log: c.events,
		rule: func(rng *rand.Rand) faultproxy.Rule { return badDayRule(rng, c.cfg.Safe, c.cfg.Lease, false) }, problem: c.problem,
	})
}

// strikes is the order of the disturber's strikes, over and over: ddblock
// alone paused (from a heartbeat period to past the lease and safe period
// together) more often than anything, ddblock killed, its guard killed,
// its guard paused. Every kind comes in the first four, so that even a
// slow run (a loaded machine) strikes with each.
var strikes = []string{"pause", "kill", "kill-guard", "pause-guard", "pause", "pause", "pause"}

// disturb strikes a `ddblock run` that holds its lock, every so often.
func (c *cliChaos) disturb(ctx context.Context) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 2))
	for n := 0; sleep(ctx, around(rng, c.cfg.DisturbEvery)); {
		ddblockPid, guardPid, ok := c.holding(ctx, rng, 3*time.Second)
		if !ok {
			continue
		}
		// Strike at a random point of the tenure.
		time.Sleep(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
		d := c.cfg.Heartbeat + time.Duration(rng.Int64N(int64(2*c.cfg.Lease+c.cfg.Safe)))
		if c.ddblockLongPauses.Load() == 0 {
			// Until one has happened, a pause of ddblock outlasts the
			// lease: the case the guard exists for is not left to chance.
			d = c.cfg.Lease + c.cfg.Heartbeat + time.Duration(rng.Int64N(int64(c.cfg.Lease)))
		}
		struck := false
		switch strikes[n%len(strikes)] {
		case "pause":
			if struck = stopFor(ddblockPid, d); struck {
				c.ddblockPauses.Add(1)
				if d > c.cfg.Lease {
					c.ddblockLongPauses.Add(1)
				}
			}
		case "kill":
			if struck = syscall.Kill(ddblockPid, syscall.SIGKILL) == nil; struck {
				c.ddblockKills.Add(1)
			}
		case "kill-guard":
			if struck = syscall.Kill(guardPid, syscall.SIGKILL) == nil; struck {
				c.guardKills.Add(1)
			}
		case "pause-guard":
			if struck = stopFor(guardPid, d); struck {
				c.guardPauses.Add(1)
			}
		}
		if struck {
			// A process gone before the strike: the same kind next time.
			n++
		}
	}
}

// holding waits, at most limit, until one of the `ddblock run` slots has
// its command working under the lock, and returns the pids of its
// ddblock and its guard.
func (c *cliChaos) holding(ctx context.Context, rng *rand.Rand, limit time.Duration) (ddblockPid, guardPid int, ok bool) {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for _, i := range rng.Perm(len(c.slots)) {
			if ddblockPid, guardPid, ok := c.slots[i].holding(); ok {
				return ddblockPid, guardPid, true
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, 0, false
}

// stopFor stops a process for d; false if it was gone already.
func stopFor(pid int, d time.Duration) bool {
	if syscall.Kill(pid, syscall.SIGSTOP) != nil {
		return false
	}
	time.Sleep(d)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return true
}

// tenures counts the acquisitions of the ddblock run holders and of the
// library's.
func (c *cliChaos) tenures() (run, lib int) {
	for _, ev := range c.allEvents() {
		if ev.Kind == mutexcheck.Acquired {
			if strings.HasPrefix(ev.Tenure, "run") {
				run++
			} else {
				lib++
			}
		}
	}
	return run, lib
}

// summary formats the run's figures.
func (c *cliChaos) summary(rep mutexcheck.Report) string {
	var b strings.Builder
	cfg := c.cfg
	fmt.Fprintf(&b, "run: %v, %d keys, %d library holders + %d ddblock run slots; heartbeat %v, safe %v, lease %v; seed %d\n",
		cfg.Duration, cfg.Keys, cfg.InProcess, cfg.Runs, cfg.Heartbeat, cfg.Safe, cfg.Lease, cfg.Seed)
	fmt.Fprintf(&b, "machine: %s/%s, %d CPUs, %s, race detector %v; timestamps from %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), raceEnabled, mutexcheck.ClockName)
	b.WriteString(rep.Summary())
	run, lib := c.tenures()
	fmt.Fprintf(&b, "tenures: %d of ddblock run holders, %d of library holders\n", run, lib)
	var injected, requests int64
	for _, p := range c.proxies {
		counts := p.Counts()
		injected += counts.Faults()
		requests += counts.Requests
	}
	fmt.Fprintf(&b, "faults injected %d of %d requests\n", injected, requests)
	fmt.Fprintf(&b, "holding ddblock run struck: ddblock paused alone %d (%d longer than the lease), ddblock killed %d, guard killed %d, guard paused %d\n",
		c.ddblockPauses.Load(), c.ddblockLongPauses.Load(), c.ddblockKills.Load(), c.guardKills.Load(), c.guardPauses.Load())
	var exits []string
	c.exits.Range(func(k, v any) bool {
		exits = append(exits, fmt.Sprintf("%d: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	slices.Sort(exits)
	fmt.Fprintf(&b, "ddblock run exits (status: count; -1 killed): %s; commands stopped by the guard for want of a heartbeat: %d\n",
		strings.Join(exits, ", "), c.notRenewed.Load())
	return b.String()
}

// runSlot runs `ddblock run` after `ddblock run`, each with a new tenure.
type runSlot struct {
	c     *cliChaos
	name  string
	proxy *faultproxy.Proxy
	flags []string
	rng   *rand.Rand
	n     int

	mu      sync.Mutex
	pid     int    // the running ddblock, 0 between runs
	logPath string // its stepper's log
	tenure  string
}

func (s *runSlot) loop(ctx context.Context) {
	cfg := s.c.cfg
	const wait = 5 * time.Second
	for ctx.Err() == nil {
		s.n++
		tenure := fmt.Sprintf("%s#%d", s.name, s.n)
		key := s.c.keys[s.rng.IntN(len(s.c.keys))]
		hold := cfg.RunHoldMin + time.Duration(s.rng.Int64N(int64(cfg.RunHoldMax-cfg.RunHoldMin)+1))
		logPath := filepath.Join(s.c.dir, strings.ReplaceAll(tenure, "#", "-")+".log")
		stepper := []string{s.c.self, stepperArg, logPath, tenure, hold.String(), cfg.Step.String()}
		if s.rng.Float64() < cfg.IgnoreTermShare {
			stepper = append(stepper, "ignore-term")
		}
		args := append([]string{"run", "--endpoint", s.proxy.URL(), "--table", s.c.env.table,
			"--owner", tenure, "--heartbeat", cfg.Heartbeat.String(), "--safe", cfg.Safe.String(), "--lease", cfg.Lease.String(),
			"--wait", wait.String()}, s.flags...)
		args = append(append(args, key, "--"), stepper...)
		cmd := exec.Command(s.c.bin, args...)
		cmd.Env = ddblockEnv(s.c.srv)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		// The guard and the command share that stderr; none outlives
		// ddblock by much, but the test must not hang on one that does.
		cmd.WaitDelay = 10 * time.Second
		// The run is one attempt, for the progress check: a slot run
		// waits for any slot of the key's semaphore.
		attemptKey := key
		if slices.Contains(s.flags, "--slots") {
			attemptKey += "/slot-*"
		}
		start := mutexcheck.Now()
		s.c.events.Attempting(s.name, attemptKey, start)
		if err := cmd.Start(); err != nil {
			s.c.problem("starting ddblock run: %v", err)
			return
		}
		s.mu.Lock()
		s.pid, s.logPath, s.tenure = cmd.Process.Pid, logPath, tenure
		s.mu.Unlock()
		_ = cmd.Wait()
		exit := mutexcheck.Now()
		s.mu.Lock()
		s.pid = 0
		s.mu.Unlock()
		s.ended(tenure, logPath, cmd.ProcessState, stderr.String())
		s.attempted(tenure, attemptKey, logPath, start, exit, cmd.ProcessState.ExitCode(), wait)
	}
}

// attempted logs how a run that started at start and exited at exit
// ended, as an acquire attempt: the run's process is gone at exit; one
// that did not acquire spent its start-up (all but its last wait before
// it exited) unable to look.
func (s *runSlot) attempted(tenure, key, logPath string, start, exit int64, code int, wait time.Duration) {
	ev := s.c.events
	ev.Trouble(tenure, exit, exit, "exit", 0)
	// 76 before the command started: acquired, and lost before it could
	// start (the checker counts its lock, which no tenure shows, as
	// standing).
	if strings.Contains(readOr(logPath), "A "+tenure+" ") || code == 76 {
		ev.Attempted(s.name, key, start, exit, "acquired")
		return
	}
	outcome := map[int]string{75: string(ddblock.CodeAcquireTimeout), 69: string(ddblock.CodeUnknown), 70: "GUARD_DIED", -1: "KILLED"}[code]
	if outcome == "" {
		outcome = fmt.Sprintf("EXIT_%d", code)
	}
	if waitFrom := exit - int64(wait); waitFrom > start {
		ev.Trouble(s.name, start, waitFrom, "startup", 0)
	}
	ev.Attempted(s.name, key, start, exit, outcome)
}

// ended records how one run ended.
func (s *runSlot) ended(tenure, logPath string, ps *os.ProcessState, stderr string) {
	code := ps.ExitCode()
	s.c.countExit(code)
	if strings.Contains(stderr, "WARNING: DATA RACE") {
		s.c.problem("%s: a data race in ddblock:\n%s", tenure, stderr)
	}
	if strings.Contains(stderr, "not renewed within the safe period") {
		s.c.notRenewed.Add(1)
	}
	started := strings.Contains(readOr(logPath), "A "+tenure+" ")
	now := mutexcheck.Now()
	// A release goes to the tenure's own log, after its acquire.
	released := func(outcome string) {
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			s.c.problem("%s: %v", tenure, err)
			return
		}
		defer f.Close()
		mutexcheck.NewLog(f).Released(tenure, now, outcome)
	}
	switch {
	case code == 0 && started && strings.Contains(stderr, "could not release lock"):
		// The command's status, whatever became of the release: the item
		// may stand until it expires.
		released("failed")
	case code == 0 && started:
		released("ok")
	case code == 76 && started:
		released("lost")
	case code == 76: // the safe period ran out before the command started
		s.c.events.Failure(s.name, "run", now, "NOT_STARTED", oneLine(stderr))
	case code == 75:
		s.c.events.Failure(s.name, "acquire", now, string(ddblock.CodeAcquireTimeout), oneLine(stderr))
	case code == 69 && strings.Contains(stderr, string(ddblock.CodeLockInDanger)):
		// A --session run whose session's heartbeats were not landing
		// when its wait ran out: no lock is put on such a session.
		s.c.events.Failure(s.name, "acquire", now, string(ddblock.CodeLockInDanger), oneLine(stderr))
	case code == 69:
		s.c.events.Failure(s.name, "acquire", now, string(ddblock.CodeUnknown), oneLine(stderr))
	case code == 70 && strings.Contains(stderr, "the guard process died"):
		if started {
			released("guard-died")
		}
	case code == -1 && !ps.Success():
		// Killed by the disturber: no release.
	default:
		s.c.problem("%s: ddblock run exited %d unexpectedly: %s", tenure, code, stderr)
	}
}

// holding reports whether the slot's ddblock run has its command
// working under the lock, with the pids of ddblock and of its guard.
func (s *runSlot) holding() (ddblockPid, guardPid int, ok bool) {
	s.mu.Lock()
	pid, logPath, tenure := s.pid, s.logPath, s.tenure
	s.mu.Unlock()
	if pid == 0 {
		return 0, 0, false
	}
	log := readOr(logPath)
	if !strings.Contains(log, "S "+tenure+" ") || strings.Contains(log, "E "+tenure+" ") {
		return 0, 0, false
	}
	if kids := childrenOf(pid); len(kids) == 1 {
		return pid, kids[0], true
	}
	return 0, 0, false
}

// childrenOf lists a process's children (Linux), over all its threads:
// Go starts children from whichever thread runs the goroutine.
func childrenOf(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, f := range files {
		for _, field := range strings.Fields(readOr(f)) {
			if n, err := strconv.Atoi(field); err == nil {
				kids = append(kids, n)
			}
		}
	}
	return kids
}

// oneLine keeps a message on one field of a log line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
