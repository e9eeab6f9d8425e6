package ddblock

// The library's mutexes, and the order they are taken in.
//
// No mutex is ever held while application code runs: the slog handler
// of Options.Logger, the Options.Metrics implementation, a Callback.
// Such code may be slow or block, and it would stall Err, Status and the
// monitor's pass over every lock. So an event seen under a lock's mutex
// (in danger, recovered, stolen) is recorded there, in the lock's outbox
// of reports, and reported once the mutex is released (see
// [Lock.unlock]). Its callback event is queued under the lock's mutex,
// so that the events of a lock reach the pool in the order they
// happened, and none that came before Close is lost; the queueing is
// the library's own short code, and the pool's workers run the callback
// with no mutex held.
//
// The mutexes, outermost first. One may be taken while holding those
// above it in the list, never while holding one below it:
//
//  1. Lock.mu: one lock's state (status, version number, last heartbeat,
//     error, outbox). Held while the lock is unregistered (Client.mu)
//     and while its callback event is queued (the pool's mutex).
//  2. Client.mu: the held set and the closed flag. Held while a lock is
//     added to, or dropped from, its session and the heartbeat schedule.
//  3. session.mu: the session's version number, its locks and leftovers.
//  4. heartbeater.mu: the heartbeat schedule. Its rate limiter's own
//     mutex is taken under it.
//  5. callbackPool.mu: the events waiting for a callback worker.
//
// No two Locks' mutexes are ever held at once: a pass over several locks
// (the monitor's, a session's) takes and releases each in turn.
//
// Taken with none of the above held, and nothing taken under them:
// Client.sessMu (which session is current), the observations cache's
// mutex, an Election's and a Leadership's, and a release's guard of its
// own timer. (Campaign reads its leadership under the Election's mutex
// but asks its context, which takes Lock.mu, only after.)
//
// Nothing waits on a channel under a mutex: a heartbeat's done channel
// (in Lock.hb, an hbState guarded by Lock.mu) is closed under Lock.mu,
// and waited on by a release with none held.
//
// The contexts of Lock.Context are cancelled under Lock.mu, so that they
// end at the instant Done closes. That is the standard library's code,
// which runs the functions given to context.AfterFunc on goroutines of
// their own; only a parent context of an application's own type is
// asked, there, for its Done channel and values (and, if it has an
// AfterFunc method, to stop the function registered with it).

// maxPendingReports bounds a lock's outbox. Reports pile up only while
// the one delivering them is stuck in application code; then the oldest
// is dropped, so that the newest, which matches the lock's status, is
// still reported once the handler returns (as for callback events, see
// maxPendingEvents).
const maxPendingReports = 16

// reportLocked records f, which calls application code (logs, Metrics),
// to run once l.mu is released: by whoever releases it next with
// l.unlock, or by a pass over many locks with a reportBatch. Reports of
// one lock run in the order they were recorded, one at a time. l.mu must
// be held.
func (l *Lock) reportLocked(f func()) {
	if len(l.reports) == maxPendingReports {
		l.reports = append(l.reports[:0], l.reports[1:]...)
	}
	l.reports = append(l.reports, f)
}

// unlock releases l.mu, and then runs the reports recorded under it,
// unless another goroutine is running the lock's reports already (it
// runs these too): a caller never waits for application code running
// for someone else.
func (l *Lock) unlock() {
	claimed := l.claimReportsLocked()
	l.mu.Unlock()
	if claimed {
		l.deliverReports()
	}
}

// claimReportsLocked makes the caller the one to run l's reports, if
// some are waiting and nobody is running them: it must then call
// deliverReports once it has released l.mu.
func (l *Lock) claimReportsLocked() bool {
	if l.reporting || len(l.reports) == 0 {
		return false
	}
	l.reporting = true
	return true
}

// deliverReports runs l's reports, those recorded while it runs too, and
// then gives up the claim made by claimReportsLocked. l.mu must not be
// held. Should a report panic, the claim is given up all the same, and
// the next unlock runs the reports left.
func (l *Lock) deliverReports() {
	finished := false
	defer func() {
		if !finished {
			l.mu.Lock()
			l.reporting = false
			l.mu.Unlock()
		}
	}()
	l.mu.Lock()
	for len(l.reports) > 0 {
		f := l.reports[0]
		l.reports[0] = nil
		l.reports = l.reports[1:]
		l.mu.Unlock()
		f()
		l.mu.Lock()
	}
	l.reporting = false
	finished = true
	l.mu.Unlock()
}

// reportBatch is a pass over several locks (the monitor's, a session's)
// that changes every lock before it reports on any, so that application
// code blocking on one lock's report cannot hold up the others' changes.
type reportBatch []*Lock

// unlock releases l.mu, keeping l's reports for deliver when the batch
// may run them.
func (b *reportBatch) unlock(l *Lock) {
	if l.claimReportsLocked() {
		*b = append(*b, l)
	}
	l.mu.Unlock()
}

// deliver runs the reports of the batch's locks, lock by lock.
func (b reportBatch) deliver() {
	for _, l := range b {
		l.deliverReports()
	}
}
