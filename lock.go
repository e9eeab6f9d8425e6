package ddblock

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Status is where a [Lock] is in its life:
//
//	PENDING → LOCKED ⇄ IN_DANGER → RELEASED or INVALID
//
// The names and values are python_dynamodb_lock's.
type Status string

// The statuses.
const (
	// StatusPending: being acquired.
	StatusPending Status = "PENDING"
	// StatusLocked: held, and heartbeated within the safe period.
	StatusLocked Status = "LOCKED"
	// StatusReleased: given back by this client.
	StatusReleased Status = "RELEASED"
	// StatusInDanger: held, but not heartbeated within the safe period;
	// another client may soon take it. Heartbeats go on, and a successful
	// one brings the lock back to LOCKED.
	StatusInDanger Status = "IN_DANGER"
	// StatusInvalid: taken by another client.
	StatusInvalid Status = "INVALID"
)

// Callback is told about events of a held lock: CodeLockInDanger,
// CodeLockStolen and CodeLockRecovered. Callbacks run on the client's
// bounded pool of workers (see [Options.CallbackWorkers]), round-robin
// across locks; events of one lock arrive in order. A callback should
// return quickly; it may call [Lock.Release]. An event that waits longer
// than the safe period for a free worker is logged and counted
// ([Metrics] CallbackLate, Stats.CallbacksLate). Events that come after
// [Client.Close] began are not delivered.
type Callback func(code Code, lock *Lock)

// Lock is a lock held (or once held) by this client. Its methods are safe
// for concurrent use.
//
// Work done under a lock must stop when [Lock.Done] is closed: the lock
// was released, stolen, went into danger, or the client was closed.
//
// A nil or zero Lock (not acquired through a Client) is no lock: Err,
// Release and Context answer with an error of CodeInvalidArgument (Guard
// and GuardedWrite with CodeLockNotHeld), Done is closed, and the other
// methods return zero values.
type Lock struct {
	client    *Client
	id        string
	pk, sk    string
	owner     string
	lease     time.Duration
	attrs     map[string]types.AttributeValue
	token     int64
	tenure    string
	takenFrom *LockInfo
	callback  Callback
	// fast: taken over by the holder's stamp (see Options.MaxClockSkew).
	fast bool
	// acquired is when the acquiring write was sent (monotonic).
	acquired time.Duration
	// traceCtx is the acquire's context, for the span of a loss
	// (spans.go); nil without a tracer.
	traceCtx context.Context
	// unreported: given back by Semaphore.Acquire before its acquire
	// was reported, so its end is not reported either (Metrics.LockEnded).
	unreported bool
	// session is the session the lock is attached to, nil when the lock
	// is heartbeated on its own (see session.go).
	session *session

	mu            sync.Mutex
	status        Status
	hb            hbState // the item's version numbers and the heartbeat in flight
	expiry        time.Time
	lastHeartbeat time.Duration // monotonic; for a session's lock, its acquire
	done          chan struct{}
	err           error
	onDone        map[*doneToken]func(error)
	// Reports of events to the application's logger and Metrics, run
	// once mu is released (locks.go); reporting is set while someone
	// runs them.
	reports   []func()
	reporting bool

	// Guarded by the callback pool's mutex.
	pending   []pendingEvent
	scheduled bool

	// The heartbeat scheduler's record of this lock, guarded by the
	// scheduler's mutex (heartbeater.go).
	sched schedEntry

	// gate lets a heartbeat refused by a transaction conflict through
	// the holder's own guarded writes (guard.go); it has its own mutex.
	gate writeGate
}

// PartitionKey returns the lock's partition key.
func (l *Lock) PartitionKey() string {
	if l == nil {
		return ""
	}
	return l.pk
}

// SortKey returns the lock's sort key.
func (l *Lock) SortKey() string {
	if l == nil {
		return ""
	}
	return l.sk
}

// ID returns Python's unique identifier of the lock:
// quote(partition key) + "|" + quote(sort key).
func (l *Lock) ID() string {
	if l == nil {
		return ""
	}
	return l.id
}

// OwnerName returns the owner name written in the item: this client's.
func (l *Lock) OwnerName() string {
	if l == nil {
		return ""
	}
	return l.owner
}

// LeaseDuration returns the lease written in the item.
func (l *Lock) LeaseDuration() time.Duration {
	if l == nil {
		return 0
	}
	return l.lease
}

// FencingToken returns the lock's fencing token: a number greater than
// that of every earlier acquisition of the key, written in the same
// conditional write that granted the lock. Hand it to the resource the
// lock protects, which remembers the largest token it has seen and
// refuses requests with a smaller one: a holder that was paused past its
// lease and does not know it yet is then turned away. It is 0 unless the
// client has [Options.FencingTokens] or the key's item already counted.
func (l *Lock) FencingToken() int64 {
	if l == nil {
		return 0
	}
	return l.token
}

// Tenure returns the identifier of this acquisition, written in the lock
// item as ddblock_tenure and kept by every heartbeat: it changes only when
// the key is acquired again, by anyone, this client included. A guarded
// write is conditioned on it (see [Lock.GuardedWrite]).
func (l *Lock) Tenure() string {
	if l == nil {
		return ""
	}
	return l.tenure
}

// TakenOverFrom returns the lock item this lock replaced when it was
// taken from a holder presumed dead (its lease ran out unrefreshed, or
// its wall-clock stamp was stale), so the caller can run recovery for
// the work that holder may have left half done. It returns nil when the
// lock was free or released.
func (l *Lock) TakenOverFrom() *LockInfo {
	if l == nil {
		return nil
	}
	return l.takenFrom
}

// AdditionalAttributes returns a copy of the application's attributes
// stored with the lock.
func (l *Lock) AdditionalAttributes() map[string]types.AttributeValue {
	if l == nil {
		return nil
	}
	l.mu.Lock() // Leadership.Proclaim replaces attrs
	defer l.mu.Unlock()
	return maps.Clone(l.attrs)
}

// RecordVersionNumber returns the version number most recently written;
// it changes with every heartbeat.
func (l *Lock) RecordVersionNumber() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hb.rvn
}

// ExpiryTime returns the TTL value most recently written.
func (l *Lock) ExpiryTime() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// lastRefresh returns the client's monotonic reading when the last
// successful write (acquire or heartbeat) was sent. For a lock attached
// to a session, the session's heartbeats count, and they alone: it is the
// session's last successful heartbeat (or its creation). The ddblock
// command's guard reads it (internal/hooks).
func (l *Lock) lastRefresh() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastRefreshLocked()
}

// SessionKey returns the partition key of the session item the lock is
// attached to (see [Options.SessionLease]), or "" for a lock heartbeated
// on its own.
func (l *Lock) SessionKey() string {
	if l == nil || l.session == nil {
		return ""
	}
	return l.session.pk
}

// lastRefreshLocked is when the lock's last write known to have landed
// was sent: its own, or, for a lock on a session, the session's. The
// lock's own write does not count then: waiters time a session's locks
// by the session alone (acquire.go's expired), however recently a lock
// was written.
func (l *Lock) lastRefreshLocked() time.Duration {
	if l.session == nil {
		return l.lastHeartbeat
	}
	return l.session.lastGoodSent()
}

// pastSafePeriodLocked reports whether the safe period has passed since
// the lock's last refresh; a lock on a session also once it has been
// held for a year less a lease, before anyone who reads its year-long
// lease, or DynamoDB's TTL, may take it.
func (l *Lock) pastSafePeriodLocked(now time.Duration) bool {
	if now-l.lastRefreshLocked() > l.client.opts.SafePeriod {
		return true
	}
	return l.session != nil && now-l.lastHeartbeat > sessionLockLease-l.session.lease
}

// Info returns a snapshot of the lock as it stands in the table.
func (l *Lock) Info() LockInfo {
	if l == nil {
		return LockInfo{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	info := LockInfo{
		PartitionKey:         l.pk,
		SortKey:              l.sk,
		OwnerName:            l.owner,
		LeaseDuration:        l.lease,
		RecordVersionNumber:  l.hb.rvn,
		ExpiryTime:           l.expiry,
		AdditionalAttributes: maps.Clone(l.attrs),
		FencingToken:         l.token,
		Tenure:               l.tenure,
	}
	if l.session != nil {
		info.Session = &SessionInfo{PartitionKey: l.session.pk, LeaseDuration: l.session.lease}
	}
	return info
}

// Status returns the lock's status. It checks the clock itself, so a lock
// whose safe period has passed reads IN_DANGER even before the client's
// monitor has run, as after the process was paused.
func (l *Lock) Status() Status {
	if l.usable() != nil {
		return ""
	}
	l.mu.Lock()
	defer l.unlock()
	l.checkDangerLocked(l.client.clock.Monotonic())
	return l.status
}

// Done returns a channel that is closed when work under the lock must
// stop: the lock was released, stolen or went into danger, or the client
// was closed. It stays closed even if the lock recovers from danger; see
// [Lock.Status]. [Lock.Err] gives the latest reason.
func (l *Lock) Done() <-chan struct{} {
	if l.usable() != nil {
		return closedChan
	}
	return l.done
}

// Err returns nil while the lock is safe to work under; afterwards, why
// it is not: an *Error with CodeLockReleased, CodeLockStolen,
// CodeLockInDanger or CodeClientShutdown. When there are several
// reasons it gives the most telling one seen so far: LOCK_STOLEN over
// LOCK_RELEASED over CLIENT_SHUTDOWN over LOCK_IN_DANGER, so a lock in
// danger that is then stolen says LOCK_STOLEN, and a lock kept by Close
// that drifts into danger says CLIENT_SHUTDOWN while its Status says
// IN_DANGER. It stays non-nil once set, even if the lock recovers from
// danger. Like Status it checks the clock itself: call it right before a
// write that the lock protects.
func (l *Lock) Err() error {
	if err := l.usable(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.unlock()
	l.checkDangerLocked(l.client.clock.Monotonic())
	return l.err
}

// Context returns a context derived from parent that is cancelled as soon
// as [Lock.Done] closes; context.Cause then gives the lock's error. Call
// cancel when the work is done.
//
// The context's Err method checks the clock itself, as [Lock.Err] does,
// so it reports a lock in danger even in the instant after a paused
// process wakes, before the client's monitor has run. A select on its
// Done channel may lag that instant: check Err before each step that the
// lock protects.
//
// A nil parent, or a nil or zero Lock, gives a context that is already
// cancelled, its cause an error of CodeInvalidArgument.
func (l *Lock) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if err := l.usable(); err != nil {
		return cancelledContext(err), func() {}
	}
	if err := checkContext(parent); err != nil {
		return cancelledContext(err), func() {}
	}
	inner, cancelCause := context.WithCancelCause(parent)
	ctx = lockContext{Context: inner, lock: l}
	token := new(doneToken)
	l.mu.Lock()
	l.checkDangerLocked(l.client.clock.Monotonic())
	if l.err != nil {
		err := l.err
		l.unlock()
		cancelCause(err)
		return ctx, func() { cancelCause(context.Canceled) }
	}
	if l.onDone == nil {
		l.onDone = make(map[*doneToken]func(error))
	}
	l.onDone[token] = cancelCause
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		delete(l.onDone, token)
		l.mu.Unlock()
		cancelCause(context.Canceled)
	}
}

// doneToken names one context of Lock.Context in Lock.onDone. It is not
// of size zero: pointers to distinct zero-size values may be equal (Go
// allocates them all at one address), and the contexts of two calls
// would then share one entry, the first never cancelled.
type doneToken struct{ _ byte }

// lockContext is the context Lock.Context returns: its Err first lets the
// lock check the clock, which cancels the context if the safe period has
// passed.
type lockContext struct {
	context.Context
	lock *Lock
}

func (c lockContext) Err() error {
	_ = c.lock.Err() // cancels the context now if the lock is in danger
	return c.Context.Err()
}

// Release gives the lock back; see [Client.ReleaseLock].
func (l *Lock) Release(ctx context.Context, opts ...ReleaseOption) error {
	if err := l.usable(); err != nil {
		return err
	}
	return l.client.ReleaseLock(ctx, l, opts...)
}

// held reports whether the lock is held (LOCKED or IN_DANGER).
func (l *Lock) heldLocked() bool {
	return l.status == StatusLocked || l.status == StatusInDanger
}

// finishLocked records err as the reason work under the lock must stop,
// and closes Done the first time. Err gives the most telling reason
// seen: a later reason replaces an earlier one of the same or lower
// rank (see errRank), so a lock in danger that is then stolen says
// LOCK_STOLEN, while a lock kept by Close that drifts into danger keeps
// saying CLIENT_SHUTDOWN. Done and the contexts of Lock.Context end once,
// with the first reason as their cause, as a context's do.
func (l *Lock) finishLocked(err *Error) {
	if err.Code == CodeLockInDanger || err.Code == CodeLockStolen {
		l.traceLossLocked(err.Code)
	}
	if l.err != nil {
		if errRank(err.Code) >= errRank(CodeOf(l.err)) {
			l.err = err
		}
		return
	}
	l.err = err
	close(l.done)
	for _, cancel := range l.onDone {
		cancel(err)
	}
	l.onDone = nil
}

// errRank orders the reasons a lock stops: danger may pass, a shut-down
// client's lock may still be released, and released or stolen are
// final; stolen outranks released because a release that finds the item
// changed hands did not give the lock back (see lostAtReleaseLocked).
func errRank(code Code) int {
	switch code {
	case CodeLockInDanger:
		return 1
	case CodeClientShutdown:
		return 2
	case CodeLockReleased:
		return 3
	case CodeLockStolen:
		return 4
	}
	return 0
}

// lostAtReleaseLocked records that a release found the item changed
// hands: the lock was not given back by us but taken, so it ends INVALID
// with LOCK_STOLEN, as it would have had a heartbeat found it first.
func (l *Lock) lostAtReleaseLocked(err *Error) {
	l.status = StatusInvalid
	l.finishLocked(err)
	l.client.stats.stolen.Add(1)
	l.reportLocked(l.client.opts.Metrics.LockStolen)
}

// checkDangerLocked moves a LOCKED lock to IN_DANGER once the safe period
// has passed since its last successful heartbeat. Its reports run once
// l.mu is released: release it with l.unlock or a reportBatch.
//
// A lock on a session goes into danger with its session: every lock on
// it at the same check, as they share the session's last heartbeat. The
// session logs it once, not each lock.
func (l *Lock) checkDangerLocked(now time.Duration) {
	if l.status != StatusLocked || !l.pastSafePeriodLocked(now) {
		return
	}
	c := l.client
	l.status = StatusInDanger
	l.finishLocked(l.lockError(CodeLockInDanger, "no successful heartbeat within the safe period", nil))
	c.stats.inDanger.Add(1)
	c.callbacks.enqueue(l, CodeLockInDanger)
	if s := l.session; s != nil {
		if s.inDanger.Swap(true) {
			l.reportLocked(c.opts.Metrics.LockInDanger)
			return
		}
		since := now - s.lastGoodSent()
		l.reportLocked(func() {
			c.opts.Metrics.LockInDanger()
			c.log.Warn("ddblock: session in danger, and every lock on it", "session", s.pk,
				"since_heartbeat", since, "safe_period", c.opts.SafePeriod)
		})
		return
	}
	since := now - l.lastHeartbeat
	l.reportLocked(func() {
		c.opts.Metrics.LockInDanger()
		c.log.Warn("ddblock: lock in danger", "key", l.pk, "sort_key", l.sk,
			"since_heartbeat", since, "safe_period", c.opts.SafePeriod)
	})
}

func (l *Lock) lockError(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: msg, PartitionKey: l.pk, SortKey: l.sk, Err: cause}
}

// markStolenLocked ends a held lock as taken by another client: status
// INVALID, LOCK_STOLEN, unregistered, counted and reported (once l.mu is
// released with l.unlock). A lock no longer held (released meanwhile) is
// left alone: its release reports it.
func (l *Lock) markStolenLocked(msg string, cause error) {
	if !l.heldLocked() {
		return
	}
	c := l.client
	l.status = StatusInvalid
	l.finishLocked(l.lockError(CodeLockStolen, msg, cause))
	c.unregister(l)
	c.stats.stolen.Add(1)
	c.callbacks.enqueue(l, CodeLockStolen)
	l.reportLocked(func() {
		c.opts.Metrics.LockStolen()
		c.log.Warn("ddblock: lock stolen", "key", l.pk, "sort_key", l.sk, "found_by", msg)
	})
}
