package compat_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// These tests time a Go waiter against a Python holder's item on a fake
// clock: the waiter must take over exactly when the item's own lease has
// passed since it first saw the item's record version number — not a
// nanosecond earlier, not a retry later — and must start over whenever
// the number changes.

// stepClock is a fake clock that also records the deadline of every
// timer armed on it, so that a test can wait until the acquire loop is
// asleep until a given retry, advance exactly to it, and tell a new sleep
// (still waiting) from a returned acquire (taken over).
type stepClock struct {
	*clock.Fake
	mu      sync.Mutex
	armed   map[time.Duration]int
	changed chan struct{}
}

func newStepClock() *stepClock {
	return &stepClock{
		// The real time: the waiter's items expire an hour after its wall
		// clock, and a server with TTL deletes expired items.
		Fake:    clock.NewFake(time.Now().UTC().Truncate(time.Second)),
		armed:   map[time.Duration]int{},
		changed: make(chan struct{}),
	}
}

// NewTimer arms a fake timer and records its deadline.
func (c *stepClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline := c.Fake.Monotonic() + d
	t := c.Fake.NewTimer(d)
	c.armed[deadline]++
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

// advanceTo moves the clock to the monotonic reading at, firing timers.
func (c *stepClock) advanceTo(at time.Duration) {
	if d := at - c.Monotonic(); d > 0 {
		c.Advance(d)
	}
}

// takeoverWaiter is a Go client's AcquireLock in progress on a fake clock.
type takeoverWaiter struct {
	t      *testing.T
	clk    *stepClock
	ddb    *tapDDB
	client *ddblock.Client
	start  time.Duration // monotonic reading when AcquireLock began
	retry  time.Duration
	tick   int // retries the clock has been advanced to
	res    chan acquireResult
	got    *acquireResult
}

type acquireResult struct {
	lock *ddblock.Lock
	err  error
}

// startWaiter starts a Go client's AcquireLock on (pk, sk) on the clock
// clk, retrying every retry, and returns once the loop sleeps until its
// first retry.
//
// The client's heartbeat period is an hour (so its safe period and lease
// are longer still): its monitor and heartbeater then arm only timers an
// hour away, and the only timers within the test's reach are the acquire
// loop's. The lease that matters here is the one in the holder's item.
func startWaiter(t *testing.T, clk *stepClock, ddb *tapDDB, n names, pk, sk string, retry, timeout time.Duration, opts ...ddblock.Option) *takeoverWaiter {
	t.Helper()
	c := newGoClient(t, ddb, n, append([]ddblock.Option{hooks.Option[ddblock.Option](clk), ddblock.WithOwnerName("go-waiter"),
		ddblock.WithHeartbeatPeriod(time.Hour), ddblock.WithSafePeriod(2 * time.Hour), ddblock.WithLeaseDuration(3 * time.Hour)}, opts...)...)
	w := &takeoverWaiter{t: t, clk: clk, ddb: ddb, client: c, start: clk.Monotonic(), retry: retry, res: make(chan acquireResult, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		l, err := c.AcquireLock(ctx, pk, ddblock.WithSortKeyValue(sk), ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(timeout))
		w.res <- acquireResult{l, err}
	}()
	if w.settle() {
		t.Fatalf("AcquireLock returned at once (lock %t, error %v); it must wait on the holder's item", w.got.lock != nil, w.got.err)
	}
	return w
}

// retryAt is the monotonic reading of the n-th retry: start + n·retry.
func (w *takeoverWaiter) retryAt(n int) time.Duration {
	return w.start + time.Duration(n)*w.retry
}

// elapsed is how far the clock is past the start of AcquireLock.
func (w *takeoverWaiter) elapsed() time.Duration { return w.clk.Monotonic() - w.start }

// settle waits until the acquire loop sleeps until its next retry (false)
// or AcquireLock returns (true).
func (w *takeoverWaiter) settle() bool {
	w.t.Helper()
	next := w.retryAt(w.tick + 1)
	limit := time.After(20 * time.Second)
	for {
		w.clk.mu.Lock()
		asleep, changed := w.clk.armed[next] > 0, w.clk.changed
		w.clk.mu.Unlock()
		if asleep {
			return false
		}
		select {
		case r := <-w.res:
			w.got = &r
			return true
		case <-changed:
		case <-limit:
			w.t.Fatalf("after retry %d (%v in), AcquireLock neither returned nor slept until %v", w.tick, w.elapsed(), next-w.start)
		}
	}
}

// step advances the clock to the next retry and reports whether the lock
// was taken there.
func (w *takeoverWaiter) step() bool {
	w.t.Helper()
	w.tick++
	w.clk.advanceTo(w.retryAt(w.tick))
	return w.settle()
}

// stepUntilAcquired steps until the lock is taken, checking before each
// step that the holder's item is still in place, and returns the retry
// at which it was taken.
func (w *takeoverWaiter) stepUntilAcquired(holderStillThere func(), limit int) int {
	w.t.Helper()
	for w.tick < limit {
		holderStillThere()
		if w.step() {
			if w.got.err != nil {
				w.t.Fatalf("AcquireLock at retry %d (%v in): %v", w.tick, w.elapsed(), w.got.err)
			}
			return w.tick
		}
	}
	w.t.Fatalf("not acquired within %d retries", limit)
	return 0
}

// tapDDB passes every call to the real server; tests may hook the calls
// to interleave another client's writes or move a fake clock at exact
// points, and it counts puts.
type tapDDB struct {
	ddblock.DynamoDBAPI
	mu        sync.Mutex
	puts      int
	beforePut func(in *dynamodb.PutItemInput)
	afterPut  func(in *dynamodb.PutItemInput, err error)
}

func (d *tapDDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	d.mu.Lock()
	d.puts++
	before, after := d.beforePut, d.afterPut
	d.mu.Unlock()
	if before != nil {
		before(in)
	}
	out, err := d.DynamoDBAPI.PutItem(ctx, in, o...)
	if after != nil {
		after(in, err)
	}
	return out, err
}

func (d *tapDDB) putCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.puts
}

func (d *tapDDB) hook(before func(*dynamodb.PutItemInput), after func(*dynamodb.PutItemInput, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.beforePut, d.afterPut = before, after
}

// takeoverCase is a Python-written item to take over.
type takeoverCase struct {
	name  string
	names func(*testing.T) names
	item  func(*testing.T) map[string]types.AttributeValue
	lease time.Duration // what the item states
}

func takeoverCases() []takeoverCase {
	fixture := func(name string) func(*testing.T) map[string]types.AttributeValue {
		return func(t *testing.T) map[string]types.AttributeValue { return loadFixture(t, name) }
	}
	return []takeoverCase{
		{"30s", defaultNames, fixture("python_default"), 30 * time.Second},
		{"0.5s", defaultNames, fixture("python_fractional_exact"), 500 * time.Millisecond},
		{"0.1s as 38 digits", defaultNames, func(t *testing.T) map[string]types.AttributeValue {
			item := loadFixture(t, "python_fractional_binary")
			item["lease_duration"] = &types.AttributeValueMemberN{Value: pythonLease01[:len("0.")+38]}
			return item
		}, 100 * time.Millisecond},
		{"custom names", customNames, fixture("python_custom_names"), 30 * time.Second},
	}
}

// TestGoWaitsExactlyTheStatedLease: a Go waiter takes over a silent
// Python holder's lock once the lease the item states has passed since it
// first saw the item, on its own monotonic clock.
//
// The waiter retries every lease/5, so its 5th retry falls exactly one
// lease after the start. When its first look at the item is made at the
// start ("seen at 0"), it takes over at that 5th retry. When the first
// look returns 1ns later ("seen at 1ns", the clock moved while the call
// was in flight), the 5th retry is 1ns short of a lease: it must wait,
// and take over at the 6th.
func TestGoWaitsExactlyTheStatedLease(t *testing.T) {
	ddb := server(t)
	for _, tc := range takeoverCases() {
		for _, seenAfter := range []time.Duration{0, time.Nanosecond} {
			t.Run(fmt.Sprintf("%s/seen at %v", tc.name, seenAfter), func(t *testing.T) {
				n := tc.names(t)
				createTable(t, ddb, n)
				item := tc.item(t)
				putRaw(t, ddb, n, item)
				pk := item[n.PK].(*types.AttributeValueMemberS).Value
				sk := item[n.SK].(*types.AttributeValueMemberS).Value
				rvn := item["record_version_number"].(*types.AttributeValueMemberS).Value

				tap := &tapDDB{DynamoDBAPI: ddb}
				clk := newStepClock()
				var once sync.Once
				// The waiter's first write attempt fails on the holder's
				// item; it then notes the item as first seen "now".
				tap.hook(nil, func(*dynamodb.PutItemInput, error) {
					once.Do(func() { clk.Advance(seenAfter) })
				})
				w := startWaiter(t, clk, tap, n, pk, sk, tc.lease/5, 3*tc.lease)
				putsWhileWaiting := tap.putCount()

				stillPython := func() {
					t.Helper()
					got := rawItem(t, ddb, n, pk, sk)
					if v, _ := got["record_version_number"].(*types.AttributeValueMemberS); v == nil || v.Value != rvn {
						t.Fatalf("at %v the holder's item changed: %v", w.elapsed(), got)
					}
				}
				wantRetry := 5
				if seenAfter > 0 {
					wantRetry = 6
				}
				took := w.stepUntilAcquired(stillPython, 10)
				if took != wantRetry {
					t.Errorf("took over at retry %d (%v after the start, item seen at %v, lease %v); want retry %d",
						took, w.elapsed(), seenAfter, tc.lease, wantRetry)
				}
				if got := tap.putCount() - putsWhileWaiting; got != 1 {
					t.Errorf("%d writes from the first look to the takeover, want 1 (waiting only reads)", got)
				}
				after := rawItem(t, ddb, n, pk, sk)
				if o := after["owner_name"].(*types.AttributeValueMemberS).Value; o != "go-waiter" {
					t.Errorf("owner after takeover = %q, want go-waiter", o)
				}
				if r := after["record_version_number"].(*types.AttributeValueMemberS).Value; r != w.got.lock.RecordVersionNumber() {
					t.Errorf("item's version %q, lock's %q", r, w.got.lock.RecordVersionNumber())
				}
				// The new holder learns whose work may have been left half done.
				prev := w.got.lock.TakenOverFrom()
				if prev == nil || prev.OwnerName != item["owner_name"].(*types.AttributeValueMemberS).Value || prev.RecordVersionNumber != rvn || prev.LeaseDuration != tc.lease {
					t.Errorf("TakenOverFrom = %+v, want the Python holder's item (version %s, lease %v)", prev, rvn, tc.lease)
				}
			})
		}
	}
}

// TestGoWaiterRestartsOnPythonHeartbeat: while the Go client waits, the
// Python holder heartbeats once (a new record version number). The wait
// starts over from the moment the waiter sees the new number, so the
// takeover comes a full lease after that, not after the first.
func TestGoWaiterRestartsOnPythonHeartbeat(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	item := loadFixture(t, "python_default")
	putRaw(t, ddb, n, item)
	const pk, sk, lease = "orders/42", "-", 30 * time.Second
	oldRVN := item["record_version_number"].(*types.AttributeValueMemberS).Value

	w := startWaiter(t, newStepClock(), &tapDDB{DynamoDBAPI: ddb}, n, pk, sk, lease/6, 3*lease)
	for range 2 { // 5 s, 10 s
		if w.step() {
			t.Fatalf("took over at %v, before the lease", w.elapsed())
		}
	}
	// The Python holder's heartbeat thread runs now, between two retries.
	newRVN := uuid4()
	if err := pyHeartbeat(context.Background(), ddb, n, pk, sk, oldRVN, newRVN, time.Now().Add(time.Hour).Unix()); err != nil {
		t.Fatalf("Python heartbeat: %v", err)
	}
	// The waiter sees the new number at its 3rd retry (15 s): it may take
	// over at 15 s + 30 s = 45 s, its 9th retry, and not at 30 s.
	stillPython := func() {
		t.Helper()
		got := rawItem(t, ddb, n, pk, sk)
		if got["record_version_number"].(*types.AttributeValueMemberS).Value != newRVN {
			t.Fatalf("at %v the holder's item changed: %v", w.elapsed(), got)
		}
	}
	if took := w.stepUntilAcquired(stillPython, 20); took != 9 {
		t.Errorf("took over at retry %d (%v); want 9 (45s: a lease after the heartbeat was seen)", took, w.elapsed())
	}
}

// TestGoTakeoverLosesToPythonHeartbeat: the Python holder heartbeats
// between the Go waiter's last read and its takeover write. The write is
// conditioned on the version number the waiter saw, so it fails, the
// Python holder keeps its lock, and the waiter starts a new lease-long
// wait from the new number.
func TestGoTakeoverLosesToPythonHeartbeat(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	item := loadFixture(t, "python_default")
	putRaw(t, ddb, n, item)
	const pk, sk, lease = "orders/42", "-", 30 * time.Second
	oldRVN := item["record_version_number"].(*types.AttributeValueMemberS).Value

	tap := &tapDDB{DynamoDBAPI: ddb}
	w := startWaiter(t, newStepClock(), tap, n, pk, sk, lease/6, 3*lease)
	for range 5 { // 5 s … 25 s
		if w.step() {
			t.Fatalf("took over at %v, before the lease", w.elapsed())
		}
	}
	newRVN := uuid4()
	raced := make(chan string, 1)
	var once sync.Once
	tap.hook(func(in *dynamodb.PutItemInput) {
		once.Do(func() {
			// The Python heartbeat lands first.
			err := pyHeartbeat(context.Background(), ddb, n, pk, sk, oldRVN, newRVN, time.Now().Add(time.Hour).Unix())
			raced <- fmt.Sprint(err)
		})
	}, nil)
	if w.step() { // 30 s: a lease since the old number was seen; the write loses
		t.Fatalf("took over at %v although the holder heartbeated: %v, %v", w.elapsed(), w.got.lock, w.got.err)
	}
	if err := <-raced; err != "<nil>" {
		t.Fatalf("Python heartbeat: %s", err)
	}
	got := rawItem(t, ddb, n, pk, sk)
	if v := got["record_version_number"].(*types.AttributeValueMemberS).Value; v != newRVN {
		t.Fatalf("version after the race = %s, want the Python heartbeat's %s", v, newRVN)
	}
	if o := got["owner_name"].(*types.AttributeValueMemberS).Value; o != item["owner_name"].(*types.AttributeValueMemberS).Value {
		t.Fatalf("owner after the race = %s, want Python's", o)
	}
	// The new number was seen at 30 s: the takeover comes at 60 s.
	stillPython := func() {
		t.Helper()
		if v := rawItem(t, ddb, n, pk, sk)["record_version_number"].(*types.AttributeValueMemberS).Value; v != newRVN {
			t.Fatalf("at %v the holder's item changed to %s", w.elapsed(), v)
		}
	}
	if took := w.stepUntilAcquired(stillPython, 20); took != 12 {
		t.Errorf("took over at retry %d (%v); want 12 (60s: a lease after the new number was seen)", took, w.elapsed())
	}
}
