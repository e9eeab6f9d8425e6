package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// hasSetTransactions reports whether the test server runs transactions.
// Where it does not (dynalite), AcquireLocks must say so, typed, and
// write nothing; the DynamoDB Local pass runs the rest of the test.
func hasSetTransactions(t *testing.T, e *env, c *ddblock.Client) bool {
	t.Helper()
	if ddbtest.Shared(t).HasTransactions() {
		return true
	}
	set, err := c.AcquireLocks(context.Background(), []string{"x1", "x2"})
	if !errors.Is(err, ddblock.CodeTransactionsUnsupported) || set != nil {
		t.Fatalf("AcquireLocks on %s, which has no transactions: %v, %v; want TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), set, err)
	}
	for _, k := range []string{"x1", "x2"} {
		if item := rawItem(t, e, k, "-"); item != nil {
			t.Fatalf("an unsupported AcquireLocks left an item at %s: %v", k, item)
		}
	}
	return false
}

// All or none: while one key of the set is held elsewhere, none of the
// set is written; once it is free, all of it is, each key an ordinary
// lock that others wait for and that can guard writes.
func TestAcquireLocksAllOrNone(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := e.client(ddblock.WithOwnerName("set-holder"), ddblock.WithFencingTokens())
	if !hasSetTransactions(t, e, a) {
		return
	}
	b := e.client()
	held, err := b.AcquireLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"a", "b", "c"}
	set, err := a.AcquireLocks(ctx, keys, ddblock.WithRetryTimeout(0))
	if !errors.Is(err, ddblock.CodeAcquireTimeout) || set != nil {
		t.Fatalf("AcquireLocks with b held = %v, %v; want ACQUIRE_TIMEOUT", set, err)
	}
	if !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("the timeout does not name the held key: %v", err)
	}
	for _, k := range []string{"a", "c"} {
		if item := rawItem(t, e, k, "-"); item != nil {
			t.Fatalf("a failed AcquireLocks left %s written: %v", k, item)
		}
	}
	if err := held.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	set, err = a.AcquireLocks(ctx, keys, ddblock.WithRetryTimeout(0))
	if err != nil {
		t.Fatalf("AcquireLocks with every key free: %v", err)
	}
	locks := set.Locks()
	if len(locks) != len(keys) {
		t.Fatalf("%d locks for %d keys", len(locks), len(keys))
	}
	for i, l := range locks {
		if l.PartitionKey() != keys[i] || l.Status() != ddblock.StatusLocked || l.FencingToken() <= 0 || l.Tenure() == "" {
			t.Errorf("lock %d: key %q status %s token %d tenure %q", i, l.PartitionKey(), l.Status(), l.FencingToken(), l.Tenure())
		}
		if item := rawItem(t, e, keys[i], "-"); attrString(item, "owner_name") != "set-holder" {
			t.Errorf("item %s names %q, not the set's holder", keys[i], attrString(item, "owner_name"))
		}
		if _, err := b.TryAcquireLock(ctx, keys[i]); !errors.Is(err, ddblock.CodeLockHeld) {
			t.Errorf("another client's TryAcquireLock(%s) = %v; want LOCK_HELD", keys[i], err)
		}
	}
	if _, err := a.AcquireLocks(ctx, []string{"c", "d"}); !errors.Is(err, ddblock.CodeAlreadyHeld) {
		t.Errorf("AcquireLocks of a key the client holds = %v; want ALREADY_HELD", err)
	}
	if item := rawItem(t, e, "d", "-"); item != nil {
		t.Errorf("ALREADY_HELD wrote d: %v", item)
	}

	// A write guarded by the whole set commits while every lock holds,
	// and not once one of them is taken.
	if _, err := set.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("n")}}); err != nil {
		t.Fatalf("GuardedWrite by the set: %v", err)
	}
	if got := e.counter("n"); got != 1 {
		t.Fatalf("counter = %d after a guarded write; want 1", got)
	}
	// Another client takes c: an operator's forced release (retried
	// should a heartbeat change the version number meanwhile), then an
	// acquire.
	ddbtest.Eventually(t, 10*time.Second, "a forced release of c", func() bool {
		return b.ForceRelease(ctx, "c", "-", locks[2].RecordVersionNumber()) == nil
	})
	if _, err := b.AcquireLock(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	_, err = set.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("n")}})
	var de *ddblock.Error
	if !errors.Is(err, ddblock.CodeLockNotHeld) || !errors.As(err, &de) || de.PartitionKey != "c" {
		t.Fatalf("GuardedWrite with c taken = %v; want LOCK_NOT_HELD naming c", err)
	}
	if got := e.counter("n"); got != 1 {
		t.Fatalf("counter = %d after a refused guarded write; want 1", got)
	}
	if err := locks[2].Err(); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Errorf("the taken lock's Err = %v; want LOCK_STOLEN", err)
	}
	ctxSet, cancel := set.Context(ctx)
	defer cancel()
	if !errors.Is(context.Cause(ctxSet), ddblock.CodeLockStolen) {
		t.Errorf("the set's context cause = %v; want LOCK_STOLEN", context.Cause(ctxSet))
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := b.TryAcquireLock(ctx, k); err != nil {
			t.Errorf("%s after the set's release: %v", k, err)
		}
	}
}

// A set's context ends the moment any of its locks is released.
func TestLockSetContextEndsWithAnyLock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := e.client()
	if !hasSetTransactions(t, e, a) {
		return
	}
	set, err := a.AcquireLocks(ctx, []string{"p", "q", "r"})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := set.Context(ctx)
	defer cancel()
	if err := sctx.Err(); err != nil {
		t.Fatalf("context of a held set: %v", err)
	}
	if err := set.Locks()[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the set's context is still live after one of its locks was released")
	}
	if !errors.Is(context.Cause(sctx), ddblock.CodeLockReleased) {
		t.Errorf("cause = %v; want LOCK_RELEASED", context.Cause(sctx))
	}
}

// Bad input is refused, typed, before any call.
func TestAcquireLocksBadInput(t *testing.T) {
	e := newEnv(t)
	counted := newCounting(e.ddb)
	c := e.clientOn(counted)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for _, tc := range []struct {
		name string
		keys []string
		opts []ddblock.AcquireOption
	}{
		{"no keys", nil, nil},
		{"a key twice", []string{"a", "b", "a"}, nil},
		{"too many keys", many, nil},
		{"an empty key", []string{"a", ""}, nil},
		{"a session's key", []string{"a", "ddblock_session#x"}, nil},
		{"a key too long to wait fairly", []string{"a", strings.Repeat("k", 2040)}, []ddblock.AcquireOption{ddblock.WithFairWaiting()}},
		{"a negative retry period", []string{"a", "b"}, []ddblock.AcquireOption{ddblock.WithRetryPeriod(-time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counted.reset()
			set, err := c.AcquireLocks(context.Background(), tc.keys, tc.opts...)
			if !errors.Is(err, ddblock.CodeInvalidArgument) || set != nil {
				t.Fatalf("AcquireLocks = %v, %v; want INVALID_ARGUMENT", set, err)
			}
			if calls := counted.snapshot(); len(calls) != 0 {
				t.Errorf("calls made for bad input: %v", calls)
			}
		})
	}
	if _, err := c.AcquireLocks(nil, []string{"a", "b"}); !errors.Is(err, ddblock.CodeInvalidArgument) { //nolint:staticcheck // a nil context on purpose
		t.Errorf("nil context: %v", err)
	}
	var zero *ddblock.LockSet
	if zero.Locks() != nil || zero.Release(context.Background()) == nil {
		t.Error("a nil LockSet answers as if it held locks")
	}
	if _, err := zero.GuardedWrite(context.Background(), nil); !errors.Is(err, ddblock.CodeLockNotHeld) {
		t.Errorf("nil LockSet GuardedWrite = %v; want LOCK_NOT_HELD", err)
	}
	zctx, cancel := zero.Context(context.Background())
	defer cancel()
	if zctx.Err() == nil {
		t.Error("a nil LockSet's context is live")
	}
}

// Callers that want the same keys in opposite orders never deadlock and
// never hold at once: each set is taken whole or not at all.
func TestAcquireLocksOppositeOrders(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	first := e.client()
	if !hasSetTransactions(t, e, first) {
		return
	}
	orders := [][]string{{"x", "y", "z"}, {"z", "y", "x"}, {"y", "z", "x"}}
	var holders atomic.Int32
	var overlaps, wins atomic.Int32
	var wg sync.WaitGroup
	for i, order := range orders {
		c := first
		if i > 0 {
			c = e.client()
		}
		wg.Go(func() {
			for range 5 {
				set, err := c.AcquireLocks(ctx, order, ddblock.WithRetryPeriod(20*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
				if err != nil {
					t.Errorf("AcquireLocks(%v): %v", order, err)
					return
				}
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				wins.Add(1)
				time.Sleep(5 * time.Millisecond) // work under the set, so that the others find it held
				holders.Add(-1)
				if err := set.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holds of the same keys", overlaps.Load())
	}
	if wins.Load() != 15 {
		t.Fatalf("%d sets won; want 15", wins.Load())
	}
}

// A holder presumed dead is taken over key by key by the single-lock rule:
// its item unchanged for its lease on the waiter's clock.
func TestAcquireLocksTakesOverDeadHolder(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	clk := fakeClock()
	a := e.client(append(fakeTimes(), ddblock.WithClock(clk))...)
	if !hasSetTransactions(t, e, a) {
		return
	}
	// A holder on a clock that never moves never heartbeats: its item
	// stands still, as a dead holder's does.
	dead := e.client(append(fakeTimes(), ddblock.WithOwnerName("dead"), ddblock.WithClock(fakeClock()))...)
	if _, err := dead.AcquireLock(ctx, "m2"); err != nil {
		t.Fatal(err)
	}
	var set *ddblock.LockSet
	_, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		var err error
		set, err = a.AcquireLocks(ctx, []string{"m1", "m2"}, ddblock.WithRetryTimeout(30*time.Second))
		if err != nil {
			return nil, err
		}
		return set.Locks()[0], nil
	})
	if err != nil {
		t.Fatalf("AcquireLocks over a dead holder: %v", err)
	}
	taken := set.Locks()[1]
	if from := taken.TakenOverFrom(); from == nil || from.OwnerName != "dead" {
		t.Errorf("TakenOverFrom = %+v; want the dead holder", from)
	}
	if set.Locks()[0].TakenOverFrom() != nil {
		t.Error("the free key reports a takeover")
	}
}

// A transaction cancelled by conflicts is tried again, after a random
// pause; one that keeps conflicting ends, within the retry timeout, as
// TRANSACTION_CONFLICT, with nothing written.
func TestAcquireLocksConflicts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxied()
	a := e.clientOn(ddb)
	if !hasSetTransactions(t, e, a) {
		return
	}
	var err error
	twice := p.MustInject(faultproxy.Rule{Kind: faultproxy.TransactionConflict, Op: "TransactWriteItems", Count: 2})
	set, err := a.AcquireLocks(ctx, []string{"c1", "c2"}, ddblock.WithRetryTimeout(0))
	if err != nil {
		t.Fatalf("AcquireLocks through two conflicts: %v", err)
	}
	if twice.Injected() != 2 {
		t.Fatalf("conflicts injected: %d; want 2", twice.Injected())
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	twice.Remove()
	always := p.MustInject(faultproxy.Rule{Kind: faultproxy.TransactionConflict, Op: "TransactWriteItems"})
	set, err = a.AcquireLocks(ctx, []string{"c3", "c4"}, ddblock.WithRetryPeriod(50*time.Millisecond), ddblock.WithRetryTimeout(200*time.Millisecond))
	if !errors.Is(err, ddblock.CodeTransactionConflict) || set != nil {
		t.Fatalf("AcquireLocks through endless conflicts = %v, %v; want TRANSACTION_CONFLICT", set, err)
	}
	if always.Injected() < 3 {
		t.Errorf("only %d tries through the conflicts", always.Injected())
	}
	for _, k := range []string{"c3", "c4"} {
		if item := rawItem(t, e, k, "-"); item != nil {
			t.Errorf("%s written through conflicts: %v", k, item)
		}
	}
}

// A transaction whose reply is lost after it committed is resolved by the
// request token or the items: the caller holds the whole set, once.
func TestAcquireLocksLostReply(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxied()
	a := e.clientOn(ddb)
	if !hasSetTransactions(t, e, a) {
		return
	}
	lost := p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "TransactWriteItems", Count: 1})
	set, err := a.AcquireLocks(ctx, []string{"l1", "l2", "l3"}, ddblock.WithRetryTimeout(0))
	if lost.Injected() != 1 {
		t.Fatalf("the reply was not lost: injected %d", lost.Injected())
	}
	if err != nil {
		t.Fatalf("AcquireLocks whose committed reply was lost: %v", err)
	}
	b := e.client()
	for _, l := range set.Locks() {
		if l.Status() != ddblock.StatusLocked {
			t.Errorf("%s: %s", l.PartitionKey(), l.Status())
		}
		item := rawItem(t, e, l.PartitionKey(), "-")
		if attrString(item, "record_version_number") != l.RecordVersionNumber() {
			t.Errorf("%s: the item is not the lock's", l.PartitionKey())
		}
		if _, err := b.TryAcquireLock(ctx, l.PartitionKey()); !errors.Is(err, ddblock.CodeLockHeld) {
			t.Errorf("another client took %s: %v", l.PartitionKey(), err)
		}
	}
}

// A lost reply whose every retry is refused at connect never leaves two
// holders, nor a set partly held: the caller holds the whole set, or
// none of its items is held by it for longer than it takes to give them
// back.
func TestAcquireLocksJudgedByEveryAttempt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxiedRetrying()
	a := e.clientOn(ddb, ddblock.WithOwnerName("set-holder"), ddblock.WithHeartbeatTimeout(2*time.Second))
	if !hasSetTransactions(t, e, a) {
		return
	}
	fault := loseThenRefuse(p, "TransactWriteItems")
	set, err := a.AcquireLocks(ctx, []string{"j1", "j2"}, ddblock.WithRetryTimeout(0))
	accept(t, p)
	if fault.Injected() != 1 {
		t.Fatalf("the reply was not lost: injected %d", fault.Injected())
	}
	owners := map[string]bool{}
	for _, k := range []string{"j1", "j2"} {
		owners[attrString(rawItem(t, e, k, "-"), "owner_name")] = true
	}
	switch {
	case err == nil:
		if len(owners) != 1 || !owners["set-holder"] {
			t.Fatalf("AcquireLocks won, but the items name %v", owners)
		}
		for _, l := range set.Locks() {
			if l.Status() != ddblock.StatusLocked {
				t.Fatalf("%s: %s", l.PartitionKey(), l.Status())
			}
		}
	default:
		if set != nil {
			t.Fatalf("a set and an error: %v", err)
		}
		var de *ddblock.Error
		if !errors.As(err, &de) {
			t.Fatalf("not a *ddblock.Error: %v", err)
		}
		if len(owners) != 1 {
			t.Fatalf("the set is partly written: %v", owners)
		}
		// The items the lost transaction wrote are given back, or left
		// to expire: no other client holds them meanwhile, and the
		// caller does not believe it holds them.
		b := e.client()
		for _, k := range []string{"j1", "j2"} {
			l, berr := b.TryAcquireLock(ctx, k)
			if berr == nil && owners["set-holder"] && attrString(rawItem(t, e, k, "-"), "owner_name") != l.OwnerName() {
				t.Fatalf("two holders of %s", k)
			}
		}
	}
}

// A session client's set rides its session: every lock of the set names
// the client's one session item, and another client waits for them.
func TestAcquireLocksOnSession(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := e.client(ddblock.WithSessionLease())
	if !hasSetTransactions(t, e, a) {
		return
	}
	set, err := a.AcquireLocks(ctx, []string{"s1", "s2"})
	if err != nil {
		t.Fatal(err)
	}
	locks := set.Locks()
	if locks[0].SessionKey() == "" || locks[0].SessionKey() != locks[1].SessionKey() {
		t.Fatalf("session keys %q and %q; want one session for the set", locks[0].SessionKey(), locks[1].SessionKey())
	}
	if item := rawItem(t, e, locks[0].SessionKey(), "-"); item == nil {
		t.Fatal("no session item")
	}
	b := e.client()
	for _, l := range locks {
		if _, err := b.TryAcquireLock(ctx, l.PartitionKey()); !errors.Is(err, ddblock.CodeLockHeld) {
			t.Errorf("another client's try of %s: %v; want LOCK_HELD", l.PartitionKey(), err)
		}
	}
	if err := set.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLocks(ctx, []string{"s1", "s2"}, ddblock.WithRetryTimeout(0)); err != nil {
		t.Fatalf("the set after its release: %v", err)
	}
}
