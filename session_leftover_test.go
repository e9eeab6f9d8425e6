package ddblock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// A session lock whose release fails would be held for as long as the
// session lives, since no lease of its own runs out: the session gives
// it back after its next successful heartbeat, and a waiter takes it
// then, without waiting for the session to end.
func TestSessionGivesBackWhatItCouldNotRelease(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithSessionLease())
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "DeleteItem"})
	if err := lock.Release(context.Background(), ddblock.WithBestEffort(false)); ddblock.CodeOf(err) != ddblock.CodeUnknown {
		t.Fatalf("release through a failing server: %v; want UNKNOWN", err)
	}
	if rawItem(t, e, "k", "-") == nil {
		t.Fatal("the lock item is gone although its delete failed")
	}
	if fault.Injected() == 0 {
		t.Fatal("the fault never struck")
	}

	// The next heartbeat, still failing the deletes, leaves the item.
	start := clk.Monotonic()
	drive(t, clk, c, start+6*time.Second)
	if rawItem(t, e, "k", "-") == nil {
		t.Fatal("the lock item went while every delete failed")
	}
	fault.Remove()
	drive(t, clk, c, start+12*time.Second)
	waitFor(t, "the session to give the lock item back", func() bool { return rawItem(t, e, "k", "-") == nil })

	// A waiter takes it with one write, its session still heartbeated.
	other := e.client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l2, err := other.TryAcquireLock(ctx, "k")
	if err != nil || l2 == nil {
		t.Fatalf("TryAcquireLock after the give-back: %v, %v", l2, err)
	}
	if s := sessionRVN(t, e, lock.SessionKey()); s == "" {
		t.Error("the session item is gone: the give-back must not need the session to end")
	}
}

// Close(true) gives back what a failed release left on the session
// before it deletes the session item, so that waiters need not wait a
// session lease; an item that changed meanwhile is left alone.
func TestSessionCloseGivesBackLeftovers(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb, ddblock.WithSessionLease())
	a, err := c.AcquireLock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquireLock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "DeleteItem"})
	for _, l := range []*ddblock.Lock{a, b} {
		if err := l.Release(context.Background()); err != nil {
			t.Fatalf("best-effort release: %v", err)
		}
	}
	fault.Remove()
	// "b" changes hands meanwhile (a forced overwrite): no longer ours
	// to give back.
	putRawLock(t, e, "b", "someone-else")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if item := rawItem(t, e, "a", "-"); item != nil {
		t.Errorf("Close(true) left the lock item a failed release left: %v", item)
	}
	if item := rawItem(t, e, "b", "-"); strAttr(item, "owner_name") != "someone-else" {
		t.Errorf("b, someone else's now, was touched: %v", item)
	}
	if item := rawItem(t, e, a.SessionKey(), "-"); item != nil {
		t.Errorf("the session item is still there after Close(true): %v", item)
	}
}

// putRawLock overwrites key's lock item as python_dynamodb_lock's put
// would, for owner.
func putRawLock(t *testing.T, e *env, key, owner string) {
	t.Helper()
	if _, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: key}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
		"owner_name": &types.AttributeValueMemberS{Value: owner}, "lease_duration": &types.AttributeValueMemberN{Value: "30"},
		"record_version_number": &types.AttributeValueMemberS{Value: owner + "-rvn"},
		"expiry_time":           &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).Unix())},
	}}); err != nil {
		t.Fatal(err)
	}
}

// An acquire whose put landed unheard takes its item back; should that
// fail too, the session takes it back after its next heartbeat, for
// nothing else would while the session lives.
func TestSessionTakesBackAnAbandonedAcquire(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithSessionLease())
	if _, err := c.AcquireLock(context.Background(), "first"); err != nil { // the session exists now
		t.Fatal(err)
	}
	lost := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	failing := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "DeleteItem"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if l, err := c.AcquireLock(ctx, "k", ddblock.WithRetryTimeout(0)); err == nil {
		t.Fatalf("acquire with its reply lost: %v; want an error", l)
	}
	if lost.Injected() != 1 || failing.Injected() == 0 {
		t.Fatalf("faults struck %d and %d times", lost.Injected(), failing.Injected())
	}
	if rawItem(t, e, "k", "-") == nil {
		t.Fatal("no item: the put never landed, so this test shows nothing")
	}
	failing.Remove()
	drive(t, clk, c, clk.Monotonic()+6*time.Second)
	waitFor(t, "the session to take the item back", func() bool { return rawItem(t, e, "k", "-") == nil })
}
