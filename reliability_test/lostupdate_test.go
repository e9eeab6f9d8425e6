package reliability

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// The lost-update workload (issue 23, point 5): holders increment a
// counter item per key by read-modify-write under their locks, while
// faults, kills and pauses make them lose their locks between their last
// look at the lock and their write. Unguarded writes must lose updates
// (the negative control: if they lose none, the run could not have shown
// anything); guarded writes must lose none. No overlap checker is
// needed: the counters are the proof.

// lostConfig sizes one run of the lost-update workload.
type lostConfig struct {
	Duration time.Duration
	// Guarded makes every write a guarded write.
	Guarded bool
	// Keys is the number of keys (and counters) everyone contends for.
	Keys int
	// InProcess incrementers are goroutines, each with its own client
	// and fault proxy; Workers are OS processes of ClientsPerWorker
	// incrementers each, behind one proxy per process.
	InProcess, Workers, ClientsPerWorker int
	// FaultEvery and ProcEvery are the mean pauses between a fault
	// switched on and a worker killed or paused.
	FaultEvery, ProcEvery  time.Duration
	Heartbeat, Safe, Lease time.Duration
	// IncMin and IncMax bound a tenure's increments.
	IncMin, IncMax int
	// StallShare is the share of in-process writes that are stalled
	// after the lock was checked: the holder's traffic (heartbeats and
	// the write) is held in the network for StallMin to StallMax, long
	// enough for another holder to take the lock over.
	StallShare         float64
	StallMin, StallMax time.Duration
	// WorkerStallShare is the share of workers' writes that wait
	// WorkerStall after the lock was checked: a window the test's
	// SIGSTOPs aim at.
	WorkerStallShare float64
	WorkerStall      time.Duration
	RetryPeriod      time.Duration
	Attempts         int
	MaxClockSkew     time.Duration
	// SemaphoreSlots, when positive, makes some holders take the keys as
	// semaphores of that many slots, each slot with a counter.
	SemaphoreSlots int
	Seed           uint64
}

func defaultLost(d time.Duration, guarded bool) lostConfig {
	return lostConfig{
		Duration: d, Guarded: guarded,
		Keys:      2,
		InProcess: 5, Workers: 2, ClientsPerWorker: 2,
		FaultEvery: 300 * time.Millisecond, ProcEvery: 800 * time.Millisecond,
		Heartbeat: 100 * time.Millisecond, Safe: 400 * time.Millisecond, Lease: 600 * time.Millisecond,
		IncMin: 1, IncMax: 6,
		StallShare: 0.08, StallMin: 1200 * time.Millisecond, StallMax: 2 * time.Second,
		WorkerStallShare: 0.1, WorkerStall: 40 * time.Millisecond,
		RetryPeriod:    15 * time.Millisecond,
		Attempts:       3,
		MaxClockSkew:   50 * time.Millisecond,
		SemaphoreSlots: 2,
		Seed:           uint64(time.Now().UnixNano()),
	}
}

// lostResult is what a run did and what the counters say.
type lostResult struct {
	Config   lostConfig
	Elapsed  time.Duration
	Counts   mutexcheck.CountReport
	Overlap  mutexcheck.Report
	Injected map[faultproxy.Kind]int64
	Requests int64
	// Stalls counts the in-process writes stalled in the network; Kills
	// and Pauses the SIGKILLs and SIGSTOPs sent to workers, LongPauses
	// those longer than the lease, and AimedPauses those sent while a
	// worker had a write under way (logged, outcome not yet).
	Stalls                                 int64
	Kills, Pauses, LongPauses, AimedPauses int
	WorkerStarts                           int
}

func (r lostResult) faults() int64 {
	var n int64
	for _, v := range r.Injected {
		n += v
	}
	return n
}

// Summary formats the run's figures.
func (r lostResult) Summary() string {
	var b strings.Builder
	c := r.Config
	mode := "UNGUARDED (plain UpdateItem after a check of Lock.Err())"
	if c.Guarded {
		mode = "GUARDED (Lock.GuardedWrite; the update has no condition of its own)"
	}
	fmt.Fprintf(&b, "lost-update run, %s writes: %v, %d keys, %d in-process clients + %d worker processes x %d clients; heartbeat %v, safe %v, lease %v; seed %d\n",
		mode, r.Elapsed.Round(time.Second), c.Keys, c.InProcess, c.Workers, c.ClientsPerWorker, c.Heartbeat, c.Safe, c.Lease, c.Seed)
	fmt.Fprintf(&b, "machine: %s/%s, %d CPUs, %s, race detector %v, server %s\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), raceEnabled, ddbtest.SharedServer().Name())
	b.WriteString(r.Counts.Summary())
	o := r.Overlap
	fmt.Fprintf(&b, "tenures %d (by kind: %s), handoffs %d, takeovers of a lock still held %d; overlap checker (steps only): violations %d\n",
		o.Tenures, formatKinds(o.ByKind), o.Handoffs, o.Takeovers, len(o.Violations))
	fmt.Fprintf(&b, "failed calls: %s\n", formatKinds(o.Failures))
	var kinds []string
	for _, k := range append(slices.Clone(faultproxy.Kinds), faultproxy.TransactionConflict) {
		if n := r.Injected[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(&b, "faults injected %d of %d requests: %s\n", r.faults(), r.Requests, strings.Join(kinds, ", "))
	fmt.Fprintf(&b, "in-process writes stalled in the network %d; worker kills %d, pauses %d (%d longer than the lease, %d aimed at a write under way), worker incarnations %d\n",
		r.Stalls, r.Kills, r.Pauses, r.LongPauses, r.AimedPauses, r.WorkerStarts)
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

// lostRun is one run in progress.
type lostRun struct {
	t        *testing.T
	cfg      lostConfig
	env      *env
	data     string
	keys     []string
	dir      string
	bin      string
	proxies  []*faultproxy.Proxy
	targets  []string // whom each proxy's faults strike (see chaos.targets)
	inproc   *mutexcheck.Log
	workers  []*counterWorker
	problems chan string

	stalls                                   atomic.Int64
	kills, pauses, longPauses, aimed, starts atomic.Int64
}

func (c *lostRun) problem(format string, args ...any) {
	select {
	case c.problems <- fmt.Sprintf(format, args...):
	default:
	}
}

// runLost runs the workload for cfg.Duration and returns its figures. It
// fails the test on a harness problem, an unclear error, or an overlap
// of verified steps; the caller judges the counts.
func runLost(t *testing.T, cfg lostConfig) lostResult {
	c := &lostRun{
		t: t, cfg: cfg, env: newEnv(t), bin: workerBinary(t),
		dir:      t.TempDir(),
		problems: make(chan string, 1000),
	}
	c.data = c.env.table + "_data"
	ddbtest.CreateTable(t, c.env.direct, c.data)
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
	f, err := os.Create(filepath.Join(c.dir, "inprocess.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inproc := mutexcheck.NewLog(f)
	c.inproc = inproc

	start := time.Now()
	holders, stopHolders := context.WithCancel(context.Background())
	var holdersDone sync.WaitGroup
	holdersDone.Go(func() { mutexcheck.WatchStalls(holders, inproc, "inproc") })
	for i := range cfg.InProcess {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		c.targets = append(c.targets, fmt.Sprintf("g%d-*", i))
		holdersDone.Go(func() { c.runInProcess(holders, i, p, inproc) })
	}
	for i := range cfg.Workers {
		p := c.env.proxy()
		c.proxies = append(c.proxies, p)
		c.targets = append(c.targets, fmt.Sprintf("w%d.*", i))
		w := &counterWorker{c: c, proxy: p, flavour: i, workerProc: workerProc{name: fmt.Sprintf("w%d", i), problem: c.problem}}
		c.workers = append(c.workers, w)
		w.start()
	}
	t.Cleanup(func() {
		for _, w := range c.workers {
			w.killNow()
		}
	})

	chaosCtx, stopChaos := context.WithTimeout(context.Background(), cfg.Duration)
	var chaosDone sync.WaitGroup
	chaosDone.Go(func() { c.injectFaults(chaosCtx) })
	chaosDone.Go(func() { c.disturbWorkers(chaosCtx) })
	<-chaosCtx.Done()
	chaosDone.Wait()
	stopChaos()

	// Calm the network, then stop everyone; writes under way finish, and
	// unknown outcomes are resolved, without faults.
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

	res := lostResult{Config: cfg, Elapsed: elapsed, Injected: map[faultproxy.Kind]int64{}}
	for _, p := range c.proxies {
		counts := p.Counts()
		res.Requests += counts.Requests
		for k, v := range counts.Injected {
			res.Injected[k] += v
		}
	}
	res.Stalls = c.stalls.Load()
	res.Kills, res.Pauses, res.LongPauses, res.AimedPauses, res.WorkerStarts =
		int(c.kills.Load()), int(c.pauses.Load()), int(c.longPauses.Load()), int(c.aimed.Load()), int(c.starts.Load())

	events := c.events()
	final := map[string]int64{}
	for _, ev := range events {
		if ev.Kind == mutexcheck.Write {
			final[ev.Key] = 0
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for key := range final {
		n, err := mutexcheck.ReadCounter(ctx, c.env.direct, c.data, key)
		if err != nil {
			t.Fatalf("reading the counter of %s: %v", key, err)
		}
		final[key] = n
	}
	res.Counts = mutexcheck.CountIncrements(events, final)
	res.Overlap = mutexcheck.Check(events)

	close(c.problems)
	for p := range c.problems {
		t.Errorf("harness: %s", p)
	}
	for _, p := range res.Counts.Problems {
		t.Errorf("inconsistent record: %s", p)
	}
	for _, p := range res.Overlap.Problems {
		t.Errorf("inconsistent record: %s", p)
	}
	for _, u := range res.Overlap.Unclear {
		t.Errorf("unclear error from %s (%s): %s", u.Tenure, u.Key, u.Detail)
	}
	// Steps are verified looks at the lock: even the unguarded writers'
	// steps never overlap. Their writes, which land later, are what the
	// counters catch.
	for _, v := range res.Overlap.Violations {
		t.Errorf("MUTUAL EXCLUSION VIOLATED (verified steps): %s", v)
	}
	reportProgress(t, res.Overlap)
	return res
}

// runInProcess runs in-process incrementer i until ctx ends.
func (c *lostRun) runInProcess(ctx context.Context, i int, p *faultproxy.Proxy, log *mutexcheck.Log) {
	cfg := c.cfg
	ddb := ddbtest.SharedServer().ClientFor(p.URL(), cfg.Attempts)
	flavours := mutexcheck.Flavours(cfg.MaxClockSkew)
	fl := flavours[i%len(flavours)]
	name := fmt.Sprintf("g%d-%s", i, fl.Name)
	opts := append(times(cfg.Heartbeat, cfg.Safe, cfg.Lease),
		ddblock.WithTableName(c.env.table), ddblock.WithLogger(quiet), ddblock.WithOwnerName(name))
	api := &mutexcheck.Recorder{API: ddb, Client: name, Log: log}
	client, err := ddblock.New(api, append(opts, fl.Options...)...)
	if err != nil {
		c.problem("ddblock.New: %v", err)
		return
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))
	h := &mutexcheck.Incrementer{
		ID: name, Client: client, Data: ddb, DataTable: c.data, Keys: c.keys, Log: log,
		Guarded: cfg.Guarded, IncMin: cfg.IncMin, IncMax: cfg.IncMax,
		StallShare: cfg.StallShare,
		// The holder's traffic is held in the network, heartbeats and
		// the write alike, as a partition or a slow network would: the
		// lock goes stale and is taken over while the write is on its
		// way.
		Stall: func(context.Context) func() {
			rule := faultproxy.Rule{Kind: faultproxy.Latency, Delay: between(rng, cfg.StallMin, cfg.StallMax)}
			f, err := injectLogged(p, rule, log, name)
			if err != nil {
				c.problem("stall: %v", err)
				return nil
			}
			c.stalls.Add(1)
			return f.Remove
		},
		CallTimeout: cfg.StallMax + 2*time.Second, ResolveFor: 20 * time.Second,
		AcquireTimeout: 3 * time.Second,
		AcquireOptions: []ddblock.AcquireOption{ddblock.WithRetryPeriod(cfg.RetryPeriod)},
		UseWithLock:    i%4 == 1,
		UseSemaphore:   cfg.SemaphoreSlots > 0 && i%4 == 2,
		UseElection:    i%4 == 3,
		Slots:          cfg.SemaphoreSlots,
		Seed:           cfg.Seed + uint64(i),
		CallsRecorded:  true,
	}
	if err := h.Run(ctx); err != nil {
		c.problem("incrementer %s: %v", name, err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := client.Close(cctx, true); err != nil {
		c.problem("closing %s: %v", name, err)
	}
	now := mutexcheck.Now()
	log.Trouble(name, now, now, "closed", 0)
}

// events reads every event log of the run.
func (c *lostRun) events() []mutexcheck.Event {
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

// injectFaults switches a random fault on at a random proxy every so
// often, for a random while: the checker's faults, and transaction
// conflicts and lost replies on the guarded writes.
func (c *lostRun) injectFaults(ctx context.Context) {
	injectFaultsEvery(ctx, faultPlan{
		seed: c.cfg.Seed, every: c.cfg.FaultEvery, proxies: c.proxies, targets: c.targets, log: c.inproc,
		rule: func(rng *rand.Rand) faultproxy.Rule { return badDayRule(rng, c.cfg.Safe, c.cfg.Lease, true) }, problem: c.problem,
	})
}

// disturbWorkers kills or pauses a random worker every so often, aiming
// at a write under way: one action in three is a SIGKILL (the worker is
// restarted), the others a SIGSTOP from the lease to twice the lease
// and more.
func (c *lostRun) disturbWorkers(ctx context.Context) {
	if len(c.workers) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 2))
	for n := 0; sleep(ctx, around(rng, c.cfg.ProcEvery)); n++ {
		w := c.workers[rng.IntN(len(c.workers))]
		aimed := w.waitOpen(ctx, time.Second)
		if n%3 == 1 {
			id := w.id()
			w.kill()
			now := mutexcheck.Now()
			c.inproc.Trouble(id, now, now, "kill", 0)
			c.kills.Add(1)
			time.Sleep(between(rng, 50*time.Millisecond, 300*time.Millisecond))
			w.start()
			continue
		}
		d := between(rng, c.cfg.Lease, 2*c.cfg.Lease+c.cfg.Safe)
		w.pause(d)
		c.pauses.Add(1)
		if aimed {
			c.aimed.Add(1)
		}
		if d > c.cfg.Lease {
			c.longPauses.Add(1)
		}
	}
}

// counterWorker is one worker process position of the lost-update run;
// a killed worker is replaced in the same slot, behind the same proxy.
type counterWorker struct {
	workerProc
	c       *lostRun
	proxy   *faultproxy.Proxy
	flavour int
	inc     int
}

func (w *counterWorker) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inc++
	w.c.starts.Add(1)
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
		"-retry-period", cfg.RetryPeriod.String(),
		"-attempts", fmt.Sprint(cfg.Attempts),
		// Worker 0's clients use the session flavours, worker 1's plain
		// and fencing, as in the checker.
		"-flavour", fmt.Sprint(2*w.flavour+3), "-max-clock-skew", cfg.MaxClockSkew.String(),
		fmt.Sprintf("-elections=%v", w.flavour%2 == 1),
		"-semaphore-slots", fmt.Sprint(cfg.SemaphoreSlots),
		"-seed", fmt.Sprint(cfg.Seed+uint64(w.inc*100+w.flavour)),
		"-counter-table", w.c.data,
		fmt.Sprintf("-guarded=%v", cfg.Guarded),
		"-inc-min", fmt.Sprint(cfg.IncMin), "-inc-max", fmt.Sprint(cfg.IncMax),
		"-stall-share", fmt.Sprint(cfg.WorkerStallShare), "-stall", cfg.WorkerStall.String(),
	)
	w.launchLocked(id, cmd, newEventTail(logPath, writesUnderWay))
}

// stop closes the worker's stdin and waits for it to finish cleanly.
func (w *counterWorker) stop() {
	id := w.id()
	w.finish(60 * time.Second)
	now := mutexcheck.Now()
	w.c.inproc.Trouble(id, now, now, "exit", 0)
}

// id is the name of the worker's current incarnation.
func (w *counterWorker) id() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%s.%d", w.name, w.inc)
}

// TestLostUpdates is the proof by lost updates, in CI's short run (about
// ten seconds a variant) and as a soak with -soak:
//
//	DDBLOCK_TEST_SERVER=dynamodb-local go test -count=1 ./reliability_test -run TestLostUpdates -soak=5m -v -timeout 0
//
// With -soak, the guarded run lasts that long and the negative control a
// fifth of it.
func TestLostUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	guardedFor, controlFor := 10*time.Second, 10*time.Second
	if *soakFor > 0 {
		guardedFor, controlFor = *soakFor, max(*soakFor/5, 10*time.Second)
	}

	t.Run("unguarded", func(t *testing.T) {
		res := runLost(t, defaultLost(controlFor, false))
		report(t, res)
		cr := res.Counts
		// The negative control: a workload that cannot lose updates
		// without guards proves nothing about the guards.
		if cr.Lost == 0 {
			t.Errorf("the unguarded writers lost no update (%d acknowledged, final %d): the run is blind, and the guarded run's zero would prove nothing", cr.Acked, cr.Final)
		}
		if cr.Excess != 0 {
			t.Errorf("final counts exceed acknowledged+unresolved writes by %d: the records are incomplete", cr.Excess)
		}
	})

	t.Run("guarded", func(t *testing.T) {
		if !ddbtest.Shared(t).HasTransactions() {
			guardedUnsupported(t)
			return
		}
		res := runLost(t, defaultLost(guardedFor, true))
		report(t, res)
		cr := res.Counts
		if cr.Lost != 0 || cr.Duplicates != 0 {
			t.Errorf("GUARDED WRITES LOST %d UPDATES (%d values acknowledged twice): %v", cr.Lost, cr.Duplicates, cr.Examples)
		}
		// Every increment accounted for: the counters went up by the
		// acknowledged writes, plus at most the writes whose outcome
		// stayed unknown (a worker killed between its write and its log
		// line, a resolution that ran out of time).
		if cr.Excess != 0 {
			t.Errorf("final counts exceed acknowledged+unresolved writes by %d: a guarded write reported not applied was applied", cr.Excess)
		}
		if cr.GuardedFailures[string(ddblock.CodeLockNotHeld)] == 0 {
			t.Errorf("no guarded write failed with LOCK_NOT_HELD: the guard never had to stop a write (failures: %v)", cr.GuardedFailures)
		}
		if res.Injected[faultproxy.TransactionConflict] == 0 || cr.GuardedFailures[string(ddblock.CodeTransactionConflict)] == 0 {
			t.Errorf("transaction conflicts injected %d, guarded writes failed with TRANSACTION_CONFLICT %d: both must happen",
				res.Injected[faultproxy.TransactionConflict], cr.GuardedFailures[string(ddblock.CodeTransactionConflict)])
		}
		for code, n := range cr.GuardedFailures {
			switch ddblock.Code(code) {
			case ddblock.CodeLockNotHeld, ddblock.CodeTransactionConflict, ddblock.CodeOutcomeUnknown, ddblock.CodeUnknown:
			default:
				t.Errorf("%d guarded writes failed with %s", n, code)
			}
		}
		if n := cr.Resolutions["UNRESOLVED"]; n > 0 {
			t.Errorf("%d guarded writes stayed unresolved after 20 s of retries", n)
		}
	})
}

// report logs a run's figures (prints them in a soak) and checks that
// it did what it claims: without increments, takeovers, stalls, faults,
// kills and pauses, a zero proves nothing.
func report(t *testing.T, res lostResult) {
	t.Helper()
	if *soakFor > 0 {
		fmt.Printf("\n=== %s ===\n%s\n", t.Name(), res.Summary())
	} else {
		t.Logf("\n%s", res.Summary())
	}
	cr := res.Counts
	if cr.Acked < 100 {
		t.Errorf("only %d acknowledged increments: too little work to show anything", cr.Acked)
	}
	if res.Overlap.Takeovers == 0 {
		t.Error("no takeover of a lock still held: nothing made a holder lose its lock")
	}
	if res.Stalls == 0 || res.faults() == 0 || res.Kills == 0 || res.Pauses == 0 {
		t.Errorf("stalls %d, faults %d, kills %d, pauses %d: every kind of trouble must happen at least once",
			res.Stalls, res.faults(), res.Kills, res.Pauses)
	}
	for _, kind := range []string{"plain", "fencing", "fast", "session", "session-fast"} {
		if res.Overlap.ByKind[kind] == 0 {
			t.Errorf("no working tenure of a %s client: %v", kind, res.Overlap.ByKind)
		}
	}
}

// guardedUnsupported checks, on a server without transactions
// (dynalite), that a guarded increment fails with the typed
// TRANSACTIONS_UNSUPPORTED error and writes nothing: the guarded run
// itself is the DynamoDB Local pass's.
func guardedUnsupported(t *testing.T) {
	e := newEnv(t)
	data := e.table + "_data"
	ddbtest.CreateTable(t, e.direct, data)
	lock, err := e.client(e.direct).AcquireLock(context.Background(), "key-0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock.GuardedWrite(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{Update: &types.Update{
			TableName:                 aws.String(data),
			Key:                       mutexcheck.CounterKey("key-0"),
			UpdateExpression:          aws.String("SET #n = :new"),
			ExpressionAttributeNames:  map[string]string{"#n": mutexcheck.CounterAttr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":new": &types.AttributeValueMemberN{Value: "1"}},
		}}},
	})
	var lerr *ddblock.Error
	if !errors.Is(err, ddblock.CodeTransactionsUnsupported) || !errors.As(err, &lerr) {
		t.Fatalf("GuardedWrite on %s, which has no transactions: %v; want a *ddblock.Error of TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), err)
	}
	if n, err := mutexcheck.ReadCounter(context.Background(), e.direct, data, "key-0"); err != nil || n != 0 {
		t.Fatalf("counter = %d, %v after an unsupported guarded write; want 0", n, err)
	}
	if lock.Err() != nil {
		t.Errorf("the lock after an unsupported guarded write: %v; want still held", lock.Err())
	}
}
