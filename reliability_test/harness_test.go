package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// chaosConfig sizes one run of the mutual-exclusion checker.
type chaosConfig struct {
	Duration time.Duration
	// Keys is the number of keys everyone contends for.
	Keys int
	// InProcess holders are goroutines of the test, each with its own
	// client and fault proxy; Workers are OS processes running
	// ClientsPerWorker holders each, behind one proxy per process.
	InProcess, Workers, ClientsPerWorker int
	// FaultEvery, ProcEvery and AbandonEvery are the mean pauses between
	// a fault switched on, a worker killed or paused, and an in-process
	// client abandoned (closed without releasing).
	FaultEvery, ProcEvery, AbandonEvery time.Duration
	Heartbeat, Safe, Lease              time.Duration
	// HoldMin, HoldMax and Step shape a tenure, except for a LongShare
	// of them which work between LongMin and LongMax; RetryPeriod is how
	// often waiters look.
	HoldMin, HoldMax, Step, RetryPeriod time.Duration
	LongShare                           float64
	LongMin, LongMax                    time.Duration
	// Attempts is the SDK's attempts per call.
	Attempts int
	// MaxClockSkew is the fast flavour's setting (see
	// mutexcheck.Flavours).
	MaxClockSkew time.Duration
	// PauseMin and PauseMax bound a SIGSTOP (zero: from the heartbeat
	// period to twice the lease plus the safe period).
	PauseMin, PauseMax time.Duration
	// PausesOnly makes the disturber pause workers and never kill them;
	// TrustContext makes the workers' WithLock holders check only their
	// function's context (see mutexcheck.Holder.TrustContext).
	PausesOnly, TrustContext bool
	// SemaphoreSlots, when positive, makes some holders take the keys as
	// semaphores of that many slots (see semaphore_test.go).
	SemaphoreSlots int
	// ResizeTo, when set, makes a resizer change every key's semaphore
	// to each of these numbers in turn, one every ResizeEvery (see
	// semaphore_test.go).
	ResizeTo    []int
	ResizeEvery time.Duration
	// Fair makes the even in-process slots and the workers' even clients
	// wait fairly (mutexcheck.Fair), among the others that do not.
	Fair bool
	// FairTimeout, when positive, is a fair waiter's acquire deadline
	// (and RetryTimeout), long enough for the progress check to see a
	// line that jams (it must be over mutexcheck.FairProgressBound).
	FairTimeout time.Duration
	// Crowd, when positive, runs that many in-process fair waiters of
	// one client for one key's lock (fair_test.go), all cancelled or
	// their client closed at once every CrowdEvery or so;
	// WorkerCrowd more clients in each worker wait fairly for the first
	// key's lock only, so that a kill or a pause takes several waiters
	// of one line at once (the disturber aims at the front of lines).
	Crowd, WorkerCrowd int
	CrowdEvery         time.Duration
	// GarbleEvery, when positive, is the mean pause between two
	// garbage writes into the keys' lines (fair_test.go).
	GarbleEvery time.Duration
	Seed        uint64
}

func defaultChaos(d time.Duration) chaosConfig {
	return chaosConfig{
		Duration:  d,
		Keys:      4,
		InProcess: 4, Workers: 2, ClientsPerWorker: 2,
		FaultEvery: 150 * time.Millisecond, ProcEvery: 1200 * time.Millisecond, AbandonEvery: 2 * time.Second,
		Heartbeat: 100 * time.Millisecond, Safe: 400 * time.Millisecond, Lease: 600 * time.Millisecond,
		HoldMin: 5 * time.Millisecond, HoldMax: 40 * time.Millisecond, Step: 2 * time.Millisecond,
		LongShare: 0.1, LongMin: 150 * time.Millisecond, LongMax: 900 * time.Millisecond,
		RetryPeriod:  15 * time.Millisecond,
		Attempts:     3,
		MaxClockSkew: 50 * time.Millisecond,
		Seed:         uint64(time.Now().UnixNano()),
	}
}

// chaosResult is what a run did and what the checker found.
type chaosResult struct {
	Config   chaosConfig
	Elapsed  time.Duration
	Report   mutexcheck.Report
	Injected map[faultproxy.Kind]int64
	Requests int64
	// Kills and Pauses count SIGKILLs and SIGSTOP/SIGCONT pairs sent to
	// workers; LongPauses those longer than the lease; Abandons the
	// in-process clients closed under their locks.
	Kills, Pauses, LongPauses, Abandons int
	// Stats add up the library's counters of every client that was shut
	// down cleanly (killed workers' counters are lost with them).
	Stats ddblock.Stats
	// Leftover counts the lock items found after everyone stopped (those
	// of killed holders), all of which the final check took over.
	Leftover int
	// Fair is what befell the fair waiters in particular (fair_test.go).
	Fair fairTrouble
}

func (r chaosResult) faults() int64 {
	var n int64
	for _, v := range r.Injected {
		n += v
	}
	return n
}

// Summary formats the run's figures.
func (r chaosResult) Summary() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "run: %v, %d keys, %d in-process clients + %d worker processes x %d clients; heartbeat %v, safe %v, lease %v; seed %d\n",
		r.Elapsed.Round(time.Second), c.Keys, c.InProcess, c.Workers, c.ClientsPerWorker, c.Heartbeat, c.Safe, c.Lease, c.Seed)
	fmt.Fprintf(&b, "machine: %s/%s, %d CPUs, %s, race detector %v; timestamps from %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), raceEnabled, mutexcheck.ClockName)
	b.WriteString(r.Report.Summary())
	kinds := make([]string, 0, len(r.Injected))
	for _, k := range faultproxy.Kinds {
		if n := r.Injected[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(&b, "faults injected %d of %d requests: %s\n", r.faults(), r.Requests, strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "kills %d, pauses %d (%d longer than the lease), abandoned clients %d, leftover items taken over at the end %d\n",
		r.Kills, r.Pauses, r.LongPauses, r.Abandons, r.Leftover)
	if r.Config.Fair {
		b.WriteString(r.Fair.summary())
	}
	s := r.Stats
	fmt.Fprintf(&b, "library counters (clean shutdowns): heartbeats sent %d, failed %d, skipped %d, late rounds %d, in danger %d, recovered %d, stolen %d\n",
		s.HeartbeatsSent, s.HeartbeatsFailed, s.HeartbeatsSkipped, s.LateRounds, s.InDanger, s.Recovered, s.Stolen)
	fmt.Fprintf(&b, "locks taken over from a session already judged dead (no wait of their own): %d\n", s.DeadSessionLocks)
	return b.String()
}

// chaos is one run in progress.
type chaos struct {
	t       *testing.T
	cfg     chaosConfig
	env     *env
	keys    []string
	dir     string
	bin     string
	inproc  *mutexcheck.Log
	opts    []ddblock.Option
	proxies []*faultproxy.Proxy
	// targets name, for the checker, whom each proxy's faults strike: a
	// prefix of the names of the holders, clients and processes behind
	// it.
	targets  []string
	workers  []*workerSlot
	problems chan string
	// slots maps an in-process slot to its current client, for the
	// abandoner.
	slots sync.Map

	kills, pauses, longPauses, abandons atomic.Int64
	fair                                fairCounts
	crowdStruckBoth                     chan struct{} // closed once a crowd was cancelled and one closed under
	// lines reads the keys' lines for the disturber (fair_test.go).
	lines *ddblock.Client

	statsMu sync.Mutex
	stats   ddblock.Stats
}

// runChaosShowing runs the chaos of config(d), and checks with
// shortfalls what the run must show (each kind of trouble striking, the
// kinds of holder mixed, enough contention). What it must show takes
// throughput: on a starved machine (busy loops on CI's two cores, the
// race detector and a JVM) twenty seconds can show too little. A run
// that showed too little runs again, once, for twice as long; what
// runChaos checks (exclusion, limits, progress, unclear errors) fails
// the test in every run.
func runChaosShowing(t *testing.T, d time.Duration, config func(time.Duration) chaosConfig, shortfalls func(chaosResult) []string, each func(chaosResult)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		res := runChaos(t, config(d))
		t.Logf("\n%s", res.Summary())
		if each != nil {
			each(res)
		}
		short := shortfalls(res)
		if len(short) == 0 {
			return
		}
		if attempt == 2 || t.Failed() {
			for _, s := range short {
				t.Error(s)
			}
			return
		}
		t.Logf("the run showed too little (%s); running again for %v", strings.Join(short, "; "), 2*d)
		d *= 2
	}
}

// runChaos runs the checker for cfg.Duration and returns its figures; it
// fails the test on any violation, unclear error, harness problem, or a
// lock item that cannot be taken over afterwards.
func runChaos(t *testing.T, cfg chaosConfig) chaosResult {
	c := &chaos{
		t: t, cfg: cfg, env: newEnv(t), bin: workerBinary(t),
		dir:      t.TempDir(),
		problems: make(chan string, 1000),

		crowdStruckBoth: make(chan struct{}),
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
	c.opts = append(times(cfg.Heartbeat, cfg.Safe, cfg.Lease), ddblock.WithTableName(c.env.table), ddblock.WithLogger(quiet))
	if cfg.Fair {
		c.lines = c.env.client(c.env.direct, ddblock.WithOwnerName("line-watcher"))
	}
	f, err := os.Create(filepath.Join(c.dir, "inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.inproc = mutexcheck.NewLog(f)

	start := time.Now()
	holders, stopHolders := context.WithCancel(context.Background())
	var holdersDone sync.WaitGroup
	holdersDone.Go(func() { mutexcheck.WatchStalls(holders, c.inproc, "inproc") })
	for i := range cfg.InProcess {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		c.targets = append(c.targets, fmt.Sprintf("g%d.*", i))
		holdersDone.Go(func() { c.runSlot(holders, i, p) })
	}
	for i := range cfg.Workers {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		c.targets = append(c.targets, fmt.Sprintf("w%d.*", i))
		w := &workerSlot{c: c, proxy: p, flavour: i, workerProc: workerProc{name: fmt.Sprintf("w%d", i), problem: c.problem}}
		c.workers = append(c.workers, w)
		w.start()
	}
	t.Cleanup(func() {
		for _, w := range c.workers {
			w.killNow()
		}
	})
	if cfg.Crowd > 0 {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		c.targets = append(c.targets, "x*")
		holdersDone.Go(func() { c.runCrowd(holders, p) })
	}

	chaosCtx, stopChaos := context.WithCancel(context.Background())
	go func() {
		// The trouble lasts cfg.Duration, and with a crowd until it has
		// been struck both ways (cancelled, and closed under), up to
		// half a minute more: on a slow machine a crowd's generation
		// (line up, strike, wind down) can take most of ten seconds.
		select {
		case <-time.After(cfg.Duration):
		case <-chaosCtx.Done():
			return
		}
		if cfg.Crowd > 0 {
			select {
			case <-c.crowdStruckBoth:
			case <-time.After(30 * time.Second):
			case <-chaosCtx.Done():
			}
		}
		stopChaos()
	}()
	var chaosDone sync.WaitGroup
	chaosDone.Go(func() { c.injectFaults(chaosCtx) })
	chaosDone.Go(func() { c.disturbWorkers(chaosCtx) })
	chaosDone.Go(func() { c.abandonClients(chaosCtx, holders) })
	if len(cfg.ResizeTo) > 0 {
		chaosDone.Go(func() { c.resizeSemaphores(chaosCtx) })
	}
	if cfg.GarbleEvery > 0 {
		chaosDone.Go(func() { c.garbleLines(chaosCtx) })
	}
	<-chaosCtx.Done()
	chaosDone.Wait()
	stopChaos()

	// Calm the network, then stop everyone cleanly.
	for _, p := range c.proxies {
		p.Clear()
	}
	var stopping sync.WaitGroup
	for _, w := range c.workers {
		stopping.Go(w.stop)
	}
	stopHolders()
	holdersDone.Wait()
	stopping.Wait()
	elapsed := time.Since(start)

	res := chaosResult{Config: cfg, Elapsed: elapsed, Injected: map[faultproxy.Kind]int64{}}
	for _, p := range c.proxies {
		counts := p.Counts()
		res.Requests += counts.Requests
		for k, v := range counts.Injected {
			res.Injected[k] += v
		}
	}
	res.Kills, res.Pauses, res.LongPauses, res.Abandons =
		int(c.kills.Load()), int(c.pauses.Load()), int(c.longPauses.Load()), int(c.abandons.Load())
	res.Stats = c.stats
	res.Fair = c.fair.snapshot()
	res.Report = c.check()
	res.Leftover = c.takeOverLeftovers(res.Report.MaxToken)

	close(c.problems)
	for p := range c.problems {
		t.Errorf("harness: %s", p)
	}
	rep := res.Report
	for _, v := range rep.Violations {
		t.Errorf("MUTUAL EXCLUSION VIOLATED: %s", v)
	}
	for _, u := range rep.Unclear {
		t.Errorf("unclear error from %s (%s): %s", u.Tenure, u.Key, u.Detail)
	}
	for _, p := range rep.Problems {
		t.Errorf("inconsistent record: %s", p)
	}
	for _, v := range rep.LimitViolations {
		t.Errorf("MORE HOLDERS THAN SLOTS: %s", v)
	}
	for _, v := range rep.FencingViolations {
		t.Errorf("FENCING TOKENS OUT OF ORDER: %s", v)
	}
	reportProgress(t, rep)
	return res
}

// reportProgress fails the test on every failed wait that left its lock
// free, the waiter able to look, for longer than its bound: an unfair
// waiter's, and a fair waiter's against the line's bound behind dead,
// gone and garbled waiters (mutexcheck.FairProgressBound; issue 30).
// With -fair-progress=false those of fair waiters are only logged.
func reportProgress(t *testing.T, rep mutexcheck.Report) {
	t.Helper()
	for _, v := range rep.ProgressViolations {
		t.Errorf("PROGRESS VIOLATED: %s", v)
	}
	for _, v := range rep.FairProgressViolations {
		if *fairProgress {
			t.Errorf("PROGRESS VIOLATED BY A FAIR WAITER: %s", v)
		} else {
			t.Logf("progress violated by a fair waiter (reported, not failed: -fair-progress=false): %s", v)
		}
	}
	if rep.ProgressChecked == 0 {
		t.Errorf("no failed wait was checked for progress: the run's attempts are not on record")
	}
}

// sharedClientGoroutines is how many goroutines share one in-process
// client in the slots that share one.
const sharedClientGoroutines = 3

// runSlot runs in-process holder i until ctx ends, with a new client
// each time the abandoner closes the current one.
func (c *chaos) runSlot(ctx context.Context, i int, p *faultproxy.Proxy) {
	sdk := ddbtest.SharedServer().ClientFor(p.URL(), c.cfg.Attempts)
	flavours := mutexcheck.Flavours(c.cfg.MaxClockSkew)
	fl := flavours[i%len(flavours)]
	if c.cfg.Fair && i%2 == 0 {
		fl = mutexcheck.Fair(fl)
	}
	for gen := 1; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("g%d.%d-%s", i, gen, fl.Name)
		opts := append(slices.Clone(c.opts), ddblock.WithOwnerName(name))
		ddb := &mutexcheck.Recorder{API: sdk, Client: name, Log: c.inproc}
		client, err := ddblock.New(ddb, append(opts, fl.Options...)...)
		if err != nil {
			c.problem("ddblock.New: %v", err)
			return
		}
		c.slots.Store(i, client)
		// The holders of slots 0 and 1 (AcquireLock and WithLock) are
		// several goroutines of one client, which wait for one another's
		// locks (WithWaitOnOwn): the client's waiters of a key share its
		// reads and take it over from one another at its release
		// (waiters.go). The others are one goroutine each.
		goroutines := 1
		acquireOpts := append([]ddblock.AcquireOption{ddblock.WithRetryPeriod(c.cfg.RetryPeriod)}, fl.Acquire...)
		acquireTimeout := 3 * time.Second
		if strings.HasSuffix(fl.Name, "-fair") && c.cfg.FairTimeout > 0 {
			acquireTimeout = c.cfg.FairTimeout
			acquireOpts = append(acquireOpts, ddblock.WithRetryTimeout(acquireTimeout))
		}
		if i%4 <= 1 {
			goroutines = sharedClientGoroutines
			acquireOpts = append(acquireOpts, ddblock.WithWaitOnOwn())
		}
		var running sync.WaitGroup
		for g := range goroutines {
			id := name
			if goroutines > 1 {
				id = fmt.Sprintf("%s-t%d", name, g)
			}
			h := &mutexcheck.Holder{
				ID: id, Client: client, Keys: c.keys, Log: c.inproc,
				HoldMin: c.cfg.HoldMin, HoldMax: c.cfg.HoldMax, StepEvery: c.cfg.Step,
				LongShare: c.cfg.LongShare, LongMin: c.cfg.LongMin, LongMax: c.cfg.LongMax,
				AcquireTimeout: acquireTimeout,
				AcquireOptions: acquireOpts,
				UseWithLock:    i%4 == 1,
				UseElection:    i%4 == 3,
				UseSemaphore:   c.cfg.SemaphoreSlots > 0 && i%4 == 2,
				Slots:          c.cfg.SemaphoreSlots,
				DirectSlots:    c.cfg.SemaphoreSlots,
				Seed:           c.cfg.Seed + uint64(i*1000+gen) + uint64(g)<<32,
				CallsRecorded:  true,
			}
			running.Go(func() {
				if err := h.Run(ctx); err != nil {
					c.problem("holder %s: %v", id, err)
				}
			})
		}
		running.Wait()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := client.Close(cctx, true); err != nil {
			c.problem("closing %s: %v", name, err)
		}
		cancel()
		now := mutexcheck.Now()
		c.inproc.Trouble(name, now, now, "closed", 0)
		c.addStats(client.Stats())
	}
}

func (c *chaos) addStats(s ddblock.Stats) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	t := &c.stats
	t.HeartbeatsSent += s.HeartbeatsSent
	t.HeartbeatsFailed += s.HeartbeatsFailed
	t.HeartbeatsSkipped += s.HeartbeatsSkipped
	t.LateRounds += s.LateRounds
	t.InDanger += s.InDanger
	t.Recovered += s.Recovered
	t.Stolen += s.Stolen
	t.DeadSessionLocks += s.DeadSessionLocks
}

func (c *chaos) problem(format string, args ...any) {
	select {
	case c.problems <- fmt.Sprintf(format, args...):
	default:
	}
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// around returns a random duration in [d/2, 3d/2).
func around(rng *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rng.Int64N(int64(d)))
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// injectFaults switches a fault of a bad day on at a random proxy every
// so often, for a random while.
func (c *chaos) injectFaults(ctx context.Context) {
	injectFaultsEvery(ctx, faultPlan{
		seed: c.cfg.Seed, every: c.cfg.FaultEvery, proxies: c.proxies, targets: c.targets, log: c.inproc,
		rule: func(rng *rand.Rand) faultproxy.Rule { return badDayRule(rng, c.cfg.Safe, c.cfg.Lease, false) }, problem: c.problem,
	})
}

// faultPlan is what injectFaultsEvery strikes, and how.
type faultPlan struct {
	seed    uint64
	every   time.Duration
	proxies []*faultproxy.Proxy
	targets []string // targets[i]: whom proxies[i] serves, for the record
	log     *mutexcheck.Log
	rule    func(*rand.Rand) faultproxy.Rule
	problem func(format string, args ...any)
}

// injectFaultsEvery switches a fault of p.rule on at a random one of the
// proxies about every p.every, each for 200 ms to 1.5 s, until ctx ends;
// then it removes those still on. Every fault is on record, once
// removed, for the progress check. The one fault injector of every chaos
// driver.
func injectFaultsEvery(ctx context.Context, p faultPlan) {
	rng := rand.New(rand.NewPCG(p.seed, 1))
	var faults []*loggedFault
	defer func() {
		for _, f := range faults {
			f.Remove()
		}
	}()
	for sleep(ctx, around(rng, p.every)) {
		i := rng.IntN(len(p.proxies))
		f, err := injectLogged(p.proxies[i], p.rule(rng), p.log, p.targets[i])
		if err != nil {
			p.problem("inject: %v", err)
			continue
		}
		faults = append(faults, f)
		time.AfterFunc(between(rng, 200*time.Millisecond, 1500*time.Millisecond), f.Remove)
	}
}

// loggedFault is a fault that, once removed, is on record for the
// progress check: whom it struck, from when to when, and how long it
// held a request before forwarding it.
type loggedFault struct {
	once sync.Once
	f    *faultproxy.Fault
	log  func()
}

func (l *loggedFault) Remove() {
	l.once.Do(func() {
		l.f.Remove()
		l.log()
	})
}

// injectLogged injects rule at p, to be logged as striking target when
// removed.
func injectLogged(p *faultproxy.Proxy, rule faultproxy.Rule, log *mutexcheck.Log, target string) (*loggedFault, error) {
	start := mutexcheck.Now()
	f, err := p.Inject(rule)
	if err != nil {
		return nil, err
	}
	var hold time.Duration
	if rule.Kind == faultproxy.Latency {
		hold = rule.Delay + rule.Jitter
	}
	return &loggedFault{f: f, log: func() {
		log.Trouble(target, start, mutexcheck.Now(), "fault-"+string(rule.Kind), hold)
	}}, nil
}

// badDayRule picks one of the faults of a bad day: a slow network,
// spikes longer than the safe period, server errors, throttling, dropped
// connections, a partition, lost replies to writes; with transactions,
// their writes too, and transaction conflicts.
func badDayRule(rng *rand.Rand, safe, lease time.Duration, transactions bool) faultproxy.Rule {
	ops := []string{"", "GetItem", "PutItem", "UpdateItem", "DeleteItem"}
	writes := []string{"PutItem", "UpdateItem", "DeleteItem"}
	kinds := 8
	if transactions {
		ops = append(ops, "TransactWriteItems")
		writes = append(writes, "TransactWriteItems")
		kinds = 10
	}
	op := ops[rng.IntN(len(ops))]
	prob := 0.2 + 0.6*rng.Float64()
	switch rng.IntN(kinds) {
	case 0: // a slow network
		return faultproxy.Rule{Kind: faultproxy.Latency, Delay: between(rng, 5*time.Millisecond, 40*time.Millisecond), Jitter: 20 * time.Millisecond}
	case 1: // spikes longer than the safe period
		return faultproxy.Rule{Kind: faultproxy.Latency, Op: op, Delay: between(rng, safe, lease+safe), Probability: 0.3}
	case 2:
		return faultproxy.Rule{Kind: faultproxy.ServerError, Op: op, Probability: prob}
	case 3:
		return faultproxy.Rule{Kind: faultproxy.Throttling, Op: op, Probability: prob}
	case 4:
		return faultproxy.Rule{Kind: faultproxy.ThroughputExceeded, Op: op, Probability: prob}
	case 5:
		return faultproxy.Rule{Kind: faultproxy.Drop, Op: op, Probability: prob / 2}
	case 6: // a partition: everything, or the heartbeats only
		return faultproxy.Rule{Kind: faultproxy.BlackHole, Op: []string{"", "UpdateItem"}[rng.IntN(2)]}
	case 8, 9:
		return faultproxy.Rule{Kind: faultproxy.TransactionConflict, Op: "TransactWriteItems", Probability: prob}
	default:
		return faultproxy.Rule{Kind: faultproxy.DropReply, Op: writes[rng.IntN(len(writes))], Probability: prob}
	}
}

// disturbWorkers kills or pauses a random worker every so often: one
// action in three is a SIGKILL (the worker is restarted), the others a
// SIGSTOP for a random time from well under the safe period to well over
// the lease, then SIGCONT.
func (c *chaos) disturbWorkers(ctx context.Context) {
	if len(c.workers) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 2))
	for n := 0; sleep(ctx, around(rng, c.cfg.ProcEvery)); n++ {
		kill := n%3 == 1 && !c.cfg.PausesOnly
		// With fair waiters, every kill and one pause in two strike at
		// the front of a line (fair_test.go): a worker with the first
		// two tickets of a line (or two tickets in one), or the first.
		var w *workerSlot
		headSecond, front := false, false
		if c.cfg.Fair && (kill || n%3 == 0) {
			w, headSecond = c.huntFront(ctx, kill)
			front = w != nil
		}
		if w == nil {
			w = c.workers[rng.IntN(len(c.workers))]
			// Strike while the worker works under a lock, at a random
			// point of its tenure, when it does so within a second.
			if w.waitOpen(ctx, time.Second) {
				time.Sleep(between(rng, 0, 30*time.Millisecond))
			}
		}
		if kill {
			id := w.id()
			w.kill()
			now := mutexcheck.Now()
			c.inproc.Trouble(id, now, now, "kill", 0)
			c.kills.Add(1)
			if front {
				c.fair.add(func(t *fairTrouble) {
					t.BunchKills++
					if headSecond {
						t.HeadSecondKills++
					}
				})
			}
			time.Sleep(between(rng, 50*time.Millisecond, 300*time.Millisecond))
			w.start()
			continue
		}
		lo, hi := c.cfg.PauseMin, c.cfg.PauseMax
		if hi == 0 {
			lo, hi = c.cfg.Heartbeat, 2*c.cfg.Lease+c.cfg.Safe
		}
		d := between(rng, lo, hi)
		w.pause(d)
		c.pauses.Add(1)
		if d > c.cfg.Lease {
			c.longPauses.Add(1)
		}
		if front {
			c.fair.add(func(t *fairTrouble) {
				t.HeadPauses++
				if d > c.cfg.Lease {
					t.LongHeadPauses++
				}
			})
		}
	}
}

// abandonClients closes a random in-process client without releasing
// its locks, as a crashing process would leave them.
func (c *chaos) abandonClients(ctx, holders context.Context) {
	if c.cfg.InProcess == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 3))
	for sleep(ctx, around(rng, c.cfg.AbandonEvery)) {
		// Prefer a client that holds a lock now.
		var v any
		for range 200 {
			cand, ok := c.slots.Load(rng.IntN(c.cfg.InProcess))
			if ok {
				v = cand
				if len(cand.(*ddblock.Client).HeldLocks()) > 0 {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		if v == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(holders, 10*time.Second)
		client := v.(*ddblock.Client)
		if err := client.Close(cctx, false); err != nil && holders.Err() == nil {
			c.problem("abandoning a client: %v", err)
		}
		cancel()
		now := mutexcheck.Now()
		c.inproc.Trouble(client.Options().OwnerName, now, now, "abandon", 0)
		c.abandons.Add(1)
	}
}

// check reads every event log of the run.
func (c *chaos) check() mutexcheck.Report {
	files, err := filepath.Glob(filepath.Join(c.dir, "*.log"))
	if err != nil || len(files) == 0 {
		c.t.Fatalf("no event logs in %s: %v", c.dir, err)
	}
	var events []mutexcheck.Event
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			c.t.Fatal(err)
		}
		evs, err := mutexcheck.Parse(f)
		f.Close()
		if err != nil {
			c.t.Errorf("%s: %v", name, err)
		}
		events = append(events, evs...)
	}
	return mutexcheck.Check(events)
}

// takeOverLeftovers checks that no lock item was lost or corrupted:
// every item left in the table reads as a lock, and a fresh client
// without faults takes every key within a lease (its fencing token above
// every token of the run) and releases it, leaving no held item. It
// returns how many held items were left by the run.
func (c *chaos) takeOverLeftovers(maxToken map[string]int64) int {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fresh := c.env.client(c.env.direct, append(times(c.cfg.Heartbeat, c.cfg.Safe, c.cfg.Lease), ddblock.WithFencingTokens())...)
	left := 0
	for info, err := range fresh.ListLocks(ctx) {
		if err != nil {
			t.Errorf("a lock item left after the run does not read: %v", err)
			continue
		}
		if info.IsSession && (strings.Contains(info.OwnerName, "session") || strings.Contains(info.OwnerName, "fair")) {
			// A session item of a session client, or of a fair waiter
			// (its tickets name it), that was killed, paused or
			// abandoned: never heartbeated again, it expires by its TTL.
			// Its locks are taken over below.
			continue
		}
		if !slices.Contains(c.keys, info.PartitionKey) || !slices.Contains(c.sortKeys(), info.SortKey) {
			t.Errorf("unexpected item %+v", info)
		}
		if !info.Released {
			left++
		}
	}
	for _, lk := range c.lockKeys() {
		key := lk.log
		lock, err := fresh.AcquireLock(ctx, lk.pk, ddblock.WithSortKeyValue(lk.sk), ddblock.WithRetryPeriod(c.cfg.RetryPeriod), ddblock.WithRetryTimeout(c.cfg.Lease+5*time.Second))
		if err != nil {
			t.Errorf("after the run, %s could not be acquired: %v", key, err)
			continue
		}
		if tok := lock.FencingToken(); tok <= maxToken[key] {
			t.Errorf("after the run, %s got fencing token %d, not above the run's %d", key, tok, maxToken[key])
		}
		if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			t.Errorf("after the run, %s could not be released: %v", key, err)
		}
	}
	for info, err := range fresh.ListLocks(ctx) {
		if err == nil && info.IsSession {
			continue
		}
		if err != nil || !info.Released {
			t.Errorf("item held after the final release: %+v, %v", info, err)
		}
	}
	return left
}

// workerSlot is one worker process position; a killed worker is
// replaced by a new incarnation in the same slot, behind the same proxy.
type workerSlot struct {
	workerProc
	c       *chaos
	proxy   *faultproxy.Proxy
	flavour int
	inc     int
}

// id is the name of the worker's current incarnation.
func (w *workerSlot) id() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%s.%d", w.name, w.inc)
}

func (w *workerSlot) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inc++
	cfg := w.c.cfg
	id := fmt.Sprintf("%s.%d", w.name, w.inc)
	logPath := filepath.Join(w.c.dir, id+".log")
	cmd := exec.Command(w.c.bin,
		"-endpoint", w.proxy.URL(),
		"-table", w.c.env.table,
		"-keys", strings.Join(w.c.keys, ","),
		"-clients", fmt.Sprint(cfg.ClientsPerWorker),
		"-id", id,
		"-log", logPath,
		"-heartbeat", cfg.Heartbeat.String(), "-safe", cfg.Safe.String(), "-lease", cfg.Lease.String(),
		"-hold-min", cfg.HoldMin.String(), "-hold-max", cfg.HoldMax.String(), "-step", cfg.Step.String(),
		"-long-share", fmt.Sprint(cfg.LongShare), "-long-min", cfg.LongMin.String(), "-long-max", cfg.LongMax.String(),
		"-retry-period", cfg.RetryPeriod.String(),
		"-attempts", fmt.Sprint(cfg.Attempts),
		// Worker 0's clients use the session flavours, worker 1's plain
		// and fencing: every kind is killed and paused.
		"-flavour", fmt.Sprint(2*w.flavour+3), "-max-clock-skew", cfg.MaxClockSkew.String(),
		fmt.Sprintf("-trust-context=%v", cfg.TrustContext),
		// Every other worker's odd clients campaign in elections.
		fmt.Sprintf("-elections=%v", w.flavour%2 == 1),
		"-semaphore-slots", fmt.Sprint(cfg.SemaphoreSlots),
		fmt.Sprintf("-fair=%v", cfg.Fair),
		"-fair-timeout", cfg.FairTimeout.String(),
		"-crowd", fmt.Sprint(cfg.WorkerCrowd),
		"-seed", fmt.Sprint(cfg.Seed+uint64(w.inc*100)),
	)
	w.launchLocked(id, cmd, newEventTail(logPath, tenures))
}

// stop asks the worker to finish (by closing its stdin), waits for it,
// and adds its counters.
func (w *workerSlot) stop() {
	id := w.id()
	out, ok := w.finish(30 * time.Second)
	now := mutexcheck.Now()
	w.c.inproc.Trouble(id, now, now, "exit", 0)
	if !ok {
		return
	}
	var res struct{ Stats ddblock.Stats }
	if err := json.Unmarshal(out, &res); err != nil {
		w.c.problem("worker %s printed %q: %v", w.name, out, err)
		return
	}
	w.c.addStats(res.Stats)
}
