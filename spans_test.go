package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/tracing"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// spanLog is a smithy-go tracer provider that keeps every span ended:
// its name, its parent's name and its properties.
type spanLog struct {
	mu    sync.Mutex
	ended []*loggedSpan
}

type loggedSpan struct {
	log    *spanLog
	name   string
	parent string
	props  map[string]any
	status tracing.SpanStatus
}

type spanKey struct{}

func (l *spanLog) Tracer(string, ...tracing.TracerOption) tracing.Tracer { return l }

func (l *spanLog) StartSpan(ctx context.Context, name string, _ ...tracing.SpanOption) (context.Context, tracing.Span) {
	s := &loggedSpan{log: l, name: name, props: map[string]any{}}
	if p, ok := ctx.Value(spanKey{}).(*loggedSpan); ok {
		s.parent = p.name
	}
	return context.WithValue(ctx, spanKey{}, s), s
}

func (s *loggedSpan) Name() string                            { return s.name }
func (s *loggedSpan) Context() tracing.SpanContext            { return tracing.SpanContext{} }
func (s *loggedSpan) AddEvent(string, ...tracing.EventOption) {}
func (s *loggedSpan) SetStatus(st tracing.SpanStatus) {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.status = st
}
func (s *loggedSpan) SetProperty(k, v any) {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.props[k.(string)] = v
}
func (s *loggedSpan) End() {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	s.log.ended = append(s.log.ended, s)
}

// summary is each span ended, as "name < parent: outcome", in order.
func (l *spanLog) summary() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.ended {
		out = append(out, fmt.Sprintf("%s < %s: %v", s.name, s.parent, s.props["ddblock.outcome"]))
	}
	return out
}

func (l *spanLog) find(name string) *loggedSpan {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.ended {
		if s.name == name {
			return s
		}
	}
	return nil
}

// With WithTracerProvider, an acquire, a release and the loss of a lock
// are spans in the trace of the contexts they were given, the SDK's
// spans of the DynamoDB calls nest under ddblock's when the SDK client
// traces through the same provider, and the lock's end is reported to
// Metrics.LockEnded once.
func TestTracerProviderSpans(t *testing.T) {
	e := newEnv(t)
	var spans spanLog
	var m metricsLog
	ddb := dynamodb.New(ddbtest.Shared(t).Client(0).Options(), func(o *dynamodb.Options) { o.TracerProvider = &spans })
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithTracerProvider(&spans), ddblock.WithMetrics(&m))
	ctx, work := spans.StartSpan(context.Background(), "work")

	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	acq := spans.find("ddblock.acquire")
	if acq == nil || acq.parent != "work" {
		t.Fatalf("acquire span: %+v; spans %v", acq, spans.summary())
	}
	wantProps := map[string]any{"ddblock.key": "k", "ddblock.sort_key": "-", "ddblock.owner": c.Options().OwnerName,
		"ddblock.attempts": 1, "ddblock.takeover": false, "ddblock.outcome": "OK"}
	if diff := cmp.Diff(wantProps, acq.props); diff != "" {
		t.Errorf("acquire span's properties (-want +got):\n%s", diff)
	}
	if put := spans.find("DynamoDB.PutItem"); put == nil || put.parent != "ddblock.acquire" {
		t.Errorf("the SDK's PutItem span: %+v; want a child of ddblock.acquire", put)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rel := spans.find("ddblock.release"); rel == nil || rel.parent != "" || rel.props["ddblock.outcome"] != "OK" {
		t.Errorf("release span: %+v", rel)
	}

	// A lock stolen: a span in the trace of its acquire's context.
	lock, err = c.AcquireLock(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "s", "-", lock.RecordVersionNumber(), "thief")
	drive(t, clk, c, clk.Monotonic()+6*time.Second)
	if !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
		t.Fatalf("lock.Err() = %v; want LOCK_STOLEN", lock.Err())
	}
	ddbtest.Eventually(t, 10*time.Second, "the span of the loss", func() bool { return spans.find("ddblock.lock.loss") != nil })
	loss := spans.find("ddblock.lock.loss")
	if loss.parent != "work" || loss.props["ddblock.outcome"] != "LOCK_STOLEN" || loss.props["ddblock.key"] != "s" || loss.status != tracing.SpanStatusError {
		t.Errorf("loss span: %+v", loss)
	}
	work.End()
	if got := m.get("ended"); got != 2 {
		t.Errorf("LockEnded reported %d times; want 2 (one release, one theft)", got)
	}
}
