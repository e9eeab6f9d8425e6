package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// rig is one test's table, a direct client to the server and a proxy in
// front of it.
type rig struct {
	t      *testing.T
	table  string
	direct *dynamodb.Client
	proxy  *faultproxy.Proxy
}

func newRig(t *testing.T, opts ...faultproxy.Option) *rig {
	t.Helper()
	srv := ddbtest.Shared(t)
	r := &rig{t: t, table: ddbtest.TableName(t), direct: srv.Client(1)}
	ddbtest.CreateTable(t, r.direct, r.table)
	p, err := faultproxy.Start(srv.Endpoint, opts...)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	r.proxy = p
	return r
}

// client returns an SDK client through the proxy that makes at most
// attempts attempts per call.
func (r *rig) client(attempts int) *dynamodb.Client {
	return ddbtest.SharedServer().ClientFor(r.proxy.URL(), attempts)
}

func key(k string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: k},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
	}
}

func (r *rig) put(ctx context.Context, c *dynamodb.Client, k string) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                aws.String(r.table),
		Item:                     key(k),
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": ddblock.DefaultPartitionKeyName},
	})
	return err
}

func (r *rig) get(ctx context.Context, c *dynamodb.Client, k string) (bool, error) {
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: key(k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	return len(out.Item) > 0, nil
}

// exists reads k straight from the server, past the proxy.
func (r *rig) exists(k string) bool {
	r.t.Helper()
	ok, err := r.get(context.Background(), r.direct, k)
	if err != nil {
		r.t.Fatalf("GetItem %q from the server: %v", k, err)
	}
	return ok
}

// eventually polls cond until it holds, failing the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPassThrough(t *testing.T) {
	r := newRig(t)
	c := r.client(1)
	ctx := context.Background()
	if err := r.put(ctx, c, "a"); err != nil {
		t.Fatalf("PutItem through the proxy: %v", err)
	}
	ok, err := r.get(ctx, c, "a")
	if err != nil || !ok {
		t.Fatalf("GetItem through the proxy = %v, %v; want the item", ok, err)
	}
	// A condition failure is the server's answer, passed through intact.
	var ccf *types.ConditionalCheckFailedException
	if err := r.put(ctx, c, "a"); !errors.As(err, &ccf) {
		t.Fatalf("second PutItem: %v, want ConditionalCheckFailedException", err)
	}
	got := r.proxy.Counts()
	want := faultproxy.Counts{
		Requests: 3, ByOp: map[string]int64{"PutItem": 2, "GetItem": 1},
		Forwarded: 3, Injected: map[faultproxy.Kind]int64{}, InjectedByOp: map[string]map[faultproxy.Kind]int64{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}

func TestErrorAnswers(t *testing.T) {
	for _, tc := range []struct {
		kind     faultproxy.Kind
		code     string
		status   int
		throttle bool
	}{
		{faultproxy.ServerError, "InternalServerError", 500, false},
		{faultproxy.Throttling, "ThrottlingException", 400, true},
		{faultproxy.ThroughputExceeded, "ProvisionedThroughputExceededException", 400, true},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			r := newRig(t)
			f := r.proxy.MustInject(faultproxy.Rule{Kind: tc.kind, Op: "PutItem"})
			err := r.put(context.Background(), r.client(1), "a")
			var api smithy.APIError
			if !errors.As(err, &api) || api.ErrorCode() != tc.code {
				t.Fatalf("PutItem: %v; want an API error with code %s", err, tc.code)
			}
			var re *awshttp.ResponseError
			if !errors.As(err, &re) || re.HTTPStatusCode() != tc.status {
				t.Errorf("PutItem: %v; want HTTP status %d", err, tc.status)
			}
			if tc.kind == faultproxy.ThroughputExceeded {
				var pte *types.ProvisionedThroughputExceededException
				if !errors.As(err, &pte) {
					t.Errorf("PutItem: %v; want *types.ProvisionedThroughputExceededException", err)
				}
			}
			if r.exists("a") {
				t.Error("the item was written although the proxy answered in the server's place")
			}
			if f.Injected() != 1 || r.proxy.Counts().Forwarded != 0 {
				t.Errorf("injected %d, forwarded %d; want 1 and 0", f.Injected(), r.proxy.Counts().Forwarded)
			}
		})
	}
}

// The SDK's own retryer must see the injected answers as retryable: with
// one fault and two attempts, the call succeeds.
func TestSDKRetriesInjectedErrors(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.ServerError, faultproxy.Throttling, faultproxy.ThroughputExceeded, faultproxy.Drop} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			f := r.proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "PutItem", Count: 1})
			if err := r.put(context.Background(), r.client(2), "a"); err != nil {
				t.Fatalf("PutItem with one %s and two attempts: %v", kind, err)
			}
			if f.Injected() != 1 || !r.exists("a") {
				t.Errorf("injected %d, item exists %v; want 1 and true", f.Injected(), r.exists("a"))
			}
			if got := r.proxy.Counts().ByOp["PutItem"]; got != 2 {
				t.Errorf("PutItem requests = %d, want 2", got)
			}
		})
	}
}

func TestDrop(t *testing.T) {
	r := newRig(t)
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Drop, Op: "PutItem"})
	err := r.put(context.Background(), r.client(1), "a")
	if err == nil {
		t.Fatal("PutItem succeeded through a dropped connection")
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		t.Errorf("PutItem: %v; want a connection error, not an API error", err)
	}
	if r.exists("a") {
		t.Error("a dropped request reached the server")
	}
	if c := r.proxy.Counts(); c.Forwarded != 0 || c.Injected[faultproxy.Drop] != 1 {
		t.Errorf("counts %+v; want nothing forwarded and one drop", c)
	}
}

func TestDropReply(t *testing.T) {
	r := newRig(t)
	f := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	err := r.put(context.Background(), r.client(1), "a")
	if err == nil {
		t.Fatal("PutItem succeeded although its reply was dropped")
	}
	if !r.exists("a") {
		t.Fatal("the write was not applied: DropReply must forward before dropping")
	}
	// The situation a retrying client meets: its retry of a write that
	// landed fails the write's own condition.
	f.Remove()
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	err = r.put(context.Background(), r.client(2), "b")
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("PutItem retried after a dropped reply: %v; want ConditionalCheckFailedException", err)
	}
	if !r.exists("b") {
		t.Error("the first attempt's write is missing")
	}
	if c := r.proxy.Counts(); c.Injected[faultproxy.DropReply] != 2 || c.Forwarded != 3 {
		t.Errorf("counts %+v; want 2 dropped replies, 3 forwarded", c)
	}
}

func TestBlackHole(t *testing.T) {
	r := newRig(t)
	c := r.client(1)
	f := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "PutItem"})

	// The client gives up.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := r.put(ctx, c, "a")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PutItem into a black hole: %v; want the context's deadline", err)
	}

	// The fault is switched off while a request is held.
	errc := make(chan error, 1)
	go func() { errc <- r.put(context.Background(), c, "b") }()
	eventually(t, "the second request to be held", func() bool { return f.Injected() == 2 })
	select {
	case err := <-errc:
		t.Fatalf("a held request was answered: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	f.Remove()
	if err := <-errc; err == nil {
		t.Fatal("a request let go from the black hole succeeded; it must be hung up on")
	}
	if r.exists("a") || r.exists("b") {
		t.Error("a black-holed request reached the server")
	}
	// Nothing is held any more.
	if err := r.put(context.Background(), c, "c"); err != nil {
		t.Fatalf("PutItem after the fault was removed: %v", err)
	}
}

func TestLatency(t *testing.T) {
	r := newRig(t)
	c := r.client(1)
	const delay = 200 * time.Millisecond
	f := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: "GetItem", Delay: delay})
	start := time.Now()
	if _, err := r.get(context.Background(), c, "a"); err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("GetItem took %v under a %v latency", took, delay)
	}
	f.Remove()

	// A write the client gave up on still lands: the network was slow,
	// not broken.
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: "PutItem", Delay: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := r.put(ctx, c, "late")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PutItem: %v; want the context's deadline", err)
	}
	eventually(t, "the late write to land", func() bool { return r.exists("late") })
}

func TestSelection(t *testing.T) {
	r := newRig(t)
	c := r.client(1)
	ctx := context.Background()
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "DynamoDB_20120810.DeleteItem"})
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "PutItem", BodyContains: `"key-b"`})
	if err := r.put(ctx, c, "key-a"); err != nil {
		t.Errorf("PutItem key-a, which no fault selects: %v", err)
	}
	if err := r.put(ctx, c, "key-b"); err == nil {
		t.Error("PutItem key-b succeeded; its fault selects it")
	}
	if _, err := r.get(ctx, c, "key-b"); err != nil {
		t.Errorf("GetItem key-b, which no fault selects: %v", err)
	}
	_, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r.table), Key: key("key-a")})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ThrottlingException" {
		t.Errorf("DeleteItem: %v; want ThrottlingException", err)
	}
	want := map[string]map[faultproxy.Kind]int64{
		"DeleteItem": {faultproxy.Throttling: 1},
		"PutItem":    {faultproxy.ServerError: 1},
	}
	if diff := cmp.Diff(want, r.proxy.Counts().InjectedByOp); diff != "" {
		t.Errorf("injected by op (-want +got):\n%s", diff)
	}
}

func TestProbabilityAndCount(t *testing.T) {
	r := newRig(t, faultproxy.WithSeed(42))
	c := r.client(1)
	ctx := context.Background()
	calls := func(n int) (failed int) {
		for range n {
			if _, err := r.get(ctx, c, "a"); err != nil {
				failed++
			}
		}
		return failed
	}

	half := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Probability: 0.5})
	failed := calls(200)
	if failed != int(half.Injected()) {
		t.Errorf("%d calls failed, %d faults injected", failed, half.Injected())
	}
	// 200 draws at one half: 100 ± 7; outside [50, 150] is a broken coin.
	if failed < 50 || failed > 150 {
		t.Errorf("%d of 200 calls hit at probability 0.5", failed)
	}
	half.Remove()

	three := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Count: 3})
	if failed := calls(10); failed != 3 || three.Injected() != 3 {
		t.Errorf("a fault of count 3 failed %d of 10 calls (injected %d)", failed, three.Injected())
	}
	if got := r.proxy.Counts().Faults(); got != half.Injected()+3 {
		t.Errorf("Counts.Faults = %d, want %d", got, half.Injected()+3)
	}
}

func TestSwitchingFaults(t *testing.T) {
	r := newRig(t)
	c := r.client(1)
	ctx := context.Background()
	f := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError})
	if _, err := r.get(ctx, c, "a"); err == nil {
		t.Fatal("GetItem succeeded while a server error is in force")
	}
	f.Remove()
	f.Remove()
	if _, err := r.get(ctx, c, "a"); err != nil {
		t.Fatalf("GetItem after Remove: %v", err)
	}
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Drop})
	r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling})
	r.proxy.Clear()
	if _, err := r.get(ctx, c, "a"); err != nil {
		t.Fatalf("GetItem after Clear: %v", err)
	}
}

func TestRuleValidation(t *testing.T) {
	r := newRig(t)
	for _, rule := range []faultproxy.Rule{
		{Kind: "flood"},
		{Kind: faultproxy.Latency},
		{Kind: faultproxy.Latency, Delay: -time.Second},
		{Kind: faultproxy.Drop, Probability: 1.5},
		{Kind: faultproxy.Drop, Count: -1},
	} {
		if _, err := r.proxy.Inject(rule); err == nil {
			t.Errorf("Inject(%+v) accepted a bad rule", rule)
		}
	}
	if _, err := faultproxy.Start("unix:///tmp/x"); err == nil {
		t.Error("Start accepted a target that is not http://")
	}
}

// Close lets go of every held request and waits for its handlers.
func TestCloseReleasesHeldRequests(t *testing.T) {
	srv := ddbtest.Shared(t)
	p, err := faultproxy.Start(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	f := p.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole})
	c := srv.ClientFor(p.URL(), 1)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("none"), Key: key(fmt.Sprint(i))})
		})
	}
	eventually(t, "four held requests", func() bool { return f.Injected() == 4 })
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Errorf("request %d was answered", i)
		}
	}
	_, err = c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("none"), Key: key("x")})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("GetItem after Close: %v; want connection refused", err)
	}
}
