package ddblock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// A call is judged by every attempt the SDK made of it, not by its last:
// these tests lose the reply of a write that the server applied, and then
// refuse every retry of it at connect, so that the SDK's last error alone
// says "never sent".

// proxiedRetrying returns a fault proxy in front of the test server and
// an SDK client through it that makes three attempts a call, 10 ms apart.
func (e *env) proxiedRetrying() (*faultproxy.Proxy, *dynamodb.Client) {
	e.t.Helper()
	p, err := faultproxy.Start(ddbtest.Shared(e.t).Endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	base := ddbtest.Shared(e.t).ClientFor(p.URL(), 3)
	return p, dynamodb.New(base.Options(), func(o *dynamodb.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 3
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 10 * time.Millisecond, nil })
		})
	})
}

// loseThenRefuse makes the next call of op reach the server, which applies
// it, lose its reply, and refuse every later connection until the proxy
// accepts connections again.
func loseThenRefuse(p *faultproxy.Proxy, op string) *faultproxy.Fault {
	return p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: op, Count: 1, Then: p.RefuseConnections})
}

// refusedAtConnect reports whether err ends in a failed dial: proof that
// the retries of the call were refused at connect, as the test meant.
func refusedAtConnect(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func accept(t *testing.T, p *faultproxy.Proxy) {
	t.Helper()
	if err := p.AcceptConnections(); err != nil {
		t.Fatalf("AcceptConnections: %v", err)
	}
}

// A guarded write whose transaction committed, whose reply was lost and
// whose retries could not connect is OUTCOME_UNKNOWN, never "nothing was
// written": a caller who believed that would apply the write twice.
func TestGuardedWriteJudgedByEveryAttempt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxiedRetrying()
	lock := acquireN(t, e.clientOn(ddb), "k")[0]
	if !hasTransactions(t, lock, e) {
		return
	}
	fault := loseThenRefuse(p, "TransactWriteItems")
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c")}}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := lock.GuardedWrite(callCtx, in)
	cancel()
	accept(t, p)
	if fault.Injected() != 1 || !refusedAtConnect(err) {
		t.Fatalf("the fault did not happen as meant: injected %d, err %v", fault.Injected(), err)
	}
	var gw *ddblock.GuardedWriteError
	if !errors.Is(err, ddblock.CodeOutcomeUnknown) || !errors.As(err, &gw) || gw.RequestToken == "" {
		t.Fatalf("GuardedWrite = %v (code %s); want OUTCOME_UNKNOWN with the request token", err, ddblock.CodeOf(err))
	}
	if got := e.counter("c"); got != 1 {
		t.Fatalf("counter = %d; want 1: the transaction committed before its reply was lost", got)
	}
	retry := *in
	retry.ClientRequestToken = aws.String(gw.RequestToken)
	if _, err := lock.GuardedWrite(ctx, &retry); err != nil {
		t.Fatalf("the retry with the same token: %v", err)
	}
	if got := e.counter("c"); got != 1 {
		t.Errorf("counter = %d after the retry with the same token; want 1: applied exactly once", got)
	}
}

// A heartbeat that landed, whose reply was lost and whose retries could
// not connect, may be in the table: the next heartbeat finds its version
// there and carries on, instead of declaring the lock stolen.
func TestHeartbeatJudgedByEveryAttempt(t *testing.T) {
	e := newEnv(t)
	p, ddb := e.proxiedRetrying()
	clk := fakeClock()
	c := e.clientOn(ddb, append(fakeTimes(), ddblock.WithClock(clk))...)
	var ev events
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	acquired := rawItem(t, e, "k", "-")
	start := clk.Monotonic()
	fault := loseThenRefuse(p, "UpdateItem")
	drive(t, clk, c, start+1500*time.Millisecond) // the first heartbeat
	if fault.Injected() != 1 {
		t.Fatalf("the first heartbeat's reply was not lost: injected %d", fault.Injected())
	}
	landed := rawItem(t, e, "k", "-")
	if landed["record_version_number"] == nil ||
		attrString(landed, "record_version_number") == attrString(acquired, "record_version_number") {
		t.Fatalf("the first heartbeat did not land on the server: item %v", landed)
	}
	accept(t, p)
	// Two more heartbeats. Not drive: a lock marked stolen leaves the
	// scheduler without a timer, and drive would wait for it.
	for range 2 {
		clk.Advance(time.Second)
		waitFor(t, "the heartbeat", func() bool {
			return c.Stats().HeartbeatsInFlight == 0 && (clk.Timers() >= 2 || lock.Status() != ddblock.StatusLocked)
		})
	}
	if lock.Status() != ddblock.StatusLocked || lock.Err() != nil {
		t.Fatalf("after a landed heartbeat whose reply was lost: status %s, err %v; want LOCKED", lock.Status(), lock.Err())
	}
	if got := ev.list(); len(got) != 0 {
		t.Errorf("callbacks %v; want none", got)
	}
	if s := c.Stats(); s.Stolen != 0 || s.HeartbeatsSent < 2 {
		t.Errorf("stats %+v: want no stolen lock and the later heartbeats sent", s)
	}
	if now := rawItem(t, e, "k", "-"); attrString(now, "record_version_number") == attrString(landed, "record_version_number") {
		t.Errorf("the later heartbeats did not move the item on from the lost one's version")
	}
}

// An acquire whose put landed, whose reply was lost and whose retries
// could not connect never leaves two holders: the acquirer does not hold
// the lock, and another client gets it only once the abandoned item's
// lease has passed or the acquirer took it back.
func TestAcquireJudgedByEveryAttempt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxiedRetrying()
	clk := fakeClock()
	a := e.clientOn(ddb, append(fakeTimes(), ddblock.WithClock(clk))...)
	fault := loseThenRefuse(p, "PutItem")
	lock, err := a.TryAcquireLock(ctx, "k")
	accept(t, p)
	if fault.Injected() != 1 {
		t.Fatalf("the put's reply was not lost: injected %d", fault.Injected())
	}
	if err == nil {
		// The acquire may learn, on a later try, that its put landed:
		// then it holds the lock, and nobody else may.
		if lock.Status() != ddblock.StatusLocked {
			t.Fatalf("status %s", lock.Status())
		}
	} else if lock != nil {
		t.Fatalf("TryAcquireLock returned a lock and an error: %v", err)
	}
	b := e.client(fakeTimes()...)
	other, berr := b.TryAcquireLock(ctx, "k")
	item := rawItem(t, e, "k", "-")
	switch {
	case err == nil && berr == nil:
		t.Fatalf("two holders: %s and %s", lock.OwnerName(), other.OwnerName())
	case err != nil && berr == nil:
		// Allowed only if the abandoned item was taken back.
		if attrString(item, "owner_name") != other.OwnerName() {
			t.Fatalf("the item names %q, not the new holder", attrString(item, "owner_name"))
		}
	case err != nil && !errors.Is(berr, ddblock.CodeLockHeld):
		t.Fatalf("the other client: %v; want LOCK_HELD by the abandoned item, or the lock", berr)
	}
	var de *ddblock.Error
	if err != nil && !errors.As(err, &de) {
		t.Errorf("the failed acquire's error is not a *ddblock.Error: %v", err)
	}
}

// A release whose delete landed, whose reply was lost and whose retries
// could not connect reports its failure, and leaves the lock free, never
// held by a ghost.
func TestReleaseJudgedByEveryAttempt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxiedRetrying()
	a := e.clientOn(ddb)
	lock := acquireN(t, a, "k")[0]
	fault := loseThenRefuse(p, "DeleteItem")
	rerr := lock.Release(ctx)
	accept(t, p)
	if fault.Injected() != 1 {
		t.Fatalf("the delete's reply was not lost: injected %d", fault.Injected())
	}
	if lock.Status() == ddblock.StatusLocked {
		t.Fatalf("after a release (%v), the lock is still LOCKED", rerr)
	}
	if item := rawItem(t, e, "k", "-"); item != nil {
		t.Fatalf("the delete landed, yet the item is there: %v", item)
	}
	b := e.client()
	if _, err := b.TryAcquireLock(ctx, "k"); err != nil {
		t.Fatalf("another client on the released lock: %v", err)
	}
}

func attrString(item map[string]types.AttributeValue, name string) string {
	if s, ok := item[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// Guarded writes back to back, from several goroutines, never starve
// the holder's own heartbeat, although DynamoDB refuses a heartbeat while
// a transaction that includes the lock item (every guarded write's guard
// does) is under way: a refused heartbeat holds the lock's guarded writes
// back and goes again at once. Three safe periods of writing leave the
// lock held, never in danger, and every write accounted for.
func TestGuardedWritesBackToBackKeepTheLock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	p, ddb := e.proxied()
	if !p.EmulatesConflicts() {
		t.Fatal("the fault proxy does not emulate DynamoDB's transaction conflicts")
	}
	clk := fakeClock()
	c := e.clientOn(ddb, append(fakeTimes(), ddblock.WithClock(clk))...)
	var ev events
	lock, err := c.AcquireLock(ctx, "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	if !hasTransactions(t, lock, e) {
		return
	}
	const writers = 4
	names := []string{"c0", "c1", "c2", "c3"}
	for _, n := range names {
		e.counter(n) // the data table exists before the writers start
	}
	stop := make(chan struct{})
	var started atomic.Int32 // writers that committed once
	type tally struct{ committed, conflicts, other int }
	results := make(chan tally, writers)
	for w := range writers {
		go func() {
			var tl tally
			defer func() { results <- tl }()
			in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr(names[w])}}
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := lock.GuardedWrite(ctx, in)
				switch {
				case err == nil:
					if tl.committed == 0 {
						started.Add(1)
					}
					tl.committed++
				case errors.Is(err, ddblock.CodeTransactionConflict):
					// Another writer's transaction: nothing written. Back
					// off a little, as the error says.
					tl.conflicts++
					time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
				default:
					tl.other++
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		}()
	}
	// Three safe periods of fake time, a quarter of a heartbeat period a
	// step, each step once the heartbeat in flight has finished.
	waitFor(t, "the writers to commit", func() bool { return started.Load() >= writers })
	start := clk.Monotonic()
	for step := time.Duration(1); step <= 48 && lock.Status() == ddblock.StatusLocked; step++ {
		drive(t, clk, c, start+step*250*time.Millisecond)
	}
	close(stop)
	var sum tally
	for range writers {
		r := <-results
		sum.committed += r.committed
		sum.conflicts += r.conflicts
		sum.other += r.other
	}
	counts := p.Counts()
	s := c.Stats()
	t.Logf("%d guarded writes committed, %d cancelled by each other; heartbeats: %d sent, %d failed; UpdateItem refused by a conflict %d times",
		sum.committed, sum.conflicts, s.HeartbeatsSent, s.HeartbeatsFailed, counts.Conflicts["UpdateItem"])
	if lock.Status() != ddblock.StatusLocked || s.InDanger != 0 || len(ev.list()) != 0 {
		t.Fatalf("after three safe periods of guarded writes: status %s, in danger %d times, callbacks %v; want LOCKED throughout",
			lock.Status(), s.InDanger, ev.list())
	}
	if s.HeartbeatsSent < 10 {
		t.Errorf("%d heartbeats landed in 12 s of 1 s periods", s.HeartbeatsSent)
	}
	if counts.Conflicts["UpdateItem"] == 0 {
		t.Errorf("no heartbeat met a transaction: the test did not test the conflict")
	}
	total := 0
	for _, n := range names {
		total += e.counter(n)
	}
	if total != sum.committed || sum.committed == 0 {
		t.Errorf("the counters add up to %d; %d writes were acknowledged", total, sum.committed)
	}
}

// Each recipe's writes keep their lost-reply safety under the same
// sequence: whatever the first write of a session lock, a semaphore slot
// or an election's lock met, there is never more than one holder, and a
// failure is a typed error.
func TestRecipesJudgedByEveryAttempt(t *testing.T) {
	ctx := context.Background()
	type take func(t *testing.T, c *ddblock.Client) (held bool, err error)
	cases := []struct {
		name string
		opts []ddblock.Option // the first client's
		take take
	}{
		{"session lock", []ddblock.Option{ddblock.WithSessionLease()}, func(t *testing.T, c *ddblock.Client) (bool, error) {
			l, err := c.TryAcquireLock(ctx, "k")
			return l != nil && err == nil, err
		}},
		{"semaphore slot", nil, func(t *testing.T, c *ddblock.Client) (bool, error) {
			s, err := c.NewSemaphore("k", 1)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.TryAcquire(ctx)
			return l != nil && err == nil, err
		}},
		{"election", nil, func(t *testing.T, c *ddblock.Client) (bool, error) {
			el, err := c.NewElection("k")
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ld, err := el.Campaign(cctx, "v")
			return ld != nil && err == nil, err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p, ddb := e.proxiedRetrying()
			a := e.clientOn(ddb, tc.opts...)
			fault := loseThenRefuse(p, "PutItem")
			heldA, errA := tc.take(t, a)
			accept(t, p)
			if fault.Injected() != 1 {
				t.Fatalf("no put's reply was lost: injected %d", fault.Injected())
			}
			var de *ddblock.Error
			if errA != nil && !errors.As(errA, &de) {
				t.Errorf("the first client's error is not a *ddblock.Error: %v", errA)
			}
			heldB, errB := tc.take(t, e.client())
			if heldA && heldB {
				t.Fatalf("two holders after a lost reply")
			}
			if !heldB && !errors.Is(errB, ddblock.CodeLockHeld) && !errors.Is(errB, ddblock.CodeAcquireTimeout) {
				t.Errorf("the second client: %v; want the lock, LOCK_HELD or ACQUIRE_TIMEOUT", errB)
			}
			t.Logf("first client: held %v (%v); second: held %v (%v)", heldA, errA, heldB, errB)
		})
	}
}
