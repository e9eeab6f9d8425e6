package ddblock

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/ddblock/ddblock/internal/wire"
)

// heartbeater is the client's one heartbeat scheduler.
//
// It keeps every held lock in a queue ordered by when its next heartbeat
// is due: one heartbeat period after its last successful write (the
// acquire, or the last heartbeat), or after its last attempt if that
// failed. It sends the heartbeat of the lock due first, and never later
// than it is due while the server keeps up. When the server cannot keep
// up, the lock whose write is oldest still goes first, so every lock,
// freshly acquired or not, shares the delay evenly.
//
// A lock may also go early, from three fifths of a period after its last
// write (a margin above the half period promised below, so that the
// promise holds on replies as well as sends while no reply is delayed
// by more than a tenth of a period), and
// the scheduler uses that room to pace its sends: one every period/n for
// n locks (adaptive, the default), never more than HeartbeatTPS a second
// with an explicit rate. Locks acquired in a burst fall due in a burst
// once, and are spread over the periods that follow. Hence:
//
//   - a lock's first heartbeat goes at most one period after its
//     acquire's write, whatever the number of locks;
//   - no lock is heartbeated sooner than half a period after its last
//     successful write (unless that write's outcome was unknown: it may
//     have landed later than the scheduler knows);
//   - in steady state every lock is heartbeated once a period, and the
//     sends are evenly spaced.
//
// Sends run on at most HeartbeatConcurrency sender goroutines, started as
// needed and kept until the client closes, each call bounded by
// HeartbeatTimeout, so one slow call never holds up the other locks. A
// lock's heartbeat is never sent while its previous one is in flight: if
// it falls due meanwhile it is passed over (Stats.HeartbeatsSkipped), and
// goes as soon as that call ends.
//
// The scheduler counts its work in rounds of one period
// (Stats.Rounds). A round in which a heartbeat went out more than a
// tenth of a period after it was due is late: the server, or the
// senders, cannot keep up. It is counted (Stats.LateRounds), reported
// (Metrics.HeartbeatRoundLate) and logged, once a round: by the sender of
// the next heartbeat, once that call has ended, so that the scheduler
// never waits for the application's code. While one report has not
// returned, later late rounds are counted but not reported, so that
// application code that blocks holds one sender at most.
type heartbeater struct {
	c       *Client
	period  time.Duration
	limiter *rate.Limiter // nil in adaptive mode
	wake    chan struct{}

	mu sync.Mutex
	// ready holds the entries waiting for their next heartbeat, busy
	// those with a heartbeat in flight, each ordered by due time.
	ready, busy schedQueue
	nextSeq     uint64

	// Only run's goroutine touches these.
	lastSlot    time.Duration // when the previous send was planned to go
	lastReserve time.Duration // when the limiter last gave a token
	roundStart  time.Duration
	inRound     bool
	roundLate   time.Duration // the latest send of the round, past its due time
	lateReport  func()        // a late round's report, for the next sender

	// Set from a late round's report being made until it returns.
	lateReporting atomic.Bool

	// The senders take jobs from an unbuffered channel, so that dispatch
	// waits for a free one. They live as long as the scheduler: a fresh
	// goroutine per heartbeat would grow its stack, by copying, through
	// the SDK's deep call chain on every send.
	senders  errgroup.Group
	jobs     chan func()
	nSenders int // started so far; only run's goroutine touches it
}

// heartbeatTarget is something the heartbeater keeps alive: a held lock.
// A new kind of entry (a session item standing in for its locks, say)
// implements it and embeds a schedEntry of its own.
type heartbeatTarget interface {
	// prepareHeartbeat runs on the scheduler's goroutine when the target
	// is due. It returns the call to run on a sender, which sends the
	// heartbeat and returns the monotonic time of the target's last
	// successful write once it is done; or nil when the target needs no
	// more heartbeats (it was released meanwhile). The call is bounded by
	// the client's sendCtx and HeartbeatTimeout, not by the scheduler's
	// context: Close waits for it rather than cancelling it.
	prepareHeartbeat() (call func() (lastWrite time.Duration))
}

// schedEntry is the heartbeater's record of one target. It lives inside
// the target (Lock.sched), so that scheduling a lock allocates nothing.
// Its fields are guarded by the heartbeater's mutex.
type schedEntry struct {
	target   heartbeatTarget
	due      time.Duration // monotonic: send by then
	earliest time.Duration // and not before
	seq      uint64        // first come, first served among equal due times
	index    int           // in ready or busy; -1 when in neither
	inFlight bool          // in busy: a heartbeat is being sent
}

// noSlot is lastSlot when there is nothing to pace from: the next send
// goes when due.
const noSlot = -1 << 62

func newHeartbeater(c *Client) *heartbeater {
	h := &heartbeater{
		c:        c,
		period:   c.opts.HeartbeatPeriod,
		wake:     make(chan struct{}, 1),
		jobs:     make(chan func()),
		lastSlot: noSlot,
	}
	if c.opts.HeartbeatTPS > 0 {
		h.limiter = rate.NewLimiter(rate.Limit(c.opts.HeartbeatTPS), 1)
	}
	return h
}

// add schedules t, whose last successful write was sent at lastWrite.
func (h *heartbeater) add(e *schedEntry, t heartbeatTarget, lastWrite time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextSeq++
	*e = schedEntry{target: t, seq: h.nextSeq}
	h.setTimesLocked(e, lastWrite)
	heap.Push(&h.ready, e)
	// A new entry falls due after every other one (theirs are at most a
	// period after a write already made), so only an idle scheduler,
	// which has no timer, needs to hear of it.
	if len(h.ready)+len(h.busy) == 1 {
		h.poke()
	}
}

// remove unschedules e; a heartbeat in flight finishes unheeded.
func (h *heartbeater) remove(e *schedEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(e)
}

func (h *heartbeater) removeLocked(e *schedEntry) {
	if e.index < 0 {
		return
	}
	heap.Remove(h.queueOf(e), e.index)
}

func (h *heartbeater) queueOf(e *schedEntry) *schedQueue {
	if e.inFlight {
		return &h.busy
	}
	return &h.ready
}

// setTimesLocked times e's next heartbeat from base, its last successful
// write or its last attempt.
func (h *heartbeater) setTimesLocked(e *schedEntry, base time.Duration) {
	e.earliest, e.due = base+h.period*3/5, base+h.period
}

// finished puts e back in line after a heartbeat: base is when its last
// successful write, or else the attempt just made, was sent.
func (h *heartbeater) finished(e *schedEntry, base time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.index < 0 {
		return // removed meanwhile
	}
	heap.Remove(&h.busy, e.index)
	e.inFlight = false
	passedOver := e.due
	h.setTimesLocked(e, base)
	heap.Push(&h.ready, e)
	if e.due < passedOver {
		// The call outlasted a period: the lock is overdue now, and the
		// scheduler may be asleep until a later time.
		h.poke()
	}
}

// poke wakes the scheduler to look at its queue again.
func (h *heartbeater) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *heartbeater) run(ctx context.Context) {
	defer func() {
		close(h.jobs)
		_ = h.senders.Wait()
		if h.lateReport != nil { // no heartbeat came after it
			h.lateReport()
		}
	}()
	for ctx.Err() == nil {
		w, wait := h.next()
		if w.call != nil {
			h.dispatch(w)
			continue
		}
		if !h.sleep(ctx, wait) {
			return
		}
	}
}

// work is one heartbeat the scheduler hands to a sender.
type work struct {
	entry *schedEntry
	call  func() time.Duration
	due   time.Duration // when it was due, to measure how late it goes
}

// next returns the heartbeat to send now, or how long to sleep before
// looking again (negative: until poked, as nothing is scheduled).
func (h *heartbeater) next() (work, time.Duration) {
	for {
		h.mu.Lock()
		now := h.c.clock.Monotonic()
		e, wait := h.pickLocked(now)
		if e == nil {
			h.mu.Unlock()
			return work{}, wait
		}
		w := work{entry: e, due: e.due}
		// In flight until the call's outcome puts it back in line; until
		// then it is timed as if the call had just succeeded.
		heap.Remove(&h.ready, e.index)
		e.inFlight = true
		h.setTimesLocked(e, now)
		heap.Push(&h.busy, e)
		h.mu.Unlock()
		if w.call = e.target.prepareHeartbeat(); w.call != nil {
			return w, 0
		}
		h.remove(e)
	}
}

// pickLocked returns the entry whose heartbeat goes now, or how long
// until one might.
func (h *heartbeater) pickLocked(now time.Duration) (*schedEntry, time.Duration) {
	// An entry whose call is still under way when it falls due again is
	// passed over, and due a period later.
	for len(h.busy) > 0 && h.busy[0].due <= now {
		e := h.busy[0]
		e.earliest += h.period
		e.due += h.period
		heap.Fix(&h.busy, 0)
		h.c.stats.heartbeatsSkipped.Add(1)
	}
	if len(h.ready)+len(h.busy) == 0 {
		h.lastSlot = noSlot
		return nil, -1
	}
	wait := time.Duration(-1)
	wakeAt := func(at time.Duration) {
		if d := at - now; d > 0 && (wait < 0 || d < wait) {
			wait = d
		}
	}
	if len(h.busy) > 0 {
		// The entry in flight that is due first is planned as if its call
		// had succeeded as it started: it cannot go sooner than that,
		// and calls almost always end long before. Waking then, rather
		// than when its call ends, keeps the schedule the same however
		// long the call takes.
		b := h.busy[0]
		wakeAt(h.planLocked(b))
		wakeAt(b.due)
	}
	if len(h.ready) > 0 {
		e := h.ready[0]
		at := h.planLocked(e)
		if at <= now {
			// A send that goes late does not leave the next ones a
			// burst of credit: at most a tenth of a period.
			h.lastSlot = max(at, now-h.period/10)
			if h.limiter != nil {
				h.limiter.ReserveN(monoTime(now), 1)
				h.lastReserve = now
			}
			return e, 0
		}
		wakeAt(at)
	}
	return nil, wait
}

// planLocked returns when e, the first in line, should go: a pacing slot
// after the previous send, but not before e's earliest time and not after
// its due time; and with an explicit rate, not before the limiter allows.
// With no send to pace from (the scheduler was idle), e goes when due.
func (h *heartbeater) planLocked(e *schedEntry) time.Duration {
	at := e.due
	if h.lastSlot != noSlot {
		n := time.Duration(len(h.ready) + len(h.busy))
		at = min(max(h.lastSlot+h.period/n, e.earliest), e.due)
	}
	if h.limiter != nil {
		// The limiter counts from its last reservation: read it there.
		if tokens := h.limiter.TokensAt(monoTime(h.lastReserve)); tokens < 1 {
			ready := h.lastReserve + time.Duration((1-tokens)/float64(h.limiter.Limit())*float64(time.Second))
			at = max(at, ready)
		}
	}
	return at
}

// monoTime turns a monotonic reading into the time.Time a rate.Limiter
// takes, so that the limiter runs on the client's clock.
func monoTime(d time.Duration) time.Time { return time.Unix(0, 0).Add(d) }

// sleep waits d (d < 0: until poked), or until poked; false when the
// client closed.
func (h *heartbeater) sleep(ctx context.Context, d time.Duration) bool {
	var fired <-chan time.Time
	if d >= 0 {
		t := h.c.clock.NewTimer(d)
		defer t.Stop()
		fired = t.C()
	}
	select {
	case <-fired:
	case <-h.wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// dispatch hands w to a sender, waiting for a free one if need be.
func (h *heartbeater) dispatch(w work) {
	h.c.stats.heartbeatsInFlight.Add(1)
	report := h.lateReport
	h.lateReport = nil
	job := func() {
		attempt := h.c.clock.Monotonic()
		lastWrite := w.call()
		h.finished(w.entry, max(lastWrite, attempt))
		h.c.stats.heartbeatsInFlight.Add(-1)
		if report != nil {
			report()
		}
	}
	h.handOff(job)
	h.countRound(h.c.clock.Monotonic(), w.due)
}

func (h *heartbeater) handOff(job func()) {
	select {
	case h.jobs <- job: // an idle sender took it
		return
	default:
	}
	if h.nSenders < h.c.opts.HeartbeatConcurrency {
		h.nSenders++
		h.senders.Go(func() error {
			job()
			for next := range h.jobs {
				next()
			}
			return nil
		})
		return
	}
	h.jobs <- job // every sender is busy: wait for one
}

// countRound notes a heartbeat handed to a sender at now, due at due, in
// the current round, and closes the round once a period has passed. A
// late round's report waits for the next heartbeat's sender.
func (h *heartbeater) countRound(now, due time.Duration) {
	if h.inRound && now-h.roundStart >= h.period {
		h.inRound = false
		if late := h.roundLate; late > h.period/10 {
			h.c.stats.lateRounds.Add(1)
			// Unless the last one's report has not returned.
			if h.lateReporting.CompareAndSwap(false, true) {
				h.mu.Lock()
				locks := len(h.ready) + len(h.busy)
				h.mu.Unlock()
				h.lateReport = func() {
					defer h.lateReporting.Store(false)
					h.c.opts.Metrics.HeartbeatRoundLate(late, locks)
					h.c.log.Warn("ddblock: heartbeats went out late: the server or the senders cannot keep up",
						"locks", locks, "period", h.period, "late", late)
				}
			}
		}
	}
	if !h.inRound {
		h.inRound, h.roundStart, h.roundLate = true, now, 0
		h.c.stats.rounds.Add(1)
	}
	h.roundLate = max(h.roundLate, now-due)
}

// schedQueue is a min-heap of entries by due time (container/heap).
type schedQueue []*schedEntry

func (q schedQueue) Len() int { return len(q) }

func (q schedQueue) Less(i, j int) bool {
	if q[i].due != q[j].due {
		return q[i].due < q[j].due
	}
	return q[i].seq < q[j].seq
}

func (q schedQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *schedQueue) Push(x any) {
	e := x.(*schedEntry)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *schedQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}

// prepareHeartbeat makes the lock's next heartbeat, unless it was
// released meanwhile. The scheduler sends one heartbeat of a lock at a
// time; its done channel (l.hb), set here under the lock's mutex, lets a release wait for
// it.
func (l *Lock) prepareHeartbeat() func() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.heldLocked() {
		return nil
	}
	oldRVN, unknown, _ := l.hb.start()
	return func() time.Duration { return l.client.heartbeat(l, oldRVN, unknown) }
}

// heartbeat is Python's: a conditional UpdateItem of the record version
// number and the expiry time, which leaves every other attribute alone.
// unknown lists version numbers written by earlier heartbeats whose
// outcome is unknown (a timeout, a dropped connection): any of them may
// be in the table. It returns when the lock's last successful write was
// sent.
//
// The outcome is recorded under the lock's mutex, which ends the
// heartbeat for a release waiting on it; the application hears of
// it (Metrics, logs) after.
func (c *Client) heartbeat(l *Lock, oldRVN string, unknown []string) (lastWrite time.Duration) {
	// The send outlives Close's cancel: Close waits for it instead, so
	// that the lock's version number is known when Close returns. Only a
	// Close that gives up cancels it, through sendCtx.
	ctx, cancel := context.WithTimeout(c.sendCtx, c.opts.HeartbeatTimeout)
	defer cancel()
	hb, err, stolen, _ := c.refreshItem(ctx, l.pk, l.sk, oldRVN, unknown, false, &l.gate)
	l.mu.Lock()
	close(l.hb.finish())
	gap := hb.sent - l.lastHeartbeat
	switch {
	case err == nil:
		c.stats.heartbeatsSent.Add(1)
		l.hb.landed(hb.rvn)
		l.expiry, l.lastHeartbeat = hb.expiry, hb.sent
		if l.status == StatusInDanger {
			l.status = StatusLocked
			c.stats.recovered.Add(1)
			c.callbacks.enqueue(l, CodeLockRecovered)
			l.reportLocked(func() {
				c.opts.Metrics.LockRecovered()
				c.log.Info("ddblock: lock recovered from danger", "key", l.pk, "sort_key", l.sk)
			})
		}
	case stolen:
		c.stats.heartbeatsFailed.Add(1)
		l.markStolenLocked("another client took the lock", err)
	default:
		c.stats.heartbeatsFailed.Add(1)
		// The write may have landed: remember its version number.
		l.hb.failed(hb.rvn, err)
	}
	lastWrite = l.lastHeartbeat
	// The heartbeat's own outcome goes first, as the events it caused
	// follow from it.
	claimed := l.claimReportsLocked()
	l.mu.Unlock()
	c.opts.Metrics.HeartbeatFinished(gap, l.lease, err)
	if err != nil && !stolen {
		c.log.Warn("ddblock: heartbeat failed", "key", l.pk, "sort_key", l.sk, "err", err)
	}
	if claimed {
		l.deliverReports()
	}
	return lastWrite
}

// sentHeartbeat is what one heartbeat call wrote.
type sentHeartbeat struct {
	rvn    string
	expiry time.Time
	sent   time.Duration // monotonic
}

func (c *Client) sendHeartbeat(ctx context.Context, pk, sk, oldRVN string) (sentHeartbeat, error) {
	now := c.clock.Now()
	hb := sentHeartbeat{rvn: wire.NewRecordVersionNumber(), expiry: now.Add(c.opts.ExpiryPeriod)}
	var stamp time.Time
	if c.opts.MaxClockSkew > 0 {
		stamp = now
	}
	in := c.wire().Heartbeat(pk, sk, oldRVN, hb.rvn, hb.expiry, stamp)
	hb.sent = c.clock.Monotonic()
	_, err := c.ddb.UpdateItem(ctx, in, c.callOpts("UpdateItem")...)
	return hb, err
}

// A heartbeat refused by a transaction conflict is retried at once, not a
// period later. DynamoDB refuses a plain write of an item that a
// TransactWriteItems under way includes, and every guarded write includes
// the lock item (its guard), so a holder that writes through its lock
// back to back would otherwise see its heartbeats refused one after the
// other and its lock go into danger while its writes commit.
//
// The back-off waits in real time, not on the client's clock: what it
// waits for is a transaction under way in DynamoDB, which takes tens of
// milliseconds of the server's time.
const (
	conflictBackoffMin = 10 * time.Millisecond
	conflictBackoffMax = 160 * time.Millisecond
)

// conflictBackoff paces the tries of a write that DynamoDB refused for a
// transaction under way on one of its items (a heartbeat, a release, a
// set's transaction): pauses that double from conflictBackoffMin to
// conflictBackoffMax, each a random time between half and all of it, so
// that writes that keep meeting part. Its zero value is ready to use.
type conflictBackoff struct{ next time.Duration }

// step returns the next pause.
func (b *conflictBackoff) step() time.Duration {
	if b.next == 0 {
		b.next = conflictBackoffMin
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, conflictBackoffMax)
	return d
}

// wait pauses for the next step, in real time; false when ctx ended
// first.
func (b *conflictBackoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.step())
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// sendHeartbeatThroughConflicts sends a heartbeat, and sends it again
// while DynamoDB refuses it for a transaction conflict, until ctx (the
// heartbeat's timeout) ends. gate, when not nil, is the lock's: after the
// first conflict it holds the holder's own guarded writes back, and the
// next try goes as soon as those in flight have finished. Tries that meet
// transactions it cannot hold back (the holder's own, built on
// Lock.Guard; another process's) back off with jitter, and so does a try
// whose guarded writes are slow to finish: a write stuck on a dead
// connection must not keep the heartbeat waiting. A conflict proves the
// write was refused, so each try is a fresh heartbeat of its own; one
// whose earlier attempt may have landed is returned for the caller to
// remember (hbState.failed).
func (c *Client) sendHeartbeatThroughConflicts(ctx context.Context, pk, sk, oldRVN string, gate *writeGate) (sentHeartbeat, error) {
	var drained <-chan struct{} // nil once the writes held back have finished, or with no gate
	held := false
	var backoff conflictBackoff
	for {
		hb, err := c.sendHeartbeat(ctx, pk, sk, oldRVN)
		if !wire.TransactionConflict(err) || wire.OutcomeUnknown(err) {
			return hb, err
		}
		wait := backoff.step()
		if gate != nil && !held {
			var release func()
			drained, release = gate.hold()
			held = true
			defer release()
			// The writes in flight take about a transaction's time; wait
			// for them, but not for one stuck on a dead connection.
			wait = conflictBackoffMax
		}
		t := time.NewTimer(wait)
		select {
		case <-drained:
			drained = nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return hb, err
		}
		t.Stop()
	}
}

// refreshItem sends one heartbeat: a conditional update of the item's
// record version number and TTL. unknown lists version numbers written
// by earlier heartbeats whose outcome is unknown (a timeout, a dropped
// connection): any of them may be in the table. lost reports that the
// item is someone else's now, or gone (found is then what is there, or
// nil); a session item counts as someone else's once it lacks the
// session mark. gate, when not nil, holds the holder's own guarded writes
// back while a heartbeat refused by a transaction conflict is retried
// (see sendHeartbeatThroughConflicts).
func (c *Client) refreshItem(ctx context.Context, pk, sk, oldRVN string, unknown []string, isSession bool, gate *writeGate) (hb sentHeartbeat, err error, lost bool, found *LockInfo) {
	hb, err = c.sendHeartbeatThroughConflicts(ctx, pk, sk, oldRVN, gate)
	if err == nil || !wire.ConditionFailed(err) {
		return hb, err, false, nil
	}
	// Someone took the item, or a write of ours landed without our
	// hearing of it: this one (its reply lost and the SDK's retry failing
	// the condition), or an earlier one. Only a read can tell.
	info, rerr := c.readItem(ctx, pk, sk)
	switch {
	case rerr != nil && isSession && CodeOf(rerr) == CodeInvalidItem:
		return hb, err, true, nil // not a lock item any more: not ours
	case rerr != nil:
		return hb, err, false, nil // unknown: a failed heartbeat, tried again
	case info != nil && isSession && !info.IsSession:
		return hb, err, true, info
	case info != nil && info.RecordVersionNumber == hb.rvn:
		return hb, nil, false, nil
	case info != nil && slices.Contains(unknown, info.RecordVersionNumber):
		// An earlier heartbeat landed: carry on from its version.
		hb, err = c.sendHeartbeatThroughConflicts(ctx, pk, sk, info.RecordVersionNumber, gate)
		return hb, err, err != nil && wire.ConditionFailed(err), nil // taken since that read
	default:
		return hb, err, true, info
	}
}
