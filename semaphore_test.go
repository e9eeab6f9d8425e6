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

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// queryCounting counts Query calls too, which a semaphore's reads are.
type queryCounting struct{ *counting }

func (c queryCounting) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.count("Query")
	return c.counting.DynamoDBAPI.Query(ctx, in, o...)
}

func semaphoreOf(t *testing.T, c *ddblock.Client, name string, slots int) *ddblock.Semaphore {
	t.Helper()
	s, err := c.NewSemaphore(name, slots)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// At most N holders: N clients take the N slots (each a different one),
// the next finds none free, and a waiter gets the slot the moment one is
// released.
func TestSemaphoreAtMostN(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 3
	var locks []*ddblock.Lock
	seen := map[int]bool{}
	for i := range n {
		// The default 30 s lease: a busy machine cannot cost a holder
		// its slot before it releases it.
		c := e.client(ddblock.WithOwnerName(fmt.Sprintf("c%d", i)))
		s := semaphoreOf(t, c, "migrations", n)
		lock, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		slot, ok := s.SlotOf(lock)
		if !ok || slot < 0 || slot >= n || seen[slot] {
			t.Fatalf("Acquire %d got slot %d (%v); slots taken so far %v", i, slot, ok, seen)
		}
		seen[slot] = true
		if lock.PartitionKey() != "migrations" || lock.SortKey() != fmt.Sprintf("slot-%d", slot) {
			t.Errorf("slot %d is the lock %q/%q", slot, lock.PartitionKey(), lock.SortKey())
		}
		locks = append(locks, lock)
	}
	clk := fakeClock()
	late := e.client(ddblock.WithOwnerName("late"), ddblock.WithClock(clk))
	s := semaphoreOf(t, late, "migrations", n)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("TryAcquire with every slot held: %v; want LOCK_HELD", err)
	}
	held, err := s.Holders(ctx)
	if err != nil || len(held) != n {
		t.Fatalf("Holders: %d, %v; want %d", len(held), err, n)
	}
	done := make(chan struct{})
	var lock *ddblock.Lock
	var acqErr error
	go func() {
		defer close(done)
		lock, acqErr = s.Acquire(ctx, ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
	}()
	// The waiter has looked at every slot and waits for its next look.
	waitForSleepers(t, clk, 2)
	select {
	case <-done:
		t.Fatalf("a fourth holder got a slot while three were held: %v", acqErr)
	default:
	}
	freed, _ := s.SlotOf(locks[1])
	if err := locks[1].Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	stepUntil(t, clk, 2, done, time.Minute)
	if acqErr != nil {
		t.Fatalf("the waiter: %v", acqErr)
	}
	if slot, ok := s.SlotOf(lock); !ok || slot != freed {
		t.Errorf("the waiter got slot %d (%v); want the freed slot %d", slot, ok, freed)
	}
	if lock.Status() != ddblock.StatusLocked || lock.OwnerName() != "late" {
		t.Errorf("the slot's lock: %s, owner %q", lock.Status(), lock.OwnerName())
	}
	// A slot is an ordinary lock: GetLock reads it, Release ends it.
	info, err := late.GetLock(ctx, "migrations", lock.SortKey())
	if err != nil || info.OwnerName != "late" || info.SortKey != lock.SortKey() {
		t.Errorf("GetLock of the slot: %+v, %v", info, err)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lock.Done():
	default:
		t.Error("Done not closed after Release")
	}
	if !errors.Is(lock.Err(), ddblock.CodeLockReleased) {
		t.Errorf("Err after Release: %v", lock.Err())
	}
}

// The calls a semaphore makes: the first acquire on a new name writes
// the metadata item and a slot; later ones read once and write once; a
// waiter only reads, one Query per look.
func TestSemaphoreCallCounts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	calls := queryCounting{newCounting(e.ddb)}
	c := e.clientOn(calls) // a heartbeat every 5 s: none during the test
	s := semaphoreOf(t, c, "pool", 2)
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := fmt.Sprint(calls.snapshot()); diff != fmt.Sprint(ops("GetItem", 1, "Query", 1, "PutItem", 2)) {
		t.Errorf("first acquire: %v; want a Query, the metadata's put and the slot's, and the metadata's read that confirms the slot", diff)
	}
	calls.reset()
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(calls.snapshot()); got != fmt.Sprint(ops("GetItem", 1, "Query", 1, "PutItem", 1)) {
		t.Errorf("second acquire: %v; want a Query, a put and the metadata's read that confirms it", got)
	}
	calls.reset()
	for range 3 {
		if _, err := s.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
			t.Fatalf("TryAcquire: %v", err)
		}
	}
	if got := fmt.Sprint(calls.snapshot()); got != fmt.Sprint(ops("Query", 3)) {
		t.Errorf("three looks at a full semaphore: %v; want 3 Query and no write", got)
	}
}

// A client asking for another number of slots is refused with
// SEMAPHORE_MISMATCH and writes no slot; so is the loser of a race
// between two numbers on a new name, whoever it is.
func TestSemaphoreMismatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.client(fastTimings...)
	b := e.client(fastTimings...)
	if _, err := semaphoreOf(t, a, "jobs", 2).Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	sb := semaphoreOf(t, b, "jobs", 3)
	for name, call := range map[string]func() error{
		"Acquire":    func() error { _, err := sb.Acquire(ctx); return err },
		"TryAcquire": func() error { _, err := sb.TryAcquire(ctx); return err },
	} {
		err := call()
		var lerr *ddblock.Error
		if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeSemaphoreMismatch || !errors.Is(err, ddblock.CodeSemaphoreMismatch) {
			t.Fatalf("%s with 3 slots on a 2-slot semaphore: %v; want SEMAPHORE_MISMATCH", name, err)
		}
		if !strings.Contains(lerr.Message, "has 2 slots, not the 3 asked for") {
			t.Errorf("message: %q", lerr.Message)
		}
	}
	if held, err := sb.Holders(ctx); err != nil || len(held) != 1 {
		t.Errorf("after the refusals: %d holders, %v; want the one", len(held), err)
	}

	for round := range 8 {
		name := fmt.Sprintf("race-%d", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, c := range []*ddblock.Client{a, b} {
			s := semaphoreOf(t, c, name, 2+i)
			wg.Go(func() { _, errs[i] = s.TryAcquire(ctx) })
		}
		wg.Wait()
		okA, okB := errs[0] == nil, errs[1] == nil
		if okA == okB {
			t.Fatalf("round %d: both or neither went on: %v, %v", round, errs[0], errs[1])
		}
		loser := errs[0]
		if okA {
			loser = errs[1]
		}
		if !errors.Is(loser, ddblock.CodeSemaphoreMismatch) {
			t.Fatalf("round %d: the loser's error: %v", round, loser)
		}
		held, err := semaphoreOf(t, a, name, 3).Holders(ctx)
		if err != nil || len(held) != 1 {
			t.Fatalf("round %d: %d slots held, %v; want the winner's only", round, len(held), err)
		}
	}
}

// The metadata item is not a lock: listings leave it out, and deleting
// it (once no slot is held) lets the semaphore start again with another
// number.
func TestSemaphoreMetadataItem(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(fastTimings...)
	s := semaphoreOf(t, c, "workers", 2)
	lock, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: "workers"},
			ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "slots"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := out.Item["ddblock_semaphore_slots"].(*types.AttributeValueMemberN); !ok || n.Value != "2" || len(out.Item) != 3 {
		t.Fatalf("metadata item: %v; want the keys and ddblock_semaphore_slots = 2", out.Item)
	}
	for name, seq := range map[string]func(func(*ddblock.LockInfo, error) bool){
		"ListLocks":               c.ListLocks(ctx),
		"ListLocksByPartitionKey": c.ListLocksByPartitionKey(ctx, "workers"),
	} {
		var keys []string
		for info, err := range seq {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			keys = append(keys, info.PartitionKey+"/"+info.SortKey)
		}
		if want := []string{"workers/" + lock.SortKey()}; fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Errorf("%s: %v; want %v", name, keys, want)
		}
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: "workers"},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "slots"},
	}}); err != nil {
		t.Fatal(err)
	}
	bigger := semaphoreOf(t, c, "workers", 4)
	for range 4 {
		if _, err := bigger.TryAcquire(ctx); err != nil {
			t.Fatalf("after the metadata item was deleted, 4 slots: %v", err)
		}
	}
	if _, err := semaphoreOf(t, c, "workers", 2).TryAcquire(ctx); !errors.Is(err, ddblock.CodeSemaphoreMismatch) {
		t.Errorf("the old number now: %v; want SEMAPHORE_MISMATCH", err)
	}
}

// A dead holder's slot is taken over only once its version number stood
// unchanged for its lease on the waiter's clock; the waiter reads, one
// Query a retry, and writes once.
func TestSemaphoreTakeoverOfDeadHolder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dead := e.client(ddblock.WithOwnerName("dead"), ddblock.WithLeaseDuration(10*time.Second),
		ddblock.WithSafePeriod(8*time.Second), ddblock.WithHeartbeatPeriod(2*time.Second))
	held, err := semaphoreOf(t, dead, "one", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Close(ctx, false); err != nil { // dies: no release, no heartbeat
		t.Fatal(err)
	}
	clk := fakeClock()
	calls := queryCounting{newCounting(e.ddb)}
	puts := &putClock{DynamoDBAPI: calls, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"), ddblock.WithFencingTokens())
	s := semaphoreOf(t, waiter, "one", 1)
	const retry = 700 * time.Millisecond
	start := clk.Monotonic()
	lock, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		return s.Acquire(ctx, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	took := puts.lastPut() - start
	if took < 10*time.Second || took > 10*time.Second+retry {
		t.Errorf("took over after %v of fake time; want within [10s, 10s+%v]", took, retry)
	}
	if from := lock.TakenOverFrom(); from == nil || from.OwnerName != "dead" || from.RecordVersionNumber != held.RecordVersionNumber() {
		t.Errorf("TakenOverFrom = %+v; want the dead holder's item", from)
	}
	if lock.FencingToken() <= 0 {
		t.Errorf("fencing token %d; want one", lock.FencingToken())
	}
	c := calls.snapshot()
	if c["PutItem"] != 1 || c["Query"] < int(10*time.Second/retry) || c["GetItem"] != 1 {
		t.Errorf("calls = %v; want one put, a Query per retry, and the metadata's read that confirms the slot", c)
	}
}

// A slot kept after its release is free at once; a live holder's slot is
// never taken, however long the waiter waits; the usual errors end a wait.
func TestSemaphoreWaitEnds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The holders keep the default 30 s lease: a busy machine cannot
	// make them lose their slots while the waiters wait.
	keeper := e.client(ddblock.WithKeepReleasedItems(true))
	ks := semaphoreOf(t, keeper, "kept", 1)
	first, err := ks.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	other := e.client()
	second, err := semaphoreOf(t, other, "kept", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a slot kept after its release: %v", err)
	}
	if second.TakenOverFrom() != nil {
		t.Errorf("a released slot counted as a takeover: %+v", second.TakenOverFrom())
	}

	clk := fakeClock()
	waiter := e.client(ddblock.WithClock(clk))
	s := semaphoreOf(t, waiter, "kept", 1)
	_, _, err = acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		return s.Acquire(ctx, ddblock.WithRetryPeriod(500*time.Millisecond), ddblock.WithRetryTimeout(2*time.Second)) // within the holder's 30 s lease
	})
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeAcquireTimeout || lerr.PartitionKey != "kept" {
		t.Fatalf("timeout: %v; want ACQUIRE_TIMEOUT naming the semaphore", err)
	}

	// A cancel, and a Close, end an acquire in its wait between tries:
	// the waiters' fake clocks say when they are in it.
	cclk := fakeClock()
	cancelled := semaphoreOf(t, e.client(ddblock.WithClock(cclk)), "kept", 1)
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		if err := cclk.WaitForTimers(2, 10*time.Second); err != nil {
			t.Error(err)
		}
		cancel()
	}()
	if _, err := cancelled.Acquire(cctx, ddblock.WithRetryTimeout(time.Hour)); !errors.Is(err, ddblock.CodeCanceled) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v; want CANCELED wrapping context.Canceled", err)
	}
	cancel()
	clclk := fakeClock()
	closing := e.client(ddblock.WithClock(clclk))
	cs := semaphoreOf(t, closing, "kept", 1)
	go func() {
		if err := clclk.WaitForTimers(2, 10*time.Second); err != nil {
			t.Error(err)
		}
		_ = closing.Close(ctx, false)
	}()
	if _, err := cs.Acquire(ctx, ddblock.WithRetryTimeout(time.Hour)); !errors.Is(err, ddblock.CodeClientShutdown) {
		t.Errorf("client closed: %v; want CLIENT_SHUTDOWN", err)
	}
	if second.Status() != ddblock.StatusLocked {
		t.Errorf("the holder's slot: %s", second.Status())
	}
}

// On a table keyed by the partition key alone, the slots are the keys
// "name#slot-i" and the metadata "name#slots".
func TestSemaphorePartitionKeyOnly(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := pkOnlyTable(t, ddb)
	calls := queryCounting{newCounting(ddb)}
	c, err := ddblock.New(calls, ddblock.WithTableName(name), ddblock.WithPartitionKeyName("id"), ddblock.WithPartitionKeyOnly(), ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx, true)
	s := semaphoreOf(t, c, "batch", 2)
	var slots []int
	for range 2 {
		lock, err := s.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slot, ok := s.SlotOf(lock)
		if !ok || lock.PartitionKey() != fmt.Sprintf("batch#slot-%d", slot) || lock.SortKey() != "" {
			t.Fatalf("slot %d (%v) is the lock %q/%q", slot, ok, lock.PartitionKey(), lock.SortKey())
		}
		slots = append(slots, slot)
	}
	if slots[0] == slots[1] {
		t.Fatalf("both acquires got slot %d", slots[0])
	}
	calls.reset()
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if got := fmt.Sprint(calls.snapshot()); got != fmt.Sprint(ops("GetItem", 3)) {
		t.Errorf("a look: %v; want a GetItem for the metadata and each slot", got)
	}
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(name), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "batch#slots"}}})
	if err != nil || out.Item["ddblock_semaphore_slots"] == nil {
		t.Fatalf("metadata item: %v, %v", out.Item, err)
	}
	if _, err := semaphoreOf(t, c, "batch", 5).TryAcquire(ctx); !errors.Is(err, ddblock.CodeSemaphoreMismatch) {
		t.Errorf("another number: %v", err)
	}
}

// Bad input is refused with INVALID_ARGUMENT naming the setting, before
// any call to DynamoDB.
func TestSemaphoreBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	calls := queryCounting{newCounting(e.ddb)}
	c := e.clientOn(calls)
	pkOnly, err := ddblock.New(e.ddb, ddblock.WithTableName(e.table), ddblock.WithPartitionKeyOnly(), ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer pkOnly.Close(ctx, false)
	for _, tc := range []struct {
		what    string
		c       *ddblock.Client
		name    string
		slots   int
		setting string
	}{
		{"empty name", c, "", 2, "Name"},
		{"no slots", c, "n", 0, "Slots"},
		{"negative slots", c, "n", -3, "Slots"},
		{"absurd slots", c, "n", ddblock.MaxSemaphoreSlots + 1, "Slots"},
		{"not UTF-8", c, "a\xffb", 2, "Name"},
		{"name too long", c, strings.Repeat("x", 2049), 2, "Name"},
		{"too long with the suffix", pkOnly, strings.Repeat("x", 2048-len("#slot-9")+1), 10, "Name"},
	} {
		s, err := tc.c.NewSemaphore(tc.name, tc.slots)
		var lerr *ddblock.Error
		if s != nil || !errors.As(err, &lerr) || lerr.Code != ddblock.CodeInvalidArgument || lerr.Setting != tc.setting {
			t.Errorf("%s: %v, %v; want INVALID_ARGUMENT for %s", tc.what, s, err, tc.setting)
		}
	}
	if _, err := pkOnly.NewSemaphore(strings.Repeat("x", 2048-len("#slot-9")), 10); err != nil {
		t.Errorf("a name that just fits: %v", err)
	}
	if _, err := c.NewSemaphore(strings.Repeat("x", 2048), ddblock.MaxSemaphoreSlots); err != nil {
		t.Errorf("the longest name and the most slots: %v", err)
	}
	s := semaphoreOf(t, c, "n", 2)
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"Acquire nil ctx":    func() error { _, err := s.Acquire(nilCtx); return err },
		"TryAcquire nil ctx": func() error { _, err := s.TryAcquire(nilCtx); return err },
		"Holders nil ctx":    func() error { _, err := s.Holders(nilCtx); return err },
		"WithSortKeyValue":   func() error { _, err := s.Acquire(ctx, ddblock.WithSortKeyValue("slot-0")); return err },
		"RetryPeriod":        func() error { _, err := s.Acquire(ctx, ddblock.WithRetryPeriod(0)); return err },
		"attribute": func() error {
			_, err := s.Acquire(ctx, ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{"owner_name": &types.AttributeValueMemberS{Value: "x"}}))
			return err
		},
	} {
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s panicked: %v", name, r)
				}
			}()
			err = call()
		}()
		if !errors.Is(err, ddblock.CodeInvalidArgument) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT", name, err)
		}
	}
	if _, ok := s.SlotOf(nil); ok {
		t.Error("SlotOf(nil) says it is a slot")
	}
	if got := calls.snapshot(); len(got) != 0 {
		t.Errorf("bad input made calls: %v", got)
	}
}
