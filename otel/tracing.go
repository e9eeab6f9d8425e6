package ddblockotel

import (
	"context"
	"fmt"
	"sync"

	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// smithyTracerProvider adapts an OpenTelemetry tracer provider to
// smithy-go's tracing interfaces, which ddblock and the AWS SDK trace
// through. Spans start from the OpenTelemetry span in the context, so
// that ddblock's and the SDK's nest under the application's and under
// each other.
type smithyTracerProvider struct {
	tp trace.TracerProvider
}

func (p smithyTracerProvider) Tracer(scope string, opts ...tracing.TracerOption) tracing.Tracer {
	var o tracing.TracerOptions
	for _, opt := range opts {
		opt(&o)
	}
	var topts []trace.TracerOption
	if attrs := attributes(&o.Properties); len(attrs) > 0 {
		topts = append(topts, trace.WithInstrumentationAttributes(attrs...))
	}
	return smithyTracer{t: p.tp.Tracer(scope, topts...)}
}

type smithyTracer struct {
	t trace.Tracer
}

func (t smithyTracer) StartSpan(ctx context.Context, name string, opts ...tracing.SpanOption) (context.Context, tracing.Span) {
	var o tracing.SpanOptions
	for _, opt := range opts {
		opt(&o)
	}
	sopts := []trace.SpanStartOption{trace.WithSpanKind(spanKind(o.Kind))}
	if attrs := attributes(&o.Properties); len(attrs) > 0 {
		sopts = append(sopts, trace.WithAttributes(attrs...))
	}
	parent := trace.SpanFromContext(ctx)
	ctx, s := t.t.Start(ctx, name, sopts...)
	if name == lossSpan && parent.IsRecording() {
		return ctx, &lossEventSpan{smithySpan: smithySpan{s: s, name: name}, parent: parent}
	}
	return ctx, smithySpan{s: s, name: name}
}

// lossSpan is the name of ddblock's span of a lock's loss, a child of
// the span that was current in the context its acquire was given: the
// work that took the lock (doc/metrics.md).
const lossSpan = "ddblock.lock.loss"

// lossEventSpan is a loss span whose parent, the work's span, was still
// recording when it started: the loss is also an event on that span,
// with the loss span's attributes, where a trace viewer shows it on the
// work itself.
type lossEventSpan struct {
	smithySpan
	parent trace.Span

	mu    sync.Mutex
	attrs []attribute.KeyValue
}

func (s *lossEventSpan) SetProperty(k, v any) {
	kv := attributeOf(k, v)
	s.mu.Lock()
	s.attrs = append(s.attrs, kv)
	s.mu.Unlock()
	s.s.SetAttributes(kv)
}

func (s *lossEventSpan) End() {
	s.mu.Lock()
	attrs := s.attrs
	s.mu.Unlock()
	s.parent.AddEvent(lossSpan, trace.WithAttributes(attrs...)) // a no-op once the parent has ended
	s.s.End()
}

type smithySpan struct {
	s    trace.Span
	name string
}

func (s smithySpan) Name() string { return s.name }

func (s smithySpan) Context() tracing.SpanContext {
	sc := s.s.SpanContext()
	return tracing.SpanContext{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), IsRemote: sc.IsRemote()}
}

func (s smithySpan) AddEvent(name string, opts ...tracing.EventOption) {
	var o tracing.EventOptions
	for _, opt := range opts {
		opt(&o)
	}
	s.s.AddEvent(name, trace.WithAttributes(attributes(&o.Properties)...))
}

func (s smithySpan) SetStatus(status tracing.SpanStatus) {
	switch status {
	case tracing.SpanStatusOK:
		s.s.SetStatus(codes.Ok, "")
	case tracing.SpanStatusError:
		s.s.SetStatus(codes.Error, "")
	}
}

func (s smithySpan) SetProperty(k, v any) { s.s.SetAttributes(attributeOf(k, v)) }

func (s smithySpan) End() { s.s.End() }

func spanKind(k tracing.SpanKind) trace.SpanKind {
	switch k {
	case tracing.SpanKindClient:
		return trace.SpanKindClient
	case tracing.SpanKindServer:
		return trace.SpanKindServer
	case tracing.SpanKindProducer:
		return trace.SpanKindProducer
	case tracing.SpanKindConsumer:
		return trace.SpanKindConsumer
	}
	return trace.SpanKindInternal
}

// attributes turns smithy properties into OpenTelemetry attributes.
func attributes(p *smithy.Properties) []attribute.KeyValue {
	values := p.Values()
	if len(values) == 0 {
		return nil
	}
	attrs := make([]attribute.KeyValue, 0, len(values))
	for k, v := range values {
		attrs = append(attrs, attributeOf(k, v))
	}
	return attrs
}

// attributeOf turns one property into an attribute: keys are strings
// (or printed), values keep their type where OpenTelemetry has it and
// are printed otherwise.
func attributeOf(k, v any) attribute.KeyValue {
	key, ok := k.(string)
	if !ok {
		key = fmt.Sprint(k)
	}
	switch v := v.(type) {
	case string:
		return attribute.String(key, v)
	case bool:
		return attribute.Bool(key, v)
	case int:
		return attribute.Int(key, v)
	case int64:
		return attribute.Int64(key, v)
	case int32:
		return attribute.Int64(key, int64(v))
	case float64:
		return attribute.Float64(key, v)
	case float32:
		return attribute.Float64(key, float64(v))
	case []string:
		return attribute.StringSlice(key, v)
	case fmt.Stringer:
		return attribute.String(key, v.String())
	}
	return attribute.String(key, fmt.Sprint(v))
}
