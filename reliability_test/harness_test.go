package reliability

// The one chaos driver. A run mixes kinds of participants (kind):
// in-process holders, worker processes, `ddblock run` slots, lost-update
// writers, a crowd of fair waiters; each participant sits behind a fault
// proxy of its own. The driver starts them, switches faults on at random
// proxies, lets each kind bring its own trouble (kills, pauses, abandoned
// clients, struck guards), stops everyone, reads every event log and
// checks mutual exclusion, slot limits, fencing, progress, the counters
// of a lost-update run, and that every lock can be taken over afterwards.
// A new kind of client is one more kind.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
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

// chaosConfig sizes one run of the chaos driver.
type chaosConfig struct {
	Duration time.Duration
	// Keys is the number of keys everyone contends for.
	Keys int
	// Mix is who contends for them: one party of each kind listed.
	Mix []kind
	// FaultEvery is the mean pause between two faults switched on at a
	// random proxy (zero: none); Transactions adds the faults of
	// transactions to the bad day (badDayRule).
	FaultEvery             time.Duration
	Transactions           bool
	Heartbeat, Safe, Lease time.Duration
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
	// SemaphoreSlots, when positive, makes some holders take the keys as
	// semaphores of that many slots (see semaphore_test.go).
	SemaphoreSlots int
	// ResizeTo, when set, makes a resizer change every key's semaphore
	// to each of these numbers in turn, one every ResizeEvery (see
	// semaphore_test.go).
	ResizeTo    []int
	ResizeEvery time.Duration
	// SetSize, when at least 2, makes every fourth in-process slot (those
	// of AcquireLock) and the workers' first clients take sets of 2 to
	// SetSize keys at once (AcquireLocks, mutexcheck.Holder.SetSize);
	// their kind is "set-" and their flavour's.
	SetSize int
	// Fair makes the even in-process slots and the workers' even clients
	// wait fairly (mutexcheck.Fair), among the others that do not.
	Fair bool
	// FairTimeout, when positive, is a fair waiter's acquire deadline
	// (and RetryTimeout), long enough for the progress check to see a
	// line that jams (it must be over mutexcheck.FairProgressBound).
	FairTimeout time.Duration
	// GarbleEvery, when positive, is the mean pause between two
	// garbage writes into the keys' lines (fair_test.go).
	GarbleEvery time.Duration
	// Counters, when set, is the lost-update workload
	// (lostupdate_test.go): the writers and the worker processes
	// increment a counter item per key under their locks.
	Counters *counterWork
	Seed     uint64
}

// A kind of participant in a chaos run. start launches the kind's
// participants, each behind a proxy of its own (chaos.proxy), to run
// until ctx ends: goroutines on chaos.running, processes the party
// stops. The party brings the kind's own trouble while the chaos lasts
// (disturb), and stops what the driver does not wait for (stop).
type kind interface {
	describe() string
	start(c *chaos, ctx context.Context) party
}

type party interface {
	// disturb strikes the kind's participants until ctx ends.
	disturb(ctx context.Context)
	// stop ends the kind's processes cleanly, once the network calmed.
	stop()
}

// calm is a party that brings no trouble of its own and has nothing to
// stop.
type calm struct{}

func (calm) disturb(context.Context) {}
func (calm) stop()                   {}

// defaultChaos is the checker's mix: in-process holders of every
// flavour and way of holding, abandoned now and then, and two worker
// processes, killed and paused.
func defaultChaos(d time.Duration) chaosConfig {
	return chaosConfig{
		Duration:   d,
		Keys:       4,
		Mix:        []kind{defaultInProcess(4), defaultWorkers(2, 2)},
		FaultEvery: 150 * time.Millisecond,
		Heartbeat:  100 * time.Millisecond, Safe: 400 * time.Millisecond, Lease: 600 * time.Millisecond,
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
	// Struck counts the trouble the kinds brought, by name: "kill" and
	// "pause" (workers; "long-pause" those longer than the lease,
	// "aimed-pause" those sent while something was open), "abandon"
	// (in-process clients closed under their locks), "stall", the
	// `ddblock run` strikes, and so on.
	Struck map[string]int
	// Acquired counts the acquisitions by the party's prefix of the
	// tenure's name ("g", "w", "run", "u", "x").
	Acquired map[string]int
	// Counts is what the counters say, in a lost-update run.
	Counts mutexcheck.CountReport
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
	mix := make([]string, 0, len(c.Mix))
	for _, k := range c.Mix {
		mix = append(mix, k.describe())
	}
	fmt.Fprintf(&b, "run: %v, %d keys; %s; heartbeat %v, safe %v, lease %v; seed %d\n",
		r.Elapsed.Round(time.Second), c.Keys, strings.Join(mix, " + "), c.Heartbeat, c.Safe, c.Lease, c.Seed)
	fmt.Fprintf(&b, "machine: %s/%s, %d CPUs, %s, race detector %v, server %s; timestamps from %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), raceEnabled, ddbtest.SharedServer().Name(), mutexcheck.ClockName)
	if w := c.Counters; w != nil {
		mode := "UNGUARDED (plain UpdateItem after a check of Lock.Err())"
		if w.Guarded {
			mode = "GUARDED (Lock.GuardedWrite; the update has no condition of its own)"
		}
		fmt.Fprintf(&b, "lost-update workload, %s writes\n", mode)
		b.WriteString(r.Counts.Summary())
	}
	b.WriteString(r.Report.Summary())
	fmt.Fprintf(&b, "acquisitions by party: %s\n", formatKinds(r.Acquired))
	var kinds []string
	for _, k := range append(slices.Clone(faultproxy.Kinds), faultproxy.TransactionConflict) {
		if n := r.Injected[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(&b, "faults injected %d of %d requests: %s\n", r.faults(), r.Requests, strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "trouble: %s; leftover items taken over at the end %d\n", formatKinds(r.Struck), r.Leftover)
	if c.Fair {
		b.WriteString(r.Fair.summary())
	}
	s := r.Stats
	fmt.Fprintf(&b, "library counters (clean shutdowns): heartbeats sent %d, failed %d, skipped %d, late rounds %d, in danger %d, recovered %d, stolen %d\n",
		s.HeartbeatsSent, s.HeartbeatsFailed, s.HeartbeatsSkipped, s.LateRounds, s.InDanger, s.Recovered, s.Stolen)
	fmt.Fprintf(&b, "locks taken over from a session already judged dead (no wait of their own): %d\n", s.DeadSessionLocks)
	return b.String()
}

func formatKinds(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// chaos is one run in progress.
type chaos struct {
	t    *testing.T
	cfg  chaosConfig
	env  *env
	keys []string
	dir  string
	// log is the test process's event log: the in-process participants',
	// and the trouble the driver and the kinds bring.
	log  *mutexcheck.Log
	opts []ddblock.Option
	// data is the lost-update run's counter table.
	data string
	// running are the in-process participants.
	running sync.WaitGroup
	proxies []*faultproxy.Proxy
	// targets name, for the checker, whom each proxy's faults strike: a
	// prefix of the names of the holders, clients and processes behind
	// it.
	targets []string
	// extend are what the chaos waits for, up to half a minute, after
	// its Duration (a crowd struck both ways: fair_test.go).
	extend []<-chan struct{}

	problemsMu sync.Mutex
	problems   []string
	struck     sync.Map // name -> *atomic.Int64

	fair fairCounts
	// lines reads the keys' lines for the disturbers (fair_test.go).
	lines *ddblock.Client

	statsMu sync.Mutex
	stats   ddblock.Stats
}

// proxy starts a fault proxy for participants named target (a prefix
// and "*"), struck by the fault injector.
func (c *chaos) proxy(target string) *faultproxy.Proxy {
	p := c.env.proxy()
	c.proxies = append(c.proxies, p)
	c.targets = append(c.targets, target)
	return p
}

// count adds one to the trouble named what.
func (c *chaos) count(what string) {
	v, _ := c.struck.LoadOrStore(what, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// counted is how often the trouble named what struck so far.
func (c *chaos) counted(what string) int64 {
	if v, ok := c.struck.Load(what); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
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

// runChaos runs cfg's mix for cfg.Duration and returns its figures; it
// fails the test on any violation, unclear error, harness problem, or a
// lock item that cannot be taken over afterwards.
func runChaos(t *testing.T, cfg chaosConfig) chaosResult {
	c := &chaos{t: t, cfg: cfg, env: newEnv(t), dir: t.TempDir()}
	if *logDir != "" {
		c.dir = filepath.Join(*logDir, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
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
	if cfg.Counters != nil {
		c.data = c.env.table + "_data"
		ddbtest.CreateTable(t, c.env.direct, c.data)
	}
	f, err := os.Create(filepath.Join(c.dir, "inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c.log = mutexcheck.NewLog(f)

	start := time.Now()
	holders, stopHolders := context.WithCancel(context.Background())
	defer stopHolders()
	c.running.Go(func() { mutexcheck.WatchStalls(holders, c.log, "inproc") })
	parties := make([]party, 0, len(cfg.Mix))
	for _, k := range cfg.Mix {
		parties = append(parties, k.start(c, holders))
	}

	chaosCtx, stopChaos := context.WithCancel(context.Background())
	go func() {
		// The trouble lasts cfg.Duration, and then until what a kind
		// must see has happened, up to half a minute more.
		select {
		case <-time.After(cfg.Duration):
		case <-chaosCtx.Done():
			return
		}
		limit := time.After(30 * time.Second)
		for _, ch := range c.extend {
			select {
			case <-ch:
			case <-limit:
			case <-chaosCtx.Done():
			}
		}
		stopChaos()
	}()
	var chaosDone sync.WaitGroup
	if cfg.FaultEvery > 0 {
		chaosDone.Go(func() { c.injectFaults(chaosCtx) })
	}
	for _, p := range parties {
		chaosDone.Go(func() { p.disturb(chaosCtx) })
	}
	if len(cfg.ResizeTo) > 0 {
		chaosDone.Go(func() { c.resizeSemaphores(chaosCtx) })
	}
	if cfg.GarbleEvery > 0 {
		chaosDone.Go(func() { c.garbleLines(chaosCtx) })
	}
	<-chaosCtx.Done()
	chaosDone.Wait()
	stopChaos()

	// Calm the network, then stop everyone cleanly; writes under way
	// finish, and unknown outcomes are resolved, without faults.
	for _, p := range c.proxies {
		p.Clear()
	}
	var stopping sync.WaitGroup
	for _, p := range parties {
		stopping.Go(p.stop)
	}
	stopHolders()
	c.running.Wait()
	stopping.Wait()

	res := chaosResult{Config: cfg, Elapsed: time.Since(start), Injected: map[faultproxy.Kind]int64{},
		Struck: map[string]int{}, Acquired: map[string]int{}}
	for _, p := range c.proxies {
		counts := p.Counts()
		res.Requests += counts.Requests
		for k, v := range counts.Injected {
			res.Injected[k] += v
		}
	}
	c.struck.Range(func(k, v any) bool {
		res.Struck[k.(string)] = int(v.(*atomic.Int64).Load())
		return true
	})
	res.Stats = c.stats
	res.Fair = c.fair.snapshot()
	events := c.events()
	for _, ev := range events {
		if ev.Kind == mutexcheck.Acquired {
			res.Acquired[partyOf(ev.Tenure)]++
		}
	}
	if cfg.Counters != nil {
		res.Counts = c.countIncrements(events)
	}
	res.Report = mutexcheck.Check(events)
	res.Leftover = c.takeOverLeftovers(res.Report.MaxToken)
	c.judge(res)
	return res
}

// partyOf is the prefix of a tenure's name that says its party: its
// leading lower-case letters.
func partyOf(tenure string) string {
	if i := strings.IndexFunc(tenure, func(r rune) bool { return r < 'a' || r > 'z' }); i >= 0 {
		return tenure[:i]
	}
	return tenure
}

// judge fails the test on what the run must never show, in every run.
func (c *chaos) judge(res chaosResult) {
	t := c.t
	c.problemsMu.Lock()
	for _, p := range c.problems {
		t.Errorf("harness: %s", p)
	}
	c.problemsMu.Unlock()
	rep := res.Report
	what := ""
	if c.cfg.Counters != nil {
		// Steps are verified looks at the lock: even the unguarded
		// writers' steps never overlap. Their writes, which land later,
		// are what the counters catch (the caller judges them).
		what = " (verified steps)"
		for _, p := range res.Counts.Problems {
			t.Errorf("inconsistent record: %s", p)
		}
	}
	for _, v := range rep.Violations {
		t.Errorf("MUTUAL EXCLUSION VIOLATED%s: %s", what, v)
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

// inProcess is N in-process holders ("g0", "g1", ...): goroutines of
// the test, each slot with a client of its own behind a proxy of its
// own, and a new client each time the abandoner closes the current one
// under its locks (about every AbandonEvery; zero: never). Slot i holds
// in flavour i (mutexcheck.Flavours), and by i%4: AcquireLock, WithLock,
// a semaphore's slot (with SemaphoreSlots; else AcquireLock), an
// election. With Shared > 1, the slots of AcquireLock and WithLock are
// that many goroutines of one client, which wait for one another's
// locks (WithWaitOnOwn): the client's waiters of a key share its reads
// and take it over from one another at its release (waiters.go).
type inProcess struct {
	N, Shared    int
	AbandonEvery time.Duration
}

func defaultInProcess(n int) inProcess {
	return inProcess{N: n, Shared: 3, AbandonEvery: 2 * time.Second}
}

func (k inProcess) describe() string {
	return fmt.Sprintf("%d in-process holders", k.N)
}

func (k inProcess) start(c *chaos, ctx context.Context) party {
	p := &inProcessParty{c: c, k: k}
	for i := range k.N {
		proxy := c.proxy(fmt.Sprintf("g%d.*", i))
		c.running.Go(func() { p.runSlot(ctx, i, proxy) })
	}
	return p
}

type inProcessParty struct {
	calm
	c *chaos
	k inProcess
	// slots maps a slot to its current client, for the abandoner.
	slots sync.Map
}

// runSlot runs in-process holder i until ctx ends, with a new client
// each time the abandoner closes the current one.
func (p *inProcessParty) runSlot(ctx context.Context, i int, proxy *faultproxy.Proxy) {
	c := p.c
	sdk := ddbtest.SharedServer().ClientFor(proxy.URL(), c.cfg.Attempts)
	flavours := mutexcheck.Flavours(c.cfg.MaxClockSkew)
	fl := flavours[i%len(flavours)]
	setSize := 0
	if c.cfg.SetSize >= 2 && i%4 == 0 {
		setSize = c.cfg.SetSize
	}
	// Half the set slots wait fairly, the others poll.
	if c.cfg.Fair && i%2 == 0 && (setSize == 0 || i%8 == 0) {
		fl = mutexcheck.Fair(fl)
	}
	for gen := 1; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("g%d.%d-%s", i, gen, fl.Name)
		if setSize > 0 {
			name = fmt.Sprintf("g%d.%d-set-%s", i, gen, fl.Name)
		}
		opts := append(slices.Clone(c.opts), ddblock.WithOwnerName(name))
		ddb := &mutexcheck.Recorder{API: sdk, Client: name, Log: c.log}
		client, err := ddblock.New(ddb, append(opts, fl.Options...)...)
		if err != nil {
			c.problem("ddblock.New: %v", err)
			return
		}
		p.slots.Store(i, client)
		goroutines := 1
		acquireOpts := append([]ddblock.AcquireOption{ddblock.WithRetryPeriod(c.cfg.RetryPeriod)}, fl.Acquire...)
		acquireTimeout := 3 * time.Second
		if strings.HasSuffix(fl.Name, "-fair") && c.cfg.FairTimeout > 0 {
			acquireTimeout = c.cfg.FairTimeout
			acquireOpts = append(acquireOpts, ddblock.WithRetryTimeout(acquireTimeout))
		}
		if setSize > 0 {
			// A set needs all its keys free at one look: it waits
			// longer than the others, or it would rarely get them.
			acquireTimeout = 5 * time.Second
			acquireOpts = append(acquireOpts, ddblock.WithRetryTimeout(acquireTimeout))
		}
		if i%4 <= 1 && p.k.Shared > 1 {
			goroutines = p.k.Shared
			acquireOpts = append(acquireOpts, ddblock.WithWaitOnOwn())
		}
		var running sync.WaitGroup
		for g := range goroutines {
			id := name
			if goroutines > 1 {
				id = fmt.Sprintf("%s-t%d", name, g)
			}
			h := &mutexcheck.Holder{
				ID: id, Client: client, Keys: c.keys, Log: c.log,
				HoldMin: c.cfg.HoldMin, HoldMax: c.cfg.HoldMax, StepEvery: c.cfg.Step,
				LongShare: c.cfg.LongShare, LongMin: c.cfg.LongMin, LongMax: c.cfg.LongMax,
				AcquireTimeout: acquireTimeout,
				AcquireOptions: acquireOpts,
				UseWithLock:    i%4 == 1,
				UseElection:    i%4 == 3,
				UseSemaphore:   c.cfg.SemaphoreSlots > 0 && i%4 == 2,
				Slots:          c.cfg.SemaphoreSlots,
				DirectSlots:    c.cfg.SemaphoreSlots,
				SetSize:        setSize,
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
		c.closeClient(client, name)
	}
}

// closeClient closes an in-process client at the end of its run,
// releasing what it holds, and adds its counters.
func (c *chaos) closeClient(client *ddblock.Client, name string) {
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := client.Close(cctx, true); err != nil {
		c.problem("closing %s: %v", name, err)
	}
	cancel()
	now := mutexcheck.Now()
	c.log.Trouble(name, now, now, "closed", 0)
	c.addStats(client.Stats())
}

// disturb closes a random in-process client without releasing its
// locks, as a crashing process would leave them.
func (p *inProcessParty) disturb(ctx context.Context) {
	c := p.c
	if p.k.N == 0 || p.k.AbandonEvery <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 3))
	for sleep(ctx, around(rng, p.k.AbandonEvery)) {
		// Prefer a client that holds a lock now.
		var v any
		for range 200 {
			cand, ok := p.slots.Load(rng.IntN(p.k.N))
			if ok {
				v = cand
				if len(cand.(*ddblock.Client).HeldLocks()) > 0 {
					break
				}
			}
			if !sleep(ctx, 5*time.Millisecond) {
				return
			}
		}
		if v == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		client := v.(*ddblock.Client)
		if err := client.Close(cctx, false); err != nil {
			c.problem("abandoning a client: %v", err)
		}
		cancel()
		now := mutexcheck.Now()
		c.log.Trouble(client.Options().OwnerName, now, now, "abandon", 0)
		c.count("abandon")
	}
}

func (c *chaos) addStats(s ddblock.Stats) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	mutexcheck.AddStats(&c.stats, s)
}

func (c *chaos) problem(format string, args ...any) {
	c.problemsMu.Lock()
	defer c.problemsMu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
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

// injectFaults switches a fault of a bad day on at a random proxy about
// every FaultEvery, each for 200 ms to 1.5 s, until ctx ends; then it
// removes those still on. Every fault is on record, once removed, for
// the progress check.
func (c *chaos) injectFaults(ctx context.Context) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 1))
	var faults []*loggedFault
	defer func() {
		for _, f := range faults {
			f.Remove()
		}
	}()
	for sleep(ctx, around(rng, c.cfg.FaultEvery)) {
		i := rng.IntN(len(c.proxies))
		f, err := injectLogged(c.proxies[i], badDayRule(rng, c.cfg.Safe, c.cfg.Lease, c.cfg.Transactions), c.log, c.targets[i])
		if err != nil {
			c.problem("inject: %v", err)
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

// events reads every event log of the run.
func (c *chaos) events() []mutexcheck.Event {
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
	return events
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

// everyTrouble is a run's shortfall unless faults and each trouble
// named struck at least once; "" when they all did.
func everyTrouble(res chaosResult, names ...string) string {
	parts := []string{fmt.Sprintf("faults %d", res.faults())}
	short := res.faults() == 0
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, res.Struck[n]))
		short = short || res.Struck[n] == 0
	}
	if !short {
		return ""
	}
	return strings.Join(parts, ", ") + ": every kind of trouble must happen at least once"
}
