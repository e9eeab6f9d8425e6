package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// proxied returns a fault proxy in front of the test server and an SDK
// client through it that makes one attempt per call.
func (e *env) proxied() (*faultproxy.Proxy, ddblock.DynamoDBAPI) {
	e.t.Helper()
	p, err := faultproxy.Start(ddbtest.Shared(e.t).Endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p, ddbtest.Shared(e.t).ClientFor(p.URL(), 1)
}

// Heartbeats that fail put the lock in danger once its safe period has
// passed, once per episode; a heartbeat that succeeds again brings it
// back, and a new episode is reported anew.
func TestDangerAfterFailingHeartbeats(t *testing.T) {
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
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem"})
	drive(t, clk, c, start+19*time.Second)
	if lock.Status() != ddblock.StatusLocked || len(ev.list()) != 0 {
		t.Fatalf("before the safe period: status %s, events %v", lock.Status(), ev.list())
	}
	drive(t, clk, c, start+45*time.Second) // long past the safe period, heartbeats still failing
	waitFor(t, "the danger callback", func() bool { return len(ev.list()) == 1 })
	if lock.Status() != ddblock.StatusInDanger || !errors.Is(lock.Err(), ddblock.CodeLockInDanger) {
		t.Fatalf("status %s, err %v", lock.Status(), lock.Err())
	}
	if fault.Injected() < 5 {
		t.Errorf("only %d heartbeats failed: the lock in danger must still be heartbeated", fault.Injected())
	}
	fault.Remove()
	drive(t, clk, c, start+51*time.Second)
	waitFor(t, "recovery", func() bool { return lock.Status() == ddblock.StatusLocked })
	fault = proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem"})
	drive(t, clk, c, start+80*time.Second)
	waitFor(t, "the second episode", func() bool { return len(ev.list()) == 3 })
	want := []ddblock.Code{ddblock.CodeLockInDanger, ddblock.CodeLockRecovered, ddblock.CodeLockInDanger}
	if diff := cmp.Diff(want, ev.list()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	if s := c.Stats(); s.InDanger != 2 || s.Recovered != 1 || s.HeldLocks != 1 {
		t.Errorf("stats: %+v", s)
	}
}

// One hanging heartbeat call never holds up the other locks.
func TestHangingHeartbeatDoesNotDelayOthers(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	// The hanging call's timeout (real time) outlasts the test: the black
	// hole holds it until it is removed, at the end.
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithHeartbeatPeriod(time.Second), ddblock.WithSafePeriod(4*time.Second),
		ddblock.WithLeaseDuration(time.Hour), ddblock.WithHeartbeatTimeout(time.Minute))
	locks := acquireN(t, c, "key-0", "key-1", "key-2", "key-3", "key-4")
	hang := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole, Op: "UpdateItem", BodyContains: `"key-0"`})
	defer hang.Remove()
	// Three safe periods of fake time, one timer at a time. Before each
	// step every heartbeat has ended but key-0's hanging one (caught by
	// the black hole): a scheduler that waited for it would never sleep.
	start := clk.Monotonic()
	for clk.Monotonic() < start+12*time.Second {
		waitFor(t, "every heartbeat but key-0's hanging one to end", func() bool {
			return clk.Timers() >= 2 && int64(c.Stats().HeartbeatsInFlight) <= hang.Injected()
		})
		clk.AdvanceToNext()
	}
	if !errors.Is(locks[0].Err(), ddblock.CodeLockInDanger) {
		t.Errorf("key-0, its heartbeat hanging for %v: %v; want LOCK_IN_DANGER", clk.Monotonic()-start, locks[0].Err())
	}
	for _, l := range locks[1:] {
		if err := l.Err(); err != nil {
			t.Errorf("%s: %v; a hanging call for key-0 delayed it", l.PartitionKey(), err)
		}
	}
	if hang.Injected() != 1 {
		t.Errorf("the black hole caught %d calls; want key-0's one", hang.Injected())
	}
	if s := c.Stats(); s.HeartbeatsSkipped == 0 || s.HeartbeatsSent < 4*10 {
		t.Errorf("want key-0's hanging heartbeat passed over in later rounds, and the others heartbeated about once a second: %+v", s)
	}
}

// When a client holds more locks than it can refresh within the safe
// period, every lock whose gap passes the safe period is reported in
// danger: the monitor does not trail the heartbeater.
func TestOverloadReportsEveryLockInDanger(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb, ddblock.WithHeartbeatPeriod(100*time.Millisecond), ddblock.WithSafePeriod(400*time.Millisecond),
		ddblock.WithLeaseDuration(time.Hour), ddblock.WithHeartbeatConcurrency(1))
	const n = 30
	var ev events
	var locks []*ddblock.Lock
	for i := range n {
		l, err := c.AcquireLock(context.Background(), fmt.Sprintf("key-%02d", i), ddblock.WithCallback(ev.callback))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	// 60 ms a heartbeat, one at a time: a round of 30 takes 1.8 s, four
	// and a half times the safe period.
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Latency, Op: "UpdateItem", Delay: 60 * time.Millisecond})
	waitFor(t, "every lock to be reported in danger", func() bool {
		for _, l := range locks {
			if l.Err() == nil {
				return false
			}
		}
		return true
	})
	waitFor(t, "a LOCK_IN_DANGER callback for every lock", func() bool {
		danger := 0
		for _, code := range ev.list() {
			if code == ddblock.CodeLockInDanger {
				danger++
			}
		}
		return danger >= n
	})
	waitFor(t, "the overrunning round to be counted", func() bool { return c.Stats().LateRounds > 0 })
}

// Close waits for heartbeats in flight, and leaves no goroutine behind.
func TestCloseWaitsForHeartbeatsInFlight(t *testing.T) {
	e := newEnv(t)
	gated := &gatedUpdates{DynamoDBAPI: e.ddb, gate: make(chan struct{})}
	before := ddblockGoroutines()
	clk := fakeClock()
	c, err := ddblock.New(gated, append(append(e.names, fakeTimes()...), ddblock.WithLogger(quiet), ddblock.WithClock(clk))...)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	// The first heartbeat goes a period after the acquire, and is held
	// at the gate; on the fake clock no other can go.
	sent := c.Stats().HeartbeatsSent
	clk.Advance(time.Second)
	waitFor(t, "a heartbeat held at the gate", func() bool { return gated.held.Load() == 1 })
	closed := make(chan error, 1)
	var callEndedFirst atomic.Bool
	go func() {
		err := c.Close(context.Background(), false)
		callEndedFirst.Store(gated.ended.Load() == 1)
		closed <- err
	}()
	// Close has begun: the lock is finished, the loops' timers stopped.
	<-lock.Done()
	waitFor(t, "the heartbeater and the monitor to stop", func() bool { return clk.Timers() == 0 })
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a heartbeat was in flight", err)
	default:
	}
	close(gated.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !callEndedFirst.Load() {
		t.Error("Close returned before the heartbeat call in flight ended")
	}
	if s := c.Stats(); s.HeartbeatsInFlight != 0 || s.HeartbeatsSent != sent+1 {
		t.Errorf("after Close: %+v; want the heartbeat in flight finished", s)
	}
	if n := ddblockGoroutines() - before; n != 0 {
		t.Errorf("%d goroutines left after Close", n)
	}
	// The lock's version number is the one the last heartbeat wrote.
	info, err := e.client().GetLock(context.Background(), "k", "-")
	if err != nil || info.RecordVersionNumber != lock.RecordVersionNumber() {
		t.Errorf("table has %+v; lock says %q", info, lock.RecordVersionNumber())
	}
}

// gatedUpdates holds every UpdateItem (a heartbeat) until gate is
// closed, counting the calls held and those that ended.
type gatedUpdates struct {
	ddblock.DynamoDBAPI
	gate        chan struct{}
	held, ended atomic.Int64
}

func (g *gatedUpdates) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	g.held.Add(1)
	<-g.gate
	defer g.ended.Add(1)
	return g.DynamoDBAPI.UpdateItem(ctx, in, o...)
}
