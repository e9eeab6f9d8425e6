package ddblock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	wirepkg "github.com/ddblock/ddblock/internal/wire"
)

// Fair waiting at scale (line.go): many fair waiters of one key in one
// process. The fair waiters of one line in one client form a room, of
// which only the lead reads the line's counter; the others sleep until
// woken. So neither the calls nor the CPU of a handoff should grow with
// the number of waiters behind.

// fhPeriod is the fair waiters' retry period in these benchmarks and
// tests: short, so that a run is quick; the head tries four times a
// period.
const fhPeriod = 100 * time.Millisecond

// BenchmarkFairHandoff times handoffs of one key among N fair waiters
// (WithFairWaiting, WithWaitOnOwn, retry period 100 ms) in one process,
// the line kept at N: each waiter that wins is released at the next
// handoff, and a new waiter joins the back of the line in its place.
//
//   - one-client/waiters=N: the N waiters are goroutines of one client,
//     which also holds the lock (the previous winner): the release hands
//     the key over in process, and the next waiter, already at the head,
//     puts at once;
//   - two-clients/waiters=N: N/2 waiters in each of two clients, in line
//     alternately, so that every handoff goes from one client to the
//     other: the head finds the lock free at its next poll (four a retry
//     period).
//
// Between two handoffs the process waits two retry periods and a random
// part of a quarter of one, so that the next head has read the line and
// is polling, at a random phase. Reported per handoff, over the handoffs
// of the run (the line is set up once, before Go's first run of one
// handoff, and serves the -benchtime run after it):
//
//   - handoff-ms (the mean; also p50-ms, p90-ms, max-ms): from the
//     Release call to the next waiter's AcquireLock returning;
//   - cpu-ms/handoff: the process's CPU time (user + system, getrusage)
//     over that same span: the release, the winner's put, its handing the
//     turn on and deleting its ticket, and whatever else the process did
//     meanwhile (every waiter of both clients, the GC);
//   - calls/handoff: DynamoDB calls over that span, by both clients;
//   - wait-cpu-ms/s: the process's CPU per second of waiting between
//     handoffs (N waiters asleep, the leads reading the line, the head
//     polling), measured over the last 1-1.25 retry periods before each
//     release.
//
// ns/op is the handoff too. The set-up (N waiters taking their numbers,
// one after the other) and the tear-down are not timed; at N = 10,000 each
// takes some seconds. It asserts nothing about speed; it fails if a
// waiter's acquire fails or the lock goes out of the line's order.
//
//	go test -run '^$' -bench FairHandoff -benchtime 20x .
func BenchmarkFairHandoff(b *testing.B) {
	for _, clients := range []int{1, 2} {
		for _, n := range []int{10, 100, 2000, 10000} {
			name := fmt.Sprintf("one-client/waiters=%d", n)
			if clients == 2 {
				name = fmt.Sprintf("two-clients/waiters=%d", n)
			}
			ddb, table := benchTable(b)
			// The fixture outlives the sub-benchmark's runs (b.N = 1, then
			// the -benchtime count): set up once, torn down after the last.
			var fx *fhFixture
			b.Run(name, func(b *testing.B) {
				b.StopTimer()
				if fx == nil {
					fx = &fhFixture{}
					// Alternately, from the client that does not hold the lock.
					fx.setUp(b, ddb, table, clients, n, 1, func(i int) int { return (i + 1) % clients })
				}
				fx.handoffs(b)
			})
			if fx != nil {
				fx.tearDown(b)
			}
		}
	}
}

// 2,000 fair waiters of one key in one client cost what one does: only
// the lead of the client's room (the first in line, here the head) calls
// the table while they wait, one read of the line's counter and a few of
// the lock a retry period; the others make no call. A handoff costs a
// handful of calls, and the lock goes to the first in line. Calls are
// counted against the lead's reads of the counter (about one a retry
// period), never against time.
func TestFairWaitersInOneClientCostOneReader(t *testing.T) {
	if testing.Short() {
		t.Skip("lines up 2,000 waiters: 10-60 s")
	}
	const n = 2000
	ddb, table := benchTable(t)
	fx := &fhFixture{}
	t.Cleanup(func() { fx.tearDown(t) })
	// The lock is held by client 0; the waiters are all in client 1.
	fx.setUp(t, ddb, table, 2, n, 50, func(int) int { return 1 })
	room := fx.calls[1]

	// window counts client 1's calls until the lead has read the counter
	// looks more times, and checks that they are one reader's.
	window := func(what string, looks int64) {
		t.Helper()
		before := fhSnapshot(room)
		fhWaitUntil(t, fmt.Sprintf("%d reads of the line's counter", looks), func() bool {
			return room.counterReads.Load()-before.counterReads >= looks
		})
		d := fhSnapshot(room).minus(before)
		t.Logf("%s: %+v", what, d)
		if d.counterWrites != 0 || d.ticketWrites != 0 {
			t.Errorf("%s: %d writes of the counter, %d of tickets, by %d waiters that only wait; want none", what, d.counterWrites, d.ticketWrites, n)
		}
		// The lead reads the counter once a period and, as the head, the
		// lock four times a period; nobody else calls.
		if calls := d.waiterCalls(); calls > 6*d.counterReads+6 {
			t.Errorf("%s: %d calls for %d reads of the counter; want at most 6 a read, the lead's: the others of the %d waiters call too", what, calls, d.counterReads, n)
		}
	}
	window("waiting on another client's lock", 10)

	before := fhSnapshot(room)
	if err := fx.holder.Release(context.Background(), ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	got := <-fx.won
	// The winner's ticket is deleted after it has the lock, off the
	// handoff: wait for that delete, and count it in the handoff.
	fhWaitUntil(t, "the winner's ticket to be deleted", func() bool {
		return room.ticketWrites.Load()-before.ticketWrites >= 1
	})
	d := fhSnapshot(room).minus(before)
	t.Logf("the handoff: %+v", d)
	if got.err != nil {
		t.Fatalf("the first waiter: %v", got.err)
	}
	if got.w != fx.line[0] {
		t.Fatalf("waiter %d got the lock; want waiter %d, first in line", got.w.id, fx.line[0].id)
	}
	fx.line, fx.holder, fx.held = fx.line[1:], got.lock, got.w.client
	// Reads of the lock until it shows free (one, or two if one was in
	// flight at the release), perhaps the counter's; the put, the turn
	// handed on, the ticket's delete; the next lead's first read of the
	// counter and of the lock may come before the winner returns.
	if calls := d.waiterCalls(); calls > 10 {
		t.Errorf("the handoff cost %d calls with %d waiters behind; want at most 10", calls, n-1)
	}
	window("waiting on a lock of the client's own", 10)
}

// fhCounts is a snapshot of fhCalls.
type fhCounts struct {
	total, sessionCalls, counterReads, counterWrites, ticketReads, ticketWrites, lockReads, lockWrites int64
}

func fhSnapshot(c *fhCalls) fhCounts {
	return fhCounts{c.total.Load(), c.sessionCalls.Load(), c.counterReads.Load(), c.counterWrites.Load(),
		c.ticketReads.Load(), c.ticketWrites.Load(), c.lockReads.Load(), c.lockWrites.Load()}
}

func (a fhCounts) minus(b fhCounts) fhCounts {
	return fhCounts{a.total - b.total, a.sessionCalls - b.sessionCalls, a.counterReads - b.counterReads, a.counterWrites - b.counterWrites,
		a.ticketReads - b.ticketReads, a.ticketWrites - b.ticketWrites, a.lockReads - b.lockReads, a.lockWrites - b.lockWrites}
}

// waiterCalls is every call counted but the session's (a client's, one a
// heartbeat period whatever it waits for).
func (a fhCounts) waiterCalls() int64 { return a.total - a.sessionCalls }

// fhFixture is a line of fair waiters of one key, spread over its
// clients, and the lock held by the last winner.
type fhFixture struct {
	key     string
	ddb     *dynamodb.Client
	table   string
	clients []*ddblock.Client
	calls   []*fhCalls
	holder  *ddblock.Lock
	held    int // the holder's client
	won     chan fhWon
	// line is the waiters in the order they took their numbers: the
	// first wins next.
	line []*fhWaiter
	all  []*fhWaiter
}

type fhWaiter struct {
	id     int
	client int
	cancel context.CancelFunc
	done   chan struct{}
}

type fhWon struct {
	w    *fhWaiter
	lock *ddblock.Lock
	err  error
	at   time.Time
}

// setUp makes the clients, takes the lock with the first and lines up
// n fair waiters of it, the i-th on client from(i). With batch 1 they
// come one after the other, each once the one before has its number, and
// fx.line is their order in line; with a larger batch, all but the first
// come batch at a time, and fx.line is their order in line only for the
// first.
func (fx *fhFixture) setUp(tb testing.TB, ddb *dynamodb.Client, table string, clients, n, batch int, from func(i int) int) {
	fx.key, fx.ddb, fx.table = "fair-handoff", ddb, table
	fx.won = make(chan fhWon, n+64)
	for i := range clients {
		cc := newFHCalls(ddb)
		c, err := ddblock.New(cc, ddblock.WithTableName(table), ddblock.WithLogger(quiet), ddblock.WithOwnerName(fmt.Sprintf("room-%d", i)))
		if err != nil {
			tb.Fatalf("New: %v", err)
		}
		fx.clients, fx.calls = append(fx.clients, c), append(fx.calls, cc)
	}
	held, err := fx.clients[0].AcquireLock(context.Background(), fx.key)
	if err != nil {
		tb.Fatalf("the first holder's AcquireLock: %v", err)
	}
	fx.holder, fx.held = held, 0
	start := time.Now()
	for i := 0; i < n; {
		k := 1
		if i > 0 {
			k = min(batch, n-i)
		}
		takes := fx.sum(func(c *fhCalls) int64 { return c.takes.Load() })
		for j := range k {
			fx.start(from(i + j))
		}
		fhWaitUntil(tb, "waiters to take their numbers", func() bool {
			return fx.sum(func(c *fhCalls) int64 { return c.takes.Load() }) >= takes+int64(k)
		})
		i += k
	}
	fhWaitUntil(tb, "every waiter's ticket", func() bool {
		return fx.sum(func(c *fhCalls) int64 { return c.ticketsPut.Load() }) >= int64(n)
	})
	serving, next := fhCounter(tb, ddb, table, fx.key)
	if got := next - serving + 1; got != int64(n) {
		tb.Fatalf("the line holds numbers %d to %d: %d waiters; want %d", serving, next, got, n)
	}
	tb.Logf("%d waiters in line in %v", n, time.Since(start).Round(time.Millisecond))
}

func (fx *fhFixture) sum(f func(*fhCalls) int64) int64 {
	var n int64
	for _, c := range fx.calls {
		n += f(c)
	}
	return n
}

// start starts a fair waiter on client ci, last in fx.line.
func (fx *fhFixture) start(ci int) {
	c := fx.clients[ci]
	ctx, cancel := context.WithCancel(context.Background())
	w := &fhWaiter{id: len(fx.all), client: ci, cancel: cancel, done: make(chan struct{})}
	fx.all, fx.line = append(fx.all, w), append(fx.line, w)
	go func() {
		defer close(w.done)
		l, err := c.AcquireLock(ctx, fx.key, ddblock.WithFairWaiting(), ddblock.WithWaitOnOwn(),
			ddblock.WithRetryPeriod(fhPeriod), ddblock.WithRetryTimeout(time.Hour))
		fx.won <- fhWon{w: w, lock: l, err: err, at: time.Now()}
	}()
}

// join starts a fair waiter on client ci and waits until it has taken
// its number and written its ticket.
func (fx *fhFixture) join(tb testing.TB, ci int) {
	cc := fx.calls[ci]
	takes, tickets := cc.takes.Load(), cc.ticketsPut.Load()
	fx.start(ci)
	fhWaitUntil(tb, "a waiter to take its number", func() bool { return cc.takes.Load() > takes })
	fhWaitUntil(tb, "a waiter's ticket", func() bool { return cc.ticketsPut.Load() > tickets })
}

func (fx *fhFixture) handoffs(b *testing.B) {
	ctx := context.Background()
	var walls, cpus []time.Duration
	var calls int64
	var waitCPU, waitWall time.Duration
	for range b.N {
		// Let the last handoff's aftermath pass (the next head reads the
		// line), then measure the waiting.
		time.Sleep(fhPeriod)
		c0, t0 := fhCPU(b), time.Now()
		time.Sleep(fhPeriod + rand.N(fhPeriod/4))
		waitCPU += fhCPU(b) - c0
		waitWall += time.Since(t0)

		calls0 := fx.totalCalls()
		b.StartTimer()
		cpu0, start := fhCPU(b), time.Now()
		if err := fx.holder.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			b.Fatalf("Release: %v", err)
		}
		var got fhWon
		select {
		case got = <-fx.won:
		case <-time.After(30 * time.Second):
			b.Fatalf("no waiter got the lock within 30 s of its release (%d in line)", len(fx.line))
		}
		cpu1 := fhCPU(b)
		b.StopTimer()
		calls += fx.totalCalls() - calls0
		if got.err != nil {
			b.Fatalf("waiter %d (client %d): %v", got.w.id, got.w.client, got.err)
		}
		if want := fx.line[0]; got.w != want {
			b.Fatalf("waiter %d got the lock; want waiter %d, first in line", got.w.id, want.id)
		}
		walls = append(walls, got.at.Sub(start))
		cpus = append(cpus, cpu1-cpu0)
		fx.line = fx.line[1:]
		fx.holder, fx.held = got.lock, got.w.client
		// A new waiter joins the back in the winner's place, from the
		// winner's client (so that two clients stay in alternation).
		fx.join(b, got.w.client)
	}
	b.ReportMetric(fhMeanMs(walls), "handoff-ms")
	b.ReportMetric(percentileMs(walls, 50), "p50-ms")
	b.ReportMetric(percentileMs(walls, 90), "p90-ms")
	b.ReportMetric(percentileMs(walls, 100), "max-ms")
	b.ReportMetric(fhMeanMs(cpus), "cpu-ms/handoff")
	b.ReportMetric(float64(calls)/float64(b.N), "calls/handoff")
	b.ReportMetric(float64(waitCPU)/float64(time.Millisecond)/waitWall.Seconds(), "wait-cpu-ms/s")
}

func (fx *fhFixture) totalCalls() int64 {
	return fx.sum(func(c *fhCalls) int64 { return c.total.Load() })
}

// tearDown cancels the waiters (a hundred at a time: each deletes its
// ticket as it leaves), releases the lock and closes the clients.
func (fx *fhFixture) tearDown(tb testing.TB) {
	for batch := range slices.Chunk(fx.all, 100) {
		for _, w := range batch {
			w.cancel()
		}
		for _, w := range batch {
			select {
			case <-w.done:
			case <-time.After(30 * time.Second):
				tb.Errorf("waiter %d did not end within 30 s of its cancel", w.id)
				return
			}
		}
	}
	for len(fx.won) > 0 {
		if got := <-fx.won; got.lock != nil {
			tb.Errorf("waiter %d won the lock while being cancelled", got.w.id)
			_ = got.lock.Release(context.Background())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if fx.holder != nil {
		if err := fx.holder.Release(ctx); err != nil {
			tb.Errorf("Release: %v", err)
		}
	}
	for _, c := range fx.clients {
		if err := c.Close(ctx, true); err != nil {
			tb.Errorf("Close: %v", err)
		}
	}
}

// fhCPU is the process's CPU time so far, user and system.
func fhCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func fhMeanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum) / float64(len(ds)) / float64(time.Millisecond)
}

// fhWaitUntil polls cond until it holds, failing after 30 s.
func fhWaitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// fhCounter reads the line's counter of key straight from the table:
// the number served and the last handed out.
func fhCounter(tb testing.TB, ddb *dynamodb.Client, table, key string) (serving, next int64) {
	tb.Helper()
	out, err := ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: benchKey("ddblock_line#" + key)})
	if err != nil {
		tb.Fatalf("reading the line's counter: %v", err)
	}
	num := func(a string) int64 {
		v, _ := out.Item[a].(*types.AttributeValueMemberN)
		if v == nil {
			tb.Fatalf("the line's counter has no %s: %v", a, out.Item)
		}
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			tb.Fatalf("the line's counter's %s: %v", a, err)
		}
		return n
	}
	return num(wirepkg.AttrLineServing), num(wirepkg.AttrLineNext)
}

// fhCalls counts a client's DynamoDB calls by the item they are on: the
// line's counter, a ticket, the lock, or a session item (a client's, not
// a wait's).
type fhCalls struct {
	ddbtest.Tap
	total                                      atomic.Int64
	counterReads, counterWrites                atomic.Int64
	ticketReads, ticketWrites                  atomic.Int64
	lockReads, lockWrites, sessionCalls, scans atomic.Int64
	takes, ticketsPut                          atomic.Int64 // that succeeded
}

func newFHCalls(api ddblock.DynamoDBAPI) *fhCalls {
	c := &fhCalls{}
	c.Tap = ddbtest.Tap{DynamoDBAPI: api,
		Before: func(_ context.Context, call *ddbtest.Call) error {
			if call.Op == "Query" {
				return nil
			}
			c.total.Add(1)
			write := call.Write()
			switch kind := call.Kind(); {
			case call.Op == "Scan":
				c.scans.Add(1)
			case kind == "session":
				c.sessionCalls.Add(1)
			case kind == "line" && write:
				c.counterWrites.Add(1)
			case kind == "line":
				c.counterReads.Add(1)
			case kind == "ticket" && write:
				c.ticketWrites.Add(1)
			case kind == "ticket":
				c.ticketReads.Add(1)
			case write:
				c.lockWrites.Add(1)
			default:
				c.lockReads.Add(1)
			}
			return nil
		},
		After: func(call *ddbtest.Call, err error) {
			switch {
			case err != nil:
			case call.Op == "PutItem" && call.Kind() == "ticket":
				c.ticketsPut.Add(1)
			case call.Op == "UpdateItem" && call.Kind() == "line" && call.In.(*dynamodb.UpdateItemInput).ConditionExpression == nil:
				c.takes.Add(1) // the take of a number is the counter's one unconditional update
			}
		},
	}
	return c
}
