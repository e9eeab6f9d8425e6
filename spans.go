package ddblock

import (
	"context"
	"time"

	"github.com/aws/smithy-go/tracing"
)

// The spans of a client with WithTracerProvider, through smithy-go's
// tracing interfaces, which the AWS SDK traces through too: no tracing
// library is a dependency of this module. doc/metrics.md lists the names
// and attributes; they are OpenTelemetry's style, since that is where
// they end up.
const (
	// tracerScope names the client's tracer (the instrumentation scope).
	tracerScope = "github.com/ddblock/ddblock"

	spanAcquire      = "ddblock.acquire"
	spanRelease      = "ddblock.release"
	spanGuardedWrite = "ddblock.guarded_write"
	spanElectionTerm = "ddblock.election.term"
	spanLockLoss     = "ddblock.lock.loss"

	attrKey          = "ddblock.key"
	attrSortKey      = "ddblock.sort_key"
	attrOwner        = "ddblock.owner"
	attrOutcome      = "ddblock.outcome"
	attrAttempts     = "ddblock.attempts"
	attrTakeover     = "ddblock.takeover"
	attrTakeoverFast = "ddblock.takeover.fast"
	attrToken        = "ddblock.fencing_token"
	attrSemaphore    = "ddblock.semaphore"
	attrElection     = "ddblock.election"
	attrTerm         = "ddblock.election.term"
	attrHeld         = "ddblock.held"

	// outcomeOK is the outcome of a call that succeeded.
	outcomeOK = "OK"
)

// isNilTracerProvider is true for providers that trace nothing: a
// client with one of them starts no spans at all.
func isNilTracerProvider(tp tracing.TracerProvider) bool {
	switch tp.(type) {
	case tracing.NopTracerProvider, *tracing.NopTracerProvider:
		return true
	}
	return false
}

// startSpan starts a span named name, a child of ctx's span, and returns
// the context that carries it: the calls of the operation are made with
// that context, so that the SDK's spans nest under it. Without a tracer
// it returns ctx and a nil span, and costs nothing.
func (c *Client) startSpan(ctx context.Context, name string) (context.Context, tracing.Span) {
	if c.tracer == nil {
		return ctx, nil
	}
	return c.tracer.StartSpan(ctx, name)
}

// outcome is the outcome attribute of an operation's error: OK, or its
// code (UNKNOWN for an error that is not ddblock's).
func outcome(err error) string {
	if err == nil {
		return outcomeOK
	}
	if code := CodeOf(err); code != "" {
		return string(code)
	}
	return string(CodeUnknown)
}

// endSpan sets span's outcome and status from err, and ends it.
func endSpan(span tracing.Span, err error) {
	span.SetProperty(attrOutcome, outcome(err))
	if err != nil {
		span.SetStatus(tracing.SpanStatusError)
	} else {
		span.SetStatus(tracing.SpanStatusOK)
	}
	span.End()
}

// setLockProperties sets the attributes that name a lock on span.
func setLockProperties(span tracing.Span, pk, sk, owner string) {
	span.SetProperty(attrKey, pk)
	if sk != "" {
		span.SetProperty(attrSortKey, sk)
	}
	span.SetProperty(attrOwner, owner)
}

// traceCtx is what a lock keeps of the context its acquire was given,
// for the span of its loss: the values, not the deadline or cancel. Nil
// without a tracer, so that nothing of the caller's is kept then.
func (c *Client) traceCtx(ctx context.Context) context.Context {
	if c.tracer == nil {
		return nil
	}
	return context.WithoutCancel(ctx)
}

// endAcquireSpan ends the span of an acquire (AcquireLock,
// TryAcquireLock, Semaphore.Acquire) with what it came to.
func endAcquireSpan(span tracing.Span, attempts int, lock *Lock, err error) {
	span.SetProperty(attrAttempts, attempts)
	if lock != nil {
		if lock.sk != "" {
			span.SetProperty(attrSortKey, lock.sk) // a semaphore's slot
		}
		span.SetProperty(attrTakeover, lock.takenFrom != nil)
		if lock.takenFrom != nil {
			span.SetProperty(attrTakeoverFast, lock.fast)
		}
		if lock.token > 0 {
			span.SetProperty(attrToken, lock.token)
		}
	}
	endSpan(span, err)
}

// traceLossLocked records, to run once l.mu is released, a span for
// the lock's going into danger or being stolen (code), in the trace of
// the context its acquire was given: a child of the span that was
// current there, the work that acquired the lock, whether or not that
// span has ended. l.mu must be held.
func (l *Lock) traceLossLocked(code Code) {
	c := l.client
	if l.traceCtx == nil || c.tracer == nil {
		return
	}
	held := l.heldFor(c.clock.Monotonic())
	parent := l.traceCtx
	l.reportLocked(func() {
		_, span := c.tracer.StartSpan(parent, spanLockLoss)
		setLockProperties(span, l.pk, l.sk, l.owner)
		span.SetProperty(attrHeld, held.Seconds())
		if l.token > 0 {
			span.SetProperty(attrToken, l.token)
		}
		span.SetProperty(attrOutcome, string(code))
		span.SetStatus(tracing.SpanStatusError)
		span.End()
	})
}

// heldFor is how long l has been held, as of now (monotonic).
func (l *Lock) heldFor(now time.Duration) time.Duration { return now - l.acquired }
