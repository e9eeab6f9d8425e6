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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// takeAll fills every slot of an n-slot semaphore, one client each, and
// returns the locks by slot.
func takeAll(t *testing.T, e *env, name string, n int) map[int]*ddblock.Lock {
	t.Helper()
	ctx := context.Background()
	locks := map[int]*ddblock.Lock{}
	for i := range n {
		c := e.client(append(fastTimings, ddblock.WithOwnerName(fmt.Sprintf("holder-%d", i)))...)
		s := semaphoreOf(t, c, name, n)
		lock, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire %d: %v", i, err)
		}
		slot, _ := s.SlotOf(lock)
		locks[slot] = lock
	}
	return locks
}

// resizeCancelledOnceWritten runs s.Resize(n) and ends its context once
// the metadata item says n: a resize whose context ends while it waits
// for holders above n, however slow the machine.
func resizeCancelledOnceWritten(t *testing.T, s *ddblock.Semaphore, n int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Resize(ctx, n) }()
	waitFor(t, "the new number to be written", func() bool {
		select {
		case err := <-done:
			done <- err // ended on its own: the caller sees why
			return true
		default:
		}
		_, err := s.Holders(context.Background())
		return err == nil && s.Slots() == n
	})
	cancel()
	return <-done
}

// Growing: Resize returns at once, the new slots are free, and a client
// that asks for the old number follows the new one (Slots says so).
func TestSemaphoreResizeGrow(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	takeAll(t, e, "grow", 2)
	c := e.client(fastTimings...)
	s := semaphoreOf(t, c, "grow", 2)
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("a third on a full 2-slot semaphore: %v", err)
	}
	if err := semaphoreOf(t, e.client(fastTimings...), "grow", 7).Resize(ctx, 3); err != nil {
		t.Fatalf("Resize(3): %v", err)
	}
	lock, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("after the resize to 3, a client made with 2: %v", err)
	}
	if slot, ok := s.SlotOf(lock); !ok || slot != 2 || s.Slots() != 3 {
		t.Errorf("got slot %d (%v), Slots() = %d; want slot 2 of 3", slot, ok, s.Slots())
	}
	if _, err := semaphoreOf(t, c, "grow", 5).TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("a client made with 5 after the resize to 3, all 3 held: %v; want LOCK_HELD", err)
	}
	info, err := c.GetSemaphore(ctx, "grow")
	if err != nil || info.Slots != 3 || info.Span != 3 || info.Resizes != 1 || len(info.Holders) != 3 {
		t.Fatalf("GetSemaphore: %+v, %v; want 3 slots, 3 held, 1 resize", info, err)
	}
}

// Shrinking waits for the holders above the new number, who keep their
// slots until they release them; meanwhile new holders take only slots
// below it, and once Resize returned, at most the new number hold.
func TestSemaphoreResizeShrinkWaits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	locks := takeAll(t, e, "shrink", 4)
	c := e.client(fastTimings...)
	s := semaphoreOf(t, c, "shrink", 4)
	var released atomic.Bool
	done := make(chan error, 1)
	go func() {
		err := s.Resize(ctx, 2)
		if !released.Load() {
			err = fmt.Errorf("Resize returned (%v) before the holders above 2 released", err)
		}
		done <- err
	}()
	waitFor(t, "the new number to be written", func() bool {
		info, err := c.GetSemaphore(ctx, "shrink")
		return err == nil && info.Slots == 2 && info.Span == 4
	})
	// Slot 0 frees: a newcomer may take it (below 2); slot 3's holder is
	// still there.
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	newcomer := semaphoreOf(t, e.client(fastTimings...), "shrink", 4)
	lock, err := newcomer.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("newcomer during the drain: %v", err)
	}
	if slot, _ := newcomer.SlotOf(lock); slot != 0 {
		t.Fatalf("newcomer got slot %d; want 0, the only free one below 2", slot)
	}
	if err := locks[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := newcomer.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("with slot 2 free but above the new number: %v; want LOCK_HELD", err)
	}
	if err := locks[3].Err(); err != nil {
		t.Fatalf("the holder of slot 3 lost its lock during the drain: %v", err)
	}
	released.Store(true)
	if err := locks[3].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	info, err := c.GetSemaphore(ctx, "shrink")
	if err != nil || info.Slots != 2 || info.Span != 2 || len(info.Holders) != 2 {
		t.Fatalf("after the resize: %+v, %v; want 2 slots, both held", info, err)
	}
	if _, err := semaphoreOf(t, e.client(fastTimings...), "shrink", 4).TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("a third after the shrink to 2: %v; want LOCK_HELD", err)
	}
}

// A resize whose context ends while holders above it remain says so
// (LOCK_HELD naming them, wrapping the deadline); the new number is in
// force all the same, and a second Resize waits on.
func TestSemaphoreResizeContextEnds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	locks := takeAll(t, e, "partial", 2)
	s := semaphoreOf(t, e.client(fastTimings...), "partial", 2)
	err := resizeCancelledOnceWritten(t, s, 1)
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeLockHeld || !errors.Is(err, context.Canceled) ||
		!strings.Contains(lerr.Message, `slot 1 (owner "holder-`) {
		t.Fatalf("Resize with holders above: %v; want LOCK_HELD naming slot 1, wrapping the context's end", err)
	}
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	other := semaphoreOf(t, e.client(fastTimings...), "partial", 2)
	if _, err := other.TryAcquire(ctx); err != nil {
		t.Fatalf("slot 0 under the new number: %v", err)
	}
	if _, err := semaphoreOf(t, e.client(fastTimings...), "partial", 2).TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("a second holder beside slot 1's: %v; want LOCK_HELD: slot 1 is above the new number", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = locks[1].Release(ctx)
	}()
	if err := s.Resize(ctx, 1); err != nil {
		t.Fatalf("the second Resize: %v", err)
	}
	if locks[1].Err() == nil {
		t.Fatal("Resize returned while slot 1's holder held it")
	}
}

// A holder above the new number that died is removed once its version
// stood unchanged for its lease on the resizer's clock, not before.
func TestSemaphoreResizeDeadHolder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dead := e.client(ddblock.WithOwnerName("dead"), ddblock.WithLeaseDuration(10*time.Second),
		ddblock.WithSafePeriod(8*time.Second), ddblock.WithHeartbeatPeriod(2*time.Second))
	ds := semaphoreOf(t, dead, "corpse", 2)
	var above *ddblock.Lock
	for range 2 {
		lock, err := ds.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slot, _ := ds.SlotOf(lock); slot == 1 {
			above = lock
		}
	}
	if err := dead.Close(ctx, false); err != nil { // dies: no release, no heartbeat
		t.Fatal(err)
	}
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk), ddblock.WithHeartbeatPeriod(time.Second), ddblock.WithSafePeriod(4*time.Second),
		ddblock.WithLeaseDuration(6*time.Second))
	s := semaphoreOf(t, c, "corpse", 2)
	done := make(chan struct{})
	var err error
	start := clk.Monotonic()
	go func() {
		defer close(done)
		err = s.Resize(ctx, 1)
	}()
	end := stepUntil(t, clk, 2, done, time.Minute)
	if err != nil {
		t.Fatalf("Resize: %v", err)
	}
	if took := end - start; took < 10*time.Second {
		t.Errorf("the dead holder's slot was removed after %v of fake time; want its lease, 10s, first", took)
	}
	info, gerr := c.GetSemaphore(ctx, "corpse")
	if gerr != nil || info.Slots != 1 || len(info.Holders) != 1 || info.Holders[0].RecordVersionNumber == above.RecordVersionNumber() {
		t.Fatalf("after the resize: %+v, %v; want slot 0 alone held", info, gerr)
	}
}

// raceResize runs a resize of the semaphore to 1 slot just before the
// first put on slot 1 goes out: the acquirer read 2 slots, and wins
// slot 1 after the new number was written.
type raceResize struct {
	ddblock.DynamoDBAPI
	once   sync.Once
	resize func()
}

func (r *raceResize) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if sk, ok := in.Item[ddblock.DefaultSortKeyName].(*types.AttributeValueMemberS); ok && sk.Value == "slot-1" {
		r.once.Do(r.resize)
	}
	return r.DynamoDBAPI.PutItem(ctx, in, o...)
}

// An acquirer whose read came before a shrink, and whose put after it,
// gives the slot back instead of returning it: the read that confirms a
// won slot sees the new number.
func TestSemaphoreResizeRacingAcquire(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(fastTimings...)
	hs := semaphoreOf(t, holder, "race", 2)
	first, err := hs.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slot, _ := hs.SlotOf(first); slot != 0 {
		// Make slot 0 the held one, so that the acquirer's only choice
		// is slot 1.
		second, err := hs.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first = second
	}
	resizer := semaphoreOf(t, e.client(fastTimings...), "race", 2)
	resized := make(chan error, 1)
	race := &raceResize{DynamoDBAPI: e.ddb}
	race.resize = func() {
		go func() { resized <- resizer.Resize(ctx, 1) }()
		waitFor(t, "the resize's write", func() bool {
			info, err := holder.GetSemaphore(ctx, "race")
			return err == nil && info.Slots == 1
		})
	}
	acquirer := semaphoreOf(t, e.clientOn(race, fastTimings...), "race", 2)
	lock, err := acquirer.TryAcquire(ctx)
	if err == nil {
		slot, _ := acquirer.SlotOf(lock)
		t.Fatalf("the acquirer that read 2 slots got slot %d after the resize to 1 was written", slot)
	}
	if !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("TryAcquire: %v; want LOCK_HELD", err)
	}
	if err := <-resized; err != nil {
		t.Fatalf("Resize: %v", err)
	}
	info, err := holder.GetSemaphore(ctx, "race")
	if err != nil || len(info.Holders) != 1 || info.Holders[0].SortKey != "slot-0" {
		t.Fatalf("after the race: %+v, %v; want slot 0 alone held", info, err)
	}
}

// Before any resize, a client asking for another number is still
// refused; bad numbers are refused before any call.
func TestSemaphoreResizeBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := semaphoreOf(t, e.client(fastTimings...), "bad", 2)
	for _, n := range []int{0, -1, ddblock.MaxSemaphoreSlots + 1} {
		if err := s.Resize(ctx, n); !errors.Is(err, ddblock.CodeInvalidArgument) {
			t.Errorf("Resize(%d): %v; want INVALID_ARGUMENT", n, err)
		}
	}
	if _, err := e.client().GetSemaphore(ctx, "bad"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("GetSemaphore of a semaphore never used: %v; want LOCK_NOT_FOUND", err)
	}
	// A metadata item that is not a valid one is reported, not trusted.
	if _, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: "broken"},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "slots"},
		"ddblock_semaphore_slots":       &types.AttributeValueMemberN{Value: "0"},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := semaphoreOf(t, e.client(), "broken", 2).Resize(ctx, 3); !errors.Is(err, ddblock.CodeInvalidItem) {
		t.Errorf("Resize over a broken metadata item: %v; want INVALID_ITEM", err)
	}
	var names []string
	var bad int
	for info, err := range e.client().ListSemaphores(ctx) {
		if errors.Is(err, ddblock.CodeInvalidItem) {
			bad++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, info.Name)
	}
	if bad != 1 || len(names) != 0 {
		t.Errorf("ListSemaphores: %v and %d invalid; want only the broken one, reported", names, bad)
	}
}

// ListSemaphores finds every semaphore by its metadata item, and its
// Slot and SemaphoreNameOf recognize the keys of its slots and metadata.
func TestListSemaphores(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(fastTimings...)
	for _, n := range []int{1, 3} {
		if _, err := semaphoreOf(t, c, fmt.Sprintf("sem-%d", n), n).TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AcquireLock(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for info, err := range c.ListSemaphores(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		got[info.Name] = info.Slots
		if i, ok := info.Slot(info.Name, "slot-2"); !ok || i != 2 {
			t.Errorf("%s: Slot(slot-2) = %d, %v", info.Name, i, ok)
		}
		if _, ok := info.Slot(info.Name, "slots"); ok {
			t.Errorf("%s: the metadata item taken for a slot", info.Name)
		}
	}
	if fmt.Sprint(got) != "map[sem-1:1 sem-3:3]" {
		t.Errorf("ListSemaphores: %v", got)
	}
	if name, ok := c.SemaphoreNameOf("sem-3", "slots"); !ok || name != "sem-3" {
		t.Errorf("SemaphoreNameOf: %q, %v", name, ok)
	}
	if _, ok := c.SemaphoreNameOf("plain", "-"); ok {
		t.Error("SemaphoreNameOf took a plain lock's key for a metadata item")
	}
}

// On a table keyed by the partition key alone, where each slot is read
// by its own GetItem, a shrink still sees and waits for the holders
// above the new number (the span tells how far to read), and listings
// name the semaphore.
func TestSemaphoreResizePartitionKeyOnly(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := pkOnlyTable(t, ddb)
	client := func() *ddblock.Client {
		c, err := ddblock.New(ddb, append([]ddblock.Option{ddblock.WithTableName(name), ddblock.WithPartitionKeyName("id"),
			ddblock.WithPartitionKeyOnly(), ddblock.WithLogger(quiet)}, fastTimings...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(ctx, false) })
		return c
	}
	a, b := client(), client()
	sa := semaphoreOf(t, a, "batch", 3)
	var top *ddblock.Lock
	var others []*ddblock.Lock
	for range 3 {
		lock, err := sa.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if slot, _ := sa.SlotOf(lock); slot == 2 {
			top = lock
		} else {
			others = append(others, lock)
		}
	}
	for _, lock := range others {
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sb := semaphoreOf(t, b, "batch", 1) // asks for 1: follows once resized
	err := resizeCancelledOnceWritten(t, sb, 1)
	if !errors.Is(err, ddblock.CodeLockHeld) || !strings.Contains(err.Error(), "slot 2") {
		t.Fatalf("Resize(1) with slot 2 held: %v; want LOCK_HELD naming slot 2", err)
	}
	held, err := sb.Holders(ctx)
	if err != nil || len(held) != 1 || held[0].PartitionKey != "batch#slot-2" || sb.Slots() != 1 {
		t.Fatalf("Holders: %v, %v, Slots() = %d; want slot 2 above the new number", held, err, sb.Slots())
	}
	if name, ok := b.SemaphoreNameOf("batch#slots", ""); !ok || name != "batch" {
		t.Errorf("SemaphoreNameOf: %q, %v", name, ok)
	}
	if err := top.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resize(ctx, 1); err != nil {
		t.Fatal(err)
	}
	info, err := b.GetSemaphore(ctx, "batch")
	if err != nil || info.Slots != 1 || info.Span != 1 || info.Resizes != 2 {
		t.Fatalf("GetSemaphore: %+v, %v", info, err)
	}
	if _, err := sb.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("a second holder of the 1-slot semaphore: %v", err)
	}
}
