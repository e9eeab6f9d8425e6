package ddblock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ddblock/ddblock/internal/wire"
	"golang.org/x/sync/errgroup"
)

// ReleaseLock gives a held lock back by deleting its item, on the
// condition that its record version number is still ours.
//
// The lock is marked RELEASED, its Done channel closed and its heartbeats
// stopped before the database call, so no work continues under it while
// the call is in flight. A lock kept by [Client.Close] (without
// releaseLocks) is still held and is released the same way. A lock that
// is not LOCKED or IN_DANGER is left alone. When the delete finds that
// the item changed hands, the lock ends INVALID, its Err LOCK_STOLEN:
// it was taken, not given back.
//
// By default the release is best effort, as in Python: failures are
// logged and nil is returned. With WithBestEffort(false) it reports
// CodeLockNotOwned (not held by this client), CodeLockStolen (the item
// changed hands, found now or known from an earlier heartbeat),
// CodeCanceled or CodeUnknown. A nil context or lock is refused with
// CodeInvalidArgument before anything changes, best effort or not.
func (c *Client) ReleaseLock(ctx context.Context, lock *Lock, opts ...ReleaseOption) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	if lock == nil {
		return invalidArg("Lock", "must not be nil")
	}
	o := releaseOptions{BestEffort: true}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	ctx, span := c.startSpan(ctx, spanRelease)
	known, err := c.release(ctx, lock)
	if span != nil {
		setLockProperties(span, lock.pk, lock.sk, lock.owner)
		if lock.token > 0 {
			span.SetProperty(attrToken, lock.token)
		}
		endSpan(span, err)
	}
	if err != nil && o.BestEffort {
		if CodeOf(err) != CodeLockNotOwned && !known {
			c.log.Warn("ddblock: best-effort release failed", "err", err)
		}
		return nil
	}
	return err
}

// release gives l back; known is set when its error reports what was
// already known (a lock found stolen earlier), not a failure of this call.
func (c *Client) release(ctx context.Context, l *Lock) (known bool, err error) {
	if l.client != c {
		return false, l.lockError(CodeLockNotOwned, "the lock belongs to another client", nil)
	}
	l.mu.Lock()
	if !l.heldLocked() {
		status, lerr := l.status, l.err
		l.mu.Unlock()
		if status == StatusInvalid {
			return true, lerr // stolen: the item is another holder's
		}
		return false, nil
	}
	// A held lock is registered (a lock kept by Close included); should it
	// not be, nothing changes.
	if !c.unregister(l) {
		l.mu.Unlock()
		return false, l.lockError(CodeLockNotOwned, "the lock is not held by this client", nil)
	}
	l.status = StatusReleased
	l.finishLocked(l.lockError(CodeLockReleased, "the lock was released", nil))
	inflight := l.hb.inFlight()
	l.unlock() // reports the lock's end (unregister)
	// Marking the lock released has just cancelled the contexts made from
	// it (Lock.Context, WithLock's, an election's): ctx may be one of
	// them, as when WithLock's function releases its own lock. That end
	// must not cancel the release's own calls.
	ctx, stop := l.survivingOwnEnd(ctx)
	defer stop()
	// A heartbeat in flight may still change the version number: wait for
	// it, so that the delete names the number the item really carries.
	if inflight != nil {
		select {
		case <-inflight:
		case <-ctx.Done():
			return false, l.lockError(CodeCanceled, "waiting for a heartbeat in flight", context.Cause(ctx))
		}
	}
	l.mu.Lock()
	rvn, unknown := l.hb.versions()
	l.mu.Unlock()
	err = c.giveBack(ctx, l.pk, l.sk, rvn, l.token > 0)
	if err != nil && wire.ConditionFailed(err) {
		// Stolen, or a write of ours landed unheard: this release (its
		// reply lost, the SDK's retry failing the condition), or a
		// heartbeat whose outcome was unknown. Only a read can tell.
		info, rerr := c.readItem(ctx, l.pk, l.sk)
		switch {
		case rerr != nil:
		case info == nil || (info.Released && info.RecordVersionNumber == rvn):
			return false, nil // the lock is given back
		case slices.Contains(unknown, info.RecordVersionNumber):
			err = c.giveBack(ctx, l.pk, l.sk, info.RecordVersionNumber, l.token > 0)
		}
	}
	if err != nil && !wire.ConditionFailed(err) && l.session != nil {
		// Still ours, perhaps, and kept alive by the session, which no
		// lease ends: the session gives it back after a later heartbeat.
		l.session.leave(leftover{pk: l.pk, sk: l.sk, rvn: rvn, counted: l.token > 0})
	}
	switch {
	case err == nil:
		c.handOff(l, rvn) // to this client's waiters of the key (waiters.go)
		return false, nil
	case wire.ConditionFailed(err):
		lerr := l.lockError(CodeLockStolen, "the item changed hands before the release", err)
		l.mu.Lock()
		l.lostAtReleaseLocked(lerr)
		l.unlock()
		c.log.Warn("ddblock: lock found stolen at its release", "key", l.pk, "sort_key", l.sk)
		return false, lerr
	case ctx.Err() != nil:
		return false, l.lockError(CodeCanceled, "releasing the lock", context.Cause(ctx))
	default:
		return false, c.tableError(err, "releasing the lock", l.pk, l.sk)
	}
}

// releaseAll releases every lock, best effort, a few at a time, each
// call bounded by ctx and by the heartbeat timeout.
func (c *Client) releaseAll(ctx context.Context, locks []*Lock) {
	var g errgroup.Group
	g.SetLimit(16)
	for _, l := range locks {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(ctx, c.opts.HeartbeatTimeout)
			defer cancel()
			_ = c.ReleaseLock(ctx, l)
			return nil
		})
	}
	_ = g.Wait()
}

// giveBack ends a lock item's tenure, on the condition that it still
// carries rvn: it deletes the item, or, with KeepReleasedItems or when the
// item carries a fencing token (counted), marks it released so that its
// count lives on, refreshing its TTL so that DynamoDB removes it in time.
//
// DynamoDB refuses it while a transaction that includes the item is under
// way: another client's AcquireLocks that found the key free a moment
// ago, say. It is sent again then, after a pause with jitter, until ctx
// ends (see throughConflicts).
func (c *Client) giveBack(ctx context.Context, pk, sk, rvn string, counted bool) error {
	return throughConflicts(ctx, func() error {
		if !c.opts.KeepReleasedItems && !counted {
			return c.deleteItem(ctx, pk, sk, rvn)
		}
		in := c.wire().MarkReleased(pk, sk, rvn, c.clock.Now().Add(c.opts.ExpiryPeriod))
		_, err := c.ddb.UpdateItem(ctx, in, c.callOpts("UpdateItem")...)
		return err
	})
}

// throughConflicts makes a plain write, and makes it again while DynamoDB
// refuses it for a transaction conflict (which proves it was not
// applied), after a conflictBackoff pause, until ctx ends.
func throughConflicts(ctx context.Context, write func() error) error {
	var backoff conflictBackoff
	for {
		err := write()
		if !wire.TransactionConflict(err) || wire.OutcomeUnknown(err) || !backoff.wait(ctx) {
			return err
		}
	}
}

func (c *Client) deleteItem(ctx context.Context, pk, sk, rvn string) error {
	_, err := c.ddb.DeleteItem(ctx, c.wire().Delete(pk, sk, rvn), c.callOpts("DeleteItem")...)
	return err
}

// ForceRelease deletes the lock item on (partitionKey, sortKey) whoever
// holds it (or, with KeepReleasedItems, marks it released): an
// operator's removal of a stuck lock. It is guarded: the
// delete happens only if the item still carries recordVersionNumber, the
// number the operator saw (from [Client.GetLock]), so a lock that changed
// hands or was heartbeated since is left alone (CodeLockStolen). It
// returns CodeLockNotFound when there is no item, and
// CodeInvalidArgument, before any call, for a key DynamoDB would refuse
// (empty, over its length, not UTF-8).
//
// The holder, if alive, learns of it at its next heartbeat (LOCK_STOLEN).
//
// A lock attached to a session (see [Options.SessionLease]) is never
// heartbeated on its own, so its holder would not learn of a forced
// release: while its session item is there, ForceRelease refuses with
// CodeLockHeld, naming the session item's key and version number. Force
// the session item's release first (its holder then learns at its next
// session heartbeat that every lock on it is lost), then the lock's.
func (c *Client) ForceRelease(ctx context.Context, partitionKey, sortKey, recordVersionNumber string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	sortKey = c.defaultSortKey(sortKey)
	if err := c.checkItemKey(partitionKey, sortKey); err != nil {
		return err
	}
	if recordVersionNumber == "" {
		return invalidArg("RecordVersionNumber", "must name the version to delete")
	}
	// An item that counts acquisitions is kept, so the count goes on.
	counted := false
	if info, err := c.readItem(ctx, partitionKey, sortKey); err == nil && info != nil {
		counted = info.FencingToken > 0
		if info.RecordVersionNumber == recordVersionNumber && info.Session != nil && !info.Released {
			if err := c.fillSession(ctx, info, nil); err != nil {
				return c.tableError(err, "reading the lock's session", partitionKey, sortKey)
			}
			if s := info.Session.Item; s != nil {
				return &Error{Code: CodeLockHeld, PartitionKey: partitionKey, SortKey: sortKey,
					Message: fmt.Sprintf("the lock is attached to session %q of owner %q, whose item is there (version %q): "+
						"its holder would not learn of a forced release; force the session item's release first",
						s.PartitionKey, s.OwnerName, s.RecordVersionNumber)}
			}
		}
	}
	err := c.giveBack(ctx, partitionKey, sortKey, recordVersionNumber, counted)
	switch {
	case err == nil:
		return nil
	case wire.ConditionFailed(err):
		if _, gerr := c.GetLock(ctx, partitionKey, sortKey); errors.Is(gerr, CodeLockNotFound) || errors.Is(gerr, CodeLockReleased) {
			return gerr
		}
		return &Error{Code: CodeLockStolen, Message: "the lock's version number is no longer " + recordVersionNumber,
			PartitionKey: partitionKey, SortKey: sortKey, Err: err}
	default:
		return c.tableError(err, "deleting the lock", partitionKey, sortKey)
	}
}

// survivingOwnEnd returns a context for the calls of l's release: ctx,
// except that ctx ending because l itself was released (its cause l's
// LOCK_RELEASED, as for a context made by l.Context) does not end it; the
// calls are then bounded by the heartbeat timeout instead.
func (l *Lock) survivingOwnEnd(ctx context.Context) (context.Context, context.CancelFunc) {
	ownEnd := func() bool {
		var e *Error
		return errors.As(context.Cause(ctx), &e) && e.Code == CodeLockReleased && e.PartitionKey == l.pk && e.SortKey == l.sk
	}
	if ctx.Err() != nil && !ownEnd() {
		return ctx, func() {}
	}
	inner, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var timer *time.Timer
	var mu sync.Mutex
	stopWatch := context.AfterFunc(ctx, func() {
		if !ownEnd() {
			cancel(context.Cause(ctx))
			return
		}
		mu.Lock()
		defer mu.Unlock()
		timer = time.AfterFunc(l.client.opts.HeartbeatTimeout, func() {
			cancel(l.lockError(CodeCanceled, "the release outlived its lock's context by the heartbeat timeout", nil))
		})
	})
	return inner, func() {
		stopWatch()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}
