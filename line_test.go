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
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// Fair waiting (line.go): tests on a real server, the waiters on a fake
// clock (only the test's steps pass their retry periods and graces), the
// holder they wait for on the real clock.

const fairRetry = 100 * time.Millisecond

// fairGrace is a ticket's grace at fairRetry and fakeTimes' heartbeat
// period (1 s): the longer of three retry periods and two heartbeat
// periods, and a second (line.go's fairGrace).
const fairGrace = 2*time.Second + time.Second

// fairWaiter runs one fair AcquireLock of key on its own goroutine; the
// lock (or the error) comes on the returned channels' one value.
type fairWaiter struct {
	name string
	done chan struct{}
	lock *ddblock.Lock
	err  error
}

func startFair(c *ddblock.Client, name, key string, opts ...ddblock.AcquireOption) *fairWaiter {
	w := &fairWaiter{name: name, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.lock, w.err = c.AcquireLock(context.Background(), key, append([]ddblock.AcquireOption{ddblock.WithFairWaiting(),
			ddblock.WithRetryPeriod(fairRetry), ddblock.WithRetryTimeout(time.Hour)}, opts...)...)
	}()
	return w
}

// holdK takes the lock "k" with a client of its own, owner "holder", on
// the real clock: the lock fair waiters wait for.
func holdK(t *testing.T, e *env) (*ddblock.Client, *ddblock.Lock) {
	t.Helper()
	holder := e.client(ddblock.WithOwnerName("holder"))
	held, err := holder.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	return holder, held
}

// lineItemOfK reads the line item of "k" straight from the table: nil
// when there is none.
func lineItemOfK(t *testing.T, e *env) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"lock_key": &types.AttributeValueMemberS{Value: "ddblock_line#k"},
			"sort_key": &types.AttributeValueMemberS{Value: "-"},
		}})
	if err != nil {
		t.Fatalf("reading the line item: %v", err)
	}
	return out.Item
}

func (w *fairWaiter) finished() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stepWhile advances the fake clock from timer to timer while busy()
// holds, waiting first for `sleepers()` timers to be pending and for
// the calls of the tracked clients to have answered, within limit of
// fake time. A call in flight may be a session's heartbeat, whose timer
// is re-armed at once: fake time must not run past it, or the waiters
// behind would see the session stand still and skip its tickets.
func stepWhile(t *testing.T, clk *clock.Fake, sleepers func() int, busy func() bool, limit time.Duration) {
	t.Helper()
	start := clk.Monotonic()
	for busy() {
		waitFor(t, "the waiters to sleep", func() bool {
			return !busy() || (clk.Timers() >= sleepers() && trackedInFlight.Load() == 0)
		})
		if !busy() {
			return
		}
		if clk.Monotonic()-start > limit {
			t.Fatalf("still busy after %v of fake time", limit)
		}
		clk.AdvanceToNext()
	}
}

func tickets(t *testing.T, c *ddblock.Client, key string) []string {
	t.Helper()
	line, err := c.Line(context.Background(), key, "")
	if err != nil {
		t.Fatalf("Line(%s): %v", key, err)
	}
	var owners []string
	for _, tk := range line.Tickets {
		owners = append(owners, tk.OwnerName)
	}
	return owners
}

// Fair waiters take the lock in the order they came, whatever their
// polls' timing; the line is shown by Line and ListLines, never by
// ListLocks, and is gone once everyone has had a turn.
func TestFairWaitersTakeTheLockInArrivalOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, held := holdK(t, e)
	clk := fakeClock()
	const n = 4
	var clients []*ddblock.Client
	for i := range n {
		clients = append(clients, e.clientOn(tracked(e.ddb), append(fakeTimes(), ddblock.WithClock(clk), ddblock.WithOwnerName(fmt.Sprintf("w%d", i)))...))
	}
	waitForSleepers(t, clk, n) // every client's monitor
	var waiters []*fairWaiter
	var want []string
	for i, c := range clients {
		// Come in an order other than the clients' names would sort.
		name := fmt.Sprintf("w%d", (i*3)%n)
		c = clients[(i*3)%n]
		waiters = append(waiters, startFair(c, name, "k"))
		want = append(want, name)
		waitFor(t, name+"'s ticket", func() bool { return len(tickets(t, holder, "k")) == i+1 })
		waitForSleepers(t, clk, n+2*(i+1)) // in line, and asleep (its retry, its session's heartbeats)
	}
	if got := tickets(t, holder, "k"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("line %v; want %v", got, want)
	}
	var lines []*ddblock.LineInfo
	for l, err := range holder.ListLines(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 1 || lines[0].PartitionKey != "k" || lines[0].SortKey != "-" || len(lines[0].Tickets) != n {
		t.Fatalf("ListLines: %+v; want the line of k with %d tickets", lines, n)
	}
	var listed []string
	for info, err := range holder.ListLocks(ctx) {
		if err != nil {
			t.Fatalf("ListLocks: %v", err)
		}
		if info.IsSession {
			continue // a fair waiter's session item: its tickets name it
		}
		listed = append(listed, info.PartitionKey)
	}
	if fmt.Sprint(listed) != "[k]" {
		t.Fatalf("ListLocks: %v; want the lock k alone, not its line", listed)
	}

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var finished atomic.Int32
	for _, w := range waiters {
		go func() {
			<-w.done
			if w.err == nil {
				mu.Lock()
				order = append(order, w.name)
				mu.Unlock()
				if err := w.lock.Release(ctx); err != nil {
					t.Errorf("%s: Release: %v", w.name, err)
				}
			}
			finished.Add(1)
		}()
	}
	stepWhile(t, clk, func() int { return n + n - int(finished.Load()) }, func() bool { return finished.Load() < n }, time.Minute)
	for _, w := range waiters {
		if w.err != nil {
			t.Errorf("%s: %v", w.name, w.err)
		}
	}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("the lock went to %v; want the order they came in, %v", order, want)
	}
	if got := tickets(t, holder, "k"); len(got) != 0 {
		t.Errorf("line after every turn: %v; want none", got)
	}
}

// trackedInFlight counts the calls in flight of the clients made on
// tracked(...): stepWhile moves fake time only when none is.
var trackedInFlight atomic.Int64

func tracked(d ddblock.DynamoDBAPI) ddblock.DynamoDBAPI {
	return &ddbtest.Tap{DynamoDBAPI: d,
		Before: func(context.Context, *ddbtest.Call) error { trackedInFlight.Add(1); return nil },
		After:  func(*ddbtest.Call, error) { trackedInFlight.Add(-1) },
	}
}

// dying is a DynamoDB client that can be killed: every call then fails,
// as a killed process's would never come.
type dying struct {
	ddbtest.Tap
	dead atomic.Bool
}

var errDead = errors.New("dead")

func newDying(api ddblock.DynamoDBAPI) *dying {
	d := &dying{}
	d.Tap = ddbtest.Tap{DynamoDBAPI: api, Before: func(context.Context, *ddbtest.Call) error {
		if d.dead.Load() {
			return errDead
		}
		return nil
	}}
	return d
}

// A fair waiter that dies first in line (its ticket stays: it can
// neither take the lock nor leave) holds the line up for its grace once
// the lock is free, no longer: the next waiter removes it and takes the
// lock.
func TestDeadFairWaiterLosesItsPlace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, held := holdK(t, e)
	clk := fakeClock()
	dd := newDying(e.ddb)
	doomed := e.clientOn(tracked(dd), append(fakeTimes(), ddblock.WithClock(clk), ddblock.WithOwnerName("doomed"))...)
	puts := &putClock{DynamoDBAPI: e.ddb, clk: clk}
	alive := e.clientOn(tracked(puts), append(fakeTimes(), ddblock.WithClock(clk), ddblock.WithOwnerName("alive"))...)
	waitForSleepers(t, clk, 2)
	d := startFair(doomed, "doomed", "k")
	waitForSleepers(t, clk, 4) // its retry, its session's heartbeats
	w := startFair(alive, "alive", "k")
	waitForSleepers(t, clk, 6)
	if got := fmt.Sprint(tickets(t, holder, "k")); got != "[doomed alive]" {
		t.Fatalf("line %s; want [doomed alive]", got)
	}
	dd.dead.Store(true)
	clk.AdvanceToNext() // both poll; the doomed one's call fails, and so does its leaving
	<-d.done
	if d.err == nil {
		t.Fatal("the doomed waiter acquired")
	}
	if got := fmt.Sprint(tickets(t, holder, "k")); got != "[doomed alive]" {
		t.Fatalf("line after the death: %s; want the dead ticket still first", got)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	freed := clk.Monotonic()
	// The monitors, the sessions' heartbeats (the doomed one's failing)
	// and the live waiter's retry.
	stepWhile(t, clk, func() int { return 5 }, func() bool { return !w.finished() }, time.Minute)
	if w.err != nil {
		t.Fatalf("the live waiter: %v", w.err)
	}
	took := puts.lastPut() - freed
	if took < fairGrace || took > fairGrace+5*fairRetry {
		t.Errorf("the live waiter took the lock %v after its release; want after the dead one's grace, %v, within a few retry periods", took, fairGrace)
	}
	if got := tickets(t, holder, "k"); len(got) != 0 {
		t.Errorf("line after: %v; want none", got)
	}
	// The remover, alone once the dead ticket was out, took the line
	// item with it when it left: no empty line is left to the TTL.
	if item := lineItemOfK(t, e); item != nil {
		t.Errorf("the line item after everyone left: %v; want none", item)
	}
	dd.dead.Store(false)
}

// lineCounting counts calls by whether they are on a line's counter, a
// ticket or a lock item, and whether they write; the holder's heartbeats
// (updates of the lock) and the calls on session items (a client's, not
// a wait's: one heartbeat a period whatever it waits for) are not
// counted.
type lineCounting struct {
	ddbtest.Tap
	lineWrites, lineReads, lockWrites, lockReads atomic.Int32
	ticketWrites, ticketReads                    atomic.Int32
	mu                                           sync.Mutex
	writes                                       []string // lock writes, in order, with their outcomes
}

func newLineCounting(api ddblock.DynamoDBAPI) *lineCounting {
	c := &lineCounting{}
	c.Tap = ddbtest.Tap{DynamoDBAPI: api,
		Before: func(_ context.Context, call *ddbtest.Call) error {
			kind, write := call.Kind(), call.Write()
			switch {
			case call.Op == "Query" || call.Op == "Scan" || kind == "session":
			case call.Op == "UpdateItem" && kind != "line": // on the lock, a heartbeat: not the wait's
			case kind == "ticket" && write:
				c.ticketWrites.Add(1)
			case kind == "ticket":
				c.ticketReads.Add(1)
			case kind == "line" && write:
				c.lineWrites.Add(1)
			case kind == "line":
				c.lineReads.Add(1)
			case write:
				c.lockWrites.Add(1)
			default:
				c.lockReads.Add(1)
			}
			return nil
		},
		After: func(call *ddbtest.Call, err error) {
			if call.Kind() == "lock" && (call.Op == "PutItem" || call.Op == "DeleteItem") {
				c.wrote(call.Op, err)
			}
		},
	}
	return c
}

func (c *lineCounting) wrote(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	outcome := "ok"
	if err != nil {
		outcome = strings.Fields(err.Error())[0]
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			outcome = "condition failed"
		}
	}
	c.writes = append(c.writes, op+": "+outcome)
}

// A fair wait costs a bounded number of writes, however long it lasts:
// on the line, the number taken, the ticket, the turn handed on and the
// ticket's delete; on the lock a put when served, the put that takes it
// and the release. Waiting itself costs reads only: the counter's once a
// period by each client's lead (four times by the next in line), the
// lock's four times a period by the head, and, by the two nearest the
// front (who time the head), the
// lock, the head's ticket and its session once a period; those further
// back inspect the front once per half a grace.
func TestFairWaitWritesAreBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, held := holdK(t, e)
	clk := fakeClock()
	const n = 4
	var counts []*lineCounting
	var waiters []*fairWaiter
	for i := range n {
		cc := newLineCounting(e.ddb)
		counts = append(counts, cc)
		c := e.clientOn(tracked(cc), append(fakeTimes(), ddblock.WithClock(clk), ddblock.WithOwnerName(fmt.Sprintf("w%d", i)))...)
		waitForSleepers(t, clk, 3*i+1)
		waiters = append(waiters, startFair(c, fmt.Sprintf("w%d", i), "k"))
		waitForSleepers(t, clk, 3*i+3) // its monitor, its retry, its session's heartbeats
	}
	// Twenty retry periods of waiting on a held lock.
	start := clk.Monotonic()
	for clk.Monotonic()-start < 20*fairRetry {
		waitForSleepers(t, clk, 3*n)
		waitFor(t, "the calls in flight to answer", func() bool { return trackedInFlight.Load() == 0 })
		clk.AdvanceToNext()
	}
	for i, cc := range counts {
		if w := cc.lineWrites.Load() + cc.ticketWrites.Load(); w != 2 {
			t.Errorf("w%d wrote %d times on the line while waiting; want 2: its number and its ticket", i, w)
		}
		lo, hi, want := int32(15), int32(22), "one a period"
		if i == 1 {
			// The next in line looks four times a period, to see its
			// turn come soon after the head leaves.
			lo, hi, want = 60, 84, "four a period"
		}
		if r := cc.lineReads.Load(); r < lo || r > hi {
			t.Errorf("w%d read the line's counter %d times in 20 retry periods; want %s", i, r, want)
		}
	}
	if w := counts[0].lockWrites.Load(); w != 1 {
		t.Errorf("the head wrote %d times on the lock while waiting; want 1: its first put", w)
	}
	// The head looks at the lock four times a period, the next two once
	// (to time the head), the fourth never.
	if r := counts[0].lockReads.Load(); r < 60 || r > 84 {
		t.Errorf("the head read the lock %d times in 20 retry periods; want four a period", r)
	}
	for i := 1; i <= 2; i++ {
		if r := counts[i].lockReads.Load(); r < 15 || r > 22 {
			t.Errorf("w%d read the lock %d times in 20 retry periods; want one a period", i, r)
		}
		if r := counts[i].ticketReads.Load(); r < 15 || r > 22 {
			t.Errorf("w%d read the head's ticket %d times in 20 retry periods; want one a period", i, r)
		}
	}
	// The fourth, further back, inspects the front once per half its
	// grace (1.5 s): at most two inspections in these 2 s, the first
	// reading the three tickets ahead and the lock, the second the
	// head's ticket and the lock.
	if r := counts[3].lockReads.Load() + counts[3].ticketReads.Load(); r > 6 {
		t.Errorf("the fourth in line read the lock or a ticket %d times in 20 retry periods; want at most two inspections (6 reads)", r)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var finished atomic.Int32
	for _, w := range waiters {
		go func() {
			<-w.done
			if w.err == nil {
				if err := w.lock.Release(ctx); err != nil {
					t.Errorf("%s: Release: %v", w.name, err)
				}
			}
			finished.Add(1)
		}()
	}
	stepWhile(t, clk, func() int { return 3*n - int(finished.Load()) }, func() bool { return finished.Load() < n }, time.Minute)
	for i, cc := range counts {
		if waiters[i].err != nil {
			t.Errorf("w%d: %v", i, waiters[i].err)
		}
		lw, tw, kw := cc.lineWrites.Load(), cc.ticketWrites.Load(), cc.lockWrites.Load()
		if lw != 2 || tw != 2 {
			t.Errorf("w%d: %d writes on the counter, %d on its ticket; want 2 and 2 (number and hand-on; put and delete)", i, lw, tw)
		}
		if kw < 2 || kw > 3 {
			t.Errorf("w%d: %d writes on the lock; want 2 or 3 (a put that found it held, the put that took it, the release)", i, kw)
		}
		t.Logf("w%d: counter %d writes %d reads; tickets %d writes %d reads; lock %d writes %d reads; lock writes %v", i, lw, cc.lineReads.Load(), tw, cc.ticketReads.Load(), kw, cc.lockReads.Load(), cc.writes)
	}
}

// A semaphore's fair waiters take its slots in the order they came, from
// one line for the whole semaphore.
func TestFairSemaphoreWaitersInArrivalOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithOwnerName("holder"))
	hs := semaphoreOf(t, holder, "pool", 2)
	var held []*ddblock.Lock
	for range 2 {
		l, err := hs.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	clk := fakeClock()
	const n = 3
	var waiters []*fairWaiter
	for i := range n {
		c := e.clientOn(tracked(e.ddb), append(fakeTimes(), ddblock.WithClock(clk), ddblock.WithOwnerName(fmt.Sprintf("w%d", i)))...)
		s := semaphoreOf(t, c, "pool", 2)
		waitForSleepers(t, clk, 3*i+1)
		w := &fairWaiter{name: fmt.Sprintf("w%d", i), done: make(chan struct{})}
		go func() {
			defer close(w.done)
			w.lock, w.err = s.Acquire(ctx, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fairRetry), ddblock.WithRetryTimeout(time.Hour))
		}()
		waiters = append(waiters, w)
		waitFor(t, w.name+"'s ticket", func() bool {
			line, err := holder.Line(ctx, "pool", "slots")
			return err == nil && len(line.Tickets) == i+1
		})
		waitForSleepers(t, clk, 3*i+3) // its monitor, its retry, its session's heartbeats
	}
	if got := fmt.Sprint(tickets(t, holder, "pool")); got != "[]" {
		t.Fatalf("the lock key's line: %s; a semaphore's line is at its metadata key", got)
	}
	line, err := holder.Line(ctx, "pool", "slots")
	if err != nil || len(line.Tickets) != n {
		t.Fatalf("the semaphore's line: %+v, %v; want %d tickets", line, err, n)
	}
	// Free one slot at a time: each goes to the first in line.
	frees := []*ddblock.Lock{held[0], held[1]}
	for i := range n {
		if i < 2 {
			if err := frees[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else if err := waiters[0].lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		pending := func() int {
			k := 0
			for _, w := range waiters {
				if !w.finished() {
					k++
				}
			}
			return k
		}
		before := pending()
		stepWhile(t, clk, func() int { return n + pending() }, func() bool { return pending() == before }, time.Minute)
		for j, w := range waiters {
			if got, want := w.finished(), j <= i; got != want {
				t.Fatalf("after %d slots freed, w%d finished: %v; want %v", i+1, j, got, want)
			}
		}
		if waiters[i].err != nil {
			t.Fatalf("w%d: %v", i, waiters[i].err)
		}
	}
}

// Keys of lines are reserved, and a key too long for its line is
// refused with fair waiting only.
func TestFairWaitingBadKeys(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	if _, err := c.AcquireLock(ctx, "ddblock_line#k"); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("a line's key as a lock's: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.NewSemaphore("ddblock_line#s", 2); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("a line's key as a semaphore's name: %v; want INVALID_ARGUMENT", err)
	}
	long := strings.Repeat("x", 2040)
	if _, err := c.AcquireLock(ctx, long, ddblock.WithFairWaiting()); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("a key too long for its line: %v; want INVALID_ARGUMENT", err)
	}
	l, err := c.AcquireLock(ctx, long)
	if err != nil {
		t.Fatalf("the same key without fair waiting: %v", err)
	}
	_ = l.Release(ctx)
}

// On a table keyed by the partition key alone, a line is at
// "ddblock_line#KEY": a fair waiter waits in it behind a holder, takes the
// lock in its turn, and leaves no ticket; a semaphore's line is at
// "NAME#slots".
func TestFairWaitingPartitionKeyOnly(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := pkOnlyTable(t, ddb)
	newClientOn := func(ddb ddblock.DynamoDBAPI, owner string, opts ...ddblock.Option) *ddblock.Client {
		c, err := ddblock.New(ddb, append([]ddblock.Option{ddblock.WithTableName(name), ddblock.WithPartitionKeyName("id"), ddblock.WithPartitionKeyOnly(),
			ddblock.WithLogger(quiet), ddblock.WithOwnerName(owner)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx, true) })
		return c
	}
	holder := newClientOn(ddb, "holder")
	held, err := holder.AcquireLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	waiter := newClientOn(tracked(ddb), "waiter", append(fakeTimes(), ddblock.WithClock(clk))...)
	waitForSleepers(t, clk, 1)
	w := startFair(waiter, "waiter", "job")
	waitForSleepers(t, clk, 3) // its monitor, its retry, its session's heartbeats
	line, err := holder.Line(ctx, "job", "")
	if err != nil || len(line.Tickets) != 1 || line.Tickets[0].OwnerName != "waiter" || line.SortKey != "" {
		t.Fatalf("line %+v, %v; want the waiter's ticket, no sort key", line, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	stepWhile(t, clk, func() int { return 3 }, func() bool { return !w.finished() }, time.Minute)
	if w.err != nil {
		t.Fatalf("fair acquire: %v", w.err)
	}
	if err := w.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if line, err := holder.Line(ctx, "job", ""); err != nil || len(line.Tickets) != 0 {
		t.Errorf("line after: %+v, %v; want none", line, err)
	}
	s, err := holder.NewSemaphore("pool", 1)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := s.Acquire(ctx, ddblock.WithFairWaiting())
	if err != nil {
		t.Fatalf("fair semaphore acquire: %v", err)
	}
	_ = slot.Release(ctx)
	if line, err := s.Line(ctx); err != nil || line.PartitionKey != "pool#slots" || len(line.Tickets) != 0 {
		t.Errorf("the semaphore's line: %+v, %v; want pool#slots, empty", line, err)
	}
}

// A fair acquire on a table of other keys is TABLE_MISMATCH at once, as
// any acquire's: the line's take is refused for the keys, not for garbage
// in the line, and no reset of the line hides it.
func TestFairWaitingOnATableOfOtherKeys(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := pkOnlyTable(t, ddb) // keyed by "id" alone
	c, err := ddblock.New(ddb, ddblock.WithTableName(name), ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx, true) })
	_, err = c.AcquireLock(ctx, "k", ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fairRetry), ddblock.WithRetryTimeout(time.Minute))
	if ddblock.CodeOf(err) != ddblock.CodeTableMismatch {
		t.Fatalf("fair AcquireLock on a table of other keys: %v; want TABLE_MISMATCH", err)
	}
}
