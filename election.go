package ddblock

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/tracing"
	"github.com/ddblock/ddblock/internal/wire"
)

// attrLeaderValue holds a leader's value in its election's lock item
// (see internal/wire).
const attrLeaderValue = wire.AttrLeaderValue

// DefaultElectionRetryPeriod is how often, by default, a waiting
// candidate reads the leader's lock item (see [WithElectionRetryPeriod]).
const DefaultElectionRetryPeriod = 200 * time.Millisecond

// handoverPeriods is how many retry periods an Election stays out of
// the race after its own Resign: long enough for a candidate that reads
// every retry period to see the lock free and write its own, with room
// for two round trips on a slow network.
const handoverPeriods = 3

// electionOptions are an Election's settings.
type electionOptions struct {
	RetryPeriod time.Duration
}

// ElectionOption sets one setting of an Election; [WithElectionRetryPeriod]
// makes them.
type ElectionOption func(*electionOptions)

// WithElectionRetryPeriod sets how often a waiting candidate reads the
// leader's lock item, and so bounds how long a freed leadership stays
// free while someone waits: a resigned leader's item is gone, and the
// next read takes it. After a Resign of its own, an Election stays out
// of the race for three retry periods, so that a waiting candidate leads
// first; candidates of one election should use the same period. Each
// read is one strongly consistent GetItem. Default:
// [DefaultElectionRetryPeriod] (200 ms).
func WithElectionRetryPeriod(d time.Duration) ElectionOption {
	return func(o *electionOptions) { o.RetryPeriod = d }
}

// Election is a leader election under one name: the leader is whoever
// holds the lock of that name, and its value (an address, an identity)
// is stored in the lock item for everyone to read. Every guarantee of a
// lock carries over, because a leadership IS a lock: heartbeats, danger,
// Done, fencing tokens when the client has them.
//
// An Election is safe for concurrent use; it holds at most one
// leadership at a time. A nil or zero Election (not made by
// [Client.NewElection]) answers every call with CodeInvalidArgument.
type Election struct {
	c    *Client
	name string
	opts electionOptions

	mu   sync.Mutex
	lead *Leadership // ours, while we lead
	// resignedAt is when this Election last gave up a leadership
	// (monotonic), valid when resigned is set: Campaign stays out of
	// the race until the hand-over is over.
	resigned   bool
	resignedAt time.Duration
}

// NewElection returns the election of name (the lock's partition key; its
// sort key is the client's default). It makes no call to DynamoDB. It
// refuses, with CodeInvalidArgument, a name that cannot be a lock's key
// (empty, not UTF-8, too long, or reserved for session items) and a
// retry period that is not positive; with CodeClientShutdown, a closed
// client.
func (c *Client) NewElection(name string, opts ...ElectionOption) (*Election, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	eo := electionOptions{RetryPeriod: DefaultElectionRetryPeriod}
	for _, opt := range opts {
		if opt != nil {
			opt(&eo)
		}
	}
	o := acquireOptions{SortKey: c.defaultSortKey(""), RetryPeriod: eo.RetryPeriod}
	if err := c.checkAcquire(name, &o); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, &Error{Code: CodeClientShutdown, Message: "the client is closed", PartitionKey: name, SortKey: o.SortKey}
	}
	return &Election{c: c, name: name, opts: eo}, nil
}

// usable refuses a nil or zero Election, and one whose client is not
// usable.
func (e *Election) usable() error {
	if e == nil || e.c == nil {
		return invalidArg("Election", "was not made by Client.NewElection")
	}
	return e.c.usable()
}

// Name returns the election's name ("" for a nil Election).
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

func (e *Election) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: msg, PartitionKey: e.name, SortKey: e.c.defaultSortKey(""), Err: cause}
}

// Leadership is this client's leadership of an election: the lock, the
// value it leads with, and a context that ends the moment leadership is
// lost (the lock in danger or stolen, resigned, or the client closed).
//
// A zero Leadership (not returned by Campaign) has no lock: Context
// returns a context that is already cancelled, and Proclaim and the
// lock's methods answer as a zero [Lock] does (a typed error, or a zero
// value).
type Leadership struct {
	*Lock
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	value string
}

// Value returns the value this leader leads with: the one it campaigned
// with, or the last one it proclaimed.
func (l *Leadership) Value() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Context returns a context that ends when leadership is lost; its cause
// (context.Cause) is the lock's error. Work done as the leader should run
// under it. Like [Lock.Context]'s, its Err method checks the clock
// itself, so it reports a lock in danger the instant the safe period has
// passed, even before the client's monitor has run. For a nil or zero
// Leadership it is a context already cancelled, its cause an error of
// CodeInvalidArgument.
func (l *Leadership) Context() context.Context {
	if l == nil || l.ctx == nil {
		return cancelledContext(invalidArg("Leadership", "was not returned by Election.Campaign"))
	}
	return l.ctx
}

// Proclaim changes the value this leader publishes, without giving up
// leadership (etcd's Proclaim): one UpdateItem of the lock item's leader
// value, on the condition a guarded write uses (see [Lock.Guard]): the
// item still names this lock's owner and tenure, and was not released.
// Heartbeats keep the tenure and leave the value alone, and Proclaim
// changes neither the tenure nor the record version number, so the two
// never make each other fail.
//
// It ends with the lock's error (CodeLockInDanger, CodeLockStolen,
// CodeLockReleased, CodeClientShutdown) when leadership is already known
// lost, CodeLockStolen when the item turns out to be another tenure's
// (the leadership's heartbeats end it too), CodeCanceled or
// CodeAcquireTimeout when ctx ends (cancel or deadline, as for
// Campaign), CodeInvalidArgument for a zero Leadership or a nil ctx,
// and CodeUnknown wrapping the cause on any other failure: the value
// may or may not have been written then, and a later Proclaim decides.
// Observers see the new value at their next read.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if l == nil || l.Lock == nil || l.Lock.client == nil {
		return invalidArg("Leadership", "was not returned by Election.Campaign")
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	lk := l.Lock
	if err := lk.Err(); err != nil {
		return err
	}
	err := lk.client.setLeaderValue(ctx, lk, value)
	switch {
	case err == nil:
		lk.mu.Lock()
		attrs := maps.Clone(lk.attrs)
		if attrs == nil {
			attrs = map[string]types.AttributeValue{}
		}
		attrs[attrLeaderValue] = &types.AttributeValueMemberS{Value: value}
		lk.attrs = attrs
		lk.mu.Unlock()
		l.mu.Lock()
		l.value = value
		l.mu.Unlock()
		return nil
	case wire.ConditionFailed(err):
		if lerr := lk.Err(); lerr != nil {
			return lerr
		}
		return lk.lockError(CodeLockStolen, "the leader's lock item is not this leadership's any more", err)
	case ctx.Err() != nil:
		return contextError(ctx, lk.lockError)
	default:
		return lk.client.tableError(err, "proclaiming a new leader value", lk.pk, lk.sk)
	}
}

// setLeaderValue writes an election's leader value into the lock item
// of l, on the condition that the item is still l's tenure.
func (c *Client) setLeaderValue(ctx context.Context, l *Lock, value string) error {
	in := c.wire().Proclaim(l.pk, l.sk, l.owner, l.tenure, value)
	_, err := c.ddb.UpdateItem(ctx, in, c.callOpts("UpdateItem")...)
	return err
}

// Campaign blocks until this client leads the election, and returns the
// leadership. It waits as AcquireLock waits (reads only, every retry
// period of the Election, taking over a dead leader's lock once it stood
// unchanged for its lease), for as long as ctx allows: an
// ACQUIRE_TIMEOUT of its own retry timeout only starts another wait.
// Right after a Resign of this Election it first stays out of the race
// for three retry periods, so that a waiting candidate leads first (see
// [electionOptions.RetryPeriod]).
//
// When ctx ends it returns what AcquireLock returns then: an error of
// CodeCanceled when ctx was cancelled, CodeAcquireTimeout when ctx's
// deadline passed; either wraps context.Cause(ctx), so
// errors.Is(err, context.Canceled) or errors.Is(err,
// context.DeadlineExceeded) tells them apart too. It returns
// CodeClientShutdown when the client is closed, CodeAlreadyHeld when
// this Election already leads, CodeInvalidArgument for a zero Election,
// and the errors of AcquireLock otherwise. The leadership's context
// derives from ctx's values, not its deadline: a Campaign bounded by a
// timeout does not bound the leadership.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	cur := e.lead
	e.mu.Unlock()
	// Asked outside e.mu: the context's Err checks the lock (locks.go).
	if cur != nil && cur.ctx.Err() == nil {
		return nil, &Error{Code: CodeAlreadyHeld, Message: "this Election already leads: Resign first", PartitionKey: e.name}
	}
	if err := e.waitHandover(ctx); err != nil {
		return nil, err
	}
	attrs := map[string]types.AttributeValue{attrLeaderValue: &types.AttributeValueMemberS{Value: value}}
	for {
		lock, err := e.c.AcquireLock(ctx, e.name, WithAdditionalAttributes(attrs), WithRetryPeriod(e.opts.RetryPeriod))
		if err != nil {
			code := CodeOf(err)
			if ctx.Err() != nil && code != CodeClientShutdown {
				// One answer for ctx's end, whichever call noticed it.
				return nil, contextError(ctx, e.fail)
			}
			if code == CodeAcquireTimeout {
				continue // the client remembers what it saw: the wait goes on
			}
			return nil, err
		}
		lctx, cancel := lock.Context(e.termContext(ctx, lock))
		lead := &Leadership{Lock: lock, value: value, ctx: lctx, cancel: cancel}
		e.mu.Lock()
		e.lead = lead
		e.mu.Unlock()
		return lead, nil
	}
}

// termContext is the context a leadership's derives from: ctx's values,
// and, with a tracer, the span of the term, a child of ctx's span, which
// ends when the lock does (resigned, stolen, in danger, or the client
// closed), with that as its outcome. The leader's work under
// Leadership.Context nests under it.
func (e *Election) termContext(ctx context.Context, lock *Lock) context.Context {
	tctx, span := e.c.startSpan(context.WithoutCancel(ctx), spanElectionTerm)
	if span == nil {
		return tctx
	}
	span.SetProperty(attrElection, e.name)
	setLockProperties(span, lock.pk, lock.sk, lock.owner)
	term := lock.tenure
	if lock.token > 0 {
		term = strconv.FormatInt(lock.token, 10)
		span.SetProperty(attrToken, lock.token)
	}
	span.SetProperty(attrTerm, term)
	start := e.c.clock.Monotonic()
	lockCtx, stop := lock.Context(context.Background()) // ends with the lock
	context.AfterFunc(lockCtx, func() {
		defer stop()
		err := context.Cause(lockCtx)
		span.SetProperty(attrHeld, (e.c.clock.Monotonic() - start).Seconds())
		span.SetProperty(attrOutcome, outcome(err))
		if CodeOf(err) == CodeLockReleased {
			span.SetStatus(tracing.SpanStatusOK) // resigned
		} else {
			span.SetStatus(tracing.SpanStatusError)
		}
		span.End()
	})
	return tctx
}

// waitHandover keeps a Campaign that follows this Election's own Resign
// out of the race until the hand-over is over: a candidate that waited
// reads the freed lock within a retry period and takes it, and only if
// none did does this one lead again.
func (e *Election) waitHandover(ctx context.Context) error {
	e.mu.Lock()
	resigned, at := e.resigned, e.resignedAt
	e.mu.Unlock()
	if !resigned {
		return nil
	}
	d := at + handoverPeriods*e.opts.RetryPeriod - e.c.clock.Monotonic()
	if d <= 0 {
		return nil
	}
	t := e.c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return contextError(ctx, e.fail)
	case <-e.c.ctx.Done():
		return e.fail(CodeClientShutdown, "the client was closed while waiting", nil)
	}
}

// Resign gives up this Election's leadership: its context ends, and its
// lock is released (best effort, as Lock.Release), so that a waiting
// candidate leads at its next read, within a retry period. The release
// goes out even when ctx is already done, bounded by the client's
// heartbeat timeout instead: the leadership's own context, which a
// leader may well pass, ends the moment the release begins. This
// Election's next Campaign stays out of the race for three retry
// periods, so that the waiting candidate does lead. Without a
// leadership it does nothing.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	return e.resign(ctx, nil)
}

// resign gives up lead, or whatever leadership the Election has when
// lead is nil.
func (e *Election) resign(ctx context.Context, lead *Leadership) error {
	e.mu.Lock()
	if lead == nil {
		lead = e.lead
	}
	if e.lead == lead {
		e.lead = nil
	}
	e.mu.Unlock()
	if lead == nil {
		return nil
	}
	defer lead.cancel()
	// The release marks the lock released first, which ends the
	// leadership's contexts: a Resign called with one of them (from
	// OnStartedLeading, say) must still reach DynamoDB, or the item
	// stays for a lease. Its own bound is the heartbeat timeout.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.opts.HeartbeatTimeout)
	defer cancel()
	err := lead.Release(rctx)
	e.mu.Lock()
	e.resigned, e.resignedAt = true, e.c.clock.Monotonic()
	e.mu.Unlock()
	return err
}

// LeaderInfo describes an election's leader, as its lock item says.
type LeaderInfo struct {
	// Value is what the leader campaigned with, or last proclaimed.
	Value string
	// Owner is the leader's client (its OwnerName).
	Owner string
	// Term tells one leadership from the next, even when the same owner
	// wins again with the same value: the lock's fencing token when the
	// item counts them (as a decimal number, greater for every later
	// term), else its tenure (Lock.Tenure, a random identifier written
	// at each acquisition). Heartbeats and proclamations do not change
	// it. Compare terms for equality; only tokens are ordered.
	Term string
	// Lock is the leader's lock item.
	Lock LockInfo
}

// termOf is the term of a leader's lock item.
func termOf(info *LockInfo) string {
	if info.FencingToken > 0 {
		return strconv.FormatInt(info.FencingToken, 10)
	}
	return info.Tenure
}

// Leader returns the current leader, read from the table with a strongly
// consistent read. With no leader it returns an error of CodeLockNotFound
// (errors.Is(err, CodeLockNotFound)); an item not written by an Election
// (no leader value) is CodeInvalidItem. Like GetLock, it tells who holds
// the lock, not that the holder is alive.
func (e *Election) Leader(ctx context.Context) (*LeaderInfo, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	info, err := e.c.GetLock(ctx, e.name, "")
	if err != nil {
		return nil, err
	}
	v, ok := info.AdditionalAttributes[attrLeaderValue].(*types.AttributeValueMemberS)
	if !ok {
		return nil, &Error{Code: CodeInvalidItem, PartitionKey: info.PartitionKey, SortKey: info.SortKey,
			Message: fmt.Sprintf("the lock item has no %s string: held by %q, not through an Election", attrLeaderValue, info.OwnerName)}
	}
	return &LeaderInfo{Value: v.Value, Owner: info.OwnerName, Term: termOf(info), Lock: *info}, nil
}

// Observe reports each change of leader: it reads the leader (Leader)
// at once and then every period (the client's heartbeat period when
// period is 0), and yields whenever the leader's owner, value or term
// changes, or leadership starts or ends: (info, nil) for a new leader or
// value, (nil, nil) for none. A failed read is yielded as (nil, err) and
// observing goes on; it ends when ctx ends or the loop stops. Reads only.
// A negative period, a nil ctx or a zero Election is yielded once as an
// error of CodeInvalidArgument, and observing ends.
//
// It polls, so it reports what each read shows, not every change in
// between: a leadership that starts and ends between two reads is not
// seen, nor are the values a leader proclaimed and replaced between two
// reads, nor a gap without leader between two terms (the new term is
// reported, not the "none" before it). A new term is told from the
// last by [LeaderInfo.Term], so the same owner winning again with the
// same value is reported as a change.
//
//	for leader, err := range election.Observe(ctx, 0) { … }
func (e *Election) Observe(ctx context.Context, period time.Duration) iter.Seq2[*LeaderInfo, error] {
	return func(yield func(*LeaderInfo, error) bool) {
		if err := e.usable(); err != nil {
			yield(nil, err)
			return
		}
		if err := checkContext(ctx); err != nil {
			yield(nil, err)
			return
		}
		if period < 0 {
			yield(nil, invalidArg("period", fmt.Sprintf("must not be negative, got %v", period)))
			return
		}
		if period == 0 {
			period = e.c.opts.HeartbeatPeriod
		}
		type seen struct {
			present            bool
			owner, value, term string
		}
		var last *seen
		for {
			info, err := e.Leader(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil && CodeOf(err) != CodeLockNotFound:
				if !yield(nil, err) {
					return
				}
			default:
				now := seen{present: info != nil}
				if info != nil {
					now.owner, now.value, now.term = info.Owner, info.Value, info.Term
				}
				if last == nil || *last != now {
					last = &now
					if !yield(info, nil) {
						return
					}
				}
			}
			t := e.c.clock.NewTimer(period)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
	}
}

// LeaderCallbacks are what Run calls. Each is optional.
type LeaderCallbacks struct {
	// OnStartedLeading runs when this client starts leading, with a
	// context that ends when leadership is lost or Run's context ends;
	// it should return when that context ends. That context's Err checks
	// the clock itself, as [Lock.Context]'s does: check it before each
	// step of leader-only work. It may call Resign, which hands
	// leadership over to a waiting candidate. If it panics, Run resigns
	// before the panic goes on (see Run).
	OnStartedLeading func(ctx context.Context, lead *Leadership)
	// OnStoppedLeading runs after each leadership, once it has ended and
	// been resigned, however OnStartedLeading ended.
	OnStoppedLeading func()
	// OnNewLeader runs for each change of leader seen by Observe,
	// this client included; nil when there is none. It polls, and can
	// miss changes between two reads (see Observe).
	OnNewLeader func(leader *LeaderInfo)
}

// Run campaigns with value until ctx ends: each time it leads it calls
// OnStartedLeading and waits for leadership to end (and
// OnStartedLeading to return), resigns, calls OnStoppedLeading, and
// campaigns again; after a Resign the Election stays out of the race
// long enough for a waiting candidate to lead first (see Campaign).
// OnNewLeader is fed by Observe on a goroutine that Run owns and stops.
//
// Run returns when ctx ends, with ctx's end as Campaign reports it (an
// error of CodeCanceled for a cancel, CodeAcquireTimeout for a
// deadline, either wrapping context.Cause(ctx)), or with an error that
// campaigning cannot get past (a closed client, bad arguments, a missing
// table, CodeAccessDenied: a permission or the credentials refused by
// AWS, which Run logs at error level). Other failures of a campaign
// (throttling, a lost connection) are logged at warn level and tried
// again after a heartbeat period.
//
// A panic in OnStartedLeading (or runtime.Goexit) does not leave this
// client leading: Run resigns, releasing the lock so that another
// candidate can lead at once, calls OnStoppedLeading, stops its Observe
// goroutine, and lets the panic go on up to Run's caller, unchanged.
// A leader that panicked is presumed broken; Run does not campaign again.
func (e *Election) Run(ctx context.Context, value string, cb LeaderCallbacks) error {
	if err := e.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	var observer sync.WaitGroup
	if cb.OnNewLeader != nil {
		octx, stop := context.WithCancel(ctx)
		defer observer.Wait()
		defer stop()
		observer.Go(func() {
			for leader, err := range e.Observe(octx, 0) {
				if err == nil {
					cb.OnNewLeader(leader)
				}
			}
		})
	}
	for {
		lead, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return contextError(ctx, e.fail)
			}
			switch CodeOf(err) {
			case CodeAccessDenied:
				// A refused permission or bad credentials do not pass
				// by themselves: campaigning again would only hide
				// them until ctx ends (as ACQUIRE_TIMEOUT), so Run
				// says so and ends, as for a missing table.
				e.c.log.Error("ddblock: election campaign refused by AWS; Run ends", "election", e.name, "err", err)
				return err
			case CodeClientShutdown, CodeInvalidArgument, CodeTableNotFound, CodeTableMismatch, CodeInvalidItem:
				return err
			}
			// A failure worth another try (throttling, a lost
			// connection): campaign again after a period.
			e.c.log.Warn("ddblock: election campaign failed; will campaign again", "election", e.name, "err", err)
			t := e.c.clock.NewTimer(e.c.opts.HeartbeatPeriod)
			select {
			case <-ctx.Done():
				t.Stop()
				return contextError(ctx, e.fail)
			case <-t.C():
			}
			continue
		}
		e.leadOnce(ctx, lead, cb)
		if ctx.Err() != nil {
			return contextError(ctx, e.fail)
		}
	}
}

// leadOnce is one leadership under Run: OnStartedLeading, the wait for the
// leadership's end, the resignation and OnStoppedLeading, which happen
// however OnStartedLeading ends (a panic included: the deferred
// resignation runs while it unwinds).
func (e *Election) leadOnce(ctx context.Context, lead *Leadership, cb LeaderCallbacks) {
	// The leader's work ends with leadership or with Run's context,
	// whichever ends first; the lock's own context checks the clock.
	lctx, endLeading := lead.Lock.Context(ctx)
	defer func() {
		endLeading()
		_ = e.resign(ctx, lead)
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading()
		}
	}()
	if cb.OnStartedLeading != nil {
		cb.OnStartedLeading(lctx, lead)
	}
	<-lctx.Done()
}
