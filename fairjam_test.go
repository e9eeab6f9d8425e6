package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// Issue 30: ways a line of fair waiters (line.go) could jam, one test
// each, on a real server. The fair waiters run on one fake clock that
// only the test advances (fjWorld.stepUntil): every bound is asserted in
// fake time, from the moment the lock stood free. The lock they wait for
// is held by a client on the real clock.

const (
	fjRetry = 100 * time.Millisecond
	// fjHeartbeat is the heartbeat period of the clients on the fake
	// clock (fakeTimes): their sessions land a heartbeat once a period.
	fjHeartbeat = time.Second
)

// fjBound duplicates lineBound in line.go: how long after the lock stands
// free a live fair waiter gets its turn when every waiter ahead of it is
// dead, gone or garbled; grace is the longest grace among them and its
// own, period its retry period.
func fjBound(grace, period time.Duration) time.Duration {
	return 2*grace + 3*period
}

// fjGraceOf is the longest grace of the tickets in the line of (key,
// sk), as Line shows them: a waiter's grace is the line's own business
// (line.go, fairGrace), read rather than assumed.
func fjGraceOf(t *testing.T, c *ddblock.Client, key, sk string) time.Duration {
	t.Helper()
	line, err := c.Line(context.Background(), key, sk)
	if err != nil {
		t.Fatalf("Line(%s): %v", key, err)
	}
	var g time.Duration
	for _, tk := range line.Tickets {
		g = max(g, tk.Grace)
	}
	if g <= 0 {
		t.Fatalf("no grace in the line of %s: %+v", key, line.Tickets)
	}
	return g
}

var fjErrDead = errors.New("fairjam: dead")

// fjDDB is one client's DynamoDB as these tests see it: it counts calls
// (started, in flight) so that the test steps the fake clock only when
// every client is quiet; it can be killed (every call fails, as a killed
// process's never come) or paused (calls wait until resumed, as a
// stopped process's do); it records when the last lock put that landed
// was sent, and counts the writes of a wait.
type fjDDB struct {
	ddbtest.Tap
	clk *clock.Fake

	dead     atomic.Bool
	pmu      sync.Mutex
	paused   chan struct{} // non-nil while paused; closed on resume
	inflight atomic.Int64
	calls    atomic.Int64
	putAt    atomic.Int64 // fake monotonic (ns) of the last landed lock put; -1: none

	lineWrites, ticketWrites, lockPuts atomic.Int32
}

func (d *fjDDB) pause() {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if d.paused == nil {
		d.paused = make(chan struct{})
	}
}

func (d *fjDDB) resume() {
	d.pmu.Lock()
	defer d.pmu.Unlock()
	if d.paused != nil {
		close(d.paused)
		d.paused = nil
	}
}

func (d *fjDDB) enter(ctx context.Context) error {
	d.pmu.Lock()
	p := d.paused
	d.pmu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if d.dead.Load() {
		return fjErrDead
	}
	d.calls.Add(1)
	d.inflight.Add(1)
	return nil
}

func (d *fjDDB) exit() { d.inflight.Add(-1) }

func (d *fjDDB) wrote(kind string) {
	switch kind {
	case "line":
		d.lineWrites.Add(1)
	case "ticket":
		d.ticketWrites.Add(1)
	}
}

func newFJDDB(api ddblock.DynamoDBAPI, clk *clock.Fake) *fjDDB {
	d := &fjDDB{clk: clk}
	d.putAt.Store(-1)
	d.Tap = ddbtest.Tap{DynamoDBAPI: api,
		Before: func(ctx context.Context, call *ddbtest.Call) error {
			if err := d.enter(ctx); err != nil {
				return err
			}
			if call.Write() {
				d.wrote(call.Kind())
			}
			if call.Op == "PutItem" {
				call.Data = d.clk.Monotonic()
			}
			return nil
		},
		After: func(call *ddbtest.Call, err error) {
			d.exit()
			if call.Op == "PutItem" && call.Kind() == "lock" {
				d.lockPuts.Add(1)
				if err == nil {
					d.putAt.Store(int64(call.Data.(time.Duration)))
				}
			}
		},
	}
	return d
}

// lastPut is when the last lock put that landed was sent (fake
// monotonic), and whether there was one.
func (d *fjDDB) lastPut() (time.Duration, bool) {
	v := d.putAt.Load()
	return time.Duration(v), v >= 0
}

// fjWorld is one test's table, its fake clock and the clients on it.
type fjWorld struct {
	t   *testing.T
	e   *env
	clk *clock.Fake
	mu  sync.Mutex
	dbs []*fjDDB
}

func newFJWorld(t *testing.T) *fjWorld {
	return &fjWorld{t: t, e: newEnv(t), clk: fakeClock()}
}

// client makes a client on the fake clock, owner name owner, whose calls
// go through a fjDDB of its own. Clients killed or paused by the test
// are revived at its end, so that they close.
func (w *fjWorld) client(owner string, opts ...ddblock.Option) (*ddblock.Client, *fjDDB) {
	w.t.Helper()
	d := newFJDDB(w.e.ddb, w.clk)
	w.mu.Lock()
	w.dbs = append(w.dbs, d)
	w.mu.Unlock()
	c := w.e.clientOn(d, append(append(fakeTimes(), ddblock.WithClock(w.clk), ddblock.WithOwnerName(owner)), opts...)...)
	w.t.Cleanup(func() { d.dead.Store(false); d.resume() }) // runs before the client's Close
	return c, d
}

func (w *fjWorld) quiet() (calls int64, busy bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dbs {
		calls += d.calls.Load()
		busy = busy || d.inflight.Load() > 0
	}
	return calls, busy
}

// settle waits, in real time, until the clients on the fake clock are
// quiet: no call in flight, none started and the pending timers
// unchanged for a few milliseconds in a row (or until done holds). A
// step taken too early only makes a waiter later in fake time, never
// earlier.
func (w *fjWorld) settle(done func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last [2]int64
	stable := 0
	for stable < 5 {
		if done != nil && done() {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the clients never settled")
		}
		time.Sleep(time.Millisecond)
		calls, busy := w.quiet()
		cur := [2]int64{int64(w.clk.Timers()), calls}
		if !busy && cur == last {
			stable++
		} else {
			stable, last = 0, cur
		}
	}
}

// stepUntil advances the fake clock from timer to timer, letting the
// clients settle before each step, until cond holds; it fails the test
// after limit of fake time.
func (w *fjWorld) stepUntil(what string, cond func() bool, limit time.Duration) {
	w.t.Helper()
	start := w.clk.Monotonic()
	for {
		w.settle(cond)
		if cond() {
			return
		}
		if w.clk.Monotonic()-start > limit {
			w.t.Fatalf("%s: not after %v of fake time", what, limit)
		}
		w.clk.AdvanceToNext()
	}
}

// stepFor advances the fake clock by at least d, timer to timer.
func (w *fjWorld) stepFor(d time.Duration) {
	w.t.Helper()
	end := w.clk.Monotonic() + d
	w.stepUntil("stepping", func() bool { return w.clk.Monotonic() >= end }, d+time.Minute)
}

// fjWaiter is one fair acquire on a goroutine of its own.
type fjWaiter struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	lock   *ddblock.Lock
	err    error
}

func (f *fjWaiter) finished() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func fjGo(name string, acquire func(ctx context.Context) (*ddblock.Lock, error)) *fjWaiter {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fjWaiter{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		f.lock, f.err = acquire(ctx)
	}()
	return f
}

// fjFair starts a fair AcquireLock of key (retry period fjRetry, an hour
// to wait unless opts say otherwise).
func fjFair(c *ddblock.Client, name, key string, opts ...ddblock.AcquireOption) *fjWaiter {
	return fjGo(name, func(ctx context.Context) (*ddblock.Lock, error) {
		return c.AcquireLock(ctx, key, append([]ddblock.AcquireOption{ddblock.WithFairWaiting(),
			ddblock.WithRetryPeriod(fjRetry), ddblock.WithRetryTimeout(time.Hour)}, opts...)...)
	})
}

// fjHold takes key with a client of its own on the real clock, owner
// "holder".
func fjHold(t *testing.T, e *env, key string) *ddblock.Lock {
	t.Helper()
	holder := e.client(ddblock.WithOwnerName("holder"))
	held, err := holder.AcquireLock(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// fjScan reads the whole table: the line counters' and tickets' items,
// by partition key.
func (w *fjWorld) scan() (counters, tickets map[string]map[string]types.AttributeValue) {
	w.t.Helper()
	counters, tickets = map[string]map[string]types.AttributeValue{}, map[string]map[string]types.AttributeValue{}
	var start map[string]types.AttributeValue
	for {
		out, err := w.e.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(w.e.table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			w.t.Fatalf("Scan: %v", err)
		}
		for _, item := range out.Items {
			pk, _ := item[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS)
			if pk == nil {
				continue
			}
			switch {
			case strings.HasPrefix(pk.Value, "ddblock_line#"):
				counters[pk.Value] = item
			case strings.HasPrefix(pk.Value, "ddblock_wait#"):
				tickets[pk.Value] = item
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return counters, tickets
		}
		start = out.LastEvaluatedKey
	}
}

// grace is the longest grace of the readable tickets in the table.
func (w *fjWorld) grace() time.Duration {
	w.t.Helper()
	_, tickets := w.scan()
	var g time.Duration
	for _, item := range tickets {
		if n, ok := item["ddblock_ticket_grace_ms"].(*types.AttributeValueMemberN); ok {
			var ms int64
			if _, err := fmt.Sscan(n.Value, &ms); err == nil {
				g = max(g, time.Duration(ms)*time.Millisecond)
			}
		}
	}
	if g <= 0 {
		w.t.Fatal("no ticket with a grace in the table")
	}
	return g
}

func (w *fjWorld) ticketCount() int {
	_, tickets := w.scan()
	return len(tickets)
}

// lineGone fails the test unless no counter and no ticket is left.
func (w *fjWorld) lineGone(when string) {
	w.t.Helper()
	counters, tickets := w.scan()
	if len(counters) != 0 || len(tickets) != 0 {
		var keys []string
		for k, item := range counters {
			keys = append(keys, fmt.Sprintf("%s %v", k, fjShow(item)))
		}
		for k := range tickets {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.t.Errorf("%s: %d line counters and %d tickets left; want none: %v", when, len(counters), len(tickets), keys)
	}
}

func fjShow(item map[string]types.AttributeValue) map[string]string {
	out := map[string]string{}
	for k, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			out[k] = v.Value
		case *types.AttributeValueMemberN:
			out[k] = v.Value
		default:
			out[k] = fmt.Sprintf("%T", v)
		}
	}
	return out
}

// owners is the owners of the tickets in key's line, in order.
func fjOwners(t *testing.T, c *ddblock.Client, key, sk string) string {
	t.Helper()
	line, err := c.Line(context.Background(), key, sk)
	if err != nil {
		t.Fatalf("Line(%s): %v", key, err)
	}
	var owners []string
	for _, tk := range line.Tickets {
		owners = append(owners, tk.OwnerName)
	}
	return strings.Join(owners, " ")
}

func (w *fjWorld) putItem(item map[string]types.AttributeValue) {
	w.t.Helper()
	if _, err := w.e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(w.e.table), Item: item}); err != nil {
		w.t.Fatalf("PutItem: %v", err)
	}
}

func fjS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func fjN(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

func fjTTL() types.AttributeValue {
	return fjN(fmt.Sprint(time.Now().Add(24 * time.Hour).Unix()))
}

// lockOwner reads key's lock item straight from the table: its owner,
// or "" when there is no item.
func (w *fjWorld) lockOwner(key, sk string) string {
	w.t.Helper()
	out, err := w.e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(w.e.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{ddblock.DefaultPartitionKeyName: fjS(key), ddblock.DefaultSortKeyName: fjS(sk)}})
	if err != nil {
		w.t.Fatalf("GetItem: %v", err)
	}
	if len(out.Item) == 0 {
		return ""
	}
	if s, ok := out.Item["owner_name"].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return "?"
}

// fjExclusion checks that at most one waiter holds the lock at a time:
// a winner counts in when its acquire returns, out before its release.
type fjExclusion struct {
	t       *testing.T
	holding atomic.Int32
}

func (x *fjExclusion) in(name string) {
	if n := x.holding.Add(1); n != 1 {
		x.t.Errorf("%s acquired while %d others held the lock", name, n-1)
	}
}

func (x *fjExclusion) out() { x.holding.Add(-1) }

// fjWins records, for the waiters given, when each took the lock (its
// client's last lock put, fake time) and when it let it go: each winner
// is released as soon as its acquire returns.
type fjWins struct {
	t        *testing.T
	clk      *clock.Fake
	x        fjExclusion
	mu       sync.Mutex
	took     map[string]time.Duration
	released map[string]time.Duration
	left     atomic.Int32
}

func newFJWins(t *testing.T, clk *clock.Fake) *fjWins {
	return &fjWins{t: t, clk: clk, x: fjExclusion{t: t}, took: map[string]time.Duration{}, released: map[string]time.Duration{}}
}

// watch releases f's lock as soon as it has it, and records the times.
func (r *fjWins) watch(f *fjWaiter, d *fjDDB) {
	r.left.Add(1)
	go func() {
		defer r.left.Add(-1)
		<-f.done
		if f.err != nil {
			return
		}
		r.x.in(f.name)
		at, _ := d.lastPut()
		r.mu.Lock()
		r.took[f.name] = at
		r.released[f.name] = r.clk.Monotonic()
		r.mu.Unlock()
		r.x.out()
		if err := f.lock.Release(context.Background(), ddblock.WithBestEffort(false)); err != nil {
			r.t.Errorf("%s: Release: %v", f.name, err)
		}
	}()
}

// check asserts that each winner took the lock within bound of the
// previous release (the first: of freed), in the order they took it, and
// returns that order.
func (r *fjWins) check(freed, bound time.Duration) []string {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n := range r.took {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return r.took[names[i]] < r.took[names[j]] })
	prev := freed
	for _, n := range names {
		gap := r.took[n] - prev
		if gap < 0 || gap > bound {
			r.t.Errorf("%s took the lock %v after it was freed; want within %v (lineBound)", n, gap, bound)
		}
		prev = r.released[n]
	}
	return names
}

// Issue 30, defect 1: a line jammed behind two dead waiters side by side.
// The head and the second are dead (two clients killed, or two waiters
// of one client killed together), a live waiter is third: once the lock
// is freed it gets it within lineBound, and not before the dead head's
// grace (a live head has that long to take a free lock).
func TestFairJamTwoDeadWaiters(t *testing.T) {
	t.Run("two clients", func(t *testing.T) { fjTwoDead(t, false) })
	t.Run("one client", func(t *testing.T) { fjTwoDead(t, true) })
}

func fjTwoDead(t *testing.T, oneClient bool) {
	w := newFJWorld(t)
	ctx := context.Background()
	held := fjHold(t, w.e, "k")
	observer := w.e.client(ddblock.WithOwnerName("observer"))
	ca, da := w.client("dead-a")
	cb, db := ca, da
	if !oneClient {
		cb, db = w.client("dead-b")
	}
	cl, dl := w.client("live")
	a := fjFair(ca, "dead-a", "k")
	waitFor(t, "the first ticket", func() bool { return w.ticketCount() == 1 })
	b := fjFair(cb, "dead-b", "k")
	waitFor(t, "the second ticket", func() bool { return w.ticketCount() == 2 })
	l := fjFair(cl, "live", "k")
	waitFor(t, "the third ticket", func() bool { return w.ticketCount() == 3 })
	w.stepFor(5 * fjRetry) // everyone settles into the line
	want := "dead-a dead-b live"
	if oneClient {
		want = "dead-a dead-a live"
	}
	if got := fjOwners(t, observer, "k", ""); got != want {
		t.Fatalf("line %q; want %q", got, want)
	}
	grace := fjGraceOf(t, observer, "k", "")
	// Both die the moment the lock is freed.
	da.dead.Store(true)
	db.dead.Store(true)
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	freed := w.clk.Monotonic()
	bound := fjBound(grace, fjRetry)
	w.stepUntil("the live waiter to acquire", l.finished, 2*bound)
	if l.err != nil {
		t.Fatalf("the live waiter: %v", l.err)
	}
	at, _ := dl.lastPut()
	took := at - freed
	t.Logf("the live waiter took the lock %v after its release (grace %v, bound %v)", took, grace, bound)
	// A dead client's session is judged by its heartbeats, whose last
	// landed up to a heartbeat period before the death: the head is
	// skipped no sooner than its grace less that period.
	if took < grace-fjHeartbeat {
		t.Errorf("the live waiter took the lock %v after its release: before the dead head's grace, %v, less a heartbeat period (a live head would have been jumped)", took, grace)
	}
	if took > bound {
		t.Errorf("the live waiter took the lock %v after its release; want within lineBound, %v", took, bound)
	}
	w.stepUntil("the dead waiters to fail", func() bool { return a.finished() && b.finished() }, time.Minute)
	if a.err == nil || b.err == nil {
		t.Errorf("a dead waiter acquired: %v, %v", a.err, b.err)
	}
	if err := l.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.settle(nil)
	w.lineGone("after the live waiter's turn")
}

// Issue 30, defect 2: many fair waiters of one client cancelled at once
// leave no ticket behind, and a fair waiter that comes after them takes
// the free lock within a couple of retry periods, not a grace per
// cancelled waiter; one that waited behind them all the while takes it
// within lineBound of its release.
func TestFairJamCancelledTogether(t *testing.T) {
	for _, n := range []int{20, 100} {
		t.Run(fmt.Sprintf("%d, then a newcomer", n), func(t *testing.T) { fjCancelled(t, n, false) })
		t.Run(fmt.Sprintf("%d, a waiter behind them", n), func(t *testing.T) { fjCancelled(t, n, true) })
	}
}

func fjCancelled(t *testing.T, n int, behind bool) {
	w := newFJWorld(t)
	ctx := context.Background()
	held := fjHold(t, w.e, "k")
	c, _ := w.client("many")
	var ws []*fjWaiter
	for i := range n {
		ws = append(ws, fjFair(c, fmt.Sprintf("w%d", i), "k"))
	}
	waitFor(t, "every waiter's ticket", func() bool { return w.ticketCount() == n })
	var last *fjWaiter
	var dlast *fjDDB
	if behind {
		var cl *ddblock.Client
		cl, dlast = w.client("behind")
		last = fjFair(cl, "behind", "k")
		waitFor(t, "the last waiter's ticket", func() bool { return dlast.ticketWrites.Load() == 1 })
	}
	w.stepFor(5 * fjRetry)
	bound := fjBound(w.grace(), fjRetry)
	for _, f := range ws {
		f.cancel()
	}
	for _, f := range ws {
		<-f.done
		if ddblock.CodeOf(f.err) != ddblock.CodeCanceled {
			t.Errorf("%s: %v; want CANCELED", f.name, f.err)
		}
	}
	if !behind {
		w.settle(nil)
		if _, tickets := w.scan(); len(tickets) != 0 {
			t.Errorf("%d tickets left after %d waiters were cancelled; want none", len(tickets), n)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	freed := w.clk.Monotonic()
	limit := 3 * fjRetry
	if behind {
		limit = bound
	} else {
		var cl *ddblock.Client
		cl, dlast = w.client("newcomer")
		last = fjFair(cl, "newcomer", "k")
	}
	w.stepUntil("the last waiter to acquire", last.finished, time.Minute)
	if last.err != nil {
		t.Fatalf("%s: %v", last.name, last.err)
	}
	at, _ := dlast.lastPut()
	took := at - freed
	t.Logf("%s took the free lock %v after its release", last.name, took)
	if took > limit {
		t.Errorf("%s took the free lock %v after its release, behind %d cancelled waiters; want within %v", last.name, took, n, limit)
	}
	if err := last.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.settle(nil)
	w.lineGone("after the last waiter's turn")
}

// Issue 30, defect 3: one unreadable entry in the line (another writer's
// garbage: a ticket at the head's number without an id or with
// attributes of the wrong types, a garbled counter) does not jam it:
// every live fair waiter still gets the free lock within lineBound, no
// lock item is lost, and nothing panics.
func TestFairJamGarbage(t *testing.T) {
	const gen = "00000000deadbeef"
	counter := func(next, serving types.AttributeValue) map[string]types.AttributeValue {
		item := map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: fjS("ddblock_line#k"), ddblock.DefaultSortKeyName: fjS("-"),
			"ddblock_line_gen": fjS(gen), ddblock.DefaultTTLAttributeName: fjTTL(),
		}
		if next != nil {
			item["ddblock_line_next"] = next
		}
		if serving != nil {
			item["ddblock_line_serving"] = serving
		}
		return item
	}
	// headTicket puts a line whose number 1 (its head) is the ticket of
	// attrs.
	headTicket := func(attrs map[string]types.AttributeValue) func(w *fjWorld) {
		return func(w *fjWorld) {
			w.putItem(counter(fjN("1"), fjN("1")))
			item := map[string]types.AttributeValue{
				ddblock.DefaultPartitionKeyName: fjS("ddblock_wait#" + gen + "#1#k"), ddblock.DefaultSortKeyName: fjS("-"),
				ddblock.DefaultTTLAttributeName: fjTTL(),
			}
			for k, v := range attrs {
				item[k] = v
			}
			w.putItem(item)
		}
	}
	since := fjN(fmt.Sprint(time.Now().UnixMilli()))
	// garbleCounter rewrites the line's counter, keeping its generation
	// and numbers unless change says otherwise.
	garbleCounter := func(change func(item map[string]types.AttributeValue)) func(w *fjWorld) {
		return func(w *fjWorld) {
			counters, _ := w.scan()
			item := counters["ddblock_line#k"]
			if item == nil {
				w.t.Fatal("no line counter to garble")
			}
			change(item)
			w.putItem(item)
		}
	}
	cases := []struct {
		name           string
		before, during func(w *fjWorld)
	}{
		{name: "ticket without id", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_owner": fjS("junk"), "ddblock_ticket_since_ms": since, "ddblock_ticket_grace_ms": fjN("1300")})},
		{name: "ticket id a number", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_id": fjN("7"), "ddblock_ticket_owner": fjS("junk"), "ddblock_ticket_grace_ms": fjN("1300")})},
		{name: "ticket grace a string", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_id": fjS("junk"), "ddblock_ticket_owner": fjS("junk"), "ddblock_ticket_grace_ms": fjS("1300")})},
		{name: "ticket owner and since of wrong types, session a number", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_id": fjS("junk"), "ddblock_ticket_owner": fjN("1"), "ddblock_ticket_since_ms": fjS("yesterday"),
			"ddblock_ticket_grace_ms": fjN("1300"), "ddblock_ticket_session": fjN("1")})},
		{name: "ticket session not a session's key", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_id": fjS("junk"), "ddblock_ticket_grace_ms": fjN("1300"), "ddblock_ticket_session": fjS("k")})},
		{name: "ticket of a session that never was", before: headTicket(map[string]types.AttributeValue{
			"ddblock_ticket_id": fjS("junk"), "ddblock_ticket_grace_ms": fjN("1300"), "ddblock_ticket_session": fjS("ddblock_session#nobody")})},
		{name: "counter next a string", before: func(w *fjWorld) { w.putItem(counter(fjS("two"), fjN("1"))) }},
		{name: "counter serving past next", before: func(w *fjWorld) { w.putItem(counter(fjN("3"), fjN("10"))) }},
		{name: "counter next made a string while waiting", during: garbleCounter(func(item map[string]types.AttributeValue) {
			item["ddblock_line_next"] = fjS("many")
		})},
		{name: "counter serving made past next while waiting", during: garbleCounter(func(item map[string]types.AttributeValue) {
			item["ddblock_line_serving"] = fjN("10")
		})},
		{name: "counter generation removed while waiting", during: garbleCounter(func(item map[string]types.AttributeValue) {
			delete(item, "ddblock_line_gen")
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newFJWorld(t)
			ctx := context.Background()
			held := fjHold(t, w.e, "k")
			if tc.before != nil {
				tc.before(w)
			}
			wins := newFJWins(t, w.clk)
			var ws []*fjWaiter
			for i := range 3 {
				name := fmt.Sprintf("live%d", i)
				c, d := w.client(name)
				f := fjFair(c, name, "k")
				waitFor(t, name+"'s ticket", func() bool { return d.ticketWrites.Load() >= 1 })
				wins.watch(f, d)
				ws = append(ws, f)
			}
			if strings.HasPrefix(tc.name, "ticket") {
				// The garbage is at the head of the line the live waiters
				// took their numbers in.
				counters, tickets := w.scan()
				if got := fjShow(counters["ddblock_line#k"]); got["ddblock_line_gen"] != gen || got["ddblock_line_next"] != "4" || tickets["ddblock_wait#"+gen+"#1#k"] == nil {
					t.Fatalf("the line %v; want generation %s, numbers up to 4, the garbage first", got, gen)
				}
			}
			w.stepFor(5 * fjRetry)
			if tc.during != nil {
				tc.during(w)
				w.stepFor(5 * fjRetry)
			}
			bound := fjBound(w.grace(), fjRetry)
			if owner := w.lockOwner("k", "-"); owner != "holder" {
				t.Fatalf("the lock's owner before its release: %q; want holder", owner)
			}
			if err := held.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				t.Fatalf("the holder's release: %v", err)
			}
			freed := w.clk.Monotonic()
			w.stepUntil("every live waiter to have its turn", func() bool { return wins.left.Load() == 0 }, 4*bound)
			for _, f := range ws {
				if f.err != nil {
					t.Errorf("%s: %v", f.name, f.err)
				}
			}
			t.Logf("turns: %v", wins.check(freed, bound))
		})
	}
}

// Issue 30, defect 4: a try never fails on a dead ticket. TryAcquireLock
// and Semaphore.TryAcquire, fair or not, skip the line: on a free lock
// with a dead waiter's ticket at the head of its line they take it.
func TestFairJamTryIgnoresDeadTickets(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		w := newFJWorld(t)
		ctx := context.Background()
		held := fjHold(t, w.e, "k")
		cd, dd := w.client("dead")
		d := fjFair(cd, "dead", "k")
		waitFor(t, "the dead waiter's ticket", func() bool { return w.ticketCount() == 1 })
		w.stepFor(3 * fjRetry)
		dd.dead.Store(true)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w.stepUntil("the dead waiter to fail", d.finished, time.Minute)
		if n := w.ticketCount(); n != 1 {
			t.Fatalf("%d tickets in line; want the dead waiter's", n)
		}
		c, _ := w.client("try")
		for _, opts := range [][]ddblock.AcquireOption{{ddblock.WithFairWaiting()}, nil} {
			l, err := c.TryAcquireLock(ctx, "k", opts...)
			if err != nil {
				t.Fatalf("TryAcquireLock (%d options) on a free lock with a dead ticket in line: %v", len(opts), err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// AcquireLock with fair waiting and no time to wait is a try: it
		// takes no place in line, and takes the free lock.
		l, err := c.AcquireLock(ctx, "k", ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fjRetry), ddblock.WithRetryTimeout(0))
		if err != nil {
			t.Fatalf("a fair AcquireLock with a zero retry timeout, behind a dead ticket, on a free lock: %v; want the lock", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w.settle(nil)
		if n := w.ticketCount(); n > 1 {
			t.Errorf("%d tickets in line after a fair AcquireLock that had no time to wait; want at most the dead waiter's", n)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		w := newFJWorld(t)
		ctx := context.Background()
		holder := w.e.client(ddblock.WithOwnerName("holder"))
		hs := semaphoreOf(t, holder, "pool", 1)
		held, err := hs.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cd, dd := w.client("dead")
		ds := semaphoreOf(t, cd, "pool", 1)
		d := fjGo("dead", func(ctx context.Context) (*ddblock.Lock, error) {
			return ds.Acquire(ctx, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fjRetry), ddblock.WithRetryTimeout(time.Hour))
		})
		waitFor(t, "the dead waiter's ticket", func() bool { return w.ticketCount() == 1 })
		w.stepFor(3 * fjRetry)
		dd.dead.Store(true)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w.stepUntil("the dead waiter to fail", d.finished, time.Minute)
		if n := w.ticketCount(); n != 1 {
			t.Fatalf("%d tickets in line; want the dead waiter's", n)
		}
		c, _ := w.client("try")
		s := semaphoreOf(t, c, "pool", 1)
		l, err := s.TryAcquire(ctx, ddblock.WithFairWaiting())
		if err != nil {
			t.Fatalf("TryAcquire on a free slot with a dead ticket in line: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Issue 30, defect 5: a line goes away with its last live waiter, won or
// given up, with nothing left to a TTL (dynalite has none), and new
// waiters never push the counter's TTL. The writes of a wait are
// counted too: on the line, a number and a hand-on (or the counter's
// delete), and a ticket's put and delete; uncontended, a number, the
// lock's put and the counter's delete.
func TestFairJamLineGoesAway(t *testing.T) {
	t.Run("all win", func(t *testing.T) {
		w := newFJWorld(t)
		ctx := context.Background()
		held := fjHold(t, w.e, "k")
		wins := newFJWins(t, w.clk)
		var ws []*fjWaiter
		var ds []*fjDDB
		come := func(i int) {
			name := fmt.Sprintf("w%d", i)
			c, d := w.client(name)
			f := fjFair(c, name, "k")
			waitFor(t, name+"'s ticket", func() bool { return d.ticketWrites.Load() == 1 })
			wins.watch(f, d)
			ws, ds = append(ws, f), append(ds, d)
		}
		ttl := func() string {
			counters, _ := w.scan()
			n, _ := counters["ddblock_line#k"][ddblock.DefaultTTLAttributeName].(*types.AttributeValueMemberN)
			if n == nil {
				t.Fatalf("the line's counter has no TTL: %v", fjShow(counters["ddblock_line#k"]))
			}
			return n.Value
		}
		come(0)
		come(1)
		w.stepFor(5 * fjRetry)
		before := ttl()
		wall := w.clk.Now()
		w.stepFor(3 * time.Second) // the waiters' wall clock moves on
		if w.clk.Now().Sub(wall) < 3*time.Second {
			t.Fatalf("the fake wall clock did not move")
		}
		come(2)
		come(3)
		w.stepFor(5 * fjRetry)
		if after := ttl(); after != before {
			t.Errorf("the line's TTL moved from %s to %s as waiters came; want it left as it was", before, after)
		}
		bound := fjBound(w.grace(), fjRetry)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		freed := w.clk.Monotonic()
		w.stepUntil("every waiter to have its turn", func() bool { return wins.left.Load() == 0 }, time.Minute)
		for _, f := range ws {
			if f.err != nil {
				t.Errorf("%s: %v", f.name, f.err)
			}
		}
		if got := strings.Join(wins.check(freed, bound), " "); got != "w0 w1 w2 w3" {
			t.Errorf("turns %s; want w0 w1 w2 w3", got)
		}
		w.settle(nil)
		w.lineGone("after every waiter's turn")
		for i, d := range ds {
			if lw, tw := d.lineWrites.Load(), d.ticketWrites.Load(); lw != 2 || tw != 2 {
				t.Errorf("w%d wrote %d times on the counter and %d on tickets; want 2 (its number, the hand-on) and 2 (its ticket's put and delete)", i, lw, tw)
			}
		}
	})
	giveUp := func(t *testing.T, headWins bool) {
		w := newFJWorld(t)
		ctx := context.Background()
		held := fjHold(t, w.e, "k")
		timeouts := []time.Duration{time.Hour, 500 * time.Millisecond, 800 * time.Millisecond}
		if !headWins {
			timeouts[0] = 1500 * time.Millisecond
		}
		var ws []*fjWaiter
		for i, timeout := range timeouts {
			name := fmt.Sprintf("w%d", i)
			c, d := w.client(name)
			ws = append(ws, fjFair(c, name, "k", ddblock.WithRetryTimeout(timeout)))
			waitFor(t, name+"'s ticket", func() bool { return d.ticketWrites.Load() == 1 })
		}
		w.stepUntil("those behind to give up", func() bool { return ws[1].finished() && ws[2].finished() }, time.Minute)
		for _, f := range ws[1:] {
			if ddblock.CodeOf(f.err) != ddblock.CodeAcquireTimeout {
				t.Errorf("%s: %v; want ACQUIRE_TIMEOUT", f.name, f.err)
			}
		}
		if headWins {
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w.stepUntil("the head to finish", ws[0].finished, time.Minute)
		if headWins {
			if ws[0].err != nil {
				t.Fatalf("the head: %v", ws[0].err)
			}
			if err := ws[0].lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		} else if ddblock.CodeOf(ws[0].err) != ddblock.CodeAcquireTimeout {
			t.Errorf("the head: %v; want ACQUIRE_TIMEOUT", ws[0].err)
		}
		w.settle(nil)
		w.lineGone("after the last waiter left")
	}
	t.Run("those behind give up, the head wins", func(t *testing.T) { giveUp(t, true) })
	t.Run("all give up", func(t *testing.T) { giveUp(t, false) })
	t.Run("uncontended", func(t *testing.T) {
		w := newFJWorld(t)
		ctx := context.Background()
		c, d := w.client("alone")
		l, err := c.AcquireLock(ctx, "k", ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fjRetry))
		if err != nil {
			t.Fatal(err)
		}
		if lw, tw, pw := d.lineWrites.Load(), d.ticketWrites.Load(), d.lockPuts.Load(); lw != 2 || tw != 0 || pw != 1 {
			t.Errorf("an uncontended fair acquire wrote %d times on the counter, %d on tickets, put the lock %d times; want 2 (the number, the counter's delete), 0, 1", lw, tw, pw)
		}
		w.lineGone("after an uncontended fair acquire")
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Issue 30, defect 6: a head whose client is paused longer than its grace
// while the lock is free is skipped; when it resumes it comes again at
// the back of the line, and still gets the lock in its new turn. Mutual
// exclusion holds throughout.
func TestFairJamPausedHead(t *testing.T) {
	w := newFJWorld(t)
	ctx := context.Background()
	held := fjHold(t, w.e, "k")
	observer := w.e.client(ddblock.WithOwnerName("observer"))
	var x fjExclusion
	x.t = t
	cp, dp := w.client("paused")
	cl, dl := w.client("live")
	cm, dm := w.client("later")
	p := fjFair(cp, "paused", "k")
	waitFor(t, "the head's ticket", func() bool { return dp.ticketWrites.Load() == 1 })
	l := fjFair(cl, "live", "k")
	waitFor(t, "the second's ticket", func() bool { return dl.ticketWrites.Load() == 1 })
	w.stepFor(5 * fjRetry)
	if got := fjOwners(t, observer, "k", ""); got != "paused live" {
		t.Fatalf("line %q; want %q", got, "paused live")
	}
	grace := fjGraceOf(t, observer, "k", "")
	bound := fjBound(grace, fjRetry)
	dp.pause()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	freed := w.clk.Monotonic()
	w.stepUntil("the second to acquire", l.finished, 2*bound)
	if l.err != nil {
		t.Fatalf("the second: %v", l.err)
	}
	x.in("live")
	at, _ := dl.lastPut()
	took := at - freed
	t.Logf("the second took the lock %v after its release (grace %v, bound %v)", took, grace, bound)
	// The paused client's session is judged by its heartbeats, whose
	// last landed up to a heartbeat period before the pause.
	if took < grace-fjHeartbeat || took > bound {
		t.Errorf("the second took the lock %v after its release; want after the paused head's grace (%v) less a heartbeat period, within lineBound (%v)", took, grace, bound)
	}
	if p.finished() {
		t.Fatalf("the paused head finished: %v", p.err)
	}
	m := fjFair(cm, "later", "k")
	waitFor(t, "the later waiter's ticket", func() bool { return dm.ticketWrites.Load() == 1 })
	w.stepFor(5 * fjRetry)
	t.Logf("paused for %v of fake time", w.clk.Monotonic()-freed)
	dp.resume()
	w.stepUntil("the resumed head to come again at the back", func() bool {
		return fjOwners(t, observer, "k", "") == "later paused"
	}, 2*bound)
	if p.finished() || m.finished() {
		t.Fatalf("a waiter finished while the lock was held: paused %v, later %v", p.err, m.err)
	}
	x.out()
	if err := l.lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("the second's release: %v", err)
	}
	w.stepUntil("the later waiter to acquire", m.finished, 2*bound)
	if m.err != nil {
		t.Fatalf("the later waiter: %v", m.err)
	}
	x.in("later")
	if p.finished() {
		t.Fatalf("the resumed head finished while the later waiter held the lock: %v", p.err)
	}
	w.stepFor(5 * fjRetry)
	if p.finished() {
		t.Fatalf("the resumed head finished while the later waiter held the lock: %v", p.err)
	}
	x.out()
	if err := m.lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("the later waiter's release: %v", err)
	}
	w.stepUntil("the resumed head to acquire", p.finished, 2*bound)
	if p.err != nil {
		t.Fatalf("the resumed head: %v", p.err)
	}
	x.in("paused")
	x.out()
	if err := p.lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("the resumed head's release: %v", err)
	}
	w.settle(nil)
	w.lineGone("after every turn")
}

// Issue 30, defect 7: a dead fair waiter at the head of a semaphore's line
// does not hold a live one up beyond lineBound once a slot is free, nor
// is it jumped before its grace.
func TestFairJamSemaphoreDeadHead(t *testing.T) {
	w := newFJWorld(t)
	ctx := context.Background()
	holder := w.e.client(ddblock.WithOwnerName("holder"))
	hs := semaphoreOf(t, holder, "pool", 2)
	var held []*ddblock.Lock
	for range 2 {
		l, err := hs.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	fair := func(c *ddblock.Client, name string) *fjWaiter {
		s := semaphoreOf(t, c, "pool", 2)
		return fjGo(name, func(ctx context.Context) (*ddblock.Lock, error) {
			return s.Acquire(ctx, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fjRetry), ddblock.WithRetryTimeout(time.Hour))
		})
	}
	cd, dd := w.client("dead")
	d := fair(cd, "dead")
	waitFor(t, "the dead waiter's ticket", func() bool { return dd.ticketWrites.Load() == 1 })
	cl, dl := w.client("live")
	l := fair(cl, "live")
	waitFor(t, "the live waiter's ticket", func() bool { return dl.ticketWrites.Load() == 1 })
	w.stepFor(5 * fjRetry)
	line, err := hs.Line(ctx)
	if err != nil || len(line.Tickets) != 2 || line.Tickets[0].OwnerName != "dead" {
		t.Fatalf("the semaphore's line: %+v, %v; want dead, live", line, err)
	}
	grace := w.grace()
	bound := fjBound(grace, fjRetry)
	dd.dead.Store(true)
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	freed := w.clk.Monotonic()
	w.stepUntil("the live waiter to take the slot", l.finished, 2*bound)
	if l.err != nil {
		t.Fatalf("the live waiter: %v", l.err)
	}
	at, _ := dl.lastPut()
	took := at - freed
	t.Logf("the live waiter took the slot %v after its release", took)
	if took < grace-fjHeartbeat || took > bound {
		t.Errorf("the live waiter took the slot %v after its release; want after the dead head's grace (%v) less a heartbeat period, within lineBound (%v)", took, grace, bound)
	}
	w.stepUntil("the dead waiter to fail", d.finished, time.Minute)
	if d.err == nil {
		t.Error("the dead waiter acquired")
	}
	if err := l.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.settle(nil)
	w.lineGone("after the live waiter's turn")
}
