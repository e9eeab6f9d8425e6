package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	ddbtest.Eventually(t, 10*time.Second, what, cond)
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
	// The emulation, on by default, learnt the table's key schema once,
	// for the puts.
	want := faultproxy.Counts{
		Requests: 3, ByOp: map[string]int64{"PutItem": 2, "GetItem": 1}, TransactActions: map[string]int64{},
		Forwarded: 3, Injected: map[faultproxy.Kind]int64{}, InjectedByOp: map[string]map[faultproxy.Kind]int64{},
		Conflicts: map[string]int64{}, SchemaLookups: 1,
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

// A DropReply whose Then refuses connections: the write lands, the reply
// is lost, and every retry of it fails at connect; once the proxy accepts
// again, the same client works.
func TestDropReplyThenRefuseConnections(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	c := r.client(3)
	if err := r.put(ctx, c, "a"); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	incr := func() error {
		_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(r.table),
			Key:                       key("a"),
			UpdateExpression:          aws.String("ADD v :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		})
		return err
	}
	f := r.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "UpdateItem", Count: 1, Then: r.proxy.RefuseConnections})
	err := incr()
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("UpdateItem whose reply was dropped and whose retries were refused: %v; want a dial error", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("UpdateItem: %v; want ECONNREFUSED", err)
	}
	if got := r.value("a"); got != 1 {
		t.Fatalf("v = %d on the server, want 1: the dropped reply's write must have landed, and no retry", got)
	}
	if got := r.proxy.Counts().ByOp["UpdateItem"]; got != 1 || f.Injected() != 1 {
		t.Errorf("the proxy received %d UpdateItem, injected %d; want 1 and 1 (retries refused at connect)", got, f.Injected())
	}
	if err := r.proxy.AcceptConnections(); err != nil {
		t.Fatalf("AcceptConnections: %v", err)
	}
	if err := incr(); err != nil {
		t.Fatalf("UpdateItem after AcceptConnections: %v", err)
	}
	if got := r.value("a"); got != 2 {
		t.Errorf("v = %d, want 2", got)
	}
}

// RefuseConnections closes idle connections too: a client whose pooled
// connection was idle must dial, and is refused. Close works while
// refusing.
func TestRefuseConnectionsIdle(t *testing.T) {
	srv := ddbtest.Shared(t)
	p, err := faultproxy.Start(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.ClientFor(p.URL(), 3)
	ctx := context.Background()
	list := func() error {
		_, err := c.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		return err
	}
	if err := list(); err != nil {
		t.Fatalf("ListTables: %v", err)
	}
	p.RefuseConnections()
	p.RefuseConnections()
	var op *net.OpError
	if err := list(); !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("ListTables while refusing: %v; want a dial error", err)
	}
	if err := p.AcceptConnections(); err != nil {
		t.Fatalf("AcceptConnections: %v", err)
	}
	if err := p.AcceptConnections(); err != nil {
		t.Fatalf("AcceptConnections twice: %v", err)
	}
	if err := list(); err != nil {
		t.Fatalf("ListTables after AcceptConnections: %v", err)
	}
	p.RefuseConnections()
	if err := p.Close(); err != nil {
		t.Fatalf("Close while refusing: %v", err)
	}
	if err := p.AcceptConnections(); err == nil {
		t.Error("AcceptConnections after Close succeeded")
	}
}

// value reads the number attribute v of item k from the server.
func (r *rig) value(k string) int {
	r.t.Helper()
	out, err := r.direct.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: key(k), ConsistentRead: aws.Bool(true)})
	if err != nil {
		r.t.Fatalf("GetItem %q from the server: %v", k, err)
	}
	n, ok := out.Item["v"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		r.t.Fatalf("v = %q", n.Value)
	}
	return v
}

// txRig is a table on a server with transactions (DynamoDB Local, from
// ddbtest.Transactional), keyed by a string pk and a number n, reached
// directly, past any conflict emulator.
type txRig struct {
	t      *testing.T
	srv    *ddbtest.Server
	table  string
	direct *dynamodb.Client
}

func newTxRig(t *testing.T) *txRig {
	t.Helper()
	srv, err := ddbtest.Transactional()
	if err != nil {
		t.Fatalf("a server with transactions: %v", err)
	}
	r := &txRig{t: t, srv: srv, table: ddbtest.TableName(t), direct: srv.ClientFor(ddbtest.DirectEndpoint(srv), 1)}
	ctx := context.Background()
	_, err = r.direct.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(r.table),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("n"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("n"), AttributeType: types.ScalarAttributeTypeN},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	eventually(t, "the table to be active", func() bool {
		out, err := r.direct.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(r.table)})
		return err == nil && out.Table.TableStatus == types.TableStatusActive
	})
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := r.direct.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: r.item(k, "1")}); err != nil {
			t.Fatalf("PutItem %s: %v", k, err)
		}
	}
	return r
}

// proxy starts a proxy in front of target (the server's own endpoint
// when empty).
func (r *txRig) proxy(target string, opts ...faultproxy.Option) *faultproxy.Proxy {
	r.t.Helper()
	if target == "" {
		target = ddbtest.DirectEndpoint(r.srv)
	}
	p, err := faultproxy.Start(target, opts...)
	if err != nil {
		r.t.Fatalf("Start: %v", err)
	}
	r.t.Cleanup(func() {
		if err := p.Close(); err != nil {
			r.t.Errorf("Close: %v", err)
		}
	})
	return p
}

// key is the key of item pk with the number n spelt as given.
func (r *txRig) key(pk, n string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk},
		"n":  &types.AttributeValueMemberN{Value: n},
	}
}

func (r *txRig) item(pk, n string) map[string]types.AttributeValue {
	it := r.key(pk, n)
	it["data"] = &types.AttributeValueMemberS{Value: "x"}
	return it
}

func (r *txRig) update(pk, n string) *types.Update {
	return &types.Update{
		TableName:                 aws.String(r.table),
		Key:                       r.key(pk, n),
		UpdateExpression:          aws.String("ADD v :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	}
}

// updateItem adds one to v of item pk with a plain UpdateItem.
func (r *txRig) updateItem(ctx context.Context, c *dynamodb.Client, pk, n string) error {
	u := r.update(pk, n)
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: u.TableName, Key: u.Key,
		UpdateExpression: u.UpdateExpression, ExpressionAttributeValues: u.ExpressionAttributeValues})
	return err
}

// value reads v of item pk (n = 1) from the server.
func (r *txRig) value(pk string) int {
	r.t.Helper()
	out, err := r.direct.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: r.key(pk, "1"), ConsistentRead: aws.Bool(true)})
	if err != nil {
		r.t.Fatalf("GetItem %q from the server: %v", pk, err)
	}
	if n, ok := out.Item["v"].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.Atoi(n.Value)
		return v
	}
	return 0
}

// guarded is a guarded write's shape: a condition check on a and an
// update of b.
func (r *txRig) guarded() []types.TransactWriteItem {
	return []types.TransactWriteItem{
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String(r.table), Key: r.key("a", "1"), ConditionExpression: aws.String("attribute_exists(pk)")}},
		{Update: r.update("b", "1")},
	}
}

// goTransact starts a TransactWriteItems and returns its outcome's
// channel.
func goTransact(c *dynamodb.Client, items []types.TransactWriteItem) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: items})
		errc <- err
	}()
	return errc
}

// held waits until the proxy holds n transactions (it has admitted them).
func held(t *testing.T, p *faultproxy.Proxy, n int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d transactions held", n), func() bool { return p.Counts().Transactions >= n })
}

// reasons returns the codes of a cancelled transaction's reasons.
func reasons(t *testing.T, err error) []string {
	t.Helper()
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("%v; want *types.TransactionCanceledException", err)
	}
	var codes []string
	for _, r := range tce.CancellationReasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	return codes
}

// hold is how long the tests' proxies hold a transaction: long enough for
// the requests a test sends meanwhile, on a busy machine.
const hold = 2 * time.Second

// Write against transaction: plain writes of an item a transaction in
// flight touches are refused with TransactionConflictException (which the
// SDK does not retry); writes of other items, and reads, go through; once
// the transaction is over, the write goes through.
func TestConflictWriteAgainstTransaction(t *testing.T) {
	r := newTxRig(t)
	p := r.proxy("", faultproxy.WithTransactionDuration(hold))
	c := r.srv.ClientFor(p.URL(), 3)
	ctx := context.Background()

	tx := append(r.guarded(), types.TransactWriteItem{Put: &types.Put{TableName: aws.String(r.table), Item: r.item("e", "7")}})
	errc := goTransact(c, tx)
	held(t, p, 1)

	var tce *types.TransactionConflictException
	// The ConditionCheck's item, its number spelt otherwise.
	if err := r.updateItem(ctx, c, "a", "1.0"); !errors.As(err, &tce) {
		t.Errorf("UpdateItem of the condition-checked item: %v; want *types.TransactionConflictException", err)
	}
	// The Put's item, known by the table's key schema.
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(r.table), Item: r.item("e", "7")})
	if !errors.As(err, &tce) {
		t.Errorf("PutItem of the transaction's Put item: %v; want *types.TransactionConflictException", err)
	}
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(r.table), Key: r.key("b", "1")})
	if !errors.As(err, &tce) {
		t.Errorf("DeleteItem of the transaction's Update item: %v; want *types.TransactionConflictException", err)
	}
	// Other items, and reads, are not held up.
	if err := r.updateItem(ctx, c, "c", "1"); err != nil {
		t.Errorf("UpdateItem of an item outside the transaction: %v", err)
	}
	if err := r.updateItem(ctx, c, "a", "2"); err != nil {
		t.Errorf("UpdateItem of another item of a's partition: %v", err)
	}
	if _, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.table), Key: r.key("a", "1")}); err != nil {
		t.Errorf("GetItem of the transaction's item: %v", err)
	}
	cnt := p.Counts()
	if got := cnt.ByOp["UpdateItem"]; got != 3 {
		t.Errorf("the proxy received %d UpdateItem, want 3: the SDK must not retry a TransactionConflictException", got)
	}
	select {
	case err := <-errc:
		t.Fatalf("the transaction ended while held: %v", err)
	default:
	}
	if r.value("a") != 0 {
		t.Error("a refused UpdateItem reached the server")
	}

	if err := <-errc; err != nil {
		t.Fatalf("the transaction: %v", err)
	}
	if r.value("b") != 1 {
		t.Error("the transaction did not land")
	}
	if err := r.updateItem(ctx, c, "a", "1"); err != nil {
		t.Fatalf("UpdateItem after the transaction: %v", err)
	}
	if r.value("a") != 1 {
		t.Error("the UpdateItem after the transaction did not land")
	}
	cnt = p.Counts()
	want := map[string]int64{"UpdateItem": 1, "PutItem": 1, "DeleteItem": 1}
	if diff := cmp.Diff(want, cnt.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	if cnt.Transactions != 1 || cnt.SchemaLookups != 1 {
		t.Errorf("transactions %d, schema lookups %d; want 1 and 1", cnt.Transactions, cnt.SchemaLookups)
	}
}

// Transaction against transaction: a TransactWriteItems overlapping one in
// flight is cancelled, with TransactionConflict on exactly the
// overlapping actions; one that does not overlap goes through.
func TestConflictTransactionAgainstTransaction(t *testing.T) {
	r := newTxRig(t)
	p := r.proxy("", faultproxy.WithTransactionDuration(hold))
	c := r.srv.ClientFor(p.URL(), 3)
	errc := goTransact(c, r.guarded()) // a and b
	held(t, p, 1)

	other := goTransact(c, []types.TransactWriteItem{{Update: r.update("d", "1")}})
	_, err := c.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: r.update("c", "1")},
		{Put: &types.Put{TableName: aws.String(r.table), Item: r.item("b", "1.000")}},
		{Delete: &types.Delete{TableName: aws.String(r.table), Key: r.key("e", "1")}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String(r.table), Key: r.key("a", "1"), ConditionExpression: aws.String("attribute_exists(pk)")}},
	}})
	if diff := cmp.Diff([]string{"None", "TransactionConflict", "None", "TransactionConflict"}, reasons(t, err)); diff != "" {
		t.Errorf("cancellation reasons (-want +got):\n%s", diff)
	}
	if err := <-errc; err != nil {
		t.Errorf("the first transaction: %v", err)
	}
	if err := <-other; err != nil {
		t.Errorf("a transaction on other items: %v", err)
	}
	if r.value("c") != 0 || r.value("b") != 1 || r.value("d") != 1 {
		t.Errorf("c, b, d = %d, %d, %d; want 0 (cancelled), 1, 1", r.value("c"), r.value("b"), r.value("d"))
	}
	cnt := p.Counts()
	if diff := cmp.Diff(map[string]int64{"TransactWriteItems": 1}, cnt.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
	if cnt.Transactions != 2 {
		t.Errorf("transactions held %d, want 2", cnt.Transactions)
	}
}

// Read transaction against writes: a TransactGetItems with an item that a
// write in flight writes is cancelled; so is one in flight when a write of
// one of its items comes, and that write goes through.
func TestConflictTransactGetItems(t *testing.T) {
	ctx := context.Background()
	get := func(r *txRig, c *dynamodb.Client, pks ...string) error {
		var items []types.TransactGetItem
		for _, pk := range pks {
			items = append(items, types.TransactGetItem{Get: &types.Get{TableName: aws.String(r.table), Key: r.key(pk, "1")}})
		}
		_, err := c.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: items})
		return err
	}

	t.Run("TransactWriteItems in flight", func(t *testing.T) {
		r := newTxRig(t)
		p := r.proxy("", faultproxy.WithTransactionDuration(hold))
		c := r.srv.ClientFor(p.URL(), 3)
		errc := goTransact(c, r.guarded())
		held(t, p, 1)
		if diff := cmp.Diff([]string{"None", "TransactionConflict"}, reasons(t, get(r, c, "c", "b"))); diff != "" {
			t.Errorf("cancellation reasons (-want +got):\n%s", diff)
		}
		if err := <-errc; err != nil {
			t.Errorf("the transaction: %v", err)
		}
		if err := get(r, c, "c", "b"); err != nil {
			t.Errorf("TransactGetItems after the transaction: %v", err)
		}
	})

	// A plain or batch write is in flight while it is forwarded: a
	// second proxy behind the one under test holds it.
	for _, op := range []string{"UpdateItem", "BatchWriteItem"} {
		t.Run(op+" in flight", func(t *testing.T) {
			r := newTxRig(t)
			slow := r.proxy("", faultproxy.WithoutConflicts())
			slow.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: op, Delay: hold})
			p := r.proxy(slow.URL(), faultproxy.WithTransactionDuration(0))
			c := r.srv.ClientFor(p.URL(), 3)
			errc := make(chan error, 1)
			go func() {
				if op == "UpdateItem" {
					errc <- r.updateItem(ctx, c, "b", "1")
					return
				}
				_, err := c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{
					r.table: {{PutRequest: &types.PutRequest{Item: r.item("b", "1")}}},
				}})
				errc <- err
			}()
			eventually(t, "the write to be forwarded", func() bool { return slow.Counts().ByOp[op] == 1 })
			if diff := cmp.Diff([]string{"TransactionConflict", "None"}, reasons(t, get(r, c, "b", "a"))); diff != "" {
				t.Errorf("cancellation reasons (-want +got):\n%s", diff)
			}
			if err := <-errc; err != nil {
				t.Errorf("%s: %v", op, err)
			}
			if err := get(r, c, "b", "a"); err != nil {
				t.Errorf("TransactGetItems after the write: %v", err)
			}
			if got := p.Counts().Conflicts; got["TransactGetItems"] != 1 {
				t.Errorf("conflicts %v; want one TransactGetItems", got)
			}
		})
	}

	t.Run("write comes while in flight", func(t *testing.T) {
		r := newTxRig(t)
		p := r.proxy("", faultproxy.WithTransactionDuration(hold))
		c := r.srv.ClientFor(p.URL(), 3)
		errc := make(chan error, 1)
		go func() { errc <- get(r, c, "a", "c", "d") }()
		held(t, p, 1)
		if err := r.updateItem(ctx, c, "c", "1"); err != nil {
			t.Fatalf("UpdateItem of an item a TransactGetItems in flight reads: %v", err)
		}
		if diff := cmp.Diff([]string{"None", "TransactionConflict", "None"}, reasons(t, <-errc)); diff != "" {
			t.Errorf("cancellation reasons (-want +got):\n%s", diff)
		}
		if r.value("c") != 1 {
			t.Error("the UpdateItem did not land")
		}
		if got := p.Counts().Conflicts; got["TransactGetItems"] != 1 || len(got) != 1 {
			t.Errorf("conflicts %v; want one TransactGetItems", got)
		}
	})
}

// WithoutConflicts: nothing is held, and a write meets no conflict from a
// transaction in flight.
func TestWithoutConflicts(t *testing.T) {
	r := newTxRig(t)
	slow := r.proxy("", faultproxy.WithoutConflicts())
	slow.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: "TransactWriteItems", Delay: hold})
	p := r.proxy(slow.URL(), faultproxy.WithoutConflicts())
	if p.EmulatesConflicts() {
		t.Error("EmulatesConflicts with WithoutConflicts")
	}
	c := r.srv.ClientFor(p.URL(), 1)
	errc := goTransact(c, r.guarded())
	eventually(t, "the transaction to be forwarded", func() bool { return slow.Counts().ByOp["TransactWriteItems"] == 1 })
	if err := r.updateItem(context.Background(), c, "a", "1"); err != nil {
		t.Errorf("UpdateItem during a transaction, without the emulation: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("the transaction: %v", err)
	}
	if cnt := p.Counts(); len(cnt.Conflicts) != 0 || cnt.Transactions != 0 || cnt.SchemaLookups != 0 {
		t.Errorf("counts %+v; want no emulation at all", cnt)
	}
	// Each action of the transaction is counted as the call it stands
	// for, on its table, with or without the emulation.
	want := map[string]int64{"ConditionCheckItem " + r.table: 1, "UpdateItem " + r.table: 1}
	if diff := cmp.Diff(want, p.Counts().TransactActions); diff != "" {
		t.Errorf("TransactActions (-want +got):\n%s", diff)
	}
}

// A DropReply'd transaction stays in flight until its forward ends, and
// the emulation is on by default, for DefaultTransactionDuration.
func TestDropReplyTransactionInFlight(t *testing.T) {
	r := newTxRig(t)
	slow := r.proxy("", faultproxy.WithoutConflicts())
	slow.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: "TransactWriteItems", Delay: hold})
	p := r.proxy(slow.URL())
	if !p.EmulatesConflicts() || p.TransactionDuration() != faultproxy.DefaultTransactionDuration {
		t.Fatalf("emulation %v for %v; want on for %v by default", p.EmulatesConflicts(), p.TransactionDuration(), faultproxy.DefaultTransactionDuration)
	}
	p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "TransactWriteItems"})
	c := r.srv.ClientFor(p.URL(), 1)
	errc := goTransact(c, r.guarded())
	eventually(t, "the transaction to be forwarded", func() bool { return slow.Counts().ByOp["TransactWriteItems"] == 1 })
	var tce *types.TransactionConflictException
	if err := r.updateItem(context.Background(), c, "b", "1"); !errors.As(err, &tce) {
		t.Errorf("UpdateItem during a DropReply'd transaction's forward: %v; want *types.TransactionConflictException", err)
	}
	if err := <-errc; err == nil {
		t.Error("a transaction whose reply was dropped succeeded")
	}
	if r.value("b") != 1 {
		t.Error("the transaction whose reply was dropped did not land")
	}
	if err := r.updateItem(context.Background(), c, "b", "1"); err != nil {
		t.Errorf("UpdateItem after the forward ended: %v", err)
	}
}

// The servers the tests share are behind a conflict emulator when they
// have transactions, and the emulator really raises conflicts; a proxy
// stacked on it works.
func TestSharedServersEmulateConflicts(t *testing.T) {
	shared := ddbtest.Shared(t)
	if e := ddbtest.Emulator(shared); (e != nil) != shared.HasTransactions() {
		t.Errorf("shared %s: emulator %v, transactions %v", shared, e, shared.HasTransactions())
	} else if e != nil && (shared.Endpoint != e.URL() || ddbtest.DirectEndpoint(shared) == shared.Endpoint) {
		t.Errorf("shared endpoint %s, emulator %s, direct %s", shared.Endpoint, e.URL(), ddbtest.DirectEndpoint(shared))
	}
	if !strings.Contains(ddbtest.Describe(shared), "transaction conflicts: ") {
		t.Errorf("Describe = %q; want the conflicts said", ddbtest.Describe(shared))
	}

	if v := os.Getenv(ddbtest.ConflictsEnv); v != "" {
		t.Skipf("%s=%s tunes the emulator", ddbtest.ConflictsEnv, v)
	}
	r := newTxRig(t)
	e := ddbtest.Emulator(r.srv)
	if e == nil {
		t.Fatalf("the transactional server %s has no conflict emulator", r.srv)
	}
	if r.srv.Endpoint != e.URL() || !e.EmulatesConflicts() || e.TransactionDuration() != faultproxy.DefaultTransactionDuration {
		t.Fatalf("endpoint %s, emulator %s emulating %v for %v", r.srv.Endpoint, e.URL(), e.EmulatesConflicts(), e.TransactionDuration())
	}
	// Through a proxy stacked on the emulator, which adds no emulation of
	// its own, transactions race plain writes until one meets a conflict.
	stacked := r.proxy(r.srv.Endpoint, faultproxy.WithoutConflicts())
	c := r.srv.ClientFor(stacked.URL(), 1)
	before := e.Counts()
	var tce *types.TransactionConflictException
	conflicted := false
	for i := 0; i < 50 && !conflicted; i++ {
		errc := goTransact(c, r.guarded())
		for {
			err := r.updateItem(context.Background(), c, "b", "1")
			if errors.As(err, &tce) {
				conflicted = true
			} else if err != nil {
				t.Fatalf("UpdateItem: %v", err)
			}
			select {
			case err := <-errc:
				if err != nil {
					t.Fatalf("transaction: %v", err)
				}
			default:
				continue
			}
			break
		}
	}
	if !conflicted {
		t.Fatal("no UpdateItem met a transaction in flight in 50 transactions")
	}
	if got := e.Counts().Conflicts["UpdateItem"] - before.Conflicts["UpdateItem"]; got < 1 {
		t.Errorf("the emulator counted %d UpdateItem conflicts", got)
	}
}

// The canned TransactionConflict fault cancels a transaction on its last
// action, whatever is in flight.
func TestCannedTransactionConflict(t *testing.T) {
	r := newTxRig(t)
	p := r.proxy("")
	p.MustInject(faultproxy.Rule{Kind: faultproxy.TransactionConflict, Count: 1})
	c := r.srv.ClientFor(p.URL(), 1)
	_, err := c.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: r.guarded()})
	if diff := cmp.Diff([]string{"None", "TransactionConflict"}, reasons(t, err)); diff != "" {
		t.Errorf("cancellation reasons (-want +got):\n%s", diff)
	}
	if r.value("b") != 0 {
		t.Error("a transaction cancelled by the proxy reached the server")
	}
}

// The same transaction sent again (same ClientRequestToken) while it is
// in flight is refused with TransactionInProgressException, not as a
// conflict.
func TestTransactionInProgress(t *testing.T) {
	r := newTxRig(t)
	p := r.proxy("", faultproxy.WithTransactionDuration(hold))
	c := r.srv.ClientFor(p.URL(), 1)
	// A token of its own: DynamoDB remembers tokens for ten minutes.
	token := fmt.Sprintf("tok-%d", time.Now().UnixNano())
	in := &dynamodb.TransactWriteItemsInput{TransactItems: r.guarded(), ClientRequestToken: aws.String(token)}
	errc := make(chan error, 1)
	go func() {
		_, err := c.TransactWriteItems(context.Background(), in)
		errc <- err
	}()
	held(t, p, 1)
	_, err := c.TransactWriteItems(context.Background(), in)
	var tip *types.TransactionInProgressException
	if !errors.As(err, &tip) {
		t.Errorf("the same transaction again: %v; want *types.TransactionInProgressException", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("the transaction: %v", err)
	}
	if r.value("b") != 1 {
		t.Errorf("b = %d, want 1: the transaction once", r.value("b"))
	}
	if cnt := p.Counts(); cnt.InProgress != 1 || len(cnt.Conflicts) != 0 {
		t.Errorf("in progress %d, conflicts %v; want 1 and none", cnt.InProgress, cnt.Conflicts)
	}
}
