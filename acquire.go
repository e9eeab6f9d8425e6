package ddblock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/ddblock/ddblock/internal/wire"
)

// DynamoDB's limits on key values.
const (
	maxPartitionKeyBytes = 2048
	maxSortKeyBytes      = 1024
)

// AcquireLock takes the lock on (partitionKey, sort key), waiting while
// someone else holds it, as python_dynamodb_lock does:
//
//   - no item: a conditional put creates it, and the lock is held. An
//     uncontended acquire is this one call;
//   - an item: its record version number is remembered with the time it
//     was first seen (on the monotonic clock). Once the same number has
//     been seen unchanged for the item's own lease duration, its holder is
//     presumed dead and a put conditioned on that number takes it over;
//   - otherwise it waits the retry period and reads again; a waiter only
//     reads, and writes only when a write can succeed;
//   - losing a race to another client is not an error: it waits and tries
//     again.
//
// A lock attached to a session ([Options.SessionLease]) is judged by its
// session: once this client has seen the session item (or its absence)
// stand unchanged for the session's lease, every lock of that session is
// taken over without another wait, and the first such takeover deletes
// the dead session's item.
//
// An item kept after its release ([Options.KeepReleasedItems]) is taken
// at once, and with [Options.MaxClockSkew] an item whose holder's
// wall-clock stamp is older than its lease plus the skew is taken over
// without watching it first. What the client has seen of a lock is
// remembered across calls ([Options.MaxObservations]).
//
// A lock this client holds already (the same partition and sort key) is
// not waited for: the answer is at once an error of CodeAlreadyHeld
// (errors.Is(err, CodeAlreadyHeld)), where python_dynamodb_lock would
// wait on its own lock until the retry timeout. A concurrent acquire of
// the same key by this client that loses to it gets the same answer at
// its next attempt. With [WithWaitOnOwn] the acquire waits for it
// instead, as goroutines of one program that take turns with a key do.
//
// Goroutines of one client that wait for the same key wait together: the
// key is read about once per retry period between them (the shortest of
// their periods), not once each; what a read shows serves them all, and
// one of them puts when it shows the lock free or expired. Each keeps its
// own retry period, timeout and context. When this client releases a key
// that its goroutines wait for (WithWaitOnOwn), one of them takes it at
// once, its put sent as soon as the release's call is answered, without
// waiting for its next attempt. When reads of the key are throttled, its
// waiters read less often (a retry period plus a random part that
// doubles with each throttled read, up to 16 periods), and at their
// period again once a read goes through.
//
// Failures worth another try (throttling, server errors, timeouts, lost
// connections, a put refused while a transaction of [Client.AcquireLocks]
// writes the key: CodeTransactionConflict) are retried like a held lock,
// within the retry timeout;
// if the last attempt still failed so, that failure is returned. It ends
// with CodeAcquireTimeout after the retry timeout (or at ctx's
// deadline), CodeCanceled when ctx is cancelled, CodeClientShutdown when
// the client is closed, CodeInvalidArgument for bad arguments,
// CodeTableNotFound or CodeTableMismatch when the table is missing or has
// other keys, CodeInvalidItem when the item at the key is not a lock item
// (it is left untouched), CodeLockInDanger when the client's own session
// stayed past its safe period through the last attempt (no lock is put
// on a session in danger), CodeAccessDenied at once when AWS refuses a
// permission or the credentials (never retried: the SDK's error, naming
// the operation and AWS's message, is its cause), and CodeUnknown,
// wrapping the cause, on any other failure.
func (c *Client) AcquireLock(ctx context.Context, partitionKey string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, partitionKey, false, opts)
}

// TryAcquireLock makes one attempt and answers at once: the lock, or an
// error of CodeLockHeld naming the holder. A lock seen held by an earlier
// call is taken over by a later one once it has stood unchanged for its
// lease, so polling with TryAcquireLock does take over a dead holder's
// lock. A lock this client holds already is CodeAlreadyHeld, as with
// AcquireLock. The retry options are ignored.
func (c *Client) TryAcquireLock(ctx context.Context, partitionKey string, opts ...AcquireOption) (*Lock, error) {
	return c.acquire(ctx, partitionKey, true, opts)
}

func (c *Client) acquire(ctx context.Context, pk string, once bool, opts []AcquireOption) (*Lock, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	o := c.acquireSettings(opts)
	if err := c.checkAcquire(pk, &o); err != nil {
		return nil, err
	}
	o.traceCtx = c.traceCtx(ctx)
	ctx, span := c.startSpan(ctx, spanAcquire)
	if span != nil {
		setLockProperties(span, pk, o.SortKey, c.opts.OwnerName)
	}
	a := &acquisition{retryLoop: retryLoop{c: c, once: once, start: c.clock.Monotonic()}, pk: pk, opts: o, id: lockID(pk, o.SortKey)}
	a.seen, a.seenAt = c.observations.get(a.id)
	if o.FairWaiting && !once && o.RetryTimeout > 0 {
		// A call that makes one attempt (a try, or a zero retry
		// timeout) does not wait, and takes no place in line.
		a.line = c.newLine(pk, o.SortKey, o.RetryPeriod, a.start+o.RetryTimeout)
	}
	a.kw, a.lastCall = c.waiters.join(a.id)
	defer c.waiters.leave(a.id, a.kw)
	lock, err := a.run(ctx, a, &a.opts)
	a.line.leave() // won or not, the ticket has served
	c.opts.Metrics.AcquireFinished(c.clock.Monotonic()-a.start, a.attempts, err)
	if span != nil {
		endAcquireSpan(span, a.attempts, lock, err)
	}
	return lock, err
}

// acquireSettings applies opts to the client's defaults for an acquire.
func (c *Client) acquireSettings(opts []AcquireOption) acquireOptions {
	o := acquireOptions{
		SortKey:      DefaultSortKey,
		RetryPeriod:  c.opts.HeartbeatPeriod,
		RetryTimeout: c.opts.LeaseDuration + c.opts.HeartbeatPeriod,
	}
	if c.opts.PartitionKeyOnly {
		o.SortKey = ""
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// checkKeyValue refuses, as setting, a key value that DynamoDB would
// refuse with a ValidationException: empty, longer than limit bytes, or
// not UTF-8.
func checkKeyValue(setting, v string, limit int) error {
	switch {
	case v == "":
		return invalidArg(setting, "must not be empty")
	case len(v) > limit:
		return invalidArg(setting, fmt.Sprintf("is %d bytes, over DynamoDB's %d", len(v), limit))
	case !utf8.ValidString(v):
		return invalidArg(setting, "is not valid UTF-8")
	}
	return nil
}

// checkItemKey refuses, before any call, the key of an item that a read
// or a forced release names (sk already defaulted), which DynamoDB would
// refuse: the table was not at fault. Reserved prefixes are allowed:
// operators read and remove session items and lines too.
func (c *Client) checkItemKey(pk, sk string) error {
	err := checkKeyValue("PartitionKey", pk, maxPartitionKeyBytes)
	if c.opts.PartitionKeyOnly {
		return err
	}
	return errors.Join(err, checkKeyValue("SortKey", sk, maxSortKeyBytes))
}

func (c *Client) checkAcquire(pk string, o *acquireOptions) error {
	var errs []error
	checkKey := func(setting, v string, limit int) {
		if err := checkKeyValue(setting, v, limit); err != nil {
			errs = append(errs, err)
		}
	}
	checkKey("PartitionKey", pk, maxPartitionKeyBytes)
	if strings.HasPrefix(pk, sessionKeyPrefix) {
		errs = append(errs, invalidArg("PartitionKey", fmt.Sprintf("keys starting with %q are reserved for session items", sessionKeyPrefix)))
	}
	if isLineKey(pk) {
		errs = append(errs, invalidArg("PartitionKey", fmt.Sprintf("keys starting with %q or %q are reserved for lines of fair waiters", lineKeyPrefix, ticketKeyPrefix)))
	}
	if o.FairWaiting {
		if err := checkLineKey(pk); err != nil {
			errs = append(errs, err)
		}
	}
	if !c.opts.PartitionKeyOnly {
		checkKey("SortKey", o.SortKey, maxSortKeyBytes)
	} else if o.SortKey != "" {
		errs = append(errs, invalidArg("SortKey", "the client's table has no sort key"))
	}
	if o.RetryPeriod <= 0 {
		errs = append(errs, invalidArg("RetryPeriod", fmt.Sprintf("must be positive, got %v", o.RetryPeriod)))
	}
	if o.RetryTimeout < 0 {
		errs = append(errs, invalidArg("RetryTimeout", fmt.Sprintf("must not be negative, got %v", o.RetryTimeout)))
	}
	for name, v := range o.AdditionalAttributes {
		switch {
		case c.codec.reserved(name):
			errs = append(errs, invalidArg("AdditionalAttributes", fmt.Sprintf("%q is an attribute of the lock itself", name)))
		case name == "":
			errs = append(errs, invalidArg("AdditionalAttributes", "an attribute name is empty"))
		case v == nil:
			errs = append(errs, invalidArg("AdditionalAttributes", fmt.Sprintf("%q has a nil value", name)))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

// acquisition is one AcquireLock call in progress.
type acquisition struct {
	retryLoop
	pk   string
	id   string
	opts acquireOptions

	// What the last look at the table showed: an item with this record
	// version number, first seen at seenAt (monotonic); nil when there
	// was none.
	seen   *LockInfo
	seenAt time.Duration
	// For a lock attached to a session: when the last read of the
	// session item was sent, on the wall clock.
	sessionReadWall time.Time
	// fast: what was seen is taken over by its holder's stamp, not for
	// having been watched a whole lease (set by mayWrite).
	fast bool
	// When the look that showed seen was made: monotonic (after the
	// reply) and wall clock. The lock's expiry is judged as of then.
	lookAt   time.Duration
	lookWall time.Time

	// The waiters of this key in this client (waiters.go), for
	// AcquireLock and TryAcquireLock: kw is nil for a semaphore's slots.
	kw       *keyWait
	lastCall uint64          // the latest of kw's looks this acquisition made or used (at first: the latest before it came)
	call     uint64          // the number of this acquisition's call in flight, or of its last
	handoff  <-chan struct{} // closed when this client releases the key
	callEnd  <-chan struct{} // closed when the call of another waiter ends
	readSent time.Duration   // when this acquisition's last read of the item was sent
	// backoffErr is the throttle that the key's reads are backing off from.
	backoffErr error
}

// attempt makes one try. It returns the lock when acquired, an error
// when the acquire must end, and neither when it should wait and retry.
// Which call it makes, if any, the key's waiters decide between them
// (waiters.go): one call for the key at a time, one read per retry
// period, one put per look that shows the lock free.
func (a *acquisition) attempt(ctx context.Context) (*Lock, error) {
	if a.line != nil {
		// A fair waiter tries only in its turn (line.go); one that would
		// only be told ALREADY_HELD takes no place in line.
		if !a.opts.WaitOnOwn && a.c.holds(a.id) {
			return nil, a.fail(CodeAlreadyHeld, "this client holds the lock already: release it first, or go on using it", nil)
		}
		if mine, err := a.line.turn(ctx, a.lockLook); err != nil || !mine {
			if err != nil {
				return nil, a.callError(ctx, "waiting in line", err)
			}
			return nil, nil
		}
	}
	for {
		switch a.c.waiters.next(a) {
		case stepOwn:
			if !a.opts.WaitOnOwn {
				// Checked at every attempt, not only the first: a
				// concurrent acquire of the same key by this client may
				// have won meanwhile.
				return nil, a.fail(CodeAlreadyHeld, "this client holds the lock already: release it first, or go on using it", nil)
			}
			return nil, nil // woken by its release
		case stepWait:
			if !a.once {
				return nil, nil // woken when the call ends
			}
			// TryAcquireLock answers from that call's outcome.
			select {
			case <-a.callEnd:
			case <-ctx.Done():
				return nil, contextError(ctx, a.fail)
			case <-a.c.ctx.Done():
				return nil, a.fail(CodeClientShutdown, "the client was closed while acquiring", nil)
			}
		case stepHeld:
			return nil, nil
		case stepBackoff:
			return nil, &backingOff{a.backoffErr}
		case stepRead:
			return a.readThenPut(ctx)
		case stepPut:
			return a.putOnLook(ctx, false)
		}
	}
}

// readThenPut reads the item, and puts when what it shows can be taken:
// someone held the lock when we last looked, so waiting costs reads only.
func (a *acquisition) readThenPut(ctx context.Context) (*Lock, error) {
	a.readSent = a.c.clock.Monotonic()
	info, err := a.c.readItem(ctx, a.pk, a.opts.SortKey)
	if err == nil {
		err = a.look(ctx, info)
	} else {
		err = a.callError(ctx, "reading the lock", err)
	}
	if err != nil {
		a.c.waiters.done(a, false, false, true, err, err)
		return nil, err
	}
	if !a.mayWrite() {
		a.c.waiters.done(a, true, false, true, nil, nil)
		return nil, nil // held, and not yet silent for a whole lease
	}
	return a.putOnLook(ctx, true)
}

// putOnLook puts our lock on what was seen last, and once more should
// the put lose to something that can be taken now: the item was
// released, deleted, or is stale by its holder's stamp. What a lost put
// found becomes the key's latest look.
func (a *acquisition) putOnLook(ctx context.Context, read bool) (lock *Lock, err error) {
	defer func() {
		a.c.waiters.done(a, lock == nil && err == nil, true, read, nil, nil)
	}()
	lock, err = a.putWithSession(ctx)
	if lock != nil || err != nil || !a.mayWrite() {
		return lock, err
	}
	return a.putWithSession(ctx)
}

// putWithSession puts our lock; with sessions, once more should the
// session it named end in the meantime (its item was removed, say): the
// lock was given back at once, and goes on a new session.
func (a *acquisition) putWithSession(ctx context.Context) (*Lock, error) {
	for tries := 0; ; tries++ {
		lock, err := a.put(ctx)
		if err != errSessionEnded {
			return lock, err
		}
		if tries == 2 {
			return nil, a.fail(CodeUnknown, "the client's session kept ending while acquiring", nil)
		}
	}
}

// look records what a look at the table showed. For a lock attached to
// a session it reads the session item too (Client.watchSession).
func (a *acquisition) look(ctx context.Context, info *LockInfo) error {
	if info != nil && info.Session != nil && !info.Released {
		readWall, read, err := a.c.watchSession(ctx, info)
		if err != nil {
			return a.callError(ctx, "reading the lock's session", err)
		}
		if read {
			a.sessionReadWall = readWall
		}
	}
	a.observe(info)
	return nil
}

// observe records what a look at the table showed, here and in the
// client's memory of observations. A lock attached to a session is
// timed by its session's record instead (see expired), but what was seen
// of it is kept all the same: a takeover's put is conditioned on it.
func (a *acquisition) observe(info *LockInfo) {
	now := a.c.clock.Monotonic()
	a.lookAt, a.lookWall = now, a.c.clock.Now()
	switch {
	case info == nil:
		a.seen = nil
	case a.seen != nil && a.seen.RecordVersionNumber == info.RecordVersionNumber:
		a.seen = info // same version: keep the time it was first seen
	default:
		// New to this acquire; another acquire of this client (a
		// waiter of the same key, an earlier call) may have seen it
		// first, and its sight counts as well as ours.
		a.seen, a.seenAt = info, now
		if prior, at := a.c.observations.get(a.id); prior != nil && prior.RecordVersionNumber == info.RecordVersionNumber {
			a.seenAt = min(at, now)
		}
	}
	if a.seen == nil {
		a.c.observations.forget(a.id)
	} else {
		a.c.observations.remember(a.id, a.seen, a.seenAt)
	}
}

// mayWrite reports whether a put can succeed on what was last seen, and
// notes whether a takeover would be a fast one (by stamp).
func (a *acquisition) mayWrite() bool {
	a.fast = false
	switch {
	case a.seen == nil || a.seen.Released || a.expired():
		return true
	case a.staleByStamp():
		a.fast = true
		return true
	}
	return false
}

// expired: the same version number has stood for the item's whole
// lease; for a lock attached to a session, its session is dead
// (Client.sessionExpired).
func (a *acquisition) expired() bool {
	if a.seen.Session != nil {
		return a.c.sessionExpired(a.seen)
	}
	return a.lookAt-a.seenAt >= a.seen.LeaseDuration
}

// adopt takes a look that another waiter of the key made (or a release
// by this client) as this acquisition's own: what it showed, when its
// version was first seen, and when it was made, as of which the lock's
// expiry is judged.
func (a *acquisition) adopt(l *look) {
	seenAt := l.seenAt
	if a.seen != nil && l.info != nil && a.seen.RecordVersionNumber == l.info.RecordVersionNumber {
		seenAt = min(seenAt, a.seenAt)
	}
	a.seen, a.seenAt = l.info, seenAt
	a.lookAt, a.lookWall, a.sessionReadWall = l.at, l.wall, l.sessionReadWall
}

// staleByStamp: fast takeover by the holder's wall-clock stamp; for a
// lock attached to a session, by its session's (Client.sessionStale).
func (a *acquisition) staleByStamp() bool {
	skew := a.c.opts.MaxClockSkew
	if skew <= 0 || a.seen.HeartbeatTime.IsZero() {
		return false
	}
	if a.seen.Session != nil {
		return a.c.sessionStale(a.seen, a.sessionReadWall, skew)
	}
	return a.lookWall.After(a.seen.HeartbeatTime.Add(a.seen.LeaseDuration + skew))
}

// put writes our lock: a new item when none was seen, or over the seen
// one, conditioned on its version number being unchanged.
func (a *acquisition) put(ctx context.Context) (*Lock, error) {
	c := a.c
	unreserve, refused := c.reserveHeartbeat()
	if refused != "" {
		return nil, a.fail(CodeTooManyLocks, refused, nil)
	}
	defer unreserve()
	now := c.clock.Now()
	var sess *session
	if c.opts.SessionLease {
		var err error
		if sess, err = a.liveSession(ctx); err != nil {
			return nil, err
		}
	}
	info := a.lockItem(now, sess)
	var takenFrom *LockInfo
	var in *dynamodb.PutItemInput
	if a.seen == nil {
		in = c.wire().PutNew(c.codec.encode(info), true)
	} else {
		if !a.seen.Released {
			takenFrom = a.seen
		}
		in = c.wire().PutOver(c.codec.encode(info), a.seen.RecordVersionNumber, true)
	}
	fast := takenFrom != nil && a.fast
	sent := c.clock.Monotonic()
	_, err := c.ddb.PutItem(ctx, in, c.callOpts("PutItem")...)
	if err == nil {
		return a.won(info, sess, sent, takenFrom, fast)
	}
	failedOn, failed := wire.FailedItem(err)
	if !failed && wire.TransactionConflict(err) && !wire.OutcomeUnknown(err) {
		// A set's transaction (AcquireLocks) on this key was under way:
		// nothing was written, and the key is likely being taken. The
		// next attempt reads it again.
		return nil, a.fail(CodeTransactionConflict, "a transaction that writes the lock was under way: nothing was written", err)
	}
	if !failed {
		if wire.OutcomeUnknown(err) {
			// The put may have landed (a lost reply, a cancel in flight):
			// take back what we may have written, so that nobody waits a
			// lease on a lock that nobody holds. A put that never left
			// (nothing listening, no such host) needs no clean-up.
			c.deleteIfOurs(info, sess)
		}
		return nil, a.callError(ctx, "writing the lock", err)
	}
	// Someone else holds it, or won the race. Servers that implement
	// ReturnValuesOnConditionCheckFailure hand us the item; others make
	// us read it.
	var current *LockInfo
	if failedOn != nil {
		if current, err = c.codec.decode(failedOn); err != nil {
			return nil, err
		}
	} else if current, err = c.readItem(ctx, a.pk, a.opts.SortKey); err != nil {
		return nil, a.callError(ctx, "reading the lock", err)
	}
	if current != nil && current.RecordVersionNumber == info.RecordVersionNumber {
		// Our own write: its reply was lost and the SDK's retry failed
		// the condition on the item that write made.
		return a.won(info, sess, sent, takenFrom, fast)
	}
	return nil, a.look(ctx, current)
}

// liveSession returns the client's session for a lock about to be put
// on it, or the error that keeps the put from being made: a lock on the
// session is safe only as long as the session is (lock.go), and one put
// on a session past its safe period would be in danger from the start.
// The acquire then waits for a heartbeat of the session to land, or for
// the session to end and a new one to start.
func (a *acquisition) liveSession(ctx context.Context) (*session, error) {
	c := a.c
	sess, err := c.liveSession(ctx)
	if err != nil {
		return nil, a.callError(ctx, "starting the client's session", err)
	}
	if since := c.clock.Monotonic() - sess.lastGoodSent(); since > c.opts.SafePeriod {
		return nil, a.fail(CodeLockInDanger, fmt.Sprintf("the client's session has had no heartbeat land for %v, more than the safe period: no lock is put on it until one lands", since), errSessionInDanger)
	}
	return sess, nil
}

// lockItem is the item that acquires the lock, written at now: on sess
// when it is not nil, over what was seen last (a.seen).
func (a *acquisition) lockItem(now time.Time, sess *session) *LockInfo {
	c := a.c
	info := &LockInfo{
		PartitionKey:         a.pk,
		SortKey:              a.opts.SortKey,
		OwnerName:            c.opts.OwnerName,
		LeaseDuration:        c.opts.LeaseDuration,
		RecordVersionNumber:  wire.NewRecordVersionNumber(),
		ExpiryTime:           now.Add(c.opts.ExpiryPeriod),
		AdditionalAttributes: a.opts.AdditionalAttributes,
		Tenure:               wire.NewRecordVersionNumber(),
	}
	if c.opts.MaxClockSkew > 0 {
		info.HeartbeatTime = now
	}
	if sess != nil {
		// Written once, never heartbeated: the lease that clients
		// which do not know sessions read keeps them away (see
		// session.go), and so does the TTL.
		info.LeaseDuration = sessionLockLease
		info.ExpiryTime = now.Add(sessionLockLease)
		info.Session = &SessionInfo{PartitionKey: sess.pk, LeaseDuration: sess.lease}
	}
	// The fencing token counts acquisitions of the key. It goes on even
	// when this client does not ask for tokens, so that no client breaks
	// another's count by overwriting the item. A count that has to start
	// afresh (a new key, or an item whose count was lost to a Python
	// client's overwrite or to TTL clean-up) starts at the wall clock in
	// microseconds, above every token of an earlier count as long as the
	// hosts' clocks agree to within the time the count was lost for.
	if prior := a.seen; prior != nil && prior.FencingToken > 0 {
		info.FencingToken = prior.FencingToken + 1
	} else if c.opts.FencingTokens {
		info.FencingToken = max(now.UnixMicro(), 1)
	}
	return info
}

// won turns a successful write into a held lock.
func (a *acquisition) won(info *LockInfo, sess *session, sent time.Duration, takenFrom *LockInfo, fast bool) (*Lock, error) {
	c := a.c
	c.observations.forget(a.id)
	if takenFrom != nil && takenFrom.Session != nil {
		if !fast && sent-a.start < sessionLeaseOf(takenFrom) {
			c.stats.deadSessionLocks.Add(1) // the session's watch was shared
		}
		c.deleteDeadSession(takenFrom.Session.PartitionKey)
	}
	l := &Lock{
		client:        c,
		id:            a.id,
		pk:            info.PartitionKey,
		sk:            info.SortKey,
		owner:         info.OwnerName,
		lease:         info.LeaseDuration,
		attrs:         info.AdditionalAttributes,
		token:         info.FencingToken,
		tenure:        info.Tenure,
		takenFrom:     takenFrom,
		callback:      a.opts.Callback,
		fast:          fast,
		acquired:      sent,
		traceCtx:      a.opts.traceCtx,
		status:        StatusLocked,
		hb:            hbState{rvn: info.RecordVersionNumber},
		expiry:        info.ExpiryTime,
		lastHeartbeat: sent,
		session:       sess,
		done:          make(chan struct{}),
	}
	if err := c.register(l); err != nil {
		c.deleteIfOurs(info, sess)
		if err == errSessionEnded {
			a.seen = nil // given back: try afresh, on a new session
			return nil, err
		}
		return nil, a.fail(CodeClientShutdown, "the client was closed while acquiring", nil)
	}
	if takenFrom != nil {
		c.opts.Metrics.LockTakenOver(fast)
		c.log.Info("ddblock: took over a lock from a holder presumed dead", "key", l.pk, "sort_key", l.sk,
			"previous_owner", takenFrom.OwnerName, "fast", fast)
	}
	return l, nil
}

// deleteDeadSession deletes the item of session pk, judged dead, on the
// condition that it still carries the version number that was judged, so
// that dead clients' session items do not pile up where no TTL removes
// them. It is done once per judgement, by the first acquire to take a
// lock of the session over, best effort. Waiters of other clients that
// were watching the item see it gone, and wait a session lease from then.
func (c *Client) deleteDeadSession(pk string) {
	version, ok := c.observations.claimSessionDelete(pk)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	err := c.deleteItem(ctx, pk, c.defaultSortKey(""), version)
	switch {
	case err == nil:
		c.log.Info("ddblock: deleted the item of a session presumed dead", "session", pk)
	case wire.ConditionFailed(err):
		// Heartbeated after all (its holder then counts its locks lost),
		// or deleted by someone else.
	default:
		c.log.Warn("ddblock: could not delete the item of a session presumed dead", "session", pk, "err", err)
	}
}

// deleteIfOurs removes an item we wrote but will not hold, best effort,
// on a context of its own: the caller's may be cancelled already. An
// item written on a session (sess) that could not be removed is left to
// the session, which removes it after a later heartbeat: while the
// session lives, nothing else would.
func (c *Client) deleteIfOurs(info *LockInfo, sess *session) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	counted := info.FencingToken > 0
	if err := c.giveBack(ctx, info.PartitionKey, info.SortKey, info.RecordVersionNumber, counted); err != nil && !wire.ConditionFailed(err) {
		c.log.Warn("ddblock: could not remove an abandoned acquire", "key", info.PartitionKey, "sort_key", info.SortKey, "err", err)
		if sess != nil {
			sess.leave(leftover{pk: info.PartitionKey, sk: info.SortKey, rvn: info.RecordVersionNumber, counted: counted})
		}
	}
}

// heldError is the answer of an acquire whose attempts ran out with the
// lock held: LOCK_HELD for TryAcquireLock, ACQUIRE_TIMEOUT for
// AcquireLock.
func (a *acquisition) heldError() error {
	switch {
	case a.once && a.seen != nil:
		return a.fail(CodeLockHeld, fmt.Sprintf("the lock is held by %q (lease %v)", a.seen.OwnerName, a.seen.LeaseDuration), nil)
	case a.once:
		return a.fail(CodeLockHeld, "the lock is held", nil)
	default:
		return a.fail(CodeAcquireTimeout, fmt.Sprintf("not acquired within %v", a.opts.RetryTimeout), nil)
	}
}

// errSessionInDanger is the cause of an acquire attempt that found the
// client's own session in danger; the next attempt may find it well.
var errSessionInDanger = errors.New("ddblock: the client's session is in danger")

// transient reports whether a failed call is worth another attempt:
// throttling, a server error, a timeout or a lost connection, the
// client's own session in danger, or a set's transaction cancelled by
// conflicts (lockset.go).
func transient(err error) bool {
	if errors.Is(err, errSessionInDanger) || CodeOf(err) == CodeTransactionConflict {
		return true
	}
	var lerr *Error
	if !errors.As(err, &lerr) || lerr.Code != CodeUnknown || lerr.Err == nil {
		return false
	}
	return wire.Transient(lerr.Err)
}

// callError classifies a failed DynamoDB call made while acquiring.
func (a *acquisition) callError(ctx context.Context, doing string, err error) error {
	return a.c.classifyCallError(ctx, a.fail, doing, err, a.pk, a.opts.SortKey)
}

func (a *acquisition) retryingAfter(err error) {
	a.c.log.Warn("ddblock: acquire attempt failed; will retry", "key", a.pk, "sort_key", a.opts.SortKey, "err", err)
}

func (a *acquisition) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: msg, PartitionKey: a.pk, SortKey: a.opts.SortKey, Err: cause}
}

// holds reports whether this client holds the lock of id (its exact
// partition and sort key). A semaphore's slots each have their own key,
// so holding one slot says nothing of the others.
func (c *Client) holds(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.locks[id] != nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// WithLock is the Go form of Python's `with client.acquire_lock(key):`.
// It acquires the lock, runs fn, and releases the lock (best effort)
// however fn ends.
//
// fn's context is cancelled the moment the lock is stolen, goes into
// danger, or the client closes; context.Cause gives the lock's error.
// WithLock returns fn's error unchanged. If fn returns nil although the
// lock was lost while it ran, WithLock returns the lock's error: the work
// may not have been exclusive.
func (c *Client) WithLock(ctx context.Context, partitionKey string, fn func(ctx context.Context, lock *Lock) error, opts ...AcquireOption) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	if fn == nil {
		return invalidArg("fn", "must not be nil")
	}
	lock, err := c.AcquireLock(ctx, partitionKey, opts...)
	if err != nil {
		return err
	}
	lockCtx, cancel := lock.Context(ctx)
	defer func() {
		cancel()
		// Release even when the caller's context is done.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HeartbeatTimeout)
		defer rcancel()
		_ = c.ReleaseLock(rctx, lock)
	}()
	err = fn(lockCtx, lock)
	if err == nil {
		if lerr := lock.Err(); CodeOf(lerr) == CodeLockStolen || CodeOf(lerr) == CodeLockInDanger {
			err = lerr
		}
	}
	return err
}
