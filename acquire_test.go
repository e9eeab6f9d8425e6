package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
)

func TestTwoClientsContend(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.client(ddblock.WithOwnerName("a"))
	clk := fakeClock()
	b := e.client(ddblock.WithOwnerName("b"), ddblock.WithClock(clk))

	la, err := a.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatalf("a: %v", err)
	}
	done := make(chan struct{})
	var lb *ddblock.Lock
	var errB error
	go func() {
		defer close(done)
		lb, errB = b.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
	}()
	// b finds the lock held (a's lease is 30 s) and waits for its next try.
	waitForSleepers(t, clk, 2)
	select {
	case <-done:
		t.Fatalf("b acquired while a held the lock: %v", errB)
	default:
	}
	if err := la.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("release: %v", err)
	}
	stepUntil(t, clk, 2, done, time.Minute)
	if errB != nil {
		t.Fatalf("b after release: %v", errB)
	}
	info, err := a.GetLock(ctx, "k", "-")
	if err != nil || info.OwnerName != "b" || info.RecordVersionNumber != lb.RecordVersionNumber() {
		t.Fatalf("after handoff the table has %+v, %v; want b's lock", info, err)
	}
}

// A holder that stops heartbeating is taken over no sooner than its lease
// after the waiter first saw it, and no later than one retry period after.
func TestTakeoverOfAbandonedLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithOwnerName("dead"), ddblock.WithLeaseDuration(10*time.Second),
		ddblock.WithSafePeriod(8*time.Second), ddblock.WithHeartbeatPeriod(2*time.Second))
	if _, err := holder.AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := holder.Close(ctx, false); err != nil { // dies: no release, no heartbeat
		t.Fatal(err)
	}

	clk := fakeClock()
	calls := newCounting(e.ddb)
	puts := &putClock{DynamoDBAPI: calls, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"))
	const retry = 700 * time.Millisecond
	start := clk.Monotonic()
	done := make(chan struct{})
	var lock *ddblock.Lock
	var err error
	go func() {
		defer close(done)
		lock, err = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
	}()
	stepUntil(t, clk, 2, done, time.Minute)
	if err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	took := puts.lastPut() - start
	if took < 10*time.Second || took > 10*time.Second+retry {
		t.Errorf("took over after %v of fake time; want within [10s, 10s+%v]", took, retry)
	}
	if lock.OwnerName() != "waiter" {
		t.Errorf("owner = %q", lock.OwnerName())
	}
	// Waiting costs reads: one write to find the lock taken, one to take
	// it over, and nothing but GetItems in between.
	if c := calls.snapshot(); c["PutItem"] != 2 || c["GetItem"] < 10 {
		t.Errorf("calls = %v; want 2 PutItem and a GetItem per retry", c)
	}
}

// The waiter restarts its wait when the version number changes, as it
// does on every heartbeat of a live holder.
func TestNoTakeoverWhileHeartbeating(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithOwnerName("alive"))
	hl, err := holder.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	waiter := e.client(ddblock.WithClock(clk))
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		_, werr = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(100*time.Second))
	}()
	// Every 20 fake seconds the holder's version number changes (a
	// heartbeat, done out of band so its timing is the test's).
	rvn := hl.RecordVersionNumber()
	for i := range 4 {
		for range 20 {
			waitFor(t, "the waiter to sleep", func() bool { return clk.Timers() >= 2 })
			clk.Advance(time.Second)
		}
		next := "hb-" + string(rune('a'+i))
		setRVN(t, e, "k", "-", rvn, next)
		rvn = next
	}
	stepUntil(t, clk, 2, done, 2*time.Minute)
	if !errors.Is(werr, ddblock.CodeAcquireTimeout) {
		t.Fatalf("waiter: %v; want ACQUIRE_TIMEOUT, never a takeover of a live lock", werr)
	}
	if info, _ := waiter.GetLock(ctx, "k", "-"); info == nil || info.OwnerName != "alive" {
		t.Fatalf("lock now %+v; want it still held by the live holder", info)
	}
}

// setRVN changes a lock item's version number out of band, as another
// client's heartbeat or takeover would.
func setRVN(t *testing.T, e *env, pk, sk, from, to string) {
	t.Helper()
	_, err := e.ddb.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName:                aws.String(e.table),
		Key:                      map[string]types.AttributeValue{"lock_key": &types.AttributeValueMemberS{Value: pk}, "sort_key": &types.AttributeValueMemberS{Value: sk}},
		UpdateExpression:         aws.String("SET #r = :to"),
		ConditionExpression:      aws.String("#r = :from"),
		ExpressionAttributeNames: map[string]string{"#r": "record_version_number"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":to":   &types.AttributeValueMemberS{Value: to},
			":from": &types.AttributeValueMemberS{Value: from},
		},
	})
	if err != nil {
		t.Fatalf("changing the version number out of band: %v", err)
	}
}

func TestAcquireTimeoutReadsOnly(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.client().AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	calls := newCounting(e.ddb)
	waiter := e.clientOn(calls, ddblock.WithClock(clk))
	done := make(chan struct{})
	var err error
	start := clk.Monotonic()
	go func() {
		defer close(done)
		_, err = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(500*time.Millisecond), ddblock.WithRetryTimeout(2*time.Second))
	}()
	took := stepUntil(t, clk, 2, done, time.Minute) - start
	if !errors.Is(err, ddblock.CodeAcquireTimeout) {
		t.Fatalf("err = %v; want ACQUIRE_TIMEOUT", err)
	}
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.PartitionKey != "k" || lerr.Code != ddblock.CodeAcquireTimeout {
		t.Errorf("error fields: %+v", lerr)
	}
	if took > 2*time.Second+500*time.Millisecond {
		t.Errorf("gave up after %v; want about the 2s retry timeout", took)
	}
	// Attempts at 0, 0.5, 1, 1.5 and 2 s: one put (and the read of the
	// item where the failed put did not return it), then reads only.
	want := ops("PutItem", 1, "GetItem", 4+readsAfterFailedPut(t))
	if diff := cmp.Diff(want, calls.snapshot()); diff != "" {
		t.Errorf("calls while waiting (-want +got):\n%s", diff)
	}
}

func TestAcquireContextCancel(t *testing.T) {
	e := newEnv(t)
	if _, err := e.client().AcquireLock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	waiter := e.client(ddblock.WithClock(clk))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Hour), ddblock.WithRetryTimeout(10*time.Hour))
		got <- err
	}()
	waitForSleepers(t, clk, 2) // the monitor, and the acquire in its hour-long wait
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ddblock.CodeCanceled) {
			t.Fatalf("err = %v; want CANCELED matching context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AcquireLock did not return after its context was cancelled")
	}

	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	_, err := waiter.AcquireLock(dctx, "k", ddblock.WithRetryPeriod(time.Hour), ddblock.WithRetryTimeout(10*time.Hour))
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ddblock.CodeAcquireTimeout) {
		t.Fatalf("err = %v; want ACQUIRE_TIMEOUT matching context.DeadlineExceeded", err)
	}
}

func TestAdditionalAttributesRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	attrs := map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "text"},
		"n":    &types.AttributeValueMemberN{Value: "12.5"},
		"b":    &types.AttributeValueMemberB{Value: []byte{0, 1, 2}},
		"bool": &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"m":    &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"x": &types.AttributeValueMemberS{Value: "y"}}},
		"l":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: "1"}}},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
		"bs":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}},
	}
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k", ddblock.WithAdditionalAttributes(attrs))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.GetLock(ctx, "k", "-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []cmp.Option{
		cmpopts.IgnoreUnexported(types.AttributeValueMemberS{}, types.AttributeValueMemberN{}, types.AttributeValueMemberB{},
			types.AttributeValueMemberBOOL{}, types.AttributeValueMemberNULL{}, types.AttributeValueMemberM{},
			types.AttributeValueMemberL{}, types.AttributeValueMemberSS{}, types.AttributeValueMemberNS{}, types.AttributeValueMemberBS{}),
		cmpopts.SortSlices(func(a, b string) bool { return a < b }),
	}
	if diff := cmp.Diff(attrs, info.AdditionalAttributes, opts...); diff != "" {
		t.Errorf("attributes read back (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(attrs, lock.AdditionalAttributes(), opts...); diff != "" {
		t.Errorf("lock's attributes (-want +got):\n%s", diff)
	}
}

func TestReservedAttributesRefused(t *testing.T) {
	e := newEnv(t, ddblock.TableOptionForTest(func(o *ddblock.TableOptions) {
		o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName = "pk", "sk", "ttl"
	}))
	c := e.client()
	for _, name := range []string{"pk", "sk", "ttl", "owner_name", "lease_duration", "record_version_number"} {
		_, err := c.AcquireLock(context.Background(), "k", ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{
			name: &types.AttributeValueMemberS{Value: "x"},
		}))
		var lerr *ddblock.Error
		if !errors.Is(err, ddblock.CodeInvalidArgument) || !errors.As(err, &lerr) || lerr.Setting != "AdditionalAttributes" {
			t.Errorf("attribute %q: err = %v; want INVALID_ARGUMENT naming AdditionalAttributes", name, err)
		}
	}
	if _, err := c.GetLock(context.Background(), "k", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("a refused acquire wrote something: %v", err)
	}
}

func TestBadAcquireArguments(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	long := func(n int) string { return string(make([]byte, n)) }
	for _, tc := range []struct {
		name, pk, setting string
		opts              []ddblock.AcquireOption
	}{
		{"empty partition key", "", "PartitionKey", nil},
		{"oversized partition key", long(2049), "PartitionKey", nil},
		{"invalid UTF-8", "\xff", "PartitionKey", nil},
		{"empty sort key", "k", "SortKey", []ddblock.AcquireOption{ddblock.WithSortKeyValue("")}},
		{"oversized sort key", "k", "SortKey", []ddblock.AcquireOption{ddblock.WithSortKeyValue(long(1025))}},
		{"zero retry period", "k", "RetryPeriod", []ddblock.AcquireOption{ddblock.WithRetryPeriod(0)}},
		{"negative retry timeout", "k", "RetryTimeout", []ddblock.AcquireOption{ddblock.WithRetryTimeout(-time.Second)}},
		{"nil attribute", "k", "AdditionalAttributes", []ddblock.AcquireOption{ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{"x": nil})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AcquireLock(context.Background(), tc.pk, tc.opts...)
			var lerr *ddblock.Error
			if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeInvalidArgument || lerr.Setting != tc.setting {
				t.Fatalf("err = %v; want INVALID_ARGUMENT naming %s", err, tc.setting)
			}
		})
	}
	// The largest keys DynamoDB takes are accepted.
	if _, err := c.AcquireLock(context.Background(), string(make([]byte, 2048)), ddblock.WithSortKeyValue(string(make([]byte, 1024)))); err != nil {
		t.Fatalf("largest keys: %v", err)
	}
}

func TestSortKeysAreSeparateLocks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	a, err := c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("b/c d"), ddblock.WithRetryTimeout(0))
	if err != nil {
		t.Fatalf("second sort key under the same partition key: %v", err)
	}
	if a.ID() != "k|a" || b.ID() != "k|b/c%20d" {
		t.Errorf("IDs = %q, %q", a.ID(), b.ID())
	}
	var keys []string
	for info, err := range c.ListLocksByPartitionKey(ctx, "k") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.SortKey)
	}
	if diff := cmp.Diff([]string{"a", "b/c d"}, keys); diff != "" {
		t.Errorf("locks under k (-want +got):\n%s", diff)
	}
	if _, err := c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("a"), ddblock.WithRetryTimeout(0)); !errors.Is(err, ddblock.CodeAlreadyHeld) {
		t.Errorf("same sort key again: %v; want ALREADY_HELD", err)
	}
}

func TestCustomNames(t *testing.T) {
	e := newEnv(t, ddblock.TableOptionForTest(func(o *ddblock.TableOptions) {
		o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName = "name", "range", "ttl"
	}))
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(e.table),
		Key:       map[string]types.AttributeValue{"name": &types.AttributeValueMemberS{Value: "k"}, "range": &types.AttributeValueMemberS{Value: "-"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range out.Item {
		names = append(names, k)
	}
	want := []string{"ddblock_tenure", "lease_duration", "name", "owner_name", "range", "record_version_number", "ttl"}
	if diff := cmp.Diff(want, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range c.ListLocks(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 0 {
		t.Errorf("%d locks left after release", n)
	}
}

func TestMissingTable(t *testing.T) {
	e := newEnv(t)
	c := e.client(ddblock.WithTableName("no_such_table"))
	_, err := c.AcquireLock(context.Background(), "k")
	if !errors.Is(err, ddblock.CodeTableNotFound) {
		t.Fatalf("err = %v; want TABLE_NOT_FOUND", err)
	}
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Errorf("the AWS error is not reachable through Unwrap: %v", err)
	}
	if _, err := c.GetLock(context.Background(), "k", ""); !errors.Is(err, ddblock.CodeTableNotFound) {
		t.Errorf("GetLock: %v; want TABLE_NOT_FOUND", err)
	}
}

// A client never waits on itself: AcquireLock and TryAcquireLock of a key
// (partition and sort key) this client holds answer at once with
// ALREADY_HELD, with no call to the table and no time on the clock,
// whether the lock is heartbeated on its own or on a session. Another
// sort key is another lock, and after a release the key is free again.
func TestAcquireOwnLockAnswersAtOnce(t *testing.T) {
	for _, withSession := range []bool{false, true} {
		t.Run(fmt.Sprint("session=", withSession), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			clk := fakeClock()
			calls := newCounting(e.ddb)
			opts := []ddblock.Option{ddblock.WithClock(clk)}
			if withSession {
				opts = append(opts, ddblock.WithSessionLease())
			}
			c := e.clientOn(calls, opts...)
			held, err := c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("a"))
			if err != nil {
				t.Fatal(err)
			}
			calls.reset()
			start := clk.Monotonic()
			_, err = c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("a"), ddblock.WithRetryTimeout(time.Hour))
			var lerr *ddblock.Error
			if !errors.Is(err, ddblock.CodeAlreadyHeld) || !errors.As(err, &lerr) || lerr.PartitionKey != "k" || lerr.SortKey != "a" {
				t.Fatalf("AcquireLock of a held key: %v; want ALREADY_HELD naming k/a", err)
			}
			if _, err := c.TryAcquireLock(ctx, "k", ddblock.WithSortKeyValue("a")); !errors.Is(err, ddblock.CodeAlreadyHeld) {
				t.Fatalf("TryAcquireLock of a held key: %v; want ALREADY_HELD", err)
			}
			if clk.Monotonic() != start || len(calls.snapshot()) != 0 {
				t.Errorf("answered after %v of the clock and calls %v; want at once, without a call", clk.Monotonic()-start, calls.snapshot())
			}
			if held.Status() != ddblock.StatusLocked {
				t.Errorf("the held lock is %v after the refusals", held.Status())
			}
			other, err := c.AcquireLock(ctx, "k", ddblock.WithSortKeyValue("b"))
			if err != nil {
				t.Fatalf("another sort key of the same partition key: %v", err)
			}
			if err := held.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				t.Fatal(err)
			}
			again, err := c.TryAcquireLock(ctx, "k", ddblock.WithSortKeyValue("a"))
			if err != nil {
				t.Fatalf("after the release: %v", err)
			}
			for _, l := range []*ddblock.Lock{other, again} {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Two acquires of one free key by one client at the same time: one wins,
// and the other answers ALREADY_HELD at its next attempt, a retry period
// later, instead of waiting out its retry timeout.
func TestConcurrentAcquiresOfOneKeyByOneClient(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	const retry = time.Second
	type result struct {
		lock *ddblock.Lock
		err  error
	}
	results := make(chan result, 2)
	start := clk.Monotonic()
	for range 2 {
		go func() {
			l, err := c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Hour))
			results <- result{l, err}
		}()
	}
	// Whichever ends first, the other ends too, at once or (having
	// lost the race to the table) after one retry period.
	var got []result
	advanced := false
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 2 {
		select {
		case r := <-results:
			got = append(got, r)
			continue
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after 10 s; results so far %+v", got)
		}
		// The monitor, the winner's heartbeat and the loser's sleep.
		if len(got) == 1 && !advanced && clk.Timers() >= 3 {
			clk.Advance(retry)
			advanced = true
		}
	}
	if got[1].err == nil {
		got[0], got[1] = got[1], got[0]
	}
	if got[0].err != nil || got[0].lock == nil || !errors.Is(got[1].err, ddblock.CodeAlreadyHeld) {
		t.Fatalf("results %+v, %+v; want one lock and one ALREADY_HELD", got[0], got[1])
	}
	if clk.Monotonic()-start > retry {
		t.Errorf("ended after %v of fake time; want within one retry period", clk.Monotonic()-start)
	}
}

// A semaphore's slots are separate keys: one client may hold several
// slots of one semaphore, and finding every slot held, by itself or
// not, is LOCK_HELD, not ALREADY_HELD.
func TestSemaphoreSlotsOfOneClientAreNotItself(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	s := semaphoreOf(t, c, "pool", 2)
	a, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("second slot by the same client: %v", err)
	}
	if a.SortKey() == b.SortKey() {
		t.Fatalf("both acquires got slot %q", a.SortKey())
	}
	if _, err := s.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("third slot of two: %v; want LOCK_HELD", err)
	}
}

// slowCalls makes every read and put of a client take d of its fake
// clock, as calls do that the SDK retries through throttles.
type slowCalls struct {
	ddblock.DynamoDBAPI
	clk *clock.Fake
	d   time.Duration
}

func (s slowCalls) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	s.clk.Advance(s.d)
	return s.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (s slowCalls) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	s.clk.Advance(s.d)
	return s.DynamoDBAPI.PutItem(ctx, in, o...)
}

// The retry timeout counts time, not attempts: when each attempt takes
// three retry periods, AcquireLock gives up once the timeout has passed,
// not after timeout ÷ period attempts (it took 33 s of a 10 s timeout).
func TestRetryTimeoutCountsTimeNotAttempts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	if _, err := e.client(ddblock.WithLeaseDuration(time.Hour)).AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	calls := newCounting(slowCalls{e.ddb, clk, 3 * time.Second})
	waiter := e.clientOn(calls, ddblock.WithClock(clk))
	start := clk.Monotonic()
	_, end, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		return waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(10*time.Second))
	})
	took := end - start
	if !errors.Is(err, ddblock.CodeAcquireTimeout) {
		t.Fatalf("AcquireLock = %v; want ACQUIRE_TIMEOUT", err)
	}
	// The timeout, and at most the attempt under way when it passed.
	if took > 13*time.Second {
		t.Errorf("gave up after %v of fake time (%v calls); want within the 10 s timeout and one 3 s attempt", took, calls.snapshot())
	}
}
