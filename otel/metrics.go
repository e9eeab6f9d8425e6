package ddblockotel

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ddblock/ddblock"
)

// The metrics' attributes. None names a lock: keys are for spans.
const (
	attrOutcome      = "ddblock.outcome"       // OK, or the error's code
	attrTakeoverFast = "ddblock.takeover.fast" // the holder's stamp decided
	attrOperation    = "rpc.method"            // a DynamoDB operation, as the SDK's spans say it
)

// Bucket boundaries: OpenTelemetry's defaults are for milliseconds.
var (
	secondsBuckets  = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	holdBuckets     = []float64{0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}
	attemptBuckets  = []float64{1, 2, 3, 5, 10, 20, 50, 100}
	fractionBuckets = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}
)

// recorder is the ddblock.Metrics that writes to OpenTelemetry
// instruments. Its methods are quick and safe for concurrent use.
type recorder struct {
	acquireDuration  metric.Float64Histogram
	acquireAttempts  metric.Int64Histogram
	contentions      metric.Int64Counter
	takeovers        metric.Int64Counter
	leaseFraction    metric.Float64Histogram
	lateRounds       metric.Int64Counter
	dangers          metric.Int64Counter
	recoveries       metric.Int64Counter
	thefts           metric.Int64Counter
	throttles        metric.Int64Counter
	lateCallbacks    metric.Int64Counter
	held             metric.Int64UpDownCounter
	holdDuration     metric.Float64Histogram
	guardedDurations metric.Float64Histogram

	// Attribute sets made once, so that a measurement allocates none.
	outcomes   sync.Map // outcome string -> metric.MeasurementOption
	operations sync.Map // operation -> metric.MeasurementOption
	fast, slow metric.MeasurementOption
}

var _ ddblock.Metrics = (*recorder)(nil)

func newRecorder(m metric.Meter) (*recorder, error) {
	r := &recorder{
		fast: metric.WithAttributeSet(attribute.NewSet(attribute.Bool(attrTakeoverFast, true))),
		slow: metric.WithAttributeSet(attribute.NewSet(attribute.Bool(attrTakeoverFast, false))),
	}
	var errs []error
	f64h := func(name, unit, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	r.acquireDuration = f64h("ddblock.acquire.duration", "s", "Duration of acquires (AcquireLock, TryAcquireLock, Semaphore.Acquire), waits included, by outcome.", secondsBuckets)
	var err error
	r.acquireAttempts, err = m.Int64Histogram("ddblock.acquire.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts an acquire made, by outcome."), metric.WithExplicitBucketBoundaries(attemptBuckets...))
	errs = append(errs, err)
	r.contentions = counter("ddblock.lock.contentions", "{attempt}", "Acquire attempts that found the lock held.")
	r.takeovers = counter("ddblock.lock.takeovers", "{lock}", "Locks taken from a holder presumed dead.")
	r.leaseFraction = f64h("ddblock.heartbeat.lease_fraction", "1", "Time since a lock's previous successful write at each heartbeat, as a fraction of its lease, by outcome.", fractionBuckets)
	r.lateRounds = counter("ddblock.heartbeat.late_rounds", "{round}", "Heartbeat periods in which a heartbeat went out over a tenth of a period late.")
	r.dangers = counter("ddblock.lock.dangers", "{event}", "Locks that went into danger: no heartbeat landed within the safe period.")
	r.recoveries = counter("ddblock.lock.recoveries", "{event}", "Locks in danger that a heartbeat brought back.")
	r.thefts = counter("ddblock.lock.thefts", "{event}", "Held locks found taken by another client.")
	r.throttles = counter("ddblock.dynamodb.throttles", "{attempt}", "DynamoDB call attempts refused for throughput, by operation.")
	r.lateCallbacks = counter("ddblock.callback.late", "{event}", "Callback events delivered more than the safe period after the event.")
	r.held, err = m.Int64UpDownCounter("ddblock.lock.held", metric.WithUnit("{lock}"), metric.WithDescription("Locks held."))
	errs = append(errs, err)
	r.holdDuration = f64h("ddblock.lock.hold.duration", "s", "How long locks were held, measured when they end.", holdBuckets)
	r.guardedDurations = f64h("ddblock.guarded_write.duration", "s", "Duration of guarded writes, by outcome.", secondsBuckets)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// outcomeCode is the outcome attribute of err: OK, or its code.
func outcomeCode(err error) string {
	if err == nil {
		return "OK"
	}
	if code := ddblock.CodeOf(err); code != "" {
		return string(code)
	}
	return string(ddblock.CodeUnknown)
}

// byOutcome returns the attribute set of err's outcome.
func (r *recorder) byOutcome(err error) metric.MeasurementOption {
	o := outcomeCode(err)
	if v, ok := r.outcomes.Load(o); ok {
		return v.(metric.MeasurementOption)
	}
	v, _ := r.outcomes.LoadOrStore(o, metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOutcome, o))))
	return v.(metric.MeasurementOption)
}

// The instruments are synchronous, so every measurement is given a
// context; none of ddblock's calls carry one, and the SDK's exemplars
// need none.
var bg = context.Background()

func (r *recorder) AcquireFinished(latency time.Duration, attempts int, err error) {
	o := r.byOutcome(err)
	r.acquireDuration.Record(bg, latency.Seconds(), o)
	r.acquireAttempts.Record(bg, int64(attempts), o)
	if err == nil {
		r.held.Add(bg, 1)
	}
}

func (r *recorder) LockContended() { r.contentions.Add(bg, 1) }

func (r *recorder) LockTakenOver(fast bool) {
	if fast {
		r.takeovers.Add(bg, 1, r.fast)
	} else {
		r.takeovers.Add(bg, 1, r.slow)
	}
}

func (r *recorder) HeartbeatFinished(gap, lease time.Duration, err error) {
	if lease > 0 {
		r.leaseFraction.Record(bg, gap.Seconds()/lease.Seconds(), r.byOutcome(err))
	}
}

func (r *recorder) HeartbeatRoundLate(time.Duration, int) { r.lateRounds.Add(bg, 1) }

func (r *recorder) LockInDanger() { r.dangers.Add(bg, 1) }

func (r *recorder) LockRecovered() { r.recoveries.Add(bg, 1) }

func (r *recorder) LockStolen() { r.thefts.Add(bg, 1) }

func (r *recorder) CallThrottled(operation string) {
	v, ok := r.operations.Load(operation)
	if !ok {
		v, _ = r.operations.LoadOrStore(operation, metric.WithAttributeSet(attribute.NewSet(attribute.String(attrOperation, operation))))
	}
	r.throttles.Add(bg, 1, v.(metric.MeasurementOption))
}

func (r *recorder) CallbackLate(time.Duration) { r.lateCallbacks.Add(bg, 1) }

func (r *recorder) LockEnded(held time.Duration) {
	r.held.Add(bg, -1)
	r.holdDuration.Record(bg, held.Seconds())
}

func (r *recorder) GuardedWriteFinished(latency time.Duration, err error) {
	r.guardedDurations.Record(bg, latency.Seconds(), r.byOutcome(err))
}
