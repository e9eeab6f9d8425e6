// Package ddblockotel reports ddblock's locks to OpenTelemetry: metrics
// of every acquire, wait, takeover, heartbeat, loss and guarded write,
// and spans of acquires, releases, guarded writes, election terms and a
// lock's loss, the AWS SDK's DynamoDB spans nested under them. Setup is
// three lines beside the SDK client's:
//
//	tel, err := ddblockotel.New(ddblockotel.WithMeterProvider(mp), ddblockotel.WithTracerProvider(tp))
//	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.TracerProvider = tel.TracerProvider() })
//	client, err := ddblock.New(ddb, tel.ClientOptions()...)
//
// A lock's loss (danger, theft) is a span in the trace of the context
// its acquire was given, and an event on that context's span, the work
// that took the lock, if that span still records.
//
// The metric names, units and attributes, the spans and what to alert
// on are in the repository's doc/metrics.md. The lock's key is an
// attribute of spans only, never of metrics, whose series would
// otherwise grow with the keys.
//
// This is a module of its own (github.com/ddblock/ddblock/otel), so that
// the core module depends on no OpenTelemetry package.
package ddblockotel

import (
	"github.com/aws/smithy-go/tracing"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddblock/ddblock"
)

// scope is the instrumentation scope of ddblock's meter and tracer.
const scope = "github.com/ddblock/ddblock"

// Telemetry connects ddblock clients, and the SDK clients under them,
// to OpenTelemetry providers. One may serve any number of clients.
type Telemetry struct {
	metrics *recorder
	tracer  tracing.TracerProvider
}

// config is what the options of New set.
type config struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

// Option is an option of New.
type Option func(*config)

// WithMeterProvider sets the provider of ddblock's metrics. Default:
// OpenTelemetry's global one (otel.GetMeterProvider) at the time of New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets the provider of ddblock's spans, and of the
// SDK's through [Telemetry.TracerProvider]. Default: OpenTelemetry's
// global one (otel.GetTracerProvider) at the time of New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// New creates ddblock's instruments with the meter provider, and adapts
// the tracer provider. The error is the meter provider's, should it
// refuse an instrument.
func New(opts ...Option) (*Telemetry, error) {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	r, err := newRecorder(c.mp.Meter(scope))
	if err != nil {
		return nil, err
	}
	return &Telemetry{metrics: r, tracer: smithyTracerProvider{tp: c.tp}}, nil
}

// ClientOptions returns the options that make a ddblock client report
// to t: its metrics (ddblock.WithMetrics) and its spans
// (ddblock.WithTracerProvider). Pass them to ddblock.New; a later
// WithMetrics among the options replaces t's metrics.
func (t *Telemetry) ClientOptions() []ddblock.Option {
	return []ddblock.Option{ddblock.WithMetrics(t.metrics), ddblock.WithTracerProvider(t.tracer)}
}

// TracerProvider returns t's tracer provider as the AWS SDK takes it
// (dynamodb.Options.TracerProvider): given to the SDK client that the
// ddblock client uses, it makes the SDK's DynamoDB spans children of
// ddblock's.
func (t *Telemetry) TracerProvider() tracing.TracerProvider { return t.tracer }
