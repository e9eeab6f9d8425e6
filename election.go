package ddblock

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// attrLeaderValue holds a leader's value in its election's lock item. It
// is an attribute like an application's own (python_dynamodb_lock keeps
// it through its heartbeats), with ddblock's prefix so that no
// application attribute is taken for it.
const attrLeaderValue = "ddblock_leader"

// Election is a leader election under one name: the leader is whoever
// holds the lock of that name, and its value (an address, an identity)
// is stored in the lock item for everyone to read. Every guarantee of a
// lock carries over, because a leadership IS a lock: heartbeats, danger,
// Done, fencing tokens when the client has them.
//
// An Election is safe for concurrent use; it holds at most one
// leadership at a time.
type Election struct {
	c    *Client
	name string

	mu   sync.Mutex
	lead *Leadership // ours, while we lead
}

// NewElection returns the election of name (the lock's partition key; its
// sort key is the client's default). It makes no call to DynamoDB.
func (c *Client) NewElection(name string) (*Election, error) {
	o := AcquireOptions{SortKey: c.defaultSortKey(""), RetryPeriod: c.opts.HeartbeatPeriod}
	if err := c.checkAcquire(name, &o); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leadership is this client's leadership of an election: the lock, the
// value it leads with, and a context that ends the moment leadership is
// lost (the lock in danger or stolen, resigned, or the client closed).
type Leadership struct {
	*Lock
	value  string
	ctx    context.Context
	cancel context.CancelFunc
}

// Value returns the value this leader campaigned with.
func (l *Leadership) Value() string { return l.value }

// Context returns a context that ends when leadership is lost; its cause
// (context.Cause) is the lock's error. Work done as the leader should run
// under it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Campaign blocks until this client leads the election, and returns the
// leadership. It waits as AcquireLock waits (reads only, taking over a
// dead leader's lock once it stood unchanged for its lease), for as long
// as ctx allows: an ACQUIRE_TIMEOUT only starts another wait. It ends
// with CodeCanceled when ctx ends, CodeClientShutdown when the client is
// closed, CodeInvalidArgument when this Election already leads, and with
// the errors of AcquireLock otherwise. The leadership's context derives
// from ctx's values, not its deadline: a Campaign bounded by a timeout
// does not bound the leadership.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	e.mu.Lock()
	leading := e.lead != nil && e.lead.ctx.Err() == nil
	e.mu.Unlock()
	if leading {
		return nil, invalidArg("Election", "already leads: Resign first")
	}
	attrs := map[string]types.AttributeValue{attrLeaderValue: &types.AttributeValueMemberS{Value: value}}
	for {
		lock, err := e.c.AcquireLock(ctx, e.name, WithAdditionalAttributes(attrs))
		if CodeOf(err) == CodeAcquireTimeout && ctx.Err() == nil {
			continue // the client remembers what it saw: the wait goes on
		}
		if err != nil {
			return nil, err
		}
		lctx, cancel := lock.Context(context.WithoutCancel(ctx))
		lead := &Leadership{Lock: lock, value: value, ctx: lctx, cancel: cancel}
		e.mu.Lock()
		e.lead = lead
		e.mu.Unlock()
		return lead, nil
	}
}

// Resign gives up this Election's leadership: its context ends, and its
// lock is released (best effort, as Lock.Release), so that another
// campaigner leads at once. Without a leadership it does nothing.
func (e *Election) Resign(ctx context.Context) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	e.mu.Lock()
	lead := e.lead
	e.lead = nil
	e.mu.Unlock()
	if lead == nil {
		return nil
	}
	defer lead.cancel()
	return lead.Release(ctx)
}

// LeaderInfo describes an election's leader, as its lock item says.
type LeaderInfo struct {
	// Value is what the leader campaigned with.
	Value string
	// Owner is the leader's client (its OwnerName).
	Owner string
	// Lock is the leader's lock item.
	Lock LockInfo
}

// Leader returns the current leader, read from the table with a strongly
// consistent read. With no leader it returns an error of CodeLockNotFound
// (errors.Is(err, ErrLockNotFound)); an item not written by an Election
// (no leader value) is CodeInvalidItem. Like GetLock, it tells who holds
// the lock, not that the holder is alive.
func (e *Election) Leader(ctx context.Context) (*LeaderInfo, error) {
	info, err := e.c.GetLock(ctx, e.name, "")
	if err != nil {
		return nil, err
	}
	v, ok := info.AdditionalAttributes[attrLeaderValue].(*types.AttributeValueMemberS)
	if !ok {
		return nil, &Error{Code: CodeInvalidItem, PartitionKey: info.PartitionKey, SortKey: info.SortKey,
			Message: fmt.Sprintf("the lock item has no %s string: held by %q, not through an Election", attrLeaderValue, info.OwnerName)}
	}
	return &LeaderInfo{Value: v.Value, Owner: info.OwnerName, Lock: *info}, nil
}

// Observe reports each change of leader: it reads the leader (Leader)
// at once and then every period (the client's heartbeat period when
// period is 0), and yields whenever the leader's owner or value changes,
// or leadership starts or ends: (info, nil) for a new leader, (nil, nil)
// for none. A failed read is yielded as (nil, err) and observing goes on;
// it ends when ctx ends or the loop stops. Reads only.
//
//	for leader, err := range election.Observe(ctx, 0) { … }
func (e *Election) Observe(ctx context.Context, period time.Duration) iter.Seq2[*LeaderInfo, error] {
	return func(yield func(*LeaderInfo, error) bool) {
		if err := checkContext(ctx); err != nil {
			yield(nil, err)
			return
		}
		if period <= 0 {
			period = e.c.opts.HeartbeatPeriod
		}
		type seen struct {
			present      bool
			owner, value string
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
					now.owner, now.value = info.Owner, info.Value
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
	// it should return when that context ends.
	OnStartedLeading func(ctx context.Context, lead *Leadership)
	// OnStoppedLeading runs after each leadership, once it has ended.
	OnStoppedLeading func()
	// OnNewLeader runs for each change of leader seen by Observe,
	// this client included; nil when there is none.
	OnNewLeader func(leader *LeaderInfo)
}

// Run campaigns with value until ctx ends: each time it leads it calls
// OnStartedLeading and waits for leadership to end (and
// OnStartedLeading to return), resigns, calls OnStoppedLeading, and
// campaigns again. OnNewLeader is fed by Observe on a goroutine that Run
// owns and stops. Run returns ctx's error (as an *Error of CodeCanceled),
// or an error that campaigning cannot get past (a closed client, bad
// arguments, a missing table).
func (e *Election) Run(ctx context.Context, value string, cb LeaderCallbacks) error {
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
			switch CodeOf(err) {
			case CodeCanceled, CodeClientShutdown, CodeInvalidArgument, CodeTableNotFound, CodeTableMismatch, CodeInvalidItem:
				return err
			}
			if ctx.Err() != nil {
				return &Error{Code: CodeCanceled, Message: "Run ended", Err: context.Cause(ctx)}
			}
			// A failure worth another try (throttling, a lost
			// connection): campaign again after a period.
			t := e.c.clock.NewTimer(e.c.opts.HeartbeatPeriod)
			select {
			case <-ctx.Done():
				t.Stop()
				return &Error{Code: CodeCanceled, Message: "Run ended", Err: context.Cause(ctx)}
			case <-t.C():
			}
			continue
		}
		// The leader's work ends with leadership or with Run's context,
		// whichever ends first.
		lctx, endLeading := context.WithCancelCause(lead.Context())
		stopAfter := context.AfterFunc(ctx, func() { endLeading(context.Cause(ctx)) })
		if cb.OnStartedLeading != nil {
			cb.OnStartedLeading(lctx, lead)
		}
		<-lctx.Done()
		stopAfter()
		endLeading(nil)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.opts.HeartbeatTimeout)
		_ = e.Resign(rctx)
		cancel()
		if cb.OnStoppedLeading != nil {
			cb.OnStoppedLeading()
		}
		if ctx.Err() != nil {
			return &Error{Code: CodeCanceled, Message: "Run ended", Err: context.Cause(ctx)}
		}
	}
}
