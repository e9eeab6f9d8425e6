package ddblock

import (
	"context"
	"errors"
	"time"
)

// retryLoop is the loop of attempts that AcquireLock, TryAcquireLock and
// Semaphore.Acquire share: attempts at start + n × the retry period, as
// python_dynamodb_lock makes them (and, for a target that is woken,
// between them: see wakingTarget), until one wins, one fails for good,
// the retry timeout would pass, the context ends or the client closes.
// Transient failures (throttling, server errors, lost connections) are
// tried again at the next attempt; the last one is returned should the
// loop give up.
type retryLoop struct {
	c        *Client
	once     bool // TryAcquireLock: one attempt, then an answer
	start    time.Duration
	attempts int
	lastErr  error // the last attempt's transient failure, if it failed
	// line is the waiter's place in the line of fair waiters of what it
	// acquires (line.go); nil unless it waits fairly.
	line *line
}

// headPolls is how many times a period the first in a line of fair
// waiters tries: it alone may take the lock, so how soon it sees a
// release is the line's handoff, and every waiter behind it waits
// through one handoff per place. Its reads of the line stay at one a
// period (see line.turn).
const headPolls = 4

// retryTarget is what one kind of acquire brings to the loop.
type retryTarget interface {
	// attempt makes one try: the lock when won, an error when the
	// acquire must end (or failed in a way worth another try), neither
	// when what it wants is held.
	attempt(ctx context.Context) (*Lock, error)
	// fail makes an error about what is being acquired.
	fail(code Code, msg string, cause error) *Error
	// heldError is the answer when the attempts ran out, the last of
	// them finding everything held: LOCK_HELD for TryAcquireLock,
	// ACQUIRE_TIMEOUT otherwise.
	heldError() error
	// retryingAfter logs a transient failure that will be tried again.
	retryingAfter(err error)
}

// wakingTarget is a target whose waits may end before their time: when
// what it waits for changes (see waiters.go). An attempt made then does
// not count against the schedule of attempts.
type wakingTarget interface {
	// wakeups returns channels that end the sleep after an attempt when
	// closed; nil ones never do.
	wakeups() (a, b <-chan struct{})
}

func (r *retryLoop) run(ctx context.Context, t retryTarget, opts *acquireOptions) (*Lock, error) {
	c := r.c
	// scheduled counts the attempts due so far: the next is due at
	// start + scheduled × the retry period. An attempt made before its
	// time (woken early) leaves it as it is.
	scheduled := 0
	for {
		if c.isClosed() {
			return nil, t.fail(CodeClientShutdown, "the client is closed", nil)
		}
		if ctx.Err() != nil {
			return nil, contextError(ctx, t.fail)
		}
		r.attempts++
		lock, err := r.attempt(ctx, t, opts)
		var backoff *backingOff
		switch {
		case lock != nil:
			return lock, nil
		case errors.As(err, &backoff):
			// No call was made: the key's reads back off from a
			// throttle, which was logged when it came.
			r.lastErr = backoff.err
		case err != nil && !transient(err):
			return nil, err
		case err != nil:
			r.lastErr = err
			t.retryingAfter(err)
		default:
			r.lastErr = nil
			c.opts.Metrics.LockContended()
		}
		if r.once {
			return nil, r.giveUp(t)
		}
		if r.line.heldAtHead() {
			// Served at once, but what it waits for was held: it waits
			// at the head, where those behind must see its ticket.
			if err := r.line.writeTicket(ctx); err != nil && ctx.Err() == nil {
				r.lastErr = err
			}
		}
		// Sleep until start + n × the retry period, as Python does,
		// unless that is past the retry timeout. The next attempt is due
		// at the first such time still to come: an attempt that took
		// several periods (the SDK backing off from throttles, say) uses
		// up the periods it took, so that the timeout counts time, not
		// attempts.
		for now := c.clock.Monotonic(); now >= r.start+time.Duration(scheduled)*opts.RetryPeriod; {
			scheduled++
		}
		wake := r.start + time.Duration(scheduled)*opts.RetryPeriod
		if wake > r.start+opts.RetryTimeout {
			return nil, r.giveUp(t)
		}
		if r.line.polling() {
			wake = min(wake, c.clock.Monotonic()+opts.RetryPeriod/headPolls)
		}
		if err := r.sleep(ctx, t, wake); err != nil {
			return nil, err
		}
	}
}

// errWaitOver is the cause of an attempt cut because the wait ran out.
var errWaitOver = errors.New("ddblock: the retry timeout passed while a call was in flight")

// attempt makes one attempt of a waiting loop within the wait: its calls
// end by the retry timeout plus HeartbeatTimeout (the bound of one call),
// however long the SDK backs off inside them, so that a throttled or
// hung call overruns the wait by one call's timeout at the most. A try
// (TryAcquireLock) makes its one attempt on the caller's context alone.
func (r *retryLoop) attempt(ctx context.Context, t retryTarget, opts *acquireOptions) (*Lock, error) {
	if r.once {
		return t.attempt(ctx)
	}
	left := r.start + opts.RetryTimeout + r.c.opts.HeartbeatTimeout - r.c.clock.Monotonic()
	actx, cancel := context.WithTimeoutCause(ctx, max(left, 0), errWaitOver)
	defer cancel()
	return t.attempt(actx)
}

// giveUp is the error of a loop that ran out of attempts: the last
// attempt's failure if it failed, else the target's answer for "held".
func (r *retryLoop) giveUp(t retryTarget) error {
	if r.lastErr != nil {
		return r.lastErr
	}
	return t.heldError()
}

// sleep waits until due (monotonic), or less when the target is woken.
func (r *retryLoop) sleep(ctx context.Context, t retryTarget, due time.Duration) error {
	var wakeA, wakeB <-chan struct{}
	if w, ok := t.(wakingTarget); ok {
		wakeA, wakeB = w.wakeups()
	}
	timer := r.c.clock.NewTimer(max(due-r.c.clock.Monotonic(), 0))
	defer timer.Stop()
	select {
	case <-timer.C():
	case <-wakeA:
	case <-wakeB:
	case <-ctx.Done():
		return contextError(ctx, t.fail)
	case <-r.c.ctx.Done():
		return t.fail(CodeClientShutdown, "the client was closed while waiting", nil)
	}
	return nil
}

// contextError is the error of an acquire whose context ended: its
// deadline is an ACQUIRE_TIMEOUT, a cancel is CANCELED.
func contextError(ctx context.Context, fail func(Code, string, error) *Error) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, errWaitOver) {
		return fail(CodeAcquireTimeout, "the retry timeout passed", cause)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fail(CodeAcquireTimeout, "the context's deadline passed", cause)
	}
	return fail(CodeCanceled, "the context was cancelled", cause)
}

// classifyCallError classifies a failed DynamoDB call made while
// acquiring, keyed by (pk, sk).
func (c *Client) classifyCallError(ctx context.Context, fail func(Code, string, error) *Error, doing string, err error, pk, sk string) error {
	if ctx.Err() != nil {
		return contextError(ctx, fail)
	}
	var lerr *Error
	if errors.As(err, &lerr) {
		return lerr // already classified, such as an unreadable item
	}
	return c.tableError(err, doing, pk, sk)
}
