package ddblockotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ddblock/ddblock"
	ddblockotel "github.com/ddblock/ddblock/otel"
)

// env is one test's OpenTelemetry SDK, reading into memory, its lock
// table, and an SDK client that traces through the same provider.
type env struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
	tel    *ddblockotel.Telemetry
	ddb    *dynamodb.Client
	table  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), table: newTable(t)}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	e.tracer = tp.Tracer("test")
	tel, err := ddblockotel.New(ddblockotel.WithMeterProvider(mp), ddblockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	e.tel = tel
	e.ddb = sdkClient(t, func(o *dynamodb.Options) { o.TracerProvider = tel.TracerProvider() })
	return e
}

// client is a ddblock client on the test's table that reports to the
// test's OpenTelemetry SDK, closed when the test ends.
func (e *env) client(opts ...ddblock.Option) *ddblock.Client {
	e.t.Helper()
	return e.clientOn(e.ddb, append(e.tel.ClientOptions(), opts...)...)
}

func (e *env) clientOn(ddb ddblock.DynamoDBAPI, opts ...ddblock.Option) *ddblock.Client {
	e.t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := ddblock.New(ddb, append([]ddblock.Option{ddblock.WithTableName(e.table), ddblock.WithLogger(quiet)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx, true)
	})
	return c
}

// collect reads every metric point so far.
func (e *env) collect() []metricdata.Metrics {
	e.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		e.t.Fatal(err)
	}
	var all []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/ddblock/ddblock" {
			e.t.Errorf("metrics of scope %q", sm.Scope.Name)
		}
		all = append(all, sm.Metrics...)
	}
	// No metric point may name a lock: one series per key would grow
	// without bound.
	for _, m := range all {
		for _, set := range attributeSets(m) {
			for _, kv := range set.ToSlice() {
				if kv.Value.Type() == attribute.STRING && slices.Contains([]string{"k", "s", "d", "leader"}, kv.Value.AsString()) {
					e.t.Errorf("metric %s has the attribute %s=%s, a lock's key", m.Name, kv.Key, kv.Value.AsString())
				}
			}
		}
	}
	return all
}

func attributeSets(m metricdata.Metrics) []attribute.Set {
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

// matches is true when set holds every one of want.
func matches(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func find(t *testing.T, all []metricdata.Metrics, name, unit string) metricdata.Metrics {
	t.Helper()
	for _, m := range all {
		if m.Name == name {
			if m.Unit != unit {
				t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
			}
			return m
		}
	}
	return metricdata.Metrics{Name: name}
}

// sum is the value of counter (or up-down counter) name over the points
// with the attributes want.
func sum(t *testing.T, all []metricdata.Metrics, name, unit string, want ...attribute.KeyValue) int64 {
	t.Helper()
	m := find(t, all, name, unit)
	if m.Data == nil {
		return 0
	}
	d, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, not an int64 sum", name, m.Data)
	}
	var n int64
	for _, p := range d.DataPoints {
		if matches(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// hist is the count and sum of histogram name over the points with the
// attributes want.
func hist(t *testing.T, all []metricdata.Metrics, name, unit string, want ...attribute.KeyValue) (count uint64, total float64) {
	t.Helper()
	m := find(t, all, name, unit)
	switch d := m.Data.(type) {
	case nil:
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				count, total = count+p.Count, total+p.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, want) {
				count, total = count+p.Count, total+float64(p.Sum)
			}
		}
	default:
		t.Fatalf("%s is a %T, not a histogram", name, m.Data)
	}
	return count, total
}

func outcome(o string) attribute.KeyValue { return attribute.String("ddblock.outcome", o) }

// ended returns the spans ended so far with the given name.
func (e *env) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the one span ended with the given name, waiting for it
// a while (a loss's and a term's end on goroutines of the client).
func (e *env) one(name string) sdktrace.ReadOnlySpan {
	e.t.Helper()
	eventually(e.t, "a span "+name, func() bool { return len(e.ended(name)) > 0 })
	got := e.ended(name)
	if len(got) != 1 {
		e.t.Fatalf("%d spans %s, want 1", len(got), name)
	}
	return got[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// childOf fails the test unless child's parent is parent.
func childOf(t *testing.T, child sdktrace.ReadOnlySpan, parent trace.SpanContext) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanID() || child.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("span %s: parent %v, want %v", child.Name(), child.Parent().SpanID(), parent.SpanID())
	}
}

// eventually waits, without any timing assertion, for cond: a minute at
// the most, for a busy machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An acquire and a release: their metric points, their spans in the
// trace of the request that made them, and the SDK's DynamoDB spans
// nested under them.
func TestAcquireRelease(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx, request := e.tracer.Start(context.Background(), "request")
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(t, e.collect(), "ddblock.lock.held", "{lock}"); n != 1 {
		t.Errorf("ddblock.lock.held = %d while held, want 1", n)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	request.End()

	all := e.collect()
	if n, _ := hist(t, all, "ddblock.acquire.duration", "s", outcome("OK")); n != 1 {
		t.Errorf("ddblock.acquire.duration{OK}: %d points, want 1", n)
	}
	if n, s := hist(t, all, "ddblock.acquire.attempts", "{attempt}", outcome("OK")); n != 1 || s != 1 {
		t.Errorf("ddblock.acquire.attempts{OK}: count %d sum %v, want 1 and 1", n, s)
	}
	if n := sum(t, all, "ddblock.lock.held", "{lock}"); n != 0 {
		t.Errorf("ddblock.lock.held = %d once released, want 0", n)
	}
	if n, _ := hist(t, all, "ddblock.lock.hold.duration", "s"); n != 1 {
		t.Errorf("ddblock.lock.hold.duration: %d points, want 1", n)
	}
	if n := sum(t, all, "ddblock.lock.contentions", "{attempt}"); n != 0 {
		t.Errorf("ddblock.lock.contentions = %d, want 0", n)
	}

	acquire := e.one("ddblock.acquire")
	childOf(t, acquire, request.SpanContext())
	for key, want := range map[string]attribute.Value{
		"ddblock.key":      attribute.StringValue("k"),
		"ddblock.sort_key": attribute.StringValue("-"),
		"ddblock.owner":    attribute.StringValue(c.Options().OwnerName),
		"ddblock.attempts": attribute.IntValue(1),
		"ddblock.outcome":  attribute.StringValue("OK"),
		"ddblock.takeover": attribute.BoolValue(false),
	} {
		if got := attr(acquire, key); got != want {
			t.Errorf("acquire span: %s = %v, want %v", key, got.Emit(), want.Emit())
		}
	}
	if acquire.Status().Code != codes.Ok {
		t.Errorf("acquire span's status: %v", acquire.Status())
	}
	childOf(t, e.one("DynamoDB.PutItem"), acquire.SpanContext())
	release := e.one("ddblock.release")
	childOf(t, release, request.SpanContext())
	if attr(release, "ddblock.outcome").AsString() != "OK" || attr(release, "ddblock.key").AsString() != "k" {
		t.Errorf("release span's attributes: %v", release.Attributes())
	}
	childOf(t, e.one("DynamoDB.DeleteItem"), release.SpanContext())
}

// A wait on a lock whose holder died: a try told LOCK_HELD, then an
// acquire that attempts several times and takes the lock over once its
// lease has run out unrefreshed.
func TestContendedWaitAndTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The holder reports nowhere, and dies: Close without release stops
	// its heartbeats and leaves its item, with a 2 s lease.
	dead := e.clientOn(sdkClient(t), ddblock.WithLeaseDuration(2*time.Second))
	if _, err := dead.AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := dead.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	if _, err := c.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("TryAcquireLock of a held lock: %v, want LOCK_HELD", err)
	}
	lock, err := c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(100*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if lock.TakenOverFrom() == nil {
		t.Fatal("the lock was not taken over")
	}

	all := e.collect()
	if n, _ := hist(t, all, "ddblock.acquire.duration", "s", outcome("LOCK_HELD")); n != 1 {
		t.Errorf("ddblock.acquire.duration{LOCK_HELD}: %d points, want 1", n)
	}
	n, attempts := hist(t, all, "ddblock.acquire.attempts", "{attempt}", outcome("OK"))
	if n != 1 || attempts < 2 {
		t.Errorf("ddblock.acquire.attempts{OK}: count %d sum %v, want 1 and at least 2", n, attempts)
	}
	if n := sum(t, all, "ddblock.lock.contentions", "{attempt}"); n < 2 {
		t.Errorf("ddblock.lock.contentions = %d, want at least 2 (the try, and the wait)", n)
	}
	if n := sum(t, all, "ddblock.lock.takeovers", "{lock}", attribute.Bool("ddblock.takeover.fast", false)); n != 1 {
		t.Errorf("ddblock.lock.takeovers{fast=false} = %d, want 1", n)
	}

	spans := e.ended("ddblock.acquire")
	if len(spans) != 2 {
		t.Fatalf("%d acquire spans, want 2", len(spans))
	}
	try, wait := spans[0], spans[1]
	if attr(try, "ddblock.outcome").AsString() != "LOCK_HELD" || try.Status().Code != codes.Error {
		t.Errorf("the try's span: %v %v", try.Attributes(), try.Status())
	}
	if attr(wait, "ddblock.outcome").AsString() != "OK" || attr(wait, "ddblock.attempts").AsInt64() != int64(attempts) ||
		!attr(wait, "ddblock.takeover").AsBool() || attr(wait, "ddblock.takeover.fast").AsBool() {
		t.Errorf("the wait's span: %v", wait.Attributes())
	}
	// Each attempt's read is a span of the SDK's under the wait's.
	var reads int
	for _, s := range e.ended("DynamoDB.GetItem") {
		if s.Parent().SpanID() == wait.SpanContext().SpanID() {
			reads++
		}
	}
	if reads < 1 {
		t.Errorf("no GetItem span under the wait's")
	}
}

// A guarded write: written on a server with transactions (DynamoDB
// Local), TRANSACTIONS_UNSUPPORTED on dynalite, and so reported.
func TestGuardedWrite(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx, request := e.tracer.Start(context.Background(), "request")
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{
		TableName: aws.String(e.table),
		Item: map[string]types.AttributeValue{
			"lock_key": &types.AttributeValueMemberS{Value: "d"}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
			"v": &types.AttributeValueMemberS{Value: "1"},
		},
	}}}})
	want := "OK"
	if !server.Transactions {
		want = string(ddblock.CodeTransactionsUnsupported)
	}
	if got := "OK"; err != nil {
		got = string(ddblock.CodeOf(err))
		if got != want {
			t.Fatalf("GuardedWrite: %v, want %s", err, want)
		}
	} else if want != "OK" {
		t.Fatalf("GuardedWrite succeeded on %s, want %s", server.Kind, want)
	}
	request.End()

	all := e.collect()
	if n, _ := hist(t, all, "ddblock.guarded_write.duration", "s", outcome(want)); n != 1 {
		t.Errorf("ddblock.guarded_write.duration{%s}: %d points, want 1", want, n)
	}
	span := e.one("ddblock.guarded_write")
	childOf(t, span, request.SpanContext())
	if attr(span, "ddblock.outcome").AsString() != want || attr(span, "ddblock.key").AsString() != "k" {
		t.Errorf("guarded write span: %v", span.Attributes())
	}
	if (span.Status().Code == codes.Error) != (want != "OK") {
		t.Errorf("guarded write span's status %v for outcome %s", span.Status(), want)
	}
	if server.Transactions {
		childOf(t, e.one("DynamoDB.TransactWriteItems"), span.SpanContext())
	}
}

// blockable is an SDK client whose UpdateItem calls (a lock's
// heartbeats) fail while blocked.
type blockable struct {
	*dynamodb.Client
	blocked atomic.Bool
}

func (b *blockable) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if b.blocked.Load() {
		return nil, errors.New("heartbeats blocked by the test")
	}
	return b.Client.UpdateItem(ctx, in, optFns...)
}

// A lock in danger (its heartbeats failing past the safe period), then
// recovered, then stolen: the events' metrics, and a span for the danger
// and one for the theft in the trace of the work that acquired it.
func TestLoss(t *testing.T) {
	e := newEnv(t)
	ddb := &blockable{Client: e.ddb}
	c := e.clientOn(ddb, append(e.tel.ClientOptions(), ddblock.WithLeaseDuration(3*time.Second))...)
	ctx, work := e.tracer.Start(context.Background(), "work")
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ddb.blocked.Store(true)
	eventually(t, "the lock in danger", func() bool { return errors.Is(lock.Err(), ddblock.CodeLockInDanger) })
	ddb.blocked.Store(false)
	eventually(t, "the lock recovered", func() bool { return lock.Status() == ddblock.StatusLocked })

	// Another writer takes the item: the next heartbeat finds it stolen.
	_, err = e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: aws.String(e.table),
		Key: map[string]types.AttributeValue{
			"lock_key": &types.AttributeValueMemberS{Value: "k"}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
		},
		UpdateExpression:          aws.String("SET record_version_number = :thief"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":thief": &types.AttributeValueMemberS{Value: "thief"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the lock stolen", func() bool { return errors.Is(lock.Err(), ddblock.CodeLockStolen) })
	eventually(t, "two loss spans", func() bool { return len(e.ended("ddblock.lock.loss")) == 2 })
	work.End()

	all := e.collect()
	for name, want := range map[string]int64{"ddblock.lock.dangers": 1, "ddblock.lock.recoveries": 1, "ddblock.lock.thefts": 1} {
		if n := sum(t, all, name, "{event}"); n != want {
			t.Errorf("%s = %d, want %d", name, n, want)
		}
	}
	if n := sum(t, all, "ddblock.lock.held", "{lock}"); n != 0 {
		t.Errorf("ddblock.lock.held = %d once stolen, want 0", n)
	}
	if n, _ := hist(t, all, "ddblock.lock.hold.duration", "s"); n != 1 {
		t.Errorf("ddblock.lock.hold.duration: %d points, want 1", n)
	}
	if n, _ := hist(t, all, "ddblock.heartbeat.lease_fraction", "1", outcome("OK")); n < 1 {
		t.Errorf("no successful heartbeat in ddblock.heartbeat.lease_fraction")
	}
	ok, _ := hist(t, all, "ddblock.heartbeat.lease_fraction", "1", outcome("OK"))
	if every, _ := hist(t, all, "ddblock.heartbeat.lease_fraction", "1"); every <= ok {
		t.Errorf("no failed heartbeat in ddblock.heartbeat.lease_fraction")
	}

	var outcomes []string
	for _, s := range e.ended("ddblock.lock.loss") {
		childOf(t, s, work.SpanContext())
		if s.Status().Code != codes.Error || attr(s, "ddblock.key").AsString() != "k" {
			t.Errorf("loss span: %v %v", s.Attributes(), s.Status())
		}
		outcomes = append(outcomes, attr(s, "ddblock.outcome").AsString())
	}
	if want := []string{"LOCK_IN_DANGER", "LOCK_STOLEN"}; !slices.Equal(outcomes, want) {
		t.Errorf("loss spans' outcomes %v, want %v", outcomes, want)
	}
	// The work's span, still recording then, carries them as events.
	var events []string
	for _, ev := range e.one("work").Events() {
		if ev.Name == "ddblock.lock.loss" {
			for _, kv := range ev.Attributes {
				if kv.Key == "ddblock.outcome" {
					events = append(events, kv.Value.AsString())
				}
			}
		}
	}
	if want := []string{"LOCK_IN_DANGER", "LOCK_STOLEN"}; !slices.Equal(events, want) {
		t.Errorf("the work span's loss events say %v, want %v", events, want)
	}
}

// An election term: a span from the win to the resignation, in the trace
// of the campaign, under which the leader's work nests.
func TestElectionTerm(t *testing.T) {
	e := newEnv(t)
	c := e.client(ddblock.WithFencingTokens())
	el, err := c.NewElection("leader")
	if err != nil {
		t.Fatal(err)
	}
	ctx, campaign := e.tracer.Start(context.Background(), "campaign")
	lead, err := el.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	_, leaderWork := e.tracer.Start(lead.Context(), "leader-work")
	leaderWork.End()
	if err := el.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	campaign.End()

	term := e.one("ddblock.election.term")
	childOf(t, term, campaign.SpanContext())
	childOf(t, e.one("leader-work"), term.SpanContext())
	childOf(t, e.one("ddblock.acquire"), campaign.SpanContext())
	if attr(term, "ddblock.election").AsString() != "leader" || attr(term, "ddblock.outcome").AsString() != "LOCK_RELEASED" ||
		attr(term, "ddblock.fencing_token").AsInt64() != lead.FencingToken() ||
		attr(term, "ddblock.election.term").AsString() == "" || term.Status().Code != codes.Ok {
		t.Errorf("term span: %v %v", term.Attributes(), term.Status())
	}
}

// A semaphore's slot: an acquire span naming the semaphore and the
// slot, and the slot counted among the locks held until released.
func TestSemaphoreSlot(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	sem, err := c.NewSemaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	slot, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := sum(t, e.collect(), "ddblock.lock.held", "{lock}"); n != 1 {
		t.Errorf("ddblock.lock.held = %d with a slot held, want 1", n)
	}
	if err := slot.Release(ctx); err != nil {
		t.Fatal(err)
	}
	all := e.collect()
	if n, _ := hist(t, all, "ddblock.acquire.duration", "s", outcome("OK")); n != 1 {
		t.Errorf("ddblock.acquire.duration{OK}: %d points, want 1", n)
	}
	if n := sum(t, all, "ddblock.lock.held", "{lock}"); n != 0 {
		t.Errorf("ddblock.lock.held = %d once released, want 0", n)
	}
	span := e.one("ddblock.acquire")
	if attr(span, "ddblock.semaphore").AsString() != "s" || attr(span, "ddblock.sort_key").AsString() != slot.SortKey() ||
		attr(span, "ddblock.key").AsString() != slot.PartitionKey() || attr(span, "ddblock.outcome").AsString() != "OK" {
		t.Errorf("semaphore acquire span: %v", span.Attributes())
	}
}
