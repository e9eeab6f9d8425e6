package ddblock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
	"golang.org/x/sync/errgroup"
)

// Several locks at once, all or none. AcquireLocks writes every lock
// item of the set in one DynamoDB transaction (TransactWriteItems), each
// put conditioned exactly as a single acquire's put is: on no item at the
// key, or on the version number seen and judged free, released or
// expired by the single-lock rule (acquire.go). DynamoDB commits all the
// puts or none, so no other client ever sees part of a set held, and a
// waiter holds nothing while it waits: two callers wanting the same keys
// in any order cannot deadlock.
//
// Each item of a set is an ordinary lock item: heartbeated, released and
// taken over one by one, by this library and by python_dynamodb_lock
// alike.
//
// A set that waits fairly (WithFairWaiting) stands in the lines of its
// keys (line.go) one after another, in one order for every set: by lock
// id. It takes a number in the line of its next key only once it heads
// the line of the key before, and keeps the head of every earlier line
// while it waits in the later ones: a reservation, not a lock (no lock
// item is written; the others of those lines wait behind it). Heading
// every line, it tries the set by the rule above, headPolls times a
// period, and hands every line on once it won or gave up. Should it lose
// the head of a line (skipped, or the line reset), it comes again at that
// line's back and gives up its places in every later line.
//
// No deadlock: a set waits only in the line of a key ordered after every
// key whose line it heads, so a chain of waiters, each waiting in a line
// that the next heads, climbs the order and ends at a waiter that heads
// every line it needs (a set, or a single key's head): that one tries,
// and wins once the holders (which the lines do not wait for) let go.
// Those behind a set's head do not skip it for leaving its lock free
// while its session lives, for up to its retry timeout more than a
// single head's grace (the ticket's set wait); a dead set's tickets go
// with its session, as any dead waiter's. Safety rests on the
// transaction alone, as without lines.

// maxSetKeys is the most keys one transaction can put: DynamoDB's limit
// of 100 actions a transaction.
const maxSetKeys = 100

// LockSet is the locks that [Client.AcquireLocks] took together, one
// [*Lock] per key, each an ordinary lock in every respect: heartbeated on
// its own (or by its session), with its own Done, Err, callbacks,
// fencing token and guard. They were acquired at once; they may be lost
// one by one (a lock stolen, in danger), so work that needs the whole
// set watches [LockSet.Context]. A nil or zero LockSet holds no locks.
type LockSet struct {
	locks []*Lock
}

// Locks returns the set's locks, in the order of the keys given to
// AcquireLocks.
func (s *LockSet) Locks() []*Lock {
	if s == nil {
		return nil
	}
	return slices.Clone(s.locks)
}

// Context returns a context that is cancelled, as [Lock.Context]'s is,
// the moment any lock of the set is released, stolen, goes into danger
// or its client closes; context.Cause gives that lock's error. Its Err
// checks every lock's clock, as Lock.Err does: right after a pause past
// a lock's safe period it is not nil, even before the client's monitor
// has run. Call cancel when the work is done.
func (s *LockSet) Context(parent context.Context) (ctx context.Context, cancel context.CancelFunc) {
	if s == nil || len(s.locks) == 0 {
		return cancelledContext(invalidArg("LockSet", "holds no locks: it was not made by AcquireLocks")), func() {}
	}
	if err := checkContext(parent); err != nil {
		return cancelledContext(err), func() {}
	}
	inner, cancelCause := context.WithCancelCause(parent)
	stops := make([]func(), 0, len(s.locks))
	for _, l := range s.locks {
		lctx, lcancel := l.Context(inner)
		stop := context.AfterFunc(lctx, func() { cancelCause(context.Cause(lctx)) })
		stops = append(stops, func() { stop(); lcancel() })
	}
	return setContext{Context: inner, locks: s.locks, cancel: cancelCause}, func() {
		for _, stop := range stops {
			stop()
		}
		cancelCause(context.Canceled)
	}
}

// setContext is the context LockSet.Context returns. A context derived
// from several locks' contexts would check only the last one's clock in
// its Err; this one checks each lock's, and ends at once when one is not
// held.
type setContext struct {
	context.Context
	locks  []*Lock
	cancel context.CancelCauseFunc
}

func (c setContext) Err() error {
	for _, l := range c.locks {
		if err := l.Err(); err != nil {
			c.cancel(err)
			break
		}
	}
	return c.Context.Err()
}

// Release gives back every lock of the set, at the same time, each as
// [Lock.Release] does (opts apply to each). The locks are given back one
// by one, not in one transaction: a set partly released is only fewer
// locks held. With WithBestEffort(false) the errors of the locks that
// could not be given back are joined.
func (s *LockSet) Release(ctx context.Context, opts ...ReleaseOption) error {
	if s == nil || len(s.locks) == 0 {
		return invalidArg("LockSet", "holds no locks: it was not made by AcquireLocks")
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	errs := make([]error, len(s.locks))
	var wg sync.WaitGroup
	for i, l := range s.locks {
		wg.Go(func() { errs[i] = l.Release(ctx, opts...) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// GuardedWrite runs the caller's TransactWriteItems guarded by every lock
// of the set at once: one guard per lock (see [Lock.Guard]) in front of
// the caller's actions, in one transaction that commits only if, at the
// instant DynamoDB commits it, every lock item still names its lock's
// tenure. The caller gives at most 100 actions less one per lock. The
// errors are [Lock.GuardedWrite]'s; a guard that failed is reported by
// its lock (the error's keys), and [GuardedWriteError].GuardReason is the
// first failed guard's reason.
func (s *LockSet) GuardedWrite(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if s == nil || len(s.locks) == 0 {
		return nil, &Error{Code: CodeLockNotHeld, Message: "the lock set holds no locks: it was not made by AcquireLocks"}
	}
	return guardedWrite(ctx, s.locks, in, optFns)
}

// AcquireLocks takes the locks on several partition keys at once, all or
// none, in one DynamoDB transaction: up to 100 keys, in the client's
// table, each with the sort key of the options (the default "-"). Each
// key is judged by the rule of a single [Client.AcquireLock]: free, or
// released, or held by a holder presumed dead (its item unchanged for
// its lease, its session dead, or stale by its stamp with
// [Options.MaxClockSkew]). When every key can be taken, one transaction
// puts every lock item, each conditioned on what was seen at its key; if
// any condition fails, nothing is written, and the call waits and looks
// again.
//
// It waits, polls and times out as AcquireLock does (WithRetryPeriod,
// WithRetryTimeout, the context), and holds no key while it waits: two
// callers that want overlapping keys in any order never deadlock. The
// first attempt puts the set at once (unless this client has seen one
// of its keys held), so an uncontended call is one TransactWriteItems.
// Every later attempt reads every key, at the same time (a GetItem
// each), and sends the transaction only when all of them can be taken:
// while a transaction is under way on a held item, DynamoDB refuses its
// holder's heartbeat and release, which then try again. A
// key that a concurrent transaction or write is changing cancels the
// transaction with TransactionConflict: it is sent again, at most twice,
// after a short random pause, and then at the next attempt.
//
// A transaction whose reply was lost is sent again with the same client
// request token, which DynamoDB applies once within ten minutes and
// answers with success if the first committed; failing that, the items
// are read, and any item carrying this call's version number means the
// whole set was written. Only when none does is the set deemed not
// written, and what the lost transaction might still write is deleted,
// as after a single acquire's lost put.
//
// Errors: those of AcquireLock, and CodeTransactionsUnsupported when the
// server (dynalite, for one) or the DynamoDBAPI given to [New] has no
// TransactWriteItems, before anything is written. CodeInvalidArgument,
// before any call, for no keys, a key twice, more than 100 keys, a
// key AcquireLock would refuse. A key this client holds already is
// CodeAlreadyHeld (with [WithWaitOnOwn], waited for).
//
// With [WithFairWaiting] the set waits its turn in the line of each of
// its keys, in an order of its own (every set climbs the lines in the
// same order, so that none deadlocks), and keeps its turn at the front
// of the lines of the keys it reached while it waits for the others: a
// stream of fair waiters of its keys does not starve it. Meanwhile the
// fair waiters behind it in those lines wait, their keys free or not,
// for up to the set's retry timeout longer than fair waiting otherwise
// bounds their wait (doc/waiting.md).
//
// A single key is acquired exactly as AcquireLock acquires it (one
// PutItem, no transaction; WithFairWaiting allowed).
func (c *Client) AcquireLocks(ctx context.Context, partitionKeys []string, opts ...AcquireOption) (*LockSet, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if len(partitionKeys) == 1 {
		lock, err := c.acquire(ctx, partitionKeys[0], false, opts)
		if err != nil {
			return nil, err
		}
		return &LockSet{locks: []*Lock{lock}}, nil
	}
	o := c.acquireSettings(opts)
	if err := c.checkSet(partitionKeys, &o); err != nil {
		return nil, err
	}
	o.traceCtx = c.traceCtx(ctx)
	ctx, span := c.startSpan(ctx, spanAcquire)
	if span != nil {
		setLockProperties(span, strings.Join(partitionKeys, ","), o.SortKey, c.opts.OwnerName)
	}
	m := &setAcquire{retryLoop: retryLoop{c: c, start: c.clock.Monotonic()}, opts: o}
	for _, pk := range partitionKeys {
		a := &acquisition{retryLoop: m.retryLoop, pk: pk, opts: o, id: lockID(pk, o.SortKey)}
		a.seen, a.seenAt = c.observations.get(a.id)
		m.keys = append(m.keys, a)
	}
	if o.FairWaiting && o.RetryTimeout > 0 {
		// A call that makes one attempt takes no place in line, as for
		// a single key.
		m.order = make([]int, len(m.keys))
		for i := range m.order {
			m.order[i] = i
		}
		slices.SortFunc(m.order, func(i, j int) int { return strings.Compare(m.keys[i].id, m.keys[j].id) })
		m.lines = make([]*line, len(m.keys))
		for i := range m.lines {
			m.lines[i] = m.newLine(i)
		}
	}
	_, err := m.run(ctx, m, &m.opts)
	for _, l := range m.lines {
		l.leave() // won or not, the places have served
	}
	c.opts.Metrics.AcquireFinished(c.clock.Monotonic()-m.start, m.attempts, err)
	if span != nil {
		var first *Lock
		if err == nil {
			first = m.won[0]
		}
		endAcquireSpan(span, m.attempts, first, err)
	}
	if err != nil {
		return nil, err
	}
	return &LockSet{locks: m.won}, nil
}

// checkSet refuses, before any call, a set that cannot be acquired.
func (c *Client) checkSet(pks []string, o *acquireOptions) error {
	switch {
	case len(pks) == 0:
		return invalidArg("PartitionKeys", "name at least one key")
	case len(pks) > maxSetKeys:
		return invalidArg("PartitionKeys", fmt.Sprintf("%d keys: one transaction takes at most %d", len(pks), maxSetKeys))
	}
	var errs []error
	seen := make(map[string]bool, len(pks))
	for i, pk := range pks {
		if seen[pk] {
			errs = append(errs, invalidArg(fmt.Sprintf("PartitionKeys[%d]", i), fmt.Sprintf("%s is named twice", quoteKey(pk))))
			continue
		}
		seen[pk] = true
		if err := c.checkAcquire(pk, o); err != nil {
			errs = append(errs, fmt.Errorf("PartitionKeys[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// setAcquire is one AcquireLocks call in progress: one acquisition per
// key keeps what was seen of it and judges it by the single-lock rule.
type setAcquire struct {
	retryLoop
	opts acquireOptions
	keys []*acquisition
	won  []*Lock
	// conflicted: the last transaction was cancelled by a conflict.
	conflicted bool
	// Fair waiting: lines[i] is the set's place in the line of key
	// keys[order[i]], the keys by lock id, the order every set climbs
	// in. The set heads lines[:at] and waits in lines[at]; it has taken
	// no number in the lines after. retryLoop.line is the line that
	// paces the loop: the one it waits in, or the last once it heads
	// them all.
	order []int
	lines []*line
	at    int
}

// newLine makes the set's place in the i-th line it climbs.
func (m *setAcquire) newLine(i int) *line {
	a := m.keys[m.order[i]]
	l := m.c.newLine(a.pk, m.opts.SortKey, m.opts.RetryPeriod, m.start+m.opts.RetryTimeout)
	l.setWait = min(m.opts.RetryTimeout, maxSetWait)
	return l
}

// climb keeps the set's places in line and reports whether it heads
// every line. It confirms the head of each line it climbed (a read of
// each line at most once a retry period, as a head's), waits in the
// next, and marks each head with its ticket at once: it will wait in
// the later lines, and those behind it must see that it does.
func (m *setAcquire) climb(ctx context.Context) (bool, error) {
	for i := 0; i <= m.at && i < len(m.lines); i++ {
		l, a := m.lines[i], m.keys[m.order[i]]
		m.line = l
		if i < m.at {
			still, err := l.stillHead(ctx)
			if err != nil {
				return false, a.callError(ctx, "waiting in line", err)
			}
			if !still {
				// It lost the head of this line (skipped, or the line
				// was reset): it gives up every later place before it
				// comes again at this line's back, never to hold a
				// place in a later line while it waits in an earlier
				// one.
				for j := i + 1; j < len(m.lines); j++ {
					m.lines[j].leave()
					m.lines[j] = m.newLine(j)
				}
				m.at = i
			}
		}
		if i == m.at {
			mine, err := l.turn(ctx, a.lockLook)
			if err != nil {
				return false, a.callError(ctx, "waiting in line", err)
			}
			if !mine {
				return false, nil
			}
			m.at++
		}
		if i < len(m.lines)-1 && !l.written {
			if err := l.writeTicket(ctx); err != nil {
				return false, a.callError(ctx, "waiting in line", err)
			}
		}
	}
	return m.at == len(m.lines), nil
}

// attempt reads every key (but at the first attempt) and, when every key
// can be taken, puts the whole set. It returns the first lock of the set
// when won (the set is in m.won).
func (m *setAcquire) attempt(ctx context.Context) (*Lock, error) {
	for _, a := range m.keys {
		if m.c.holds(a.id) {
			if m.opts.WaitOnOwn {
				return nil, nil
			}
			return nil, a.fail(CodeAlreadyHeld, "this client holds the lock already: release it first, or go on using it", nil)
		}
	}
	if m.lines != nil {
		if mine, err := m.climb(ctx); err != nil || !mine {
			return nil, err
		}
	}
	// The first attempt puts at once unless this client has seen one of
	// the keys held: like a single acquire, an uncontended call is one
	// write. Later ones read every key first.
	if m.attempts > 1 || !m.allMayWrite() {
		if err := m.lookAtAll(ctx); err != nil {
			return nil, err
		}
	}
	if !m.allMayWrite() {
		return nil, nil
	}
	var backoff conflictBackoff
	for tries := 0; ; tries++ {
		won, err := m.put(ctx)
		switch {
		case won:
			return m.won[0], nil
		case err != nil:
			return nil, err
		case !m.conflicted:
			return nil, nil // held: wait and look again
		case tries == 2:
			// Transient: the retry loop tries again at the next attempt.
			return nil, m.fail(CodeTransactionConflict, "other writes kept changing the keys' items while the set was put", nil)
		}
		// Another write was changing one of the items: try again soon.
		if !backoff.wait(ctx) {
			return nil, contextError(ctx, m.fail)
		}
	}
}

// allMayWrite reports whether every key can be taken on what was seen of
// it last, and notes for each whether a takeover would be a fast one.
func (m *setAcquire) allMayWrite() bool {
	for _, a := range m.keys {
		if !a.mayWrite() {
			return false
		}
	}
	return true
}

// lookAtAll reads every key of the set, at the same time, and records
// what each read showed. Every attempt reads them all before it writes:
// a transaction sent on an older look could meet a key taken since, and
// while it is under way DynamoDB refuses that key's holder its heartbeat
// and its release (a transaction conflict).
func (m *setAcquire) lookAtAll(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, a := range m.keys {
		g.Go(func() error {
			info, err := m.c.readItem(gctx, a.pk, a.opts.SortKey)
			if err != nil {
				return a.callError(ctx, "reading the lock", err)
			}
			return a.look(gctx, info)
		})
	}
	return g.Wait()
}

// put writes the whole set in one transaction; m.conflicted reports a
// transaction cancelled by a conflict (nothing written, worth another
// try soon).
func (m *setAcquire) put(ctx context.Context) (won bool, err error) {
	c := m.c
	m.conflicted = false
	tw, ok := c.ddb.(transactWriter)
	if !ok {
		return false, m.fail(CodeTransactionsUnsupported, "the DynamoDBAPI given to New has no TransactWriteItems method", nil)
	}
	for range m.keys {
		unreserve, refused := c.reserveHeartbeat()
		if refused != "" {
			return false, m.fail(CodeTooManyLocks, refused, nil)
		}
		defer unreserve()
	}
	var sess *session
	if c.opts.SessionLease {
		if sess, err = m.keys[0].liveSession(ctx); err != nil {
			return false, err
		}
	}
	now := c.clock.Now()
	infos := make([]*LockInfo, len(m.keys))
	in := &dynamodb.TransactWriteItemsInput{
		TransactItems:      make([]types.TransactWriteItem, len(m.keys)),
		ClientRequestToken: aws.String(wire.NewRecordVersionNumber()),
	}
	for i, a := range m.keys {
		infos[i] = a.lockItem(now, sess)
		var p *dynamodb.PutItemInput
		if a.seen == nil {
			p = c.wire().PutNew(c.codec.encode(infos[i]), true)
		} else {
			p = c.wire().PutOver(c.codec.encode(infos[i]), a.seen.RecordVersionNumber, true)
		}
		in.TransactItems[i].Put = &types.Put{
			TableName:                           p.TableName,
			Item:                                p.Item,
			ConditionExpression:                 p.ConditionExpression,
			ExpressionAttributeNames:            p.ExpressionAttributeNames,
			ExpressionAttributeValues:           p.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
	}
	sent := c.clock.Monotonic()
	_, err = tw.TransactWriteItems(ctx, in, c.callOpts("TransactWriteItems")...)
	if err == nil {
		return m.win(infos, sess, sent)
	}
	if wire.OutcomeUnknown(err) {
		return m.resolve(ctx, tw, in, infos, sess, sent, err)
	}
	return m.judge(ctx, err, infos, sess, sent)
}

// judge explains a transaction that failed with an answer: cancelled
// (a condition failed, or a conflict), refused, or not supported.
func (m *setAcquire) judge(ctx context.Context, err error, infos []*LockInfo, sess *session, sent time.Duration) (bool, error) {
	if reasons, ok := wire.CancellationReasons(err); ok && len(reasons) == len(m.keys) {
		ours := false
		for i, r := range reasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				var cur *LockInfo
				var rerr error
				if len(r.Item) > 0 {
					cur, rerr = m.c.codec.decode(r.Item)
				} else {
					cur, rerr = m.c.readItem(ctx, m.keys[i].pk, m.opts.SortKey)
					if rerr != nil {
						rerr = m.keys[i].callError(ctx, "reading the lock", rerr)
					}
				}
				if rerr != nil {
					return false, rerr
				}
				if cur != nil && cur.RecordVersionNumber == infos[i].RecordVersionNumber {
					ours = true // an earlier attempt of this call committed
					continue
				}
				if err := m.keys[i].look(ctx, cur); err != nil {
					return false, err
				}
			case "TransactionConflict":
				m.conflicted = true
			}
		}
		if ours {
			return m.win(infos, sess, sent)
		}
		if m.conflicted {
			return false, nil
		}
		for _, r := range reasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return false, nil // held: wait and look again
			}
		}
		return false, m.fail(CodeUnknown, "DynamoDB cancelled the transaction: "+reasonCodes(reasons), err)
	}
	var conflict *types.TransactionConflictException
	if errors.As(err, &conflict) {
		m.conflicted = true
		return false, nil
	}
	if wire.UnsupportedOperation(err) {
		return false, m.fail(CodeTransactionsUnsupported, "the server does not implement TransactWriteItems (dynalite does not): a set of keys needs it", err)
	}
	return false, m.callError(ctx, "writing the locks", err)
}

// resolve learns whether a transaction whose answer was lost committed.
// The same input goes again, with the same request token: DynamoDB
// answers a repeat of a committed transaction with success, without
// applying it twice, and one still under way with
// TransactionInProgressException. Should no answer come still, the
// items are read: the transaction wrote all of them or none, so one
// carrying this call's version number proves the set written. Only then
// is it deemed not written, and what it may still write is deleted.
func (m *setAcquire) resolve(ctx context.Context, tw transactWriter, in *dynamodb.TransactWriteItemsInput, infos []*LockInfo, sess *session, sent time.Duration, lost error) (bool, error) {
	c := m.c
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	var backoff conflictBackoff
	for tries := 0; tries < 3 && rctx.Err() == nil; tries++ {
		_, err := tw.TransactWriteItems(rctx, in, c.callOpts("TransactWriteItems")...)
		if err == nil {
			return m.win(infos, sess, sent)
		}
		var inProgress *types.TransactionInProgressException
		switch {
		case errors.As(err, &inProgress):
			backoff.wait(rctx) // the first is still under way
			continue
		case wire.OutcomeUnknown(err):
			continue
		}
		if _, ok := wire.CancellationReasons(err); ok {
			return m.judge(ctx, err, infos, sess, sent)
		}
		break
	}
	for i, a := range m.keys {
		cur, err := c.readItem(rctx, a.pk, a.opts.SortKey)
		if err != nil {
			break
		}
		if cur != nil && cur.RecordVersionNumber == infos[i].RecordVersionNumber {
			return m.win(infos, sess, sent)
		}
	}
	for _, info := range infos {
		c.deleteIfOurs(info, sess)
	}
	return false, m.callError(ctx, "writing the locks", lost)
}

// win turns the committed transaction into held locks. Should one of
// them not be registered (the client closed, the session ended), the
// locks already made are released and the other items given back.
func (m *setAcquire) win(infos []*LockInfo, sess *session, sent time.Duration) (bool, error) {
	locks := make([]*Lock, len(m.keys))
	for i, a := range m.keys {
		var takenFrom *LockInfo
		if a.seen != nil && !a.seen.Released {
			takenFrom = a.seen
		}
		l, err := a.won(infos[i], sess, sent, takenFrom, takenFrom != nil && a.fast)
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(m.c.ctx), m.c.opts.HeartbeatTimeout)
			for _, held := range locks[:i] {
				_ = held.Release(ctx)
			}
			cancel()
			for _, info := range infos[i+1:] {
				m.c.deleteIfOurs(info, sess)
			}
			if err == errSessionEnded {
				for _, b := range m.keys {
					b.seen = nil
				}
				return false, nil // given back: the next attempt goes on a new session
			}
			return false, err
		}
		locks[i] = l
	}
	m.won = locks
	return true, nil
}

func (m *setAcquire) heldError() error {
	for _, a := range m.keys {
		if !a.mayWrite() {
			return m.fail(CodeAcquireTimeout, fmt.Sprintf("not acquired within %v: %s is held by %q", m.opts.RetryTimeout, quoteKey(a.pk), a.seen.OwnerName), nil)
		}
	}
	return m.fail(CodeAcquireTimeout, fmt.Sprintf("not acquired within %v", m.opts.RetryTimeout), nil)
}

func (m *setAcquire) retryingAfter(err error) {
	m.c.log.Warn("ddblock: acquire attempt of a set of keys failed; will retry", "keys", len(m.keys), "first_key", m.keys[0].pk, "err", err)
}

// fail makes an error about the set, named by its first key.
func (m *setAcquire) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: msg, PartitionKey: m.keys[0].pk, SortKey: m.opts.SortKey, Err: cause}
}

func (m *setAcquire) callError(ctx context.Context, doing string, err error) error {
	return m.c.classifyCallError(ctx, m.fail, doing, err, m.keys[0].pk, m.opts.SortKey)
}
