package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// Fencing tokens only rise: across releases, takeovers and clients.
func TestFencingTokensOnlyRise(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	for w := range 4 {
		// The default 30 s lease: no holder loses its lock to a busy
		// machine before it releases it.
		c := e.client(ddblock.WithFencingTokens(), ddblock.WithOwnerName(fmt.Sprint("w", w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				lock, err := c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(5*time.Millisecond), ddblock.WithRetryTimeout(30*time.Second))
				if err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				mu.Lock()
				tokens = append(tokens, lock.FencingToken()) // under the lock: in acquisition order
				mu.Unlock()
				if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// A holder that dies is taken over, and the count goes on.
	dead := e.client(append(fakeTimes(), ddblock.WithFencingTokens(), ddblock.WithClock(fakeClock()))...)
	dl, err := dead.AcquireLock(ctx, "k", ddblock.WithRetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tokens = append(tokens, dl.FencingToken())
	_ = dead.Close(ctx, false)
	// A client that does not ask for tokens still carries the count. It
	// waits out the dead holder's 6 s lease on its fake clock.
	clk := fakeClock()
	plain := e.client(append(fakeTimes(), ddblock.WithClock(clk))...)
	pl, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		return plain.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(500*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
	})
	if err != nil {
		t.Fatal(err)
	}
	if pl.TakenOverFrom() == nil || pl.TakenOverFrom().OwnerName != dl.OwnerName() {
		t.Errorf("TakenOverFrom = %+v; want the dead holder", pl.TakenOverFrom())
	}
	tokens = append(tokens, pl.FencingToken())
	if len(tokens) != 34 {
		t.Fatalf("%d acquisitions recorded", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d (all: %v)", tokens[i], tokens[i-1], tokens)
		}
	}

	// Released items are kept, but nobody holds them.
	if err := pl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.GetLock(ctx, "k", ""); !errors.Is(err, ddblock.CodeLockNotFound) || !errors.Is(err, ddblock.CodeLockReleased) {
		t.Errorf("GetLock of a released item: %v", err)
	}
	for info, err := range plain.ListLocks(ctx) {
		t.Errorf("ListLocks lists a released item: %+v %v", info, err)
	}
	// A count lost to a delete (TTL clean-up, or a Python client's
	// release) starts again above the old one.
	if _, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: "k"}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
	}}); err != nil {
		t.Fatal(err)
	}
	fresh := e.client(ddblock.WithFencingTokens())
	fl, err := fresh.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if fl.FencingToken() <= tokens[len(tokens)-1] {
		t.Errorf("token %d after the count was lost; want above %d", fl.FencingToken(), tokens[len(tokens)-1])
	}
	_ = fl.Release(ctx)
}

// With a maximum clock skew, a dead holder's stale stamp lets a waiter
// take over at once; a fresh stamp does not.
func TestFastTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithMaxClockSkew(time.Second), ddblock.WithOwnerName("crashed"))
	if _, err := holder.AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_ = holder.Close(ctx, false)
	info, err := holder.GetLock(ctx, "k", "")
	if err != nil || info.HeartbeatTime.IsZero() {
		t.Fatalf("the holder wrote no stamp: %+v %v", info, err)
	}

	// A waiter whose wall clock is just inside stamp + lease + skew waits;
	clk := fakeClock()
	clk.JumpWall(info.HeartbeatTime.Sub(clk.Now()) + 30*time.Second) // wall = stamp + lease
	var m metricsLog
	waiter := e.client(ddblock.WithClock(clk), ddblock.WithMaxClockSkew(time.Second), ddblock.WithMetrics(&m))
	if _, err := waiter.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("inside the skew: %v; want LOCK_HELD", err)
	}
	// once its wall clock is past it, it takes over without watching.
	clk.JumpWall(1500 * time.Millisecond)
	lock, err := waiter.TryAcquireLock(ctx, "k")
	if err != nil {
		t.Fatalf("past stamp + lease + skew: %v", err)
	}
	if from := lock.TakenOverFrom(); from == nil || from.OwnerName != "crashed" {
		t.Errorf("TakenOverFrom = %+v", from)
	}
	if m.get("takeover fast") != 1 {
		t.Errorf("metrics: %v", m.all())
	}

	// Without the option, or on an item without a stamp, the waiter
	// watches the version number as Python does.
	slow := e.client(ddblock.WithClock(clk))
	if _, err := slow.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("without the option: %v; want LOCK_HELD", err)
	}
}

// TryAcquireLock answers at once, and a later call takes over a lock
// that has stood unchanged for its lease since an earlier call saw it.
func TestTryAcquireRemembersObservations(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithOwnerName("gone"))
	if _, err := holder.AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_ = holder.Close(ctx, false)
	clk := fakeClock()
	calls := newCounting(e.ddb)
	c := e.clientOn(calls, ddblock.WithClock(clk))
	_, err := c.TryAcquireLock(ctx, "k")
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeLockHeld || !strings.Contains(lerr.Message, `"gone"`) {
		t.Fatalf("err = %v; want LOCK_HELD naming the holder", err)
	}
	// One put, and a read where the failed put did not return the item.
	want := ops("PutItem", 1, "GetItem", readsAfterFailedPut(t))
	if diff := cmp.Diff(want, calls.snapshot()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	clk.Advance(29 * time.Second)
	if _, err := c.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("before the lease: %v", err)
	}
	clk.Advance(time.Second)
	lock, err := c.TryAcquireLock(ctx, "k")
	if err != nil {
		t.Fatalf("after the lease: %v", err)
	}
	if lock.TakenOverFrom() == nil {
		t.Error("TakenOverFrom is nil after a takeover")
	}
}

func TestEnsureTable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	name := e.table + "_ensured"
	opts := []ddblock.TableOption{ddblock.WithPollInterval(10 * time.Millisecond), ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.TableName = name })}
	report, err := ddblock.EnsureTable(ctx, e.ddb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	want := ddblock.TableReport{Created: true, TTLEnabled: true, TTLAttribute: ddblock.DefaultTTLAttributeName}
	if srv := ddbtest.Shared(t); !srv.HasTTL() {
		want = ddblock.TableReport{Created: true, TTLUnsupported: true}
	}
	if diff := cmp.Diff(want, report); diff != "" {
		t.Errorf("first call (-want +got):\n%s", diff)
	}
	out, err := e.ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil || out.Table.BillingModeSummary == nil || out.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("want an on-demand table: %+v %v", out.Table.BillingModeSummary, err)
	}
	again, err := ddblock.EnsureTable(ctx, e.ddb, opts...)
	want.Created = false
	if diff := cmp.Diff(want, again); err != nil || diff != "" {
		t.Errorf("second call: %v (-want +got):\n%s", err, diff)
	}
	// A client expecting other keys is told what differs.
	_, err = ddblock.EnsureTable(ctx, e.ddb, append(opts, ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.SortKeyName = "range" }))...)
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeTableMismatch || !strings.Contains(lerr.Message, `sort key is "sort_key", want "range"`) {
		t.Errorf("mismatch: %v", err)
	}
	_, err = ddblock.EnsureTable(ctx, e.ddb, append(opts, ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.PartitionKeyOnly = true }))...)
	if !errors.Is(err, ddblock.CodeTableMismatch) {
		t.Errorf("partition-key-only against a table with a sort key: %v", err)
	}
}

func TestPartitionKeyOnlyTable(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := pkOnlyTable(t, ddb)
	clk := fakeClock()
	c, err := ddblock.New(ddb, append(fakeTimes(), ddblock.WithTableName(name), ddblock.WithPartitionKeyName("id"), ddblock.WithPartitionKeyOnly(),
		ddblock.WithLogger(quiet), ddblock.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx, true)
	lock, err := c.AcquireLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if lock.SortKey() != "" || lock.ID() != "job|" {
		t.Errorf("sort key %q, ID %q", lock.SortKey(), lock.ID())
	}
	drive(t, clk, c, clk.Monotonic()+2*time.Second)
	if n := c.Stats().HeartbeatsSent; n < 2 {
		t.Errorf("%d heartbeats in two periods; want 2", n)
	}
	if _, err := c.AcquireLock(ctx, "job", ddblock.WithSortKeyValue("x")); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Errorf("a sort key on a partition-key-only table: %v", err)
	}
	info, err := c.GetLock(ctx, "job", "")
	if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
		t.Fatalf("GetLock: %+v %v", info, err)
	}
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "job"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := out.Item["sort_key"]; has {
		t.Errorf("the item carries a sort key: %v", out.Item)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := ddblock.New(ddb, ddblock.WithPartitionKeyOnly(), ddblock.WithSortKeyName("sk")); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Errorf("a sort key name with PartitionKeyOnly: %v", err)
	}
}

// A heartbeat whose write landed but whose reply was lost keeps its lock:
// the SDK's retry fails the condition on the item the write made.
func TestHeartbeatSurvivesLostReply(t *testing.T) {
	e := newEnv(t)
	p, err := faultproxy.Start(ddbtest.Shared(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ddb := ddbtest.Shared(t).ClientFor(p.URL(), 3) // the SDK retries a dropped reply
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk))
	var ev events
	// The acquire's own reply is lost too: the retry finds our item.
	lost := p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
	if err != nil || lost.Injected() != 1 {
		t.Fatalf("acquire with a lost reply: %v (injected %d)", err, lost.Injected())
	}
	lost = p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "UpdateItem", Count: 1})
	drive(t, clk, c, clk.Monotonic()+6*time.Second)
	if lost.Injected() != 1 {
		t.Fatalf("no reply was dropped")
	}
	if err := lock.Err(); err != nil || len(ev.list()) != 0 || c.Stats().Stolen != 0 {
		t.Fatalf("after a lost heartbeat reply: err %v, events %v, stats %+v", err, ev.list(), c.Stats())
	}
	info, err := c.GetLock(context.Background(), "k", "")
	if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
		t.Fatalf("table %+v, lock %q", info, lock.RecordVersionNumber())
	}
}

// metricsLog counts what a client reports.
type metricsLog struct {
	ddblock.NoMetrics
	mu sync.Mutex
	n  map[string]int
}

func (m *metricsLog) add(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[k]++
}

func (m *metricsLog) get(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[k]
}

func (m *metricsLog) all() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps(m.n)
}

func maps(in map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range in {
		out[k] = v
	}
	return out
}

func (m *metricsLog) AcquireFinished(_ time.Duration, attempts int, err error) {
	m.add(fmt.Sprintf("acquire ok=%v", err == nil))
}
func (m *metricsLog) LockContended() { m.add("contended") }
func (m *metricsLog) LockTakenOver(fast bool) {
	if fast {
		m.add("takeover fast")
	} else {
		m.add("takeover")
	}
}
func (m *metricsLog) HeartbeatFinished(gap, lease time.Duration, err error) {
	m.add(fmt.Sprintf("heartbeat ok=%v", err == nil))
}
func (m *metricsLog) LockInDanger()                         { m.add("danger") }
func (m *metricsLog) LockRecovered()                        { m.add("recovered") }
func (m *metricsLog) LockStolen()                           { m.add("stolen") }
func (m *metricsLog) CallThrottled(op string)               { m.add("throttled " + op) }
func (m *metricsLog) HeartbeatRoundLate(time.Duration, int) { m.add("late") }
func (m *metricsLog) LockEnded(time.Duration)               { m.add("ended") }

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	p, err := faultproxy.Start(ddbtest.Shared(t).Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var m metricsLog
	clk := fakeClock()
	c := e.clientOn(ddbtest.Shared(t).ClientFor(p.URL(), 3), ddblock.WithClock(clk), ddblock.WithMetrics(&m))
	ctx := context.Background()
	p.MustInject(faultproxy.Rule{Kind: faultproxy.Throttling, Op: "PutItem", Count: 1})
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client().AcquireLock(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquireLock(ctx, "other"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "thief")
	drive(t, clk, c, clk.Monotonic()+6*time.Second)
	want := map[string]int{
		"acquire ok=true": 1, "acquire ok=false": 1, "contended": 1,
		"throttled PutItem": 1, "heartbeat ok=false": 1, "stolen": 1, "ended": 1,
	}
	if diff := cmp.Diff(want, m.all()); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}
