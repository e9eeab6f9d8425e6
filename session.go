package ddblock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddblock/ddblock/internal/wire"
)

// Session leases (Options.SessionLease).
//
// A client with sessions keeps one session item in the lock table and
// heartbeats it alone, once a period, whatever the number of locks it
// holds. Each lock it takes is written once, naming the session
// (attrSession), and is never rewritten until its release.
//
// The rules that keep two holders apart:
//
//   - The holder creates its session item before it writes any lock
//     naming it, and never writes a session item with a key used before.
//     So a waiter that reads a lock item and then finds its session item
//     missing knows the session ended, or was removed: it cannot be one
//     that is still to come.
//   - A waiter watches the session item: its version number, or its
//     absence. Once it has seen one version stand for the session's lease
//     on its own monotonic clock, from the reply to the first read that
//     showed it to the sending of a later read that showed it still, the
//     session is dead to that client, and so is every lock naming it,
//     however many: the observation is the session's, shared by all the
//     client's acquires (observations.go). Each lock is taken over with a
//     put conditioned on the lock item's version number as read, so that
//     a lock another waiter took meanwhile is never stolen from it. The
//     first to take one over deletes the session item, conditioned on the
//     version it judged, so that dead clients' session items do not pile
//     up where no TTL removes them.
//   - The holder counts its locks safe for the safe period after the
//     session's last heartbeat known to have landed (sent, on its
//     monotonic clock), however recently a lock was written: a waiter
//     that judged the session dead takes a lock written since without
//     another wait. For the same reason it puts no new lock on a session
//     that is past its safe period (the acquire waits and tries again).
//   - A session heartbeat that lands a whole lease or more after the
//     previous landed write was sent may come after a waiter's takeover:
//     the holder then counts every lock of the session lost (LOCK_STOLEN),
//     ends the session and starts a new one for its next locks. Below a
//     lease no waiter can have seen the session unchanged for a lease, so
//     a lock in danger recovers.
//   - A session item removed or overwritten by someone else (its
//     heartbeat's condition fails and the item is gone or not ours) ends
//     the session the same way, at the heartbeat that finds it, which
//     comes before the safe period of any lock on it has passed.
//   - A lock item the client could not give back (its release failed, or
//     an acquire's clean-up after a write of unknown outcome) would stay
//     held as long as the session lives: nothing else ends it, as a
//     lease ends a lock heartbeated alone. The session keeps such items
//     as leftovers and tries to give them back again after each
//     successful heartbeat, and once more before its item is deleted at
//     Close, each time on the condition that the item still carries the
//     version number written.
//
// A client that does not know sessions (python_dynamodb_lock) reads the
// lease in the lock item, sessionLockLease, and waits that long on it.

const (
	// sessionKeyPrefix starts every session item's partition key; lock
	// keys may not start with it.
	sessionKeyPrefix = "ddblock_session#"
	// sessionLockLease is the lease written into a lock attached to a
	// session, and how far ahead its TTL goes: a year, the longest lease
	// this library reads. python_dynamodb_lock waits that long on a
	// silent lock before taking it over; DynamoDB's TTL removes an
	// abandoned one after it. The holder counts a lock it has held for a
	// year less a lease as in danger, so neither can surprise it.
	sessionLockLease = maxLease
)

func isSessionKey(pk string) bool {
	return strings.HasPrefix(pk, sessionKeyPrefix) && len(pk) > len(sessionKeyPrefix)
}

// errSessionEnded is put's answer when the session it wrote the lock
// under ended before the lock could be attached: the lock was given back
// and the acquire tries again, on a new session.
var errSessionEnded = errors.New("ddblock: the session ended while acquiring")

// session is a client's session item and the locks attached to it.
type session struct {
	c      *Client
	pk, sk string
	lease  time.Duration

	// The heartbeat scheduler's record of the session, guarded by the
	// scheduler's mutex.
	sched schedEntry

	// lastGood is when the last write of the session item known to have
	// landed (its creation or a heartbeat) was sent, on the monotonic
	// clock. Only the session's heartbeat (one at a time) writes it;
	// every lock's danger check reads it.
	lastGood atomic.Int64
	// inDanger is set by the first of its locks found in danger, so that
	// the session's next successful heartbeat looks for locks to recover,
	// and the danger is logged once for the session, not once per lock.
	inDanger atomic.Bool

	mu        sync.Mutex
	hb        hbState // the item's version numbers and the heartbeat in flight
	ended     bool
	locks     map[*Lock]struct{}
	leftovers []leftover // lock items to give back again
	retrying  bool       // a retry of the leftovers is under way
}

// leftover is a lock item of the session that the client no longer
// holds but could not give back: its release failed, or an acquire
// wrote it with an outcome unknown and could not take it back.
type leftover struct {
	pk, sk, rvn string
	counted     bool // carries a fencing token: marked released, not deleted
}

// maxLeftoverRetries bounds the items one retry after a heartbeat gives
// back, so that a long list never holds the table's writes for long.
const maxLeftoverRetries = 64

func (s *session) lastGoodSent() time.Duration { return time.Duration(s.lastGood.Load()) }

// sessionLeaseOf is the lease a waiter times a session lock by: the one
// the lock names, or the session item's own if longer.
func sessionLeaseOf(info *LockInfo) time.Duration {
	lease := info.Session.LeaseDuration
	if item := info.Session.Item; item != nil {
		lease = max(lease, item.LeaseDuration)
	}
	return lease
}

// liveSession returns the client's session, starting one if there is
// none or the last one ended. Concurrent acquires wait for one start.
func (c *Client) liveSession(ctx context.Context) (*session, error) {
	for {
		c.sessMu.Lock()
		if s := c.sess; s != nil && !s.isEnded() {
			c.sessMu.Unlock()
			return s, nil
		}
		if starting := c.sessStarting; starting != nil {
			c.sessMu.Unlock()
			select {
			case <-starting:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		starting := make(chan struct{})
		c.sessStarting = starting
		c.sessMu.Unlock()

		s, err := c.startSession(ctx)

		c.sessMu.Lock()
		c.sessStarting = nil
		if err == nil {
			c.sess = s
		}
		c.sessMu.Unlock()
		close(starting)
		return s, err
	}
}

func (s *session) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// startSession creates a session item under a fresh random key, with a
// put conditioned on there being none, and schedules its heartbeats.
func (c *Client) startSession(ctx context.Context) (*session, error) {
	s := &session{
		c:     c,
		pk:    sessionKeyPrefix + hex.EncodeToString(wire.NewUUID4()),
		sk:    c.defaultSortKey(""),
		lease: c.opts.LeaseDuration,
		locks: make(map[*Lock]struct{}),
	}
	now := c.clock.Now()
	info := &LockInfo{
		PartitionKey:        s.pk,
		SortKey:             s.sk,
		OwnerName:           c.opts.OwnerName,
		LeaseDuration:       s.lease,
		RecordVersionNumber: wire.NewRecordVersionNumber(),
		ExpiryTime:          now.Add(c.opts.ExpiryPeriod),
		IsSession:           true,
	}
	if c.opts.MaxClockSkew > 0 {
		info.HeartbeatTime = now
	}
	sent := c.clock.Monotonic()
	_, err := c.ddb.PutItem(ctx, c.wire().PutNew(c.codec.encode(info), false), c.callOpts("PutItem")...)
	if err != nil && wire.ConditionFailed(err) {
		// The key is fresh and random: an item there is our own put,
		// whose reply was lost and whose retry by the SDK then failed.
		if cur, rerr := c.readItem(ctx, s.pk, s.sk); rerr == nil && cur != nil && cur.RecordVersionNumber == info.RecordVersionNumber {
			err = nil
		}
	}
	if err != nil {
		if wire.OutcomeUnknown(err) || wire.ConditionFailed(err) {
			s.hb.rvn = info.RecordVersionNumber
			s.deleteItem(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	s.hb.rvn = info.RecordVersionNumber
	s.lastGood.Store(int64(sent))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		s.deleteItem(context.WithoutCancel(ctx))
		return nil, &Error{Code: CodeClientShutdown, Message: "the client was closed while starting its session"}
	}
	c.heartbeats.add(&s.sched, s, sent)
	c.mu.Unlock()
	c.log.Info("ddblock: session started", "session", s.pk, "lease", s.lease)
	return s, nil
}

// attach adds a freshly acquired lock; false when the session ended.
func (s *session) attach(l *Lock) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.locks[l] = struct{}{}
	return true
}

// leave records a lock item that could not be given back; the session
// gives it back after a later heartbeat. Once the session ended there is
// nothing to do: its item is gone or no longer heartbeated, and waiters
// take its locks over after its lease.
func (s *session) leave(item leftover) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.leftovers = append(s.leftovers, item)
	}
}

// retryLeftoversAfterHeartbeat starts giving back the leftovers, at most
// maxLeftoverRetries of them, on a goroutine of the client's loops (so
// that Close waits for it) rather than on the heartbeat's sender, whose
// next heartbeat must not wait for it. One retry runs at a time.
func (s *session) retryLeftoversAfterHeartbeat() {
	s.mu.Lock()
	if len(s.leftovers) == 0 || s.retrying || s.ended {
		s.mu.Unlock()
		return
	}
	s.retrying = true
	s.mu.Unlock()
	c := s.c
	// The heartbeater's run has not returned (this heartbeat is one of
	// its sends), so the group cannot have finished: joining it is safe.
	c.loops.join()
	go func() {
		defer c.loops.finish()
		ctx, cancel := context.WithTimeout(c.sendCtx, c.opts.HeartbeatTimeout)
		defer cancel()
		s.giveBackLeftovers(ctx, maxLeftoverRetries)
		s.mu.Lock()
		s.retrying = false
		s.mu.Unlock()
	}()
}

// giveBackLeftovers tries to give back up to limit leftovers, in the
// order they were left, and keeps those that failed for another time.
// An item found changed (the condition fails) is no longer ours to give
// back: it was given back after all, or taken over.
func (s *session) giveBackLeftovers(ctx context.Context, limit int) {
	c := s.c
	s.mu.Lock()
	batch := slices.Clone(s.leftovers[:min(limit, len(s.leftovers))])
	s.mu.Unlock()
	done := 0
	for _, item := range batch {
		err := c.giveBack(ctx, item.pk, item.sk, item.rvn, item.counted)
		if err != nil && !wire.ConditionFailed(err) {
			c.log.Warn("ddblock: could not give back a lock item left on the session; trying again after the next heartbeat",
				"session", s.pk, "key", item.pk, "sort_key", item.sk, "err", err)
			break
		}
		done++
		c.log.Info("ddblock: gave back a lock item left on the session", "session", s.pk, "key", item.pk, "sort_key", item.sk)
	}
	s.mu.Lock()
	// Only this goroutine (or Close, after it) removes leftovers, and
	// new ones are appended: the first done are those of the batch.
	s.leftovers = append(s.leftovers[:0], s.leftovers[done:]...)
	s.mu.Unlock()
}

// detach drops a released or lost lock.
func (s *session) detach(l *Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.locks, l)
}

// prepareHeartbeat makes the session's next heartbeat, unless it ended.
func (s *session) prepareHeartbeat() func() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil
	}
	oldRVN, unknown, done := s.hb.start()
	return func() time.Duration {
		defer close(done)
		s.heartbeat(oldRVN, unknown)
		return s.lastGoodSent()
	}
}

// heartbeat refreshes the session item, as a lock's heartbeat refreshes
// a lock item, and carries the outcome over to every lock on it.
func (s *session) heartbeat(oldRVN string, unknown []string) {
	c := s.c
	ctx, cancel := context.WithTimeout(c.sendCtx, c.opts.HeartbeatTimeout)
	defer cancel()
	last := s.lastGoodSent()
	hb, err, lost, found := c.refreshItem(ctx, s.pk, s.sk, oldRVN, unknown, true, nil)
	reply := c.clock.Monotonic()
	c.opts.Metrics.HeartbeatFinished(hb.sent-last, s.lease, err)
	s.mu.Lock()
	s.hb.finish() // closed by prepareHeartbeat's call once this returns
	switch {
	case err == nil:
		s.hb.landed(hb.rvn)
		s.mu.Unlock()
		c.stats.heartbeatsSent.Add(1)
		if reply-last >= s.lease {
			// Landed a whole lease after the last landed write was sent:
			// a waiter may have seen the session unchanged for its lease
			// and taken locks over.
			s.end(fmt.Sprintf("the session went %v without a heartbeat landing, its whole lease: others may have taken its locks", reply-last), true)
			return
		}
		s.lastGood.Store(int64(hb.sent))
		s.recover()
		s.retryLeftoversAfterHeartbeat()
		c.retryAbandonedTickets(ctx)
		if !c.opts.SessionLease && c.fairIdle() {
			// Kept for fair waiters' tickets alone, and none waits.
			s.retire()
		}
	case lost:
		s.mu.Unlock()
		c.stats.heartbeatsFailed.Add(1)
		why := "the session item was removed by someone else"
		if found != nil {
			why = "the session item was overwritten by someone else (owner " + found.OwnerName + ")"
		}
		s.end(why, false)
	default:
		s.hb.failed(hb.rvn, err)
		s.mu.Unlock()
		c.stats.heartbeatsFailed.Add(1)
		c.log.Warn("ddblock: session heartbeat failed", "session", s.pk, "err", err)
	}
}

// recover brings the session's locks in danger back to LOCKED after a
// successful heartbeat.
func (s *session) recover() {
	if !s.inDanger.Swap(false) {
		return
	}
	c := s.c
	now := c.clock.Monotonic()
	recovered := 0
	var batch reportBatch
	for _, l := range s.attached() {
		l.mu.Lock()
		if l.status == StatusInDanger && !l.pastSafePeriodLocked(now) {
			l.status = StatusLocked
			c.stats.recovered.Add(1)
			c.callbacks.enqueue(l, CodeLockRecovered)
			l.reportLocked(c.opts.Metrics.LockRecovered)
			recovered++
		}
		batch.unlock(l)
	}
	batch.deliver()
	c.log.Info("ddblock: session recovered from danger", "session", s.pk, "locks_recovered", recovered)
}

func (s *session) attached() []*Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Lock, 0, len(s.locks))
	for l := range s.locks {
		out = append(out, l)
	}
	return out
}

// end ends a session that was lost: every lock on it is lost
// (LOCK_STOLEN), and the client's next lock goes on a new session. With
// deleteItem the session item, still ours, is deleted, so that waiters
// on its locks see it gone and take them over after a lease, rather than
// wait on a session that is alive but holds nothing.
func (s *session) end(why string, deleteItem bool) {
	c := s.c
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	locks := make([]*Lock, 0, len(s.locks))
	for l := range s.locks {
		locks = append(locks, l)
	}
	s.mu.Unlock()
	c.heartbeats.remove(&s.sched)
	var batch reportBatch
	for _, l := range locks {
		l.mu.Lock()
		if l.heldLocked() {
			l.status = StatusInvalid
			l.finishLocked(l.lockError(CodeLockStolen, why, nil))
			c.unregister(l)
			c.stats.stolen.Add(1)
			c.callbacks.enqueue(l, CodeLockStolen)
			l.reportLocked(c.opts.Metrics.LockStolen)
		}
		batch.unlock(l)
	}
	batch.deliver()
	c.log.Warn("ddblock: session lost, and with it its locks", "session", s.pk, "locks", len(locks), "why", why)
	if deleteItem {
		s.deleteItem(c.sendCtx)
	}
}

// retire ends a session that no lock is on and that is no longer
// needed, deleting its item, best effort.
func (s *session) retire() {
	s.mu.Lock()
	if s.ended || len(s.locks) > 0 || len(s.leftovers) > 0 {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.mu.Unlock()
	s.c.heartbeats.remove(&s.sched)
	s.deleteItem(s.c.sendCtx)
	s.c.log.Debug("ddblock: session ended: no fair waiter uses it", "session", s.pk)
}

// close ends the session at the client's Close, once no lock is left on
// it: its item is deleted, best effort. A session that still has locks
// (kept by Close without releaseLocks) is left to run out: it is no
// longer heartbeated, and waiters take its locks over after its lease.
func (s *session) close(ctx context.Context) {
	s.mu.Lock()
	if s.ended || len(s.locks) > 0 {
		s.mu.Unlock()
		return
	}
	n := len(s.leftovers)
	s.mu.Unlock()
	if n > 0 {
		// Given back now, waiters take them at once; else they wait a
		// session lease once the session item is gone.
		lctx, cancel := context.WithTimeout(ctx, s.c.opts.HeartbeatTimeout)
		s.giveBackLeftovers(lctx, n)
		cancel()
	}
	s.mu.Lock()
	s.ended = true
	s.leftovers = nil
	s.mu.Unlock()
	s.deleteItem(ctx)
}

// deleteItem deletes the session item if it still carries our version
// number (or one a heartbeat of unknown outcome may have written), best
// effort, within the heartbeat timeout.
func (s *session) deleteItem(ctx context.Context) {
	c := s.c
	ctx, cancel := context.WithTimeout(ctx, c.opts.HeartbeatTimeout)
	defer cancel()
	s.mu.Lock()
	rvn, unknown := s.hb.versions()
	versions := append([]string{rvn}, unknown...)
	s.mu.Unlock()
	for _, rvn := range versions {
		err := c.deleteItem(ctx, s.pk, s.sk, rvn)
		if err == nil {
			return
		}
		if !wire.ConditionFailed(err) {
			c.log.Warn("ddblock: could not delete the session item; it expires by its TTL", "session", s.pk, "err", err)
			return
		}
	}
}

// readSession reads the session item at pk with a strongly consistent
// GetItem, and says when the read was sent (monotonic and wall clock).
// The item is nil when there is none, or when what is there is not a
// session item: overwritten by someone else, it stands for no session.
func (c *Client) readSession(ctx context.Context, pk string) (item *LockInfo, sent time.Duration, sentWall time.Time, err error) {
	sentWall, sent = c.clock.Now(), c.clock.Monotonic()
	item, err = c.readItem(ctx, pk, c.defaultSortKey(""))
	if CodeOf(err) == CodeInvalidItem {
		item, err = nil, nil
	}
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	if item != nil && (!item.IsSession || item.Released) {
		item = nil
	}
	return item, sent, sentWall, nil
}

// The session's part of the takeover rule: how an acquire judges a lock
// attached to a session, by its session rather than by the lock item.

// watchSession reads the session item of info, a lock seen attached to a
// session, after the lock item: the holder creates its session before
// it writes a lock naming it, so a session found missing then was ended
// or removed, not yet to come. What the read shows goes into the
// client's record of the session (observations.go), which every acquire
// of a lock naming the session shares, and into info.Session.Item. A
// session already judged dead is not read again (read false).
func (c *Client) watchSession(ctx context.Context, info *LockInfo) (readWall time.Time, read bool, err error) {
	pk := info.Session.PartitionKey
	if c.observations.sessionDead(pk, sessionLeaseOf(info)) {
		return time.Time{}, false, nil
	}
	seen, readSent, readWall, err := c.readSession(ctx, pk)
	if err != nil {
		return time.Time{}, false, err
	}
	version := absentSession
	if seen != nil {
		version = seen.RecordVersionNumber
	}
	c.observations.seeSession(pk, version, readSent, c.clock.Monotonic())
	info.Session.Item = seen
	return readWall, true, nil
}

// sessionExpired: a lock attached to a session goes with its session. It
// is free once this client has seen the session item's version (or its
// absence) stand for the session's lease, from the reply to the first
// read that showed it to the sending of a later read that showed it
// still, whichever acquire of this client made the reads and whichever
// lock of the session they were made for. The lock's own version number
// plays no part: its holder counts every lock on the session safe only
// for the safe period after the session's last landed heartbeat, however
// recently the lock was written (lock.go), and a heartbeat of the
// session that lands after the session was judged dead comes a whole
// lease after its last landed one, and makes its holder count all its
// locks lost (above). The put stays conditioned on the lock's version
// number, so that a lock another waiter took meanwhile is never stolen
// from it.
func (c *Client) sessionExpired(seen *LockInfo) bool {
	return c.observations.sessionDead(seen.Session.PartitionKey, sessionLeaseOf(seen))
}

// sessionStale: fast takeover of a lock attached to a session by the
// stamps of both items, the later one, against the wall clock when the
// session was last read (readWall). A session found dead so is dead for
// every lock on it. A missing session is timed by watching instead.
func (c *Client) sessionStale(seen *LockInfo, readWall time.Time, skew time.Duration) bool {
	s := seen.Session
	if s.Item == nil || s.Item.HeartbeatTime.IsZero() {
		return false
	}
	stamp := seen.HeartbeatTime
	if s.Item.HeartbeatTime.After(stamp) {
		stamp = s.Item.HeartbeatTime
	}
	if !readWall.After(stamp.Add(sessionLeaseOf(seen) + skew)) {
		return false
	}
	c.observations.markSessionDead(s.PartitionKey, s.Item.RecordVersionNumber, sessionLeaseOf(seen))
	return true
}
