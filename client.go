package ddblock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/tracing"

	"github.com/ddblock/ddblock/internal/clock"
)

// DynamoDBAPI is the part of *dynamodb.Client that a lock client uses.
type DynamoDBAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ DynamoDBAPI = (*dynamodb.Client)(nil)

// Client takes, heartbeats and releases locks in one DynamoDB table. It
// is safe for concurrent use. Create one per process with [New] and close
// it with [Client.Close].
//
// A client runs a fixed set of goroutines whatever the number of locks it
// holds: one heartbeat scheduler (with at most
// [Options.HeartbeatConcurrency] calls in flight), one safety monitor,
// and [Options.CallbackWorkers] callback workers.
type Client struct {
	ddb   DynamoDBAPI
	opts  Options
	codec itemCodec
	log   *slog.Logger
	clock clock.Clock
	// tracer starts the client's spans; nil without WithTracerProvider
	// (spans.go).
	tracer tracing.Tracer

	// ctx lives as long as the client; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// sendCtx bounds the heartbeat calls. Close's cancel does not end
	// them (Close waits for them, so that each lock's version number is
	// known when it returns); abandonSends does, when Close gives up.
	sendCtx      context.Context
	abandonSends context.CancelFunc

	mu     sync.Mutex
	closed bool
	locks  map[string]*Lock
	// hbReserved counts the puts in flight that took room in the
	// heartbeat schedule (reserveHeartbeat); guarded by mu.
	hbReserved int

	observations *observations
	waiters      *waitRoom // goroutines waiting for the same key (waiters.go)
	lines        *lines    // fair waiters, by line (line.go)
	// abandoned are tickets of fair waiters whose delete failed, to
	// delete again at session heartbeats; guarded by lines.mu.
	abandoned []abandonedTicket

	// The client's session (Options.SessionLease): the current one, and
	// a channel closed when the start of one under way ends.
	sessMu       sync.Mutex
	sess         *session
	sessStarting chan struct{}

	heartbeats *heartbeater
	monitor    *monitor
	callbacks  *callbackPool
	loops      *doneGroup // the heartbeater and the monitor

	stats clientStats
}

type clientStats struct {
	rounds             atomic.Uint64
	lateRounds         atomic.Uint64
	heartbeatsSent     atomic.Uint64
	heartbeatsFailed   atomic.Uint64
	heartbeatsSkipped  atomic.Uint64
	heartbeatsInFlight atomic.Int64
	inDanger           atomic.Uint64
	recovered          atomic.Uint64
	stolen             atomic.Uint64
	callbackPanics     atomic.Uint64
	callbacksDropped   atomic.Uint64
	callbacksDelivered atomic.Uint64
	callbacksLate      atomic.Uint64
	deadSessionLocks   atomic.Uint64
}

// Stats are counters of a client's background work since it was created.
type Stats struct {
	// HeldLocks is the number of locks the client holds now.
	HeldLocks int
	// Rounds counts the heartbeat scheduler's rounds: stretches of one
	// heartbeat period in which it sent heartbeats (about one a period
	// while locks are held). LateRounds counts those in which a
	// heartbeat went out more than a tenth of a period after it was due
	// (a period after the lock's last write): the server or the
	// senders cannot keep up.
	Rounds, LateRounds uint64
	// HeartbeatsSent and HeartbeatsFailed count heartbeat calls that
	// succeeded and that failed (stolen locks included).
	HeartbeatsSent, HeartbeatsFailed uint64
	// HeartbeatsSkipped counts heartbeats that fell due while the lock's
	// previous heartbeat was still in flight (a call slower than a
	// period); each lock's next one goes when that call ends.
	HeartbeatsSkipped uint64
	// HeartbeatsInFlight is the number of heartbeats dispatched and not
	// yet finished: calls under way, and any waiting for a free sender.
	HeartbeatsInFlight int
	// InDanger, Recovered and Stolen count those events.
	InDanger, Recovered, Stolen uint64
	// CallbacksDelivered, CallbacksDropped and CallbackPanics count app
	// callbacks run, events dropped (from a full per-lock queue, or
	// still queued when Close gave up waiting), and callbacks recovered
	// from a panic.
	CallbacksDelivered, CallbacksDropped, CallbackPanics uint64
	// CallbacksLate counts events whose delivery started more than the
	// safe period after the event (see Metrics.CallbackLate).
	CallbacksLate uint64
	// CallbacksRunning is the number of app callbacks running now.
	CallbacksRunning int
	// DeadSessionLocks counts locks taken over from a dead session
	// sooner than a session lease after their acquire began: locks that
	// came back with their session, judged dead by this client's watch
	// for another lock of it or by an earlier call (see
	// [Options.SessionLease]).
	DeadSessionLocks uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	if c == nil {
		return Stats{} // a client not made with New counts nothing either
	}
	c.mu.Lock()
	held := len(c.locks)
	c.mu.Unlock()
	s := &c.stats
	return Stats{
		HeldLocks:          held,
		Rounds:             s.rounds.Load(),
		LateRounds:         s.lateRounds.Load(),
		HeartbeatsSent:     s.heartbeatsSent.Load(),
		HeartbeatsFailed:   s.heartbeatsFailed.Load(),
		HeartbeatsSkipped:  s.heartbeatsSkipped.Load(),
		HeartbeatsInFlight: int(s.heartbeatsInFlight.Load()),
		InDanger:           s.inDanger.Load(),
		Recovered:          s.recovered.Load(),
		Stolen:             s.stolen.Load(),
		DeadSessionLocks:   s.deadSessionLocks.Load(),
		CallbacksDelivered: s.callbacksDelivered.Load(),
		CallbacksDropped:   s.callbacksDropped.Load(),
		CallbackPanics:     s.callbackPanics.Load(),
		CallbacksLate:      s.callbacksLate.Load(),
		CallbacksRunning:   c.callbacks.runningNow(),
	}
}

// New returns a client for the lock table, configured by opts over
// python_dynamodb_lock's defaults, and starts its background goroutines.
// Every option is applied before any default is filled or any setting is
// derived or checked, so their order does not matter (see [Options]).
// Settings that cannot work are refused, all at once, with errors of code
// CodeInvalidArgument naming each setting.
func New(ddb DynamoDBAPI, opts ...Option) (*Client, error) {
	var o settings
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	var errs []error
	if ddb == nil || isNilInterface(ddb) {
		errs = append(errs, invalidArg("DynamoDB", "client must not be nil"))
	}
	errs = append(errs, o.resolve()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := &Client{
		ddb:   ddb,
		opts:  o.Options,
		codec: itemCodec{pk: o.PartitionKeyName, sk: o.SortKeyName, ttl: o.TTLAttributeName},
		log:   o.Logger,
		clock: o.clock,
		locks: make(map[string]*Lock),
	}
	if o.tracer != nil && !isNilTracerProvider(o.tracer) {
		c.tracer = o.tracer.Tracer(tracerScope)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.sendCtx, c.abandonSends = context.WithCancel(context.Background())
	c.observations = newObservations(o.MaxObservations)
	c.waiters = newWaitRoom()
	c.lines = &lines{rooms: make(map[string]*lineRoom)}
	c.callbacks = newCallbackPool(c, o.CallbackWorkers)
	c.heartbeats = newHeartbeater(c)
	c.monitor = newMonitor(c)
	c.loops = newDoneGroup(2)
	for _, run := range []func(context.Context){c.heartbeats.run, c.monitor.run} {
		go func() {
			defer c.loops.finish()
			run(c.ctx)
		}()
	}
	for range o.CallbackWorkers {
		go c.callbacks.work() // each worker finishes c.callbacks.workers
	}
	return c, nil
}

// doneGroup is a sync.WaitGroup whose end is a channel, so that Close
// can wait for it with a select and return when its context ends,
// without leaving a goroutine behind to wait.
type doneGroup struct {
	left atomic.Int64
	done chan struct{}
}

func newDoneGroup(n int) *doneGroup {
	g := &doneGroup{done: make(chan struct{})}
	g.left.Store(int64(n))
	if n == 0 {
		close(g.done)
	}
	return g
}

// join adds a member to a group that has not finished: only a member
// that has not returned yet may call it.
func (g *doneGroup) join() { g.left.Add(1) }

// finish marks one member as returned.
func (g *doneGroup) finish() {
	if g.left.Add(-1) == 0 {
		close(g.done)
	}
}

// Options returns the client's settings, defaults filled in.
func (c *Client) Options() Options {
	if c == nil {
		return Options{}
	}
	return c.opts
}

// register adds a freshly acquired lock to the held set, and to the
// heartbeats or to its session. It fails when the client was closed
// meanwhile (CLIENT_SHUTDOWN), or with errSessionEnded when the lock's
// session ended.
func (c *Client) register(l *Lock) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return &Error{Code: CodeClientShutdown}
	}
	if l.session != nil {
		if !l.session.attach(l) {
			return errSessionEnded
		}
	} else {
		c.heartbeats.add(&l.sched, l, l.lastHeartbeat)
	}
	c.locks[l.id] = l
	return nil
}

// heartbeatCapacity is how many locks the client's heartbeats can keep
// at an explicit HeartbeatTPS: one heartbeat per lock per period, so
// HeartbeatTPS × HeartbeatPeriod (at least one). It is zero, no limit,
// when the pacing is adaptive (the sends spread over the period, as
// fast as the server answers) or with a session lease (one heartbeat,
// of the session, covers every lock).
func (c *Client) heartbeatCapacity() int {
	if c.opts.SessionLease || c.opts.HeartbeatTPS <= 0 {
		return 0
	}
	return max(int(float64(c.opts.HeartbeatTPS)*c.opts.HeartbeatPeriod.Seconds()), 1)
}

// reserveHeartbeat takes room in the heartbeat schedule for a lock about
// to be put. When the held locks and the puts in flight fill it, it
// returns instead why (the message of a TOO_MANY_LOCKS). The returned
// function gives the room back: call it once the put has failed, or
// once register has counted the lock among the held ones.
func (c *Client) reserveHeartbeat() (unreserve func(), refused string) {
	limit := c.heartbeatCapacity()
	if limit == 0 {
		return func() {}, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if held := len(c.locks); held+c.hbReserved >= limit {
		return nil, fmt.Sprintf("the client holds %d locks and is putting %d more, all its heartbeats can keep: %d a second (HeartbeatTPS) × a %v period",
			held, c.hbReserved, c.opts.HeartbeatTPS, c.opts.HeartbeatPeriod)
	}
	c.hbReserved++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		c.hbReserved--
		c.mu.Unlock()
	}), ""
}

// unregister drops l from the held set, if it is there, and records
// the lock's end for Metrics.LockEnded, to run once l.mu is released.
// l.mu must be held.
func (c *Client) unregister(l *Lock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.locks[l.id] != l {
		return false
	}
	if !l.unreported {
		held := l.heldFor(c.clock.Monotonic())
		l.reportLocked(func() { c.opts.Metrics.LockEnded(held) })
	}
	delete(c.locks, l.id)
	if l.session != nil {
		l.session.detach(l)
	} else {
		c.heartbeats.remove(&l.sched)
	}
	return true
}

// heldLocks returns a snapshot of the held set.
func (c *Client) heldLocks() []*Lock {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Lock, 0, len(c.locks))
	for _, l := range c.locks {
		out = append(out, l)
	}
	return out
}

// HeldLocks returns the locks this client holds now, in no order.
func (c *Client) HeldLocks() []*Lock {
	if c.usable() != nil {
		return nil
	}
	return c.heldLocks()
}

// Close shuts the client down, in the manner of http.Server.Shutdown.
//
// The first call refuses new acquires (CLIENT_SHUTDOWN, and waiting
// acquires end so), stops the heartbeats and the safety monitor, and
// closes every held lock's Done channel with CLIENT_SHUTDOWN. Each call
// then, with releaseLocks, releases every lock still held, best effort;
// waits for heartbeat calls in flight; and waits for the callbacks of
// events that came before the first Close, which are still delivered
// (events after it are not).
//
// Without releaseLocks, as in Python, held locks are kept: the
// application may still be working under them, and they expire after
// their lease. A kept lock is not heartbeated any more, so its Status
// turns IN_DANGER by the clock once the safe period has passed; its Err
// stays CLIENT_SHUTDOWN; it stays in HeldLocks; and it can still be
// released, by its Release or by a later Close(ctx, true), which delete
// its item as long as nobody took it over.
//
// When ctx ends first, Close stops waiting: events still queued are
// dropped (counted in Stats().CallbacksDropped), no callback starts after
// Close has returned, and Close returns an error of CodeCanceled that
// says how many callbacks were still running (they belong to the
// application: Close cannot stop them) and wraps ctx's error. Heartbeat
// calls still in flight are cancelled then, and end at once. A later Close
// waits again, and returns nil once everything has finished.
func (c *Client) Close(ctx context.Context, releaseLocks bool) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	held := make([]*Lock, 0, len(c.locks))
	for _, l := range c.locks {
		held = append(held, l)
	}
	c.mu.Unlock()
	if first {
		// The heartbeater and the monitor stop taking new work now; the
		// heartbeater's run returns only once its sends have finished.
		c.cancel()
		// Events from now on are not delivered; the workers deliver
		// those queued before, and stop.
		c.callbacks.close()
		for _, l := range held {
			l.mu.Lock()
			l.finishLocked(l.lockError(CodeClientShutdown, "the client was closed", nil))
			l.mu.Unlock()
		}
	}
	if releaseLocks {
		c.releaseAll(ctx, held)
	}
	select {
	case <-c.loops.done:
		c.abandonSends() // nothing left in flight: frees the context
	case <-ctx.Done():
		return c.closeGaveUp(ctx, true)
	}
	if releaseLocks || !c.opts.SessionLease {
		// Its heartbeats have stopped, and its locks are given back
		// (or none is on its session, kept for fair waiters' tickets
		// alone): the session item goes too.
		c.sessMu.Lock()
		s := c.sess
		c.sessMu.Unlock()
		if s != nil {
			s.close(ctx)
		}
	}
	select {
	case <-c.callbacks.workers.done:
		return nil
	case <-ctx.Done():
		return c.closeGaveUp(ctx, false)
	}
}

// closeGaveUp ends what Close waited for when its context ended first,
// and says what was left.
func (c *Client) closeGaveUp(ctx context.Context, heartbeatsLeft bool) error {
	running, dropped := c.callbacks.abandon()
	msg := fmt.Sprintf("Close stopped waiting: %d callbacks still running, %d queued callback events dropped", running, dropped)
	if heartbeatsLeft {
		// Nothing of the library's may outlive Close by more than a
		// moment: the calls in flight are cancelled, and their outcome
		// is unknown (the lock may have been heartbeated once more).
		c.abandonSends()
		msg += "; heartbeat calls in flight cancelled"
	}
	return &Error{Code: CodeCanceled, Message: msg, Err: context.Cause(ctx)}
}

// isNilInterface catches a typed nil pointer inside the interface, such
// as a nil *dynamodb.Client.
func isNilInterface(ddb DynamoDBAPI) bool {
	c, ok := ddb.(*dynamodb.Client)
	return ok && c == nil
}
