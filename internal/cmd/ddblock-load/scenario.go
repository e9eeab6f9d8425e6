package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddblock/ddblock"
)

// scenarioResult is what one client holding n locks showed.
type scenarioResult struct {
	locks       int
	period      time.Duration
	safe        time.Duration
	concurrency int
	// session is true when the client held its locks through a session
	// item (--session). The per-lock gaps are then those of the lock's
	// session item's heartbeats, which are what keeps it alive, and the
	// first gap runs from the lock's acquire to the first session write
	// sent after it; sessions counts the session items the client made
	// (1 unless one ended and the client started another).
	session         bool
	sessions        int
	lockItemUpdates int64 // successful UpdateItems of lock items, whole run

	acquireWorkers int
	acquireTime    time.Duration
	acquireLat     durations
	acquireErrors  int
	acquireGapMax  time.Duration // largest gap between heartbeats before the window
	firstGap       durations     // each lock's acquire → first heartbeat
	firstGapSent   durations     // the same, from send to send

	window                time.Duration
	heartbeatsOK          int64 // successful heartbeats of the held locks in the window
	heartbeatsFailed      int64
	callMax               time.Duration // the window's slowest successful heartbeat call
	callsSlow             int64         // and those over a tenth of a period
	statsBefore, statsEnd ddblock.Stats
	perLockGap            durations // each lock's largest gap in the window
	perLockGapSent        durations // the same, from send to send
	perLockBeats          []int64
	neverBeat             int // locks with no successful heartbeat in the window
	// Heartbeats that came back less than half a period after the lock's
	// previous successful write (acquire or heartbeat): before the
	// window (acquire phase and settle) and in it.
	earlyBefore, earlyWindow int64

	goroutinesBase    int // before the client existed
	goroutinesIdle    int // client made, connections warm, no lock held
	goroutinesHeldMax int // the most seen while holding the locks
	libIdle, libMax   int // of those, goroutines running ddblock's code
	heapIdle          uint64
	heapHeld          uint64 // after acquiring every lock
	heapEnd           uint64 // at the end of the window, still holding them

	probeIdle durations // acquire latency of fresh locks, no lock held
	probeBusy durations // the same while the heartbeats run
	probeErrs int

	cpu       cpuUse
	loadStart string // the machine's load average when the scenario started
}

// deltaStats is what the client counted during the window.
func (r *scenarioResult) deltaStats() ddblock.Stats {
	a, b := r.statsBefore, r.statsEnd
	return ddblock.Stats{
		Rounds:            b.Rounds - a.Rounds,
		LateRounds:        b.LateRounds - a.LateRounds,
		HeartbeatsSent:    b.HeartbeatsSent - a.HeartbeatsSent,
		HeartbeatsFailed:  b.HeartbeatsFailed - a.HeartbeatsFailed,
		HeartbeatsSkipped: b.HeartbeatsSkipped - a.HeartbeatsSkipped,
		InDanger:          b.InDanger - a.InDanger,
		Recovered:         b.Recovered - a.Recovered,
		Stolen:            b.Stolen - a.Stolen,
	}
}

func (r *scenarioResult) rate() float64 { return float64(r.heartbeatsOK) / r.window.Seconds() }

// runScenario acquires n locks with one client and holds them for
// cfg.duration, measuring as it goes.
func runScenario(ctx context.Context, ddb ddbClient, cfg *config, n int) (*scenarioResult, error) {
	table, err := createTable(ctx, ddb, fmt.Sprintf("locks_%d", n))
	if err != nil {
		return nil, err
	}
	defer deleteTable(ddb, table)

	r := &scenarioResult{locks: n, period: cfg.period, safe: cfg.safe, concurrency: cfg.concurrency, acquireWorkers: cfg.acquireWorkers, session: cfg.session}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("load-%07d", i)
	}
	rec := newRecorder(ddb, ddblock.DefaultPartitionKeyName, keys, cfg.period)
	r.acquireLat = make(durations, n)
	// The locks, kept to learn each one's session: made before the idle
	// heap is read, like the recorder's tracks, so that the heap per lock
	// is the client's alone.
	held := make([]*ddblock.Lock, n)
	r.probeIdle = make(durations, 0, 64)
	r.probeBusy = make(durations, 0, int(cfg.duration/max(cfg.probeEvery, time.Millisecond))+16)

	runtime.GC()
	r.goroutinesBase = runtime.NumGoroutine()
	opts := []ddblock.Option{
		ddblock.WithTableName(table),
		ddblock.WithHeartbeatPeriod(cfg.period),
		ddblock.WithSafePeriod(cfg.safe),
		ddblock.WithLeaseDuration(cfg.lease),
		ddblock.WithHeartbeatConcurrency(cfg.concurrency),
		ddblock.WithHeartbeatTPS(cfg.tps),
		// Under overload the client warns once a round; the summary
		// reports the same from Stats.
		ddblock.WithLogger(slog.New(slog.DiscardHandler)),
	}
	if cfg.session {
		opts = append(opts, ddblock.WithSessionLease())
	}
	client, err := ddblock.New(rec, opts...)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = client.Close(cctx, false)
		}
	}()

	// Warm up: open as many connections as the run will use, and take the
	// idle acquire latency, before the baseline is read.
	if err := warmUp(ctx, client, max(cfg.concurrency, cfg.acquireWorkers)); err != nil {
		return nil, err
	}
	for i := range 20 {
		d, err := probeOnce(ctx, client, fmt.Sprintf("probe-idle-%d", i))
		if err != nil {
			return nil, fmt.Errorf("idle probe: %w", err)
		}
		r.probeIdle = append(r.probeIdle, d)
	}
	r.heapIdle = heapAfterGC()
	r.goroutinesIdle = runtime.NumGoroutine()
	r.libIdle = libraryGoroutines()

	// Acquire every lock, cfg.acquireWorkers at a time.
	var next atomic.Int64
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range cfg.acquireWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				l, err := client.AcquireLock(ctx, keys[i])
				r.acquireLat[i] = time.Since(t0)
				held[i] = l
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	r.acquireTime = time.Since(start)
	r.acquireErrors = int(errs.Load())
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.acquireErrors > 0 {
		return nil, fmt.Errorf("%d acquires failed, the first: %v", r.acquireErrors, firstErr.Load())
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cfg.settle):
	}
	r.heapHeld = heapAfterGC()
	r.goroutinesHeldMax = runtime.NumGoroutine()
	if err := writeHeap(cfg, n, "held"); err != nil {
		return nil, err
	}

	// The measured window.
	for _, t := range rec.allTracks() {
		r.acquireGapMax = max(r.acquireGapMax, time.Duration(t.maxGapAcq.Load()))
	}
	samples := 0
	r.statsBefore = client.Stats()
	ok0, failed0 := rec.updatesOK.Load(), rec.updatesFailed.Load()
	cpu0 := readCPU()
	rec.startWindow()
	winStart := time.Now()
	wctx, stopWindow := context.WithCancel(ctx)
	var side sync.WaitGroup
	side.Add(2)
	go func() { // goroutine count, sampled
		defer side.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
				r.goroutinesHeldMax = max(r.goroutinesHeldMax, runtime.NumGoroutine())
				// Reading every stack stops the world for milliseconds:
				// only every 5 s.
				if samples++; samples%100 == 1 {
					r.libMax = max(r.libMax, libraryGoroutines())
				}
			}
		}
	}()
	go func() { // acquire latency of fresh locks under load
		defer side.Done()
		if cfg.probeEvery == 0 {
			return
		}
		tick := time.NewTicker(cfg.probeEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			d, err := probeOnce(wctx, client, fmt.Sprintf("probe-busy-%d", i))
			if err != nil {
				if wctx.Err() == nil {
					r.probeErrs++
				}
				continue
			}
			r.probeBusy = append(r.probeBusy, d)
		}
	}()
	select {
	case <-ctx.Done():
	case <-time.After(cfg.duration):
	}
	stopWindow()
	side.Wait()
	rec.endWindow()
	r.window = time.Since(winStart)
	r.cpu = readCPU().since(cpu0)
	r.statsEnd = client.Stats()
	r.heartbeatsOK = rec.updatesOK.Load() - ok0
	r.heartbeatsFailed = rec.updatesFailed.Load() - failed0
	r.callMax, r.callsSlow = time.Duration(rec.callMaxHold.Load()), rec.slowHold.Load()
	r.heapEnd = heapAfterGC()
	if err := writeHeap(cfg, n, "end"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	r.perLockGap = make(durations, 0, n)
	r.perLockGapSent = make(durations, 0, n)
	r.perLockBeats = make([]int64, 0, n)
	r.firstGap = make(durations, 0, n)
	r.firstGapSent = make(durations, 0, n)
	r.lockItemUpdates = rec.lockUpdates.Load()
	if cfg.session {
		r.sessionGaps(rec, keys, held)
	} else {
		r.lockGaps(rec, keys)
	}

	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closed = true
	if err := client.Close(cctx, false); err != nil {
		return nil, fmt.Errorf("closing the client: %w", err)
	}
	return r, nil
}

// lockGaps fills the per-lock figures from each lock's own heartbeats.
func (r *scenarioResult) lockGaps(rec *recorder, keys []string) {
	for _, k := range keys {
		t := rec.tracks[k]
		r.firstGap = append(r.firstGap, time.Duration(t.firstGap.Load()))
		r.firstGapSent = append(r.firstGapSent, time.Duration(t.firstGapSent.Load()))
		r.perLockGap = append(r.perLockGap, time.Duration(t.maxGapHold.Load()))
		r.perLockGapSent = append(r.perLockGapSent, time.Duration(t.maxGapHoldSent.Load()))
		b := t.beatsHold.Load()
		r.perLockBeats = append(r.perLockBeats, b)
		r.earlyBefore += t.earlyAcq.Load()
		r.earlyWindow += t.earlyHold.Load()
		if b == 0 {
			r.neverBeat++
		}
	}
}

// sessionGaps fills the per-lock figures of a session client. A lock on
// a session is written once and never heartbeated: what keeps it alive
// is its session item's heartbeats, so its gaps in the window are its
// session's, and its first gap runs from its acquire to the first
// session write sent after it (the first to move its safe period on).
// Early repeats are counted once per session write, not once per lock.
func (r *scenarioResult) sessionGaps(rec *recorder, keys []string, held []*ddblock.Lock) {
	sessions := rec.sessionTracks()
	r.sessions = len(sessions)
	for _, t := range sessions {
		r.earlyBefore += t.earlyAcq.Load()
		r.earlyWindow += t.earlyHold.Load()
	}
	end := rec.now()
	for i, k := range keys {
		lt := rec.tracks[k]
		var st *track
		if sk := held[i].SessionKey(); sk != "" {
			st = rec.sessionTrack(sk)
		}
		if st == nil {
			// Not on a session the recorder saw written: no heartbeat
			// kept it alive, so its whole life is its gap.
			r.perLockGap = append(r.perLockGap, time.Duration(end-lt.last.Load()))
			r.perLockGapSent = append(r.perLockGapSent, time.Duration(end-lt.lastSent.Load()))
			r.perLockBeats = append(r.perLockBeats, 0)
			r.firstGap = append(r.firstGap, time.Duration(end-lt.last.Load()))
			r.firstGapSent = append(r.firstGapSent, time.Duration(end-lt.lastSent.Load()))
			r.neverBeat++
			continue
		}
		r.perLockGap = append(r.perLockGap, time.Duration(st.maxGapHold.Load()))
		r.perLockGapSent = append(r.perLockGapSent, time.Duration(st.maxGapHoldSent.Load()))
		b := st.beatsHold.Load()
		r.perLockBeats = append(r.perLockBeats, b)
		if b == 0 {
			r.neverBeat++
		}
		if w, ok := rec.firstSessionRefresh(lt.lastSent.Load()); ok {
			r.firstGap = append(r.firstGap, time.Duration(w.landed-lt.last.Load()))
			r.firstGapSent = append(r.firstGapSent, time.Duration(w.sent-lt.lastSent.Load()))
		} else {
			r.firstGap = append(r.firstGap, time.Duration(end-lt.last.Load()))
			r.firstGapSent = append(r.firstGapSent, time.Duration(end-lt.lastSent.Load()))
		}
	}
}

// warmUp makes the client's connections before anything is measured:
// conns concurrent reads of a lock that does not exist.
func warmUp(ctx context.Context, c *ddblock.Client, conns int) error {
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				if _, err := c.GetLock(ctx, fmt.Sprintf("warm-%d", i), ""); err != nil && ddblock.CodeOf(err) != ddblock.CodeLockNotFound {
					failed.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	return nil
}

// probeOnce acquires a fresh lock, timing the acquire, and releases it.
func probeOnce(ctx context.Context, c *ddblock.Client, key string) (time.Duration, error) {
	t0 := time.Now()
	l, err := c.AcquireLock(ctx, key)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = l.Release(rctx)
	return d, nil
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// writeHeap writes a heap profile, if asked to, for comparing the heap
// held at two points with go tool pprof -base.
func writeHeap(cfg *config, n int, when string) error {
	if cfg.memProfile == "" {
		return nil
	}
	f, err := os.Create(fmt.Sprintf("%s-%d-%s.pprof", cfg.memProfile, n, when))
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// perLock is the heap the held locks cost, each.
func perLock(after, before uint64, n int) string {
	return fmt.Sprintf("%.0f B", (float64(after)-float64(before))/float64(n))
}

func (r *scenarioResult) print(out io.Writer, ceilings []ceilingResult) {
	d := r.deltaStats()
	fmt.Fprintf(out, "acquire:     %d locks in %v with %d workers (%.0f/s); latency p50 %v p99 %v max %v\n",
		r.locks, r.acquireTime.Round(time.Millisecond), r.acquireWorkers, float64(r.locks)/r.acquireTime.Seconds(),
		r.acquireLat.pct(50), r.acquireLat.pct(99), r.acquireLat.max())
	share := ""
	if c := bestCeiling(ceilings); c > 0 {
		share = fmt.Sprintf(" = %.0f%% of the server's ceiling (%.0f/s)", 100*r.rate()/c, c)
	}
	wanted := float64(r.locks) / r.period.Seconds()
	if r.session {
		wanted = 1 / r.period.Seconds()
		fmt.Fprintf(out, "session:     %d session item(s) made; %d heartbeat writes of lock items over the run (a session's locks get none)\n", r.sessions, r.lockItemUpdates)
	}
	fmt.Fprintf(out, "heartbeats:  %.1f/s over %v (wanted %.1f/s)%s; %d failed; slowest call %v, %d calls over a tenth of a period\n",
		r.rate(), r.window.Round(time.Millisecond), wanted, share, r.heartbeatsFailed, round(r.callMax), r.callsSlow)
	fmt.Fprintf(out, "rounds:      %d in the window (Stats.Rounds; the window is %.1f periods long), %d late (Stats.LateRounds); %d heartbeats fell due while the previous was in flight (Stats.HeartbeatsSkipped); before the window (acquire and settle) %d rounds, %d late\n",
		d.Rounds, r.window.Seconds()/r.period.Seconds(), d.LateRounds, d.HeartbeatsSkipped, r.statsBefore.Rounds, r.statsBefore.LateRounds)
	if r.session {
		fmt.Fprintln(out, "             (with a session, each lock's heartbeats are its session item's)")
	}
	// The time one round of the heartbeated items takes at the rate
	// measured: with a session there is one such item, not one a lock.
	items, itemsName := r.locks, "locks"
	if r.session {
		items, itemsName = 1, "session items"
	}
	fmt.Fprintf(out, "largest gap: between heartbeats, per lock min %v / median %v / p99 %v / max %v (period %v, safe period %v; %s ÷ rate = %v)\n",
		r.perLockGap.min(), r.perLockGap.pct(50), r.perLockGap.pct(99), r.perLockGap.max(), r.period, r.safe,
		itemsName, round(time.Duration(float64(items)/r.rate()*float64(time.Second))))
	fmt.Fprintf(out, "             the same from send to send (the scheduler's own timing, without the replies' latency): p99 %v / max %v\n",
		r.perLockGapSent.pct(99), r.perLockGapSent.max())
	fmt.Fprintf(out, "first gap:   acquire → first heartbeat, per lock min %v / median %v / p99 %v / max %v; largest gap between heartbeats before the window %v\n",
		r.firstGap.min(), r.firstGap.pct(50), r.firstGap.pct(99), r.firstGap.max(), round(r.acquireGapMax))
	fmt.Fprintf(out, "             the same from send to send (the scheduler's own timing, without the replies' latency): median %v / p99 %v / max %v\n",
		r.firstGapSent.pct(50), r.firstGapSent.pct(99), r.firstGapSent.max())
	fmt.Fprintf(out, "early:       %d heartbeats came back less than %v (half a period) after the lock's previous successful write: %d before the window, %d in it\n",
		r.earlyBefore+r.earlyWindow, r.period/2, r.earlyBefore, r.earlyWindow)
	beats := slices.Clone(r.perLockBeats)
	slices.Sort(beats)
	fmt.Fprintf(out, "per lock:    heartbeats in the window min %d / median %d / max %d; %d locks had none\n",
		beats[0], beats[len(beats)/2], beats[len(beats)-1], r.neverBeat)
	fmt.Fprintf(out, "danger:      %d locks went in danger in the window (Stats.InDanger), %d recovered, %d stolen; since the client was made: %d in danger, %d recovered\n",
		d.InDanger, d.Recovered, d.Stolen, r.statsEnd.InDanger, r.statsEnd.Recovered)
	fmt.Fprintf(out, "goroutines:  %d before the client; %d with the client idle (%d in ddblock code); while holding at most %d (%d in ddblock code)\n",
		r.goroutinesBase, r.goroutinesIdle, r.libIdle, r.goroutinesHeldMax, r.libMax)
	fmt.Fprintf(out, "heap:        %.1f MB idle, %.1f MB holding (%s per lock), %.1f MB at the end (%s per lock)\n",
		mb(r.heapIdle), mb(r.heapHeld), perLock(r.heapHeld, r.heapIdle, r.locks), mb(r.heapEnd), perLock(r.heapEnd, r.heapIdle, r.locks))
	fmt.Fprintf(out, "probe:       fresh-lock acquire idle p50 %v p99 %v; under heartbeats p50 %v p90 %v p99 %v max %v (%d probes, %d failed)\n",
		r.probeIdle.pct(50), r.probeIdle.pct(99), r.probeBusy.pct(50), r.probeBusy.pct(90), r.probeBusy.pct(99), r.probeBusy.max(), len(r.probeBusy), r.probeErrs)
	fmt.Fprintf(out, "CPU:         %s\n", r.cpu.String(r.window))
}

// libraryGoroutines counts the goroutines running ddblock's own code
// (scheduler, monitor, callback workers, heartbeat sends in flight), not
// the HTTP transport's two per open connection, nor this tool's.
func libraryGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		// This tool's own goroutines (acquire workers, the probe) are
		// created by package main; the sends pass through its recorder
		// but are the library's.
		if strings.Contains(g, "github.com/ddblock/ddblock.") && !strings.Contains(g, "\ncreated by main.") {
			count++
		}
	}
	return count
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func printSummary(out io.Writer, rs []*scenarioResult, ceilings []ceilingResult) {
	if len(rs) == 0 {
		return
	}
	c := bestCeiling(ceilings)
	fmt.Fprintln(out, "\n== summary ==")
	fmt.Fprintln(out, "| locks | period | acquire all | heartbeats/s | share of ceiling | late rounds | largest gap min / median / p99 / max | first gap max | early repeats | safe | in danger (window / all) | goroutines idle → holding (ddblock's) | heap per lock | fresh acquire p50 / p99 under load |")
	fmt.Fprintln(out, "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | --- |")
	for _, r := range rs {
		d := r.deltaStats()
		share := "n/a"
		if c > 0 {
			share = fmt.Sprintf("%.0f%%", 100*r.rate()/c)
		}
		locks := fmt.Sprint(r.locks)
		if r.session {
			locks += " (session)"
		}
		fmt.Fprintf(out, "| %s | %v | %v | %.0f | %s | %d of %d | %v / %v / %v / %v | %v | %d | %v | %d / %d | %d → %d (%d → %d) | %s | %v / %v |\n",
			locks, r.period, r.acquireTime.Round(10*time.Millisecond), r.rate(), share, d.LateRounds, d.Rounds,
			r.perLockGap.min(), r.perLockGap.pct(50), r.perLockGap.pct(99), r.perLockGap.max(), r.firstGap.max(),
			r.earlyBefore+r.earlyWindow, r.safe, d.InDanger, r.statsEnd.InDanger,
			r.goroutinesIdle, r.goroutinesHeldMax, r.libIdle, r.libMax, perLock(r.heapHeld, r.heapIdle, r.locks),
			r.probeBusy.pct(50), r.probeBusy.pct(99))
	}
	// The heap measured while holding includes fixed costs that do not
	// depend on the number of locks (up to HeartbeatConcurrency requests in
	// flight, tens of kB each, and the connections' buffers); the slope
	// between two lock counts leaves them out.
	for i := 1; i < len(rs); i++ {
		a, b := rs[i-1], rs[i]
		if b.locks == a.locks {
			continue
		}
		grown := (float64(b.heapHeld) - float64(b.heapIdle)) - (float64(a.heapHeld) - float64(a.heapIdle))
		fmt.Fprintf(out, "heap per extra lock, %d → %d locks: %.0f B\n", a.locks, b.locks, grown/float64(b.locks-a.locks))
	}
}
