package ddblock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ddblock/ddblock/internal/clock"
)

// These tests run the heartbeat scheduler alone, on the fake clock, with
// simulated targets in place of locks and a simulated server in place of
// DynamoDB: every call takes a set time on the fake clock, and the test
// moves the clock from event to event (a timer, a call's end) once every
// goroutine has settled (testing/synctest), so that each schedule is
// exact and the same on every run.

// sim is a simulated server and the targets it serves.
type sim struct {
	t       *testing.T
	clk     *clock.Fake
	h       *heartbeater
	c       *Client
	period  time.Duration
	service time.Duration // how long a call takes, unless a target says otherwise

	cancel  context.CancelFunc
	runDone chan struct{}

	mu      sync.Mutex
	pending []*simCall
	targets []*simTarget
	late    []time.Duration // Metrics.HeartbeatRoundLate's overruns
	// If set, Metrics.HeartbeatRoundLate waits for it to close, as an
	// application's code that blocks.
	lateGate chan struct{}
}

type simCall struct {
	finish time.Duration
	done   chan struct{}
}

// simTarget stands for a held lock.
type simTarget struct {
	sim   *sim
	name  string
	sched schedEntry

	// Guarded by sim.mu.
	acquired  time.Duration // its acquire's write
	lastWrite time.Duration
	released  time.Duration // 0 while held
	service   time.Duration // 0: the server's
	slowOnce  time.Duration // if set, the next call takes this long
	fail      bool          // calls fail
	sends     []simSend
}

type simSend struct {
	start, end time.Duration
	ok         bool
	after      time.Duration // the target's last successful write when the call started
}

type simOption func(*Options)

func newSim(t *testing.T, period, service time.Duration, opts ...simOption) *sim {
	t.Helper()
	o := Options{HeartbeatPeriod: period, HeartbeatTPS: -1, HeartbeatConcurrency: 64}
	for _, opt := range opts {
		opt(&o)
	}
	s := &sim{t: t, clk: clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), period: period, service: service}
	o.Metrics = simMetrics{s}
	ctx, cancel := context.WithCancel(context.Background())
	// A client made for the scheduler alone: no table, but the fields
	// that tell a client made with New from a zero one (zerovalue.go),
	// so that its Stats answer.
	s.c = &Client{opts: o, clock: s.clk, log: slog.New(slog.NewTextHandler(io.Discard, nil)), ddb: simDDB{}, ctx: ctx}
	s.h = newHeartbeater(s.c)
	s.cancel, s.runDone = cancel, make(chan struct{})
	go func() {
		defer close(s.runDone)
		s.h.run(ctx)
	}()
	return s
}

// simDDB is the simulated client's table, which the scheduler never
// calls: the simulated heartbeats answer on their own.
type simDDB struct{ DynamoDBAPI }

type simMetrics struct{ s *sim }

func (simMetrics) AcquireFinished(time.Duration, int, error)             {}
func (simMetrics) LockContended()                                        {}
func (simMetrics) LockTakenOver(bool)                                    {}
func (simMetrics) HeartbeatFinished(time.Duration, time.Duration, error) {}
func (simMetrics) LockInDanger()                                         {}
func (simMetrics) LockRecovered()                                        {}
func (simMetrics) LockStolen()                                           {}
func (simMetrics) CallThrottled(string)                                  {}
func (simMetrics) CallbackLate(time.Duration)                            {}
func (simMetrics) LockEnded(time.Duration)                               {}
func (simMetrics) GuardedWriteFinished(time.Duration, error)             {}
func (m simMetrics) HeartbeatRoundLate(overrun time.Duration, _ int) {
	m.s.mu.Lock()
	m.s.late = append(m.s.late, overrun)
	gate := m.s.lateGate
	m.s.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// now is the fake clock's reading since the start of the test.
func (s *sim) now() time.Duration { return s.clk.Monotonic() - time.Hour }

// acquire adds a target whose acquire's write is now.
func (s *sim) acquire(name string) *simTarget {
	at := s.clk.Monotonic()
	tg := &simTarget{sim: s, name: name, acquired: at, lastWrite: at}
	s.mu.Lock()
	s.targets = append(s.targets, tg)
	s.mu.Unlock()
	s.h.add(&tg.sched, tg, at)
	return tg
}

func (s *sim) acquireN(prefix string, n int) []*simTarget {
	var out []*simTarget
	for i := range n {
		out = append(out, s.acquire(fmt.Sprintf("%s%03d", prefix, i)))
	}
	return out
}

// release drops a target, as Client.unregister does for a lock.
func (s *sim) release(tg *simTarget) {
	s.mu.Lock()
	tg.released = s.clk.Monotonic()
	s.mu.Unlock()
	s.h.remove(&tg.sched)
}

func (tg *simTarget) prepareHeartbeat() func() time.Duration {
	s := tg.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	if tg.released != 0 {
		return nil
	}
	return func() time.Duration {
		start := s.clk.Monotonic()
		s.mu.Lock()
		service := cmpOr(tg.slowOnce, cmpOr(tg.service, s.service))
		tg.slowOnce = 0
		call := &simCall{finish: start + service, done: make(chan struct{})}
		s.pending = append(s.pending, call)
		after := tg.lastWrite
		s.mu.Unlock()
		<-call.done
		s.mu.Lock()
		defer s.mu.Unlock()
		ok := !tg.fail
		if ok {
			tg.lastWrite = start
		}
		tg.sends = append(tg.sends, simSend{start: start, end: s.clk.Monotonic(), ok: ok, after: after})
		return tg.lastWrite
	}
}

func cmpOr(a, b time.Duration) time.Duration {
	if a != 0 {
		return a
	}
	return b
}

// runFor moves the clock d ahead, event by event: each time every
// goroutine is blocked, to the next timer or the next call's end,
// whichever comes first.
func (s *sim) runFor(d time.Duration) {
	end := s.clk.Monotonic() + d
	for {
		synctest.Wait()
		now := s.clk.Monotonic()
		next := end
		if dl, ok := s.clk.NextDeadline(); ok {
			next = min(next, now+dl)
		}
		s.mu.Lock()
		for _, c := range s.pending {
			next = min(next, c.finish)
		}
		s.mu.Unlock()
		if next > now {
			s.clk.Advance(next - now)
		}
		s.mu.Lock()
		kept := s.pending[:0]
		for _, c := range s.pending {
			if c.finish <= next {
				close(c.done)
				continue
			}
			kept = append(kept, c)
		}
		s.pending = kept
		s.mu.Unlock()
		if next >= end {
			synctest.Wait()
			return
		}
	}
}

// stop closes the scheduler, letting the calls in flight end.
func (s *sim) stop() {
	s.cancel()
	for {
		synctest.Wait()
		s.mu.Lock()
		for _, c := range s.pending {
			close(c.done)
		}
		s.pending = nil
		s.mu.Unlock()
		select {
		case <-s.runDone:
			return
		default:
		}
	}
}

func (s *sim) sendsOf(tg *simTarget) []simSend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(tg.sends)
}

// checkTiming checks items 1 and 2 of the scheduler's promise on every
// send of every target, when every call succeeds: the first heartbeat at
// most maxGap (a period, while the server keeps up) after the acquire's
// write, each later one at most maxGap after the previous one, and none
// sooner than half a period after the last successful write. It also
// checks that a target still held at the end was not left waiting longer
// than maxGap.
func (s *sim) checkTiming(maxGap time.Duration) { s.checkTimingFrom(0, maxGap) }

// checkTimingFrom is checkTiming with the upper bound checked only on
// sends that start from `from` (since the start of the test) on.
func (s *sim) checkTimingFrom(from, maxGap time.Duration) {
	s.t.Helper()
	from += time.Hour
	now := s.clk.Monotonic()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tg := range s.targets {
		prev := tg.acquired
		for i, sd := range tg.sends {
			if sd.after != prev {
				s.t.Errorf("%s send %d started after write %v; want %v", tg.name, i, sd.after-time.Hour, prev-time.Hour)
			}
			if gap := sd.start - prev; (gap > maxGap && sd.start >= from) || gap < s.period/2 {
				s.t.Errorf("%s send %d at %v, %v after its last write at %v; want within [%v, %v]",
					tg.name, i, sd.start-time.Hour, gap, prev-time.Hour, s.period/2, maxGap)
			}
			if tg.released != 0 && sd.start > tg.released {
				s.t.Errorf("%s heartbeated at %v after its release at %v", tg.name, sd.start-time.Hour, tg.released-time.Hour)
			}
			prev = sd.start
		}
		if tg.released == 0 && now-prev > maxGap {
			s.t.Errorf("%s last written at %v, nothing since (now %v)", tg.name, prev-time.Hour, now-time.Hour)
		}
	}
}

// Item 1 and 2 of issue 14 while the server keeps up: locks acquired at
// odd moments in the middle of a round, and a burst of them, are each
// first heartbeated at most one period after the acquire, and every lock
// at most a period and at least half a period after its last write.
func TestSchedulerAcquireMidRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, 3*time.Millisecond)
		s.acquireN("a", 10)
		s.runFor(2300 * time.Millisecond)
		mid := s.acquire("mid") // in the middle of the third round
		s.runFor(370 * time.Millisecond)
		s.acquireN("burst", 40) // 40 at one instant
		for i := range 30 {     // and one every 77 ms
			s.runFor(77 * time.Millisecond)
			s.acquire(fmt.Sprintf("trickle%02d", i))
		}
		s.runFor(6 * time.Second)
		s.stop()
		s.checkTiming(s.period)

		sends := s.sendsOf(mid)
		if len(sends) == 0 || sends[0].start-mid.acquired > s.period {
			t.Fatalf("the lock acquired mid-round: sends %v after its acquire at %v", sends, mid.acquired)
		}
		if st := s.c.Stats(); st.LateRounds != 0 || st.HeartbeatsSkipped != 0 || st.Rounds < 10 {
			t.Errorf("stats %+v; want no late round, nothing skipped, a round a period", st)
		}
	})
}

// In steady state the sends are evenly spaced, period/n apart, and each
// lock goes once a period; locks acquired all at once are spread out.
func TestSchedulerSpreadsABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, time.Millisecond)
		locks := s.acquireN("k", 8)
		s.runFor(6 * time.Second)
		s.stop()
		s.checkTiming(s.period)
		var starts []time.Duration
		for _, tg := range locks {
			for _, sd := range s.sendsOf(tg) {
				if at := sd.start - time.Hour; at >= 4*time.Second && at < 6*time.Second {
					starts = append(starts, sd.start)
				}
			}
		}
		slices.Sort(starts)
		if len(starts) != 16 {
			s.logSends()
			t.Fatalf("%d sends in the last two periods; want 16", len(starts))
		}
		for i := 1; i < len(starts); i++ {
			if d := starts[i] - starts[i-1]; d != s.period/8 {
				t.Errorf("sends %d and %d %v apart; want %v (%v)", i-1, i, d, s.period/8, starts)
			}
		}
	})
}

// A lock released and acquired again within one round is a new lock to
// the scheduler: the released one is never heartbeated again, and the new
// one's first heartbeat comes between half a period and a period after
// its own acquire, not on the old one's schedule.
func TestSchedulerReleaseAndReacquireWithinRound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, 2*time.Millisecond)
		locks := s.acquireN("k", 5)
		s.runFor(1900 * time.Millisecond) // heartbeated once, at 1 s
		old := locks[2]
		s.release(old)
		s.runFor(50 * time.Millisecond)
		again := s.acquire(old.name)
		s.runFor(4 * time.Second)
		s.stop()
		s.checkTiming(s.period)

		for _, sd := range s.sendsOf(old) {
			if sd.start > old.released {
				t.Errorf("the released lock was heartbeated at %v", sd.start-time.Hour)
			}
		}
		sends := s.sendsOf(again)
		if len(sends) == 0 {
			t.Fatal("the lock acquired again was never heartbeated")
		}
		if gap := sends[0].start - again.acquired; gap > s.period || gap < s.period/2 {
			t.Errorf("first heartbeat %v after the second acquire; want within [%v, %v]", gap, s.period/2, s.period)
		}
	})
}

// Past the server's rate, rounds overrun: every lock waits longer than a
// period, the oldest write goes first, and a lock acquired meanwhile
// waits no longer than the rest. No lock is ever heartbeated twice within
// half a period, and the overrun is counted and reported.
func TestSchedulerRoundOverruns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 2 senders, 50 ms a call: 40 heartbeats a second, for 60 locks
		// at one a second.
		s := newSim(t, time.Second, 50*time.Millisecond, func(o *Options) { o.HeartbeatConcurrency = 2 })
		s.acquireN("k", 60)
		s.runFor(3330 * time.Millisecond)
		fresh := s.acquire("fresh")
		s.runFor(5 * time.Second)
		s.stop()
		// The 60 locks acquired at one instant are all due at 1 s, and
		// the last of them goes 1.5 s later. From then on each lock
		// waits 61 locks / 40 a second, give or take a call.
		s.checkTimingFrom(2600*time.Millisecond, 61*time.Second/40+s.service)

		sends := s.sendsOf(fresh)
		if len(sends) == 0 {
			t.Fatal("the lock acquired during the overrun was never heartbeated")
		}
		first := sends[0].start - fresh.acquired
		// The locks heartbeated while it waited all had older writes
		// (oldest first), and the longest any of them waited in that
		// time is at least as long as its own wait, less one call.
		longest := time.Duration(0)
		s.mu.Lock()
		for _, tg := range s.targets {
			for _, sd := range tg.sends {
				if tg != fresh && sd.start > fresh.acquired && sd.start < sends[0].start {
					if sd.after > fresh.acquired {
						t.Errorf("%s (last write %v) went ahead of the fresh lock (acquired %v)", tg.name, sd.after-time.Hour, fresh.acquired-time.Hour)
					}
					longest = max(longest, sd.start-sd.after)
				}
			}
		}
		s.mu.Unlock()
		if first <= s.period || first > longest+s.service {
			t.Errorf("the fresh lock waited %v for its first heartbeat; the others up to %v: want more than a period (overload) and no more than theirs", first, longest)
		}
		st := s.c.Stats()
		if st.LateRounds == 0 || st.HeartbeatsSkipped != 0 {
			t.Errorf("stats %+v; want late rounds and nothing skipped", st)
		}
		s.mu.Lock()
		reported := len(s.late)
		s.mu.Unlock()
		if uint64(reported) != st.LateRounds {
			t.Errorf("%d late rounds reported to Metrics; Stats says %d", reported, st.LateRounds)
		}
	})
}

// A call slower than a period is never doubled: the lock's heartbeats
// that fall due meanwhile are passed over (Stats.HeartbeatsSkipped), the
// next goes as soon as the call ends, and the other locks keep their
// schedule.
func TestSchedulerSlowCallPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, time.Millisecond)
		locks := s.acquireN("k", 4)
		s.mu.Lock()
		locks[0].slowOnce = 2500 * time.Millisecond
		s.mu.Unlock()
		s.runFor(5 * time.Second)
		s.stop()
		sends := s.sendsOf(locks[0])
		if len(sends) < 2 {
			t.Fatalf("slow lock: sends %v", sends)
		}
		// Sent at 1 s, back at 3.5 s: passed over at 2 s and 3 s, sent
		// again at once.
		if sends[0].start-time.Hour != time.Second || sends[1].start != sends[0].end {
			t.Errorf("slow lock's sends %+v; want the second as the first ends", sends)
		}
		if got := s.c.Stats().HeartbeatsSkipped; got != 2 {
			t.Errorf("HeartbeatsSkipped = %d; want 2", got)
			s.logSends()
		}
		for _, tg := range locks[1:] {
			prev := tg.acquired
			for _, sd := range s.sendsOf(tg) {
				if gap := sd.start - prev; gap > s.period {
					t.Errorf("%s waited %v: the slow call held it up", tg.name, gap)
				}
				prev = sd.start
			}
		}
	})
}

// A failed heartbeat is tried again one period after the attempt (not at
// once, which would hammer a failing server), and the lock's schedule
// resumes from its next success.
func TestSchedulerRetriesAfterFailureOncePerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, time.Millisecond)
		tg := s.acquire("k")
		s.mu.Lock()
		tg.fail = true
		s.mu.Unlock()
		s.runFor(3500 * time.Millisecond)
		s.mu.Lock()
		tg.fail = false
		s.mu.Unlock()
		s.runFor(2 * time.Second)
		s.stop()
		var got []time.Duration
		for _, sd := range s.sendsOf(tg) {
			got = append(got, sd.start-time.Hour)
		}
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}
		if !slices.Equal(got, want) {
			t.Errorf("attempts at %v; want %v", got, want)
		}
	})
}

// An explicit HeartbeatTPS caps the rate: below the cap the sends are
// spread as in adaptive mode; above it they go exactly 1/TPS apart, the
// oldest write first, every lock in turn.
func TestSchedulerExplicitTPS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 8 locks at one a second would need 8 a second: the cap is 4.
		s := newSim(t, time.Second, time.Millisecond, func(o *Options) { o.HeartbeatTPS = 4 })
		locks := s.acquireN("k", 8)
		s.runFor(10 * time.Second)
		s.stop()
		type send struct {
			at   time.Duration
			name string
		}
		var all []send
		for _, tg := range locks {
			for _, sd := range s.sendsOf(tg) {
				all = append(all, send{sd.start, tg.name})
			}
		}
		slices.SortFunc(all, func(a, b send) int { return int(a.at - b.at) })
		if len(all) < 30 {
			t.Fatalf("%d sends in 10 s at 4 a second", len(all))
		}
		for i := 1; i < len(all); i++ {
			if d := all[i].at - all[i-1].at; d != 250*time.Millisecond {
				t.Errorf("sends %d and %d are %v apart; want 250ms", i-1, i, d)
			}
			if i >= 8 && all[i].name != all[i-8].name {
				t.Errorf("send %d is %s; want every lock in turn (%s)", i, all[i].name, all[i-8].name)
			}
		}
		if s.c.Stats().LateRounds == 0 {
			t.Error("no late round although the cap keeps every lock waiting two periods")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		// Below the cap: as adaptive.
		s := newSim(t, time.Second, time.Millisecond, func(o *Options) { o.HeartbeatTPS = 100 })
		for i := range 8 {
			s.acquire(fmt.Sprintf("k%d", i))
			s.runFor(30 * time.Millisecond)
		}
		s.runFor(6 * time.Second)
		s.stop()
		s.checkTiming(s.period)
		if st := s.c.Stats(); st.LateRounds != 0 {
			t.Errorf("stats %+v; want no late round below the cap", st)
		}
	})
}

// Removing a lock, idle or in flight, leaves nothing behind: the queue
// holds what is held, and nothing else.
func TestSchedulerForgetsReleasedLocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, time.Second, 300*time.Millisecond)
		locks := s.acquireN("k", 6)
		s.runFor(1100 * time.Millisecond) // all six calls in flight
		for _, tg := range locks[:3] {
			s.release(tg)
		}
		s.runFor(3 * time.Second)
		for _, tg := range locks[3:] {
			s.release(tg)
		}
		s.runFor(3 * time.Second)
		s.h.mu.Lock()
		left := len(s.h.ready) + len(s.h.busy)
		s.h.mu.Unlock()
		s.stop()
		if left != 0 {
			t.Errorf("%d entries left after every lock was released", left)
		}
		s.checkTiming(s.period + s.service)
	})
}

// logSends logs every send, in order, for a failing test.
func (s *sim) logSends() {
	s.t.Helper()
	type row struct {
		name string
		sd   simSend
	}
	var rows []row
	s.mu.Lock()
	for _, tg := range s.targets {
		for _, sd := range tg.sends {
			rows = append(rows, row{tg.name, sd})
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(rows, func(a, b row) int { return int(a.sd.start - b.sd.start) })
	for _, r := range rows {
		s.t.Logf("%v %s (until %v, ok %v, last write %v)", r.sd.start-time.Hour, r.name, r.sd.end-time.Hour, r.sd.ok, r.sd.after-time.Hour)
	}
}

// A late round's report that blocks in the application's Metrics holds
// up one sender, never the scheduler: the heartbeats go on, and later
// late rounds are counted but not reported while it has not returned.
func TestSchedulerLateReportBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 3 senders, 50 ms a call: 60 heartbeats a second, for 80 locks
		// at one a second: every round is late.
		s := newSim(t, time.Second, 50*time.Millisecond, func(o *Options) { o.HeartbeatConcurrency = 3 })
		gate := make(chan struct{})
		s.mu.Lock()
		s.lateGate = gate
		s.mu.Unlock()
		s.acquireN("k", 80)
		var blockedAt time.Duration
		for blockedAt == 0 && s.now() < 10*time.Second {
			s.runFor(100 * time.Millisecond)
			s.mu.Lock()
			if len(s.late) > 0 {
				blockedAt = s.clk.Monotonic()
			}
			s.mu.Unlock()
		}
		if blockedAt == 0 {
			t.Fatal("no late round reported")
		}
		s.runFor(5 * time.Second)
		sent := 0
		s.mu.Lock()
		for _, tg := range s.targets {
			for _, sd := range tg.sends {
				if sd.start > blockedAt {
					sent++
				}
			}
		}
		reported := len(s.late)
		s.mu.Unlock()
		close(gate)
		s.stop()
		// Two senders left: 40 a second, 200 in the 5 s.
		if sent < 150 {
			t.Errorf("%d heartbeats sent in the 5 s after a report blocked; want the two free senders' 200 or so", sent)
		}
		if st := s.c.Stats(); reported != 1 || st.LateRounds < 4 {
			t.Errorf("%d late rounds reported, %d counted, while the first report was blocked; want 1 reported, one counted a second", reported, st.LateRounds)
		}
	})
}
