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
	"slices"
	"strconv"
	"strings"
	"sync"
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
	// Under `run --key`, a tenure for each further key (runTenures).
	tenures := []string{tenure}
	n, _ := strconv.Atoi(os.Getenv("DDBLOCK_KEYS"))
	for i := 1; i < n; i++ {
		tn := runTenure(tenure, i)
		token, _ := strconv.ParseInt(os.Getenv(fmt.Sprintf("DDBLOCK_FENCING_TOKEN_%d", i)), 10, 64)
		log.Acquired(tn, os.Getenv(fmt.Sprintf("DDBLOCK_KEY_%d", i)), start,
			os.Getenv(fmt.Sprintf("DDBLOCK_RECORD_VERSION_NUMBER_%d", i)), token,
			os.Getenv(fmt.Sprintf("DDBLOCK_TAKEN_OVER_FROM_%d", i)))
		tenures = append(tenures, tn)
	}
	end := func(reason string) {
		for _, tn := range tenures {
			log.Ended(tn, mutexcheck.Now(), reason)
		}
	}
	deadline := start + int64(hold)
	for {
		t := mutexcheck.Now()
		select {
		case <-term:
			end("SIGTERM")
			return 128 + int(syscall.SIGTERM)
		default:
		}
		for _, tn := range tenures {
			log.Step(tn, t)
		}
		if t >= deadline {
			end("done")
			return 0
		}
		time.Sleep(step)
	}
}

// runTenure names the tenure of the i-th key of a `run --key` tenure
// (i ≥ 1), a tenure of the same holder.
func runTenure(tenure string, i int) string {
	return fmt.Sprintf("%s.%d", tenure, i)
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

// TestMutualExclusionWithRun runs the checker over library holders and
// `ddblock run` holders on the same keys, under faults, with ddblock
// processes paused alone and killed, and guards killed and paused.
func TestMutualExclusionWithRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	cfg := defaultChaos(20 * time.Second)
	cfg.Keys = 3
	// A lease of a second leaves the guard 300 ms between its SIGKILL
	// (safe + grace) and the earliest takeover, however loaded the
	// machine.
	cfg.Heartbeat, cfg.Safe, cfg.Lease = 100*time.Millisecond, 500*time.Millisecond, time.Second
	cfg.HoldMax = 60 * time.Millisecond
	cfg.LongShare, cfg.LongMin, cfg.LongMax = 0.2, 300*time.Millisecond, 1500*time.Millisecond
	cfg.FaultEvery, cfg.RetryPeriod, cfg.Attempts = 300*time.Millisecond, 50*time.Millisecond, 1
	// Every key a semaphore of 2 slots as well: the `run --slots`
	// holders take its slots, the library's holders take them too, and
	// the checker counts its holders against the limit.
	cfg.SemaphoreSlots = 2
	// Every library flavour (plain, fencing, fast, session,
	// session-fast), one goroutine each, and every kind of run: plain,
	// fencing tokens, fast takeover, a session, a slot, a slot on a
	// session.
	cfg.Mix = []kind{inProcess{N: 5}, ddblockRuns{N: 6, HoldMin: 20 * time.Millisecond, HoldMax: 2 * time.Second,
		Every: 500 * time.Millisecond, IgnoreTermShare: 0.3}}
	res := runChaos(t, cfg)
	t.Logf("\n%s", res.Summary())
	rep := res.Report
	// The run must have done what it claims, or a zero proves nothing.
	for _, kind := range []string{"session", "session-fast", "slots", "slots-session"} {
		if rep.ByKind[kind] == 0 {
			t.Errorf("no working tenure of %s holders (%v): the run never mixed them in", kind, rep.ByKind)
		}
	}
	if len(rep.Limits) != cfg.Keys {
		t.Errorf("limits declared for %v; want every key as a semaphore of %d slots", rep.Limits, cfg.SemaphoreSlots)
	}
	s := res.Struck
	if s["ddblock-long-pause"] == 0 || s["ddblock-kill"] == 0 || s["guard-kill"] == 0 || s["guard-pause"] == 0 {
		t.Errorf("every kind of trouble must strike a holding ddblock run at least once: long pauses of ddblock %d, ddblock kills %d, guard kills %d, guard pauses %d",
			s["ddblock-long-pause"], s["ddblock-kill"], s["guard-kill"], s["guard-pause"])
	}
	if s["not-renewed"] == 0 {
		t.Error("no guard ever stopped a command for want of a heartbeat: the pauses never tested the guard")
	}
	runTenures, libTenures := res.Acquired["run"], res.Acquired["g"]
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
	// A lease a loaded machine cannot eat while the command escapes: the
	// run ends, and releases the lock, as soon as it has.
	cmd := exec.Command(bin, "run", "--endpoint", srv.Endpoint, "--table", e.table, "--lease", "10s", "--heartbeat", "100ms",
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
	// A long safe period, for a loaded machine not to eat it.
	c := e.client(e.direct, times(100*time.Millisecond, 10*time.Second, 15*time.Second)...)
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	log.Acquired("lib#1", "k", mutexcheck.Now(), lock.RecordVersionNumber(), 0, "")
	step := func() {
		t0 := mutexcheck.Now()
		if lock.Err() == nil {
			log.Step("lib#1", t0)
		}
	}
	// lib works until the escaped command has stepped twice more since
	// lib's first step (the second of them read its clock after it),
	// however starved the machine, for the command's ten seconds at most.
	stepsOfRun := func() int { return strings.Count(readOr(logPath), "S run#1 ") }
	step()
	before := stepsOfRun()
	for deadline := time.Now().Add(10 * time.Second); stepsOfRun() < before+2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		step()
	}
	step()
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

// ddblockRuns is N slots of `ddblock run` ("run0-plain", ...), each
// running one `ddblock run` after another behind a proxy of its own, in
// turn plain, with fencing tokens, fast takeover, a session, and with
// SemaphoreSlots a slot and a slot on a session. A run's command (the
// stepper) works for HoldMin to HoldMax (long enough, mostly, to be
// struck while it works); an IgnoreTermShare of them die only of
// SIGKILL. About every Every, one that holds its lock is struck: its
// ddblock paused alone or killed, or its guard killed or paused.
type ddblockRuns struct {
	N int
	// SetSlots of the N slots hold two keys at once (`run --key`).
	SetSlots         int
	HoldMin, HoldMax time.Duration
	Every            time.Duration
	IgnoreTermShare  float64
}

func (k ddblockRuns) describe() string { return fmt.Sprintf("%d ddblock run slots", k.N) }

func (k ddblockRuns) start(c *chaos, ctx context.Context) party {
	p := &runsParty{c: c, k: k, srv: ddbtest.Shared(c.t), bin: ddblockBinary(c.t)}
	var err error
	if p.self, err = os.Executable(); err != nil {
		c.t.Fatal(err)
	}
	cfg := c.cfg
	if cfg.SemaphoreSlots > 0 {
		for _, key := range c.keys {
			c.log.Limit("harness", key, mutexcheck.Now(), cfg.SemaphoreSlots)
		}
	}
	slots := strconv.Itoa(cfg.SemaphoreSlots)
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
	for i := range k.N {
		fl := runFlavours[i%len(runFlavours)]
		if cfg.SemaphoreSlots == 0 && strings.HasPrefix(fl.kind, "slots") {
			fl = runFlavours[i%3]
		}
		keys := 1
		if i >= k.N-k.SetSlots {
			fl.kind, fl.flags, keys = "set-"+fl.kind, slices.DeleteFunc(slices.Clone(fl.flags), func(f string) bool { return f == "--slots" || f == slots }), 2
		}
		name := fmt.Sprintf("run%d-%s", i, fl.kind)
		s := &runSlot{p: p, name: name, proxy: c.proxy(name + "*"), flags: fl.flags, keys: keys,
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))}
		// A run waits as AcquireLock does by default: it looks every
		// heartbeat period.
		flags := []string{"cli"}
		if slices.Contains(fl.flags, "--session") {
			flags = append(flags, "session")
		}
		c.log.Params(s.name, s.name, s.name, mutexcheck.Now(), cfg.Lease, cfg.Heartbeat, cfg.Heartbeat, flags...)
		p.slots = append(p.slots, s)
		c.running.Go(func() { s.loop(ctx) })
	}
	return p
}

// runsParty is the `ddblock run` slots of a run.
type runsParty struct {
	c     *chaos
	k     ddblockRuns
	srv   *ddbtest.Server
	bin   string // ddblock
	self  string // this test binary: the stepper
	slots []*runSlot
}

func (p *runsParty) stop() {}

// strikes is the order of the disturber's strikes, over and over: ddblock
// alone paused (from a heartbeat period to past the lease and safe period
// together) more often than anything, ddblock killed, its guard killed,
// its guard paused. Every kind comes in the first four, so that even a
// slow run (a loaded machine) strikes with each.
var strikes = []string{"pause", "kill", "kill-guard", "pause-guard", "pause", "pause", "pause"}

// disturb strikes a `ddblock run` that holds its lock, every so often.
func (p *runsParty) disturb(ctx context.Context) {
	c := p.c
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 4))
	for n := 0; sleep(ctx, around(rng, p.k.Every)); {
		ddblockPid, guardPid, ok := p.holding(ctx, rng, 3*time.Second)
		if !ok {
			continue
		}
		// Strike at a random point of the tenure.
		time.Sleep(time.Duration(rng.Int64N(int64(100 * time.Millisecond))))
		d := c.cfg.Heartbeat + time.Duration(rng.Int64N(int64(2*c.cfg.Lease+c.cfg.Safe)))
		if c.counted("ddblock-long-pause") == 0 {
			// Until one has happened, a pause of ddblock outlasts the
			// lease: the case the guard exists for is not left to chance.
			d = c.cfg.Lease + c.cfg.Heartbeat + time.Duration(rng.Int64N(int64(c.cfg.Lease)))
		}
		struck := false
		switch strikes[n%len(strikes)] {
		case "pause":
			if struck = stopFor(ddblockPid, d); struck {
				c.count("ddblock-pause")
				if d > c.cfg.Lease {
					c.count("ddblock-long-pause")
				}
			}
		case "kill":
			if struck = syscall.Kill(ddblockPid, syscall.SIGKILL) == nil; struck {
				c.count("ddblock-kill")
			}
		case "kill-guard":
			if struck = syscall.Kill(guardPid, syscall.SIGKILL) == nil; struck {
				c.count("guard-kill")
			}
		case "pause-guard":
			if struck = stopFor(guardPid, d); struck {
				c.count("guard-pause")
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
func (p *runsParty) holding(ctx context.Context, rng *rand.Rand, limit time.Duration) (ddblockPid, guardPid int, ok bool) {
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for _, i := range rng.Perm(len(p.slots)) {
			if ddblockPid, guardPid, ok := p.slots[i].holding(); ok {
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

// runSlot runs `ddblock run` after `ddblock run`, each with a new tenure.
type runSlot struct {
	p     *runsParty
	name  string
	proxy *faultproxy.Proxy
	flags []string
	keys  int // keys a run holds at once
	rng   *rand.Rand
	n     int

	mu      sync.Mutex
	pid     int    // the running ddblock, 0 between runs
	logPath string // its stepper's log
	tenure  string
}

func (s *runSlot) loop(ctx context.Context) {
	c, k := s.p.c, s.p.k
	cfg := c.cfg
	const wait = 5 * time.Second
	for ctx.Err() == nil {
		s.n++
		tenure := fmt.Sprintf("%s#%d", s.name, s.n)
		perm := s.rng.Perm(len(c.keys))[:s.keys]
		key := c.keys[perm[0]]
		var also []string // the further keys of a `run --key`
		for _, j := range perm[1:] {
			also = append(also, "--key", c.keys[j])
		}
		hold := between(s.rng, k.HoldMin, k.HoldMax)
		logPath := filepath.Join(c.dir, strings.ReplaceAll(tenure, "#", "-")+".log")
		stepper := []string{s.p.self, stepperArg, logPath, tenure, hold.String(), cfg.Step.String()}
		if s.rng.Float64() < k.IgnoreTermShare {
			stepper = append(stepper, "ignore-term")
		}
		args := append([]string{"run", "--endpoint", s.proxy.URL(), "--table", c.env.table,
			"--owner", tenure, "--heartbeat", cfg.Heartbeat.String(), "--safe", cfg.Safe.String(), "--lease", cfg.Lease.String(),
			"--wait", wait.String()}, s.flags...)
		args = append(append(append(args, also...), key, "--"), stepper...)
		cmd := exec.Command(s.p.bin, args...)
		cmd.Env = ddblockEnv(s.p.srv)
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
		if s.keys > 1 {
			setKeys := []string{key}
			for j := 1; j < len(also); j += 2 {
				setKeys = append(setKeys, also[j])
			}
			attemptKey = mutexcheck.SetKey(setKeys)
		}
		start := mutexcheck.Now()
		c.log.Attempting(s.name, attemptKey, start)
		if err := cmd.Start(); err != nil {
			c.problem("starting ddblock run: %v", err)
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
	ev := s.p.c.log
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
	c := s.p.c
	code := ps.ExitCode()
	c.count(fmt.Sprintf("exit(%d)", code))
	if strings.Contains(stderr, "WARNING: DATA RACE") {
		c.problem("%s: a data race in ddblock:\n%s", tenure, stderr)
	}
	if strings.Contains(stderr, "not renewed within the safe period") {
		c.count("not-renewed")
	}
	started := strings.Contains(readOr(logPath), "A "+tenure+" ")
	now := mutexcheck.Now()
	// A release goes to the tenure's own log, after its acquire.
	released := func(outcome string) {
		f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			c.problem("%s: %v", tenure, err)
			return
		}
		defer f.Close()
		log := mutexcheck.NewLog(f)
		log.Released(tenure, now, outcome)
		for i := 1; i < s.keys; i++ {
			log.Released(runTenure(tenure, i), now, outcome)
		}
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
		c.log.Failure(s.name, "run", now, "NOT_STARTED", oneLine(stderr))
	case code == 75:
		c.log.Failure(s.name, "acquire", now, string(ddblock.CodeAcquireTimeout), oneLine(stderr))
	case code == 69 && strings.Contains(stderr, string(ddblock.CodeLockInDanger)):
		// A --session run whose session's heartbeats were not landing
		// when its wait ran out: no lock is put on such a session.
		c.log.Failure(s.name, "acquire", now, string(ddblock.CodeLockInDanger), oneLine(stderr))
	case code == 69:
		c.log.Failure(s.name, "acquire", now, string(ddblock.CodeUnknown), oneLine(stderr))
	case code == 70 && strings.Contains(stderr, "the guard process died"):
		if started {
			released("guard-died")
		}
	case code == -1 && !ps.Success():
		// Killed by the disturber: no release.
	default:
		c.problem("%s: ddblock run exited %d unexpectedly: %s", tenure, code, stderr)
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
