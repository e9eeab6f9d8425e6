package ddblock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// A lock that went into danger and was then taken by another client says
// LOCK_STOLEN: Err gives the latest cause, Done stays closed once closed,
// and a release that is not best effort reports the theft.
func TestStolenAfterDangerSaysStolen(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk))
	var ev events
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Monotonic()
	lctx, cancel := lock.Context(context.Background())
	defer cancel()
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem"})
	drive(t, clk, c, start+25*time.Second)
	if lock.Status() != ddblock.StatusInDanger || !errors.Is(lock.Err(), ddblock.CodeLockInDanger) {
		t.Fatalf("status %s, Err %v; want IN_DANGER", lock.Status(), lock.Err())
	}
	// The server lost the item and another client took the key.
	if _, err := e.ddb.DeleteItem(context.Background(), deleteInput(e, "k")); err != nil {
		t.Fatal(err)
	}
	thief := e.client()
	if _, err := thief.AcquireLock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	fault.Remove()
	drive(t, clk, c, start+31*time.Second)
	waitFor(t, "the theft to be noticed", func() bool { return lock.Status() == ddblock.StatusInvalid })
	if !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
		t.Fatalf("Err = %v; want LOCK_STOLEN, which outranks LOCK_IN_DANGER", lock.Err())
	}
	select {
	case <-lock.Done():
	default:
		t.Fatal("Done open")
	}
	if cause := context.Cause(lctx); !errors.Is(cause, ddblock.CodeLockInDanger) {
		t.Errorf("the lock's context ended with %v; want its first cause, LOCK_IN_DANGER", cause)
	}
	waitFor(t, "the callbacks", func() bool { return len(ev.list()) == 2 })
	if diff := cmp.Diff([]ddblock.Code{ddblock.CodeLockInDanger, ddblock.CodeLockStolen}, ev.list()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Errorf("best-effort release: %v", err)
	}
	if err := lock.Release(context.Background(), ddblock.WithBestEffort(false)); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Errorf("release not best effort: %v; want LOCK_STOLEN", err)
	}
	if _, err := thief.GetLock(context.Background(), "k", ""); err != nil {
		t.Errorf("the thief's lock: %v", err)
	}
}

// deleteInput deletes a lock item out of band, as a server that lost it.
func deleteInput(e *env, pk string) *dynamodb.DeleteItemInput {
	return &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: pk},
		"sort_key": &types.AttributeValueMemberS{Value: "-"},
	}}
}

// syncBuffer is a log sink safe for the client's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lateLog counts Metrics.CallbackLate.
type lateLog struct {
	ddblock.NoMetrics
	mu     sync.Mutex
	waited []time.Duration
}

func (m *lateLog) CallbackLate(d time.Duration) {
	m.mu.Lock()
	m.waited = append(m.waited, d)
	m.mu.Unlock()
}

func (m *lateLog) list() []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.waited)
}

// stealAll changes every lock's version number out of band and steps the
// fake clock until the client's heartbeats have found all of them stolen.
func stealAll(t *testing.T, e *env, clk *clock.Fake, c *ddblock.Client, locks ...*ddblock.Lock) {
	t.Helper()
	for _, l := range locks {
		setRVN(t, e, l.PartitionKey(), l.SortKey(), l.RecordVersionNumber(), "thief-"+l.PartitionKey())
	}
	want := c.Stats().Stolen + uint64(len(locks))
	for range 1000 {
		if c.Stats().Stolen >= want {
			return
		}
		waitFor(t, "the heartbeats to finish", func() bool { return c.Stats().HeartbeatsInFlight == 0 && clk.Timers() >= 1 })
		clk.AdvanceToNext()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the thefts were not noticed: %+v", c.Stats())
}

// A lock's event that waits behind slow callbacks for longer than the
// safe period is logged and counted when its delivery starts.
func TestLateCallbackReported(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	var logs syncBuffer
	var m lateLog
	c := e.client(ddblock.WithClock(clk), ddblock.WithCallbackWorkers(1), ddblock.WithMetrics(&m),
		ddblock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	entered := make(chan struct{})
	gate := make(chan struct{})
	defer close(gate)
	slow, err := c.AcquireLock(context.Background(), "slow", ddblock.WithCallback(func(ddblock.Code, *ddblock.Lock) {
		close(entered)
		<-gate
	}))
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	quick, err := c.AcquireLock(context.Background(), "quick", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	stealAll(t, e, clk, c, slow)
	<-entered // the only worker is stuck in slow's callback
	stealAll(t, e, clk, c, quick)
	clk.Advance(c.Options().SafePeriod + time.Second)
	if s := c.Stats(); s.CallbacksLate != 0 || s.CallbacksRunning != 1 {
		t.Fatalf("before the delivery: %+v", s)
	}
	gate <- struct{}{} // slow's callback returns
	waitFor(t, "quick's callback", func() bool { return len(ev.list()) == 1 })
	if got := ev.list(); got[0] != ddblock.CodeLockStolen {
		t.Errorf("quick heard %v", got)
	}
	if got := m.list(); len(got) != 1 || got[0] <= c.Options().SafePeriod {
		t.Errorf("CallbackLate: %v; want one wait over the safe period", got)
	}
	if s := c.Stats(); s.CallbacksLate != 1 {
		t.Errorf("Stats.CallbacksLate = %d; want 1", s.CallbacksLate)
	}
	if !strings.Contains(logs.String(), "waited longer than the safe period") || !strings.Contains(logs.String(), "key=quick") {
		t.Errorf("no log line for the late event:\n%s", logs.String())
	}
}

// When callbacks outlive Close's context, Close returns an *Error that
// says so, drops what is queued, starts no callback afterwards, and
// leaves none of the library's goroutines but the ones stuck in the
// application's callbacks; a later Close returns nil once they return.
func TestCloseWithStuckCallbacks(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	before := ddblockGoroutines()
	c := e.client(ddblock.WithClock(clk), ddblock.WithCallbackWorkers(1))
	entered := make(chan struct{})
	gate := make(chan struct{})
	stuck, err := c.AcquireLock(context.Background(), "stuck", ddblock.WithCallback(func(ddblock.Code, *ddblock.Lock) {
		close(entered)
		<-gate
	}))
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	queued, err := c.AcquireLock(context.Background(), "queued", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	stealAll(t, e, clk, c, stuck)
	<-entered
	stealAll(t, e, clk, c, queued)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = c.Close(ctx, false)
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeCanceled || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v; want an *Error of CANCELED wrapping the deadline", err)
	}
	if !strings.Contains(lerr.Message, "1 callbacks still running") || !strings.Contains(lerr.Message, "1 queued callback events dropped") {
		t.Errorf("Close's message: %q", lerr.Message)
	}
	if n := ddblockGoroutines() - before; n != 0 {
		t.Errorf("%d of the library's goroutines left after Close gave up (the stuck callback's is the app's)", n)
	}
	if s := c.Stats(); s.CallbacksDropped != 1 || s.CallbacksRunning != 1 {
		t.Errorf("stats: %+v", s)
	}
	close(gate)
	if err := c.Close(context.Background(), false); err != nil {
		t.Fatalf("Close once the callback returned: %v", err)
	}
	if got := ev.list(); len(got) != 0 {
		t.Errorf("a callback ran after Close returned: %v", got)
	}
	if n := ddblockGoroutines() - before; n != 0 {
		t.Errorf("%d goroutines left after the last Close", n)
	}
}

// One lock's backlog of events does not hold up another lock's: with a
// single worker stuck in one lock's callback while that lock piles up
// events, another lock's event is delivered right after the stuck
// callback, before the rest of the backlog, which still arrives in order.
func TestCallbacksRoundRobinAcrossLocks(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithCallbackWorkers(1))
	var mu sync.Mutex
	var order []string
	record := func(code ddblock.Code, l *ddblock.Lock) {
		mu.Lock()
		order = append(order, l.PartitionKey()+" "+string(code))
		mu.Unlock()
	}
	delivered := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
	entered := make(chan struct{})
	gate := make(chan struct{})
	first := true
	busy, err := c.AcquireLock(context.Background(), "busy", ddblock.WithCallback(func(code ddblock.Code, l *ddblock.Lock) {
		if first {
			first = false
			close(entered)
			<-gate
		}
		record(code, l)
	}))
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.AcquireLock(context.Background(), "other", ddblock.WithCallback(record))
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Monotonic()
	failBusy := func() *faultproxy.Fault {
		return proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem", BodyContains: `"busy"`})
	}
	until := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for !cond() {
			if clk.Monotonic()-start > d {
				t.Fatalf("%s: not by %v of fake time", what, d)
			}
			drive(t, clk, c, clk.Monotonic()+time.Second)
		}
	}
	f := failBusy()
	until("busy in danger", time.Minute, func() bool { return busy.Status() == ddblock.StatusInDanger })
	<-entered // the only worker is stuck in busy's first callback
	f.Remove()
	until("busy recovered", 2*time.Minute, func() bool { return busy.Status() == ddblock.StatusLocked })
	f = failBusy()
	until("busy in danger again", 3*time.Minute, func() bool { return busy.Status() == ddblock.StatusInDanger })
	f.Remove()
	setRVN(t, e, "other", "-", other.RecordVersionNumber(), "thief")
	until("other stolen", 4*time.Minute, func() bool { return other.Status() == ddblock.StatusInvalid })
	close(gate)
	waitFor(t, "the callbacks", func() bool { return len(delivered()) == 4 })
	want := []string{"busy LOCK_IN_DANGER", "other LOCK_STOLEN", "busy LOCK_RECOVERED", "busy LOCK_IN_DANGER"}
	if diff := cmp.Diff(want, delivered()); diff != "" {
		t.Errorf("delivery order (-want +got):\n%s", diff)
	}
}

// A Close that gives up cancels the heartbeat calls still in flight:
// nothing of the library's outlives it by more than a moment, even with a
// HeartbeatTimeout of an hour and a call the network never answers.
func TestCloseGivingUpCancelsHeartbeatsInFlight(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	before := ddblockGoroutines()
	c := e.clientOn(ddb, ddblock.WithHeartbeatPeriod(50*time.Millisecond), ddblock.WithSafePeriod(2*time.Hour),
		ddblock.WithLeaseDuration(3*time.Hour), ddblock.WithHeartbeatTimeout(time.Hour))
	if _, err := c.AcquireLock(context.Background(), "hanging"); err != nil {
		t.Fatal(err)
	}
	hang := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "UpdateItem"})
	waitFor(t, "a heartbeat to hang", func() bool { return hang.Injected() > 0 && c.Stats().HeartbeatsInFlight > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Close(ctx, false)
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeCanceled || !strings.Contains(lerr.Message, "heartbeat calls in flight cancelled") {
		t.Fatalf("Close: %v; want CANCELED saying the heartbeats in flight were cancelled", err)
	}
	waitFor(t, "the library's goroutines to end", func() bool { return ddblockGoroutines() == before })
	if err := c.Close(context.Background(), false); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
