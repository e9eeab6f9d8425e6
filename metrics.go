package ddblock

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/ddblock/ddblock/internal/wire"
)

// Metrics receives measurements of a client's work, to be wired to any
// metrics system. The module github.com/ddblock/ddblock/otel implements
// it on OpenTelemetry's instruments (doc/metrics.md).
// Methods are called on the client's hot paths and from several
// goroutines at once: they must be safe for concurrent use and quick.
// No mutex of the client's is held while one runs, so a slow one delays
// only the goroutine that called it, never a lock's Err or Status.
// Embed [NoMetrics] to implement only the methods you need.
type Metrics interface {
	// AcquireFinished reports an AcquireLock or TryAcquireLock call: how
	// long it took, how many attempts it made, and its error (nil when
	// the lock was acquired).
	AcquireFinished(latency time.Duration, attempts int, err error)
	// LockContended reports an attempt that found the lock held.
	LockContended()
	// LockTakenOver reports a lock taken from a holder presumed dead;
	// fast is true when the holder's wall-clock stamp decided it (see
	// Options.MaxClockSkew).
	LockTakenOver(fast bool)
	// HeartbeatFinished reports one heartbeat call: gap is the time since
	// the lock's previous successful write, to be read against its lease;
	// err is nil on success.
	HeartbeatFinished(gap, lease time.Duration, err error)
	// HeartbeatRoundLate reports a round (one heartbeat period of the
	// scheduler's work) in which a heartbeat went out more than a tenth
	// of a period after it was due: the server, or the senders, cannot
	// keep up. overrun is the latest send's lateness; locks the number
	// held.
	HeartbeatRoundLate(overrun time.Duration, locks int)
	// LockInDanger, LockRecovered and LockStolen report those events.
	LockInDanger()
	LockRecovered()
	LockStolen()
	// CallThrottled reports a DynamoDB call attempt refused for
	// throughput (ThrottlingException, ProvisionedThroughputExceeded…),
	// retried or not. It is seen only through a *dynamodb.Client.
	CallThrottled(operation string)
	// CallbackLate reports a callback event whose delivery started more
	// than the safe period after the event: the callbacks are too slow
	// for Options.CallbackWorkers, and the application hears of trouble
	// later than the lock allows.
	CallbackLate(waited time.Duration)
	// LockEnded reports the end of a lock whose acquire was reported
	// with a nil error, once: released (by Close too) or stolen (its
	// session lost included). held is the time since its acquiring write
	// was sent. A lock kept by Close without releaseLocks is still held,
	// and ends when it is released. Acquires counted up and ends counted
	// down give the locks held.
	LockEnded(held time.Duration)
	// GuardedWriteFinished reports a Lock.GuardedWrite call on a lock of
	// a client: how long it took and its error (nil when written;
	// CodeOf gives the outcome, CodeLockNotHeld and
	// CodeWriteConditionFailed among them).
	GuardedWriteFinished(latency time.Duration, err error)
}

// NoMetrics discards every measurement. Embed it in a Metrics
// implementation to implement only some methods.
type NoMetrics struct{}

// AcquireFinished does nothing.
func (NoMetrics) AcquireFinished(time.Duration, int, error) {}

// LockContended does nothing.
func (NoMetrics) LockContended() {}

// LockTakenOver does nothing.
func (NoMetrics) LockTakenOver(bool) {}

// HeartbeatFinished does nothing.
func (NoMetrics) HeartbeatFinished(time.Duration, time.Duration, error) {}

// HeartbeatRoundLate does nothing.
func (NoMetrics) HeartbeatRoundLate(time.Duration, int) {}

// LockInDanger does nothing.
func (NoMetrics) LockInDanger() {}

// LockRecovered does nothing.
func (NoMetrics) LockRecovered() {}

// LockStolen does nothing.
func (NoMetrics) LockStolen() {}

// CallThrottled does nothing.
func (NoMetrics) CallThrottled(string) {}

// CallbackLate does nothing.
func (NoMetrics) CallbackLate(time.Duration) {}

// LockEnded does nothing.
func (NoMetrics) LockEnded(time.Duration) {}

// GuardedWriteFinished does nothing.
func (NoMetrics) GuardedWriteFinished(time.Duration, error) {}

// callOpts returns the per-call SDK options every DynamoDB call of the
// client carries. They add middlewares to the call's stack around and
// just inside the SDK's retry middleware, where they see each attempt's
// outcome, and leave the retryer alone: a wrapper around the retryer
// would hide its aws.RetryerV2 side (GetAttemptToken), and with it the
// client-side rate limiter of the SDK's adaptive retry mode.
//
// One judges the call by all its attempts (wire.JudgeAttempts): a call
// whose first attempt may have been applied is never reported as never
// sent because its retries could not connect. The other reports every
// throttled attempt of operation to the client's metrics.
func (c *Client) callOpts(operation string) []func(*dynamodb.Options) {
	m := c.opts.Metrics
	_, none := m.(NoMetrics)
	return []func(*dynamodb.Options){func(o *dynamodb.Options) {
		// o is the call's own copy of the client's options.
		o.APIOptions = append(o.APIOptions, wire.JudgeAttempts)
		if !none {
			o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
				return addThrottleCounter(s, operation, m)
			})
		}
	}}
}

// throttleCounterID names ddblock's middleware in the SDK's stack.
const throttleCounterID = "ddblock.ThrottleCounter"

// addThrottleCounter puts the counting middleware right after the retry
// middleware in the Finalize step, so that it runs once an attempt; in a
// stack without retries, each call is one attempt, and it goes first.
func addThrottleCounter(s *middleware.Stack, op string, m Metrics) error {
	count := middleware.FinalizeMiddlewareFunc(throttleCounterID, func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
		middleware.FinalizeOutput, middleware.Metadata, error,
	) {
		out, md, err := next.HandleFinalize(ctx, in)
		if wire.Throttled(err) {
			m.CallThrottled(op)
		}
		return out, md, err
	})
	if _, ok := s.Finalize.Get(wire.RetryID); ok {
		return s.Finalize.Insert(count, wire.RetryID, middleware.After)
	}
	return s.Finalize.Add(count, middleware.Before)
}
