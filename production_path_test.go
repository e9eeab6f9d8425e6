package ddblock_test

// The path production takes. Real DynamoDB answers a conditional put that
// fails with the item that made it fail (ReturnValuesOnConditionCheckFailure),
// and ddblock then decides from that item without reading it: every
// contended acquire in production goes this way. dynalite never returns
// the item, so ddblock reads it instead.
//
// These tests run against every server and assert the exact calls each
// one costs, counted on the wire by a proxy: on DynamoDB Local (the
// suite's DDBLOCK_TEST_SERVER=dynamodb-local run) the path without reads,
// on dynalite the one with a read after each failed put. ddbtest refuses
// to start a DynamoDB Local that does not return the item, so that run
// cannot quietly test the fallback instead.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// The tallies of failed puts, next to the operations counted on the wire.
const (
	failedWithItem    = "PutItem failed, item returned"
	failedWithoutItem = "PutItem failed, no item"
)

// wire is a client's way to the server through a fault proxy, which
// counts the requests that reach the server, and a wrapper that tallies
// the puts that failed their condition by whether the item came back.
type wire struct {
	t     *testing.T
	proxy *faultproxy.Proxy
	ddb   ddblock.DynamoDBAPI

	mu     sync.Mutex
	failed map[string]int
	seen   map[string]int64 // proxy counts at the last step
}

func (e *env) wire() *wire {
	e.t.Helper()
	p, err := faultproxy.Start(ddbtest.Shared(e.t).Endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	w := &wire{t: e.t, proxy: p, failed: map[string]int{}, seen: map[string]int64{}}
	// Three SDK attempts a call, as by default: a lost reply is retried.
	w.ddb = tallyFailedPuts{DynamoDBAPI: ddbtest.Shared(e.t).ClientFor(p.URL(), 3), w: w}
	return w
}

type tallyFailedPuts struct {
	ddblock.DynamoDBAPI
	w *wire
}

func (p tallyFailedPuts) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := p.DynamoDBAPI.PutItem(ctx, in, o...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		p.w.mu.Lock()
		if len(ccf.Item) > 0 {
			p.w.failed[failedWithItem]++
		} else {
			p.w.failed[failedWithoutItem]++
		}
		p.w.mu.Unlock()
	}
	return out, err
}

// step returns the calls since the last step: requests that reached the
// server by operation, and the failed puts' tallies.
func (w *wire) step() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := map[string]int{}
	for op, n := range w.proxy.Counts().ByOp {
		if d := int(n - w.seen[op]); d != 0 {
			got[op] = d
		}
		w.seen[op] = n
	}
	for k, n := range w.failed {
		got[k] = n
	}
	clear(w.failed)
	return got
}

// want is what a step costs on this server: puts PutItems reach the
// server, failed of the put calls fail their condition, and reads
// GetItems are made on purpose, plus one for each failed put where the
// server does not return the item.
func (w *wire) want(puts, failed, reads int) map[string]int {
	w.t.Helper()
	tally := failedWithoutItem
	if ddbtest.Shared(w.t).ReturnsOldItem() {
		tally = failedWithItem
	}
	return ops("PutItem", puts, "GetItem", reads+failed*readsAfterFailedPut(w.t), tally, failed)
}

// check compares a step's calls with what the server should have cost.
func (w *wire) check(what string, want map[string]int) {
	w.t.Helper()
	if diff := cmp.Diff(want, w.step()); diff != "" {
		w.t.Errorf("%s on %s: calls (-want +got):\n%s", what, ddbtest.Shared(w.t).Name(), diff)
	}
}

// abandoned leaves a lock behind as a crashed holder does: held, never
// heartbeated again, never released. It returns what the table holds.
func (e *env) abandoned(key, owner string, opts ...ddblock.Option) *ddblock.LockInfo {
	e.t.Helper()
	ctx := context.Background()
	holder := e.client(append([]ddblock.Option{ddblock.WithOwnerName(owner)}, opts...)...)
	if _, err := holder.AcquireLock(ctx, key); err != nil {
		e.t.Fatal(err)
	}
	if err := holder.Close(ctx, false); err != nil {
		e.t.Fatal(err)
	}
	info, err := e.client().GetLock(ctx, key, ddblock.DefaultSortKey)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// A contended acquire: one put, which fails, then reads only until the
// retry timeout.
func TestProductionPathContendedAcquire(t *testing.T) {
	e := newEnv(t)
	e.abandoned("k", "holder")
	w := e.wire()
	w.step()
	clk := fakeClock()
	var m metricsLog
	waiter := e.clientOn(w.ddb, ddblock.WithClock(clk), ddblock.WithMetrics(&m))
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = waiter.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(2500*time.Millisecond))
	}()
	stepUntil(t, clk, 2, done, time.Minute)
	if !errors.Is(err, ddblock.CodeAcquireTimeout) {
		t.Fatalf("err = %v; want ACQUIRE_TIMEOUT", err)
	}
	// Attempts at 0, 1 and 2 s.
	w.check("a contended acquire", w.want(1, 1, 2))
	if m.get("contended") != 3 {
		t.Errorf("metrics: %v; want 3 contended attempts", m.all())
	}
}

// A holder that died: the waiter watches its item for a lease, reading,
// and takes it over with one put conditioned on the version it watched.
func TestProductionPathTakeover(t *testing.T) {
	e := newEnv(t)
	dead := e.abandoned("k", "crashed")
	w := e.wire()
	w.step()
	clk := fakeClock()
	var m metricsLog
	waiter := e.clientOn(w.ddb, ddblock.WithClock(clk), ddblock.WithMetrics(&m))
	done := make(chan struct{})
	var (
		lock *ddblock.Lock
		err  error
	)
	go func() {
		defer close(done)
		lock, err = waiter.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(10*time.Second), ddblock.WithRetryTimeout(time.Minute))
	}()
	stepUntil(t, clk, 2, done, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A put at 0 s that fails; reads at 10, 20 and 30 s, the last of
	// which finds the version unchanged for the 30 s lease; the put.
	w.check("a takeover", w.want(2, 1, 3))
	if from := lock.TakenOverFrom(); from == nil || from.OwnerName != "crashed" || from.RecordVersionNumber != dead.RecordVersionNumber {
		t.Errorf("TakenOverFrom = %+v; want the crashed holder's item %+v", from, dead)
	}
	if m.get("takeover") != 1 || m.get("takeover fast") != 0 {
		t.Errorf("metrics: %v", m.all())
	}
}

// TryAcquireLock: one put that fails and says who holds the lock; later
// calls read what the first one saw, and the one a lease later takes over.
func TestProductionPathTryAcquireRemembers(t *testing.T) {
	e := newEnv(t)
	e.abandoned("k", "gone")
	w := e.wire()
	w.step()
	clk := fakeClock()
	c := e.clientOn(w.ddb, ddblock.WithClock(clk))
	ctx := context.Background()
	_, err := c.TryAcquireLock(ctx, "k")
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeLockHeld || !strings.Contains(lerr.Message, `"gone"`) {
		t.Fatalf("err = %v; want LOCK_HELD naming the holder", err)
	}
	w.check("the first try", w.want(1, 1, 0))
	clk.Advance(29 * time.Second)
	if _, err := c.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("before the lease: %v; want LOCK_HELD", err)
	}
	w.check("a try within the lease", w.want(0, 0, 1))
	clk.Advance(time.Second)
	lock, err := c.TryAcquireLock(ctx, "k")
	if err != nil {
		t.Fatalf("after the lease: %v", err)
	}
	w.check("the try that takes over", w.want(1, 0, 1))
	if from := lock.TakenOverFrom(); from == nil || from.OwnerName != "gone" {
		t.Errorf("TakenOverFrom = %+v", from)
	}
}

// Fencing tokens: the token a takeover writes follows the one in the
// item the failed put returned (or the read found).
func TestProductionPathFencingTokens(t *testing.T) {
	e := newEnv(t)
	dead := e.abandoned("k", "crashed", ddblock.WithFencingTokens())
	if dead.FencingToken <= 0 {
		t.Fatalf("the holder wrote no token: %+v", dead)
	}
	w := e.wire()
	w.step()
	clk := fakeClock()
	c := e.clientOn(w.ddb, ddblock.WithClock(clk), ddblock.WithFencingTokens())
	ctx := context.Background()
	if _, err := c.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("err = %v; want LOCK_HELD", err)
	}
	w.check("the first try", w.want(1, 1, 0))
	clk.Advance(30 * time.Second)
	lock, err := c.TryAcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	w.check("the takeover", w.want(1, 0, 1))
	if lock.FencingToken() != dead.FencingToken+1 {
		t.Errorf("token %d; want %d, one above the crashed holder's", lock.FencingToken(), dead.FencingToken+1)
	}
}

// Fast takeover: the failed put's item (or the read) shows a stamp older
// than lease plus skew, and a second put takes the lock at once, its
// token above the dead holder's.
func TestProductionPathFastTakeover(t *testing.T) {
	e := newEnv(t)
	dead := e.abandoned("k", "crashed", ddblock.WithMaxClockSkew(time.Second), ddblock.WithFencingTokens())
	w := e.wire()
	w.step()
	clk := fakeClock()
	clk.JumpWall(dead.HeartbeatTime.Sub(clk.Now()) + 32*time.Second) // past stamp + 30 s lease + 1 s skew
	var m metricsLog
	c := e.clientOn(w.ddb, ddblock.WithClock(clk), ddblock.WithMaxClockSkew(time.Second), ddblock.WithMetrics(&m))
	lock, err := c.TryAcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	w.check("a fast takeover", w.want(2, 1, 0))
	if m.get("takeover fast") != 1 {
		t.Errorf("metrics: %v; want one fast takeover", m.all())
	}
	if from := lock.TakenOverFrom(); from == nil || from.RecordVersionNumber != dead.RecordVersionNumber {
		t.Errorf("TakenOverFrom = %+v; want %+v", from, dead)
	}
	if lock.FencingToken() != dead.FencingToken+1 {
		t.Errorf("token %d; want %d", lock.FencingToken(), dead.FencingToken+1)
	}
}

// Lost replies: a put that landed but whose reply was lost is retried by
// the SDK; the retry fails its condition on the item the first one wrote,
// and that item, returned or read, is recognised as ours.
func TestProductionPathLostReply(t *testing.T) {
	e := newEnv(t)
	w := e.wire()
	ctx := context.Background()
	check := func(lock *ddblock.Lock, key string) {
		t.Helper()
		info, err := e.client().GetLock(ctx, key, ddblock.DefaultSortKey)
		if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() || info.OwnerName != lock.OwnerName() {
			t.Errorf("table has %+v; the lock says version %q", info, lock.RecordVersionNumber())
		}
	}

	t.Run("acquiring a free lock", func(t *testing.T) {
		c := e.clientOn(w.ddb, ddblock.WithClock(fakeClock()))
		w.step()
		lost := w.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", BodyContains: `"free"`, Count: 1})
		lock, err := c.TryAcquireLock(ctx, "free")
		if err != nil || lost.Injected() != 1 {
			t.Fatalf("err %v, replies dropped %d; want the lock, one reply dropped", err, lost.Injected())
		}
		w.check("a put whose reply was lost", w.want(2, 1, 0))
		check(lock, "free")
	})

	t.Run("taking over", func(t *testing.T) {
		e.abandoned("taken", "crashed")
		clk := fakeClock()
		c := e.clientOn(w.ddb, ddblock.WithClock(clk))
		w.step()
		if _, err := c.TryAcquireLock(ctx, "taken"); !errors.Is(err, ddblock.CodeLockHeld) {
			t.Fatalf("err = %v; want LOCK_HELD", err)
		}
		w.check("the first try", w.want(1, 1, 0))
		clk.Advance(30 * time.Second)
		lost := w.proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", BodyContains: `"taken"`, Count: 1})
		lock, err := c.TryAcquireLock(ctx, "taken")
		if err != nil || lost.Injected() != 1 {
			t.Fatalf("err %v, replies dropped %d; want the lock, one reply dropped", err, lost.Injected())
		}
		w.check("a takeover whose reply was lost", w.want(2, 1, 1))
		if from := lock.TakenOverFrom(); from == nil || from.OwnerName != "crashed" {
			t.Errorf("TakenOverFrom = %+v", from)
		}
		check(lock, "taken")
	})
}
