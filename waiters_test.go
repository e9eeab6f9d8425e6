package ddblock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// waiterPool runs n goroutines of one client that wait for one key, and
// collects what their acquires return.
type waiterPool struct {
	mu     sync.Mutex
	locks  []*ddblock.Lock
	errs   []error
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

func startWaiters(c *ddblock.Client, n int, key string, opts ...ddblock.AcquireOption) *waiterPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &waiterPool{cancel: cancel}
	for range n {
		p.wg.Go(func() {
			l, err := c.AcquireLock(ctx, key, opts...)
			p.mu.Lock()
			defer p.mu.Unlock()
			if err != nil {
				p.errs = append(p.errs, err)
			} else {
				p.locks = append(p.locks, l)
			}
		})
	}
	return p
}

func (p *waiterPool) won() []*ddblock.Lock {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*ddblock.Lock(nil), p.locks...)
}

func (p *waiterPool) failed() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

// stop cancels the waiters still waiting and waits for them all.
func (p *waiterPool) stop() {
	p.cancel()
	p.wg.Wait()
}

// advancePeriods moves the fake clock on by n periods, one at a time,
// each once `sleepers` timers are pending: every waiter asleep, no call
// in flight.
func advancePeriods(t *testing.T, clk *clock.Fake, sleepers, n int, period time.Duration) {
	t.Helper()
	for range n {
		waitFor(t, "the waiters to sleep", func() bool { return clk.Timers() >= sleepers })
		clk.Advance(period)
	}
	waitFor(t, "the waiters to sleep", func() bool { return clk.Timers() >= sleepers })
}

// Fifty goroutines of one client waiting for one key held by another
// client read it once per retry period between them, not once each;
// when it frees, exactly one of them takes it with one put, and the
// others, waiting on their own client's lock (WithWaitOnOwn), make no
// call at all until it is released, when one of them takes it at once,
// with no time passing on the clock.
func TestWaitersOfOneKeyShareOnePoll(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithOwnerName("holder"))
	held, err := holder.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	calls := newCounting(e.ddb)
	reads := &readTimes{DynamoDBAPI: calls, clk: clk}
	c := e.clientOn(reads, ddblock.WithClock(clk), ddblock.WithOwnerName("waiters"))
	const (
		n      = 50
		period = 100 * time.Millisecond
	)
	pool := startWaiters(c, n, "k", ddblock.WithRetryPeriod(period), ddblock.WithRetryTimeout(time.Hour), ddblock.WithWaitOnOwn())
	defer pool.stop()
	sleepers := n + 1 // the waiters and the client's monitor
	// The first look: one put (the key was never seen), or a few from
	// waiters that came while it was in flight and could not use it.
	advancePeriods(t, clk, sleepers, 1, period)

	calls.reset()
	from := clk.Monotonic()
	const periods = 20
	advancePeriods(t, clk, sleepers, periods, period)
	if got, want := calls.snapshot(), ops("GetItem", periods); !equalOps(got, want) {
		t.Fatalf("%d waiters over %d retry periods made calls %v; want %v: one read per period between them (reads at %v after the start)",
			n, periods, got, want, gaps(append([]time.Duration{from}, reads.since(from-1)...)))
	}
	if len(pool.won()) != 0 || len(pool.failed()) != 0 {
		t.Fatalf("while the key was held elsewhere: %d won, errors %v", len(pool.won()), pool.failed())
	}

	// The holder releases: at the next period one read, one put, one winner.
	if err := held.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	calls.reset()
	clk.Advance(period)
	waitFor(t, "a waiter to take the lock", func() bool { return len(pool.won()) == 1 })
	sleepers = n - 1 + 2 // the other waiters, the monitor and the winner's heartbeats
	advancePeriods(t, clk, sleepers, 10, period)
	if got, want := calls.snapshot(), ops("GetItem", 1, "PutItem", 1); !equalOps(got, want) {
		t.Errorf("taking the freed lock and waiting 10 periods on it: calls %v; want %v", got, want)
	}
	if len(pool.won()) != 1 || len(pool.failed()) != 0 {
		t.Fatalf("after the release: %d won, errors %v; want exactly one winner, the others waiting", len(pool.won()), pool.failed())
	}

	// The winner releases: another waiter of the client takes the lock at
	// once, its put sent right after the release's delete.
	first := pool.won()[0]
	calls.reset()
	before := clk.Monotonic()
	if err := first.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handoff", func() bool { return len(pool.won()) == 2 })
	if clk.Monotonic() != before {
		t.Errorf("the handoff took %v of the fake clock; want none", clk.Monotonic()-before)
	}
	if got, want := calls.snapshot(), ops("DeleteItem", 1, "PutItem", 1); !equalOps(got, want) {
		t.Errorf("release and handoff: calls %v; want %v", got, want)
	}
	second := pool.won()[1]
	info, err := holder.GetLock(ctx, "k", "")
	if err != nil || info.RecordVersionNumber != second.RecordVersionNumber() {
		t.Errorf("the table has %+v, %v; want the second winner's lock", info, err)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the next handoff", func() bool { return len(pool.won()) == 3 })
	pool.stop()
	for _, err := range pool.failed() {
		if !errors.Is(err, ddblock.CodeCanceled) {
			t.Errorf("a waiter ended with %v; want CANCELED", err)
		}
	}
	if got := len(pool.failed()); got != n-3 {
		t.Errorf("%d waiters cancelled; want %d", got, n-3)
	}
}

// equalOps compares counts of calls, leaving out operations called no time.
func equalOps(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// readTimes records when, on a fake clock, each GetItem was sent.
type readTimes struct {
	ddblock.DynamoDBAPI
	clk *clock.Fake
	mu  sync.Mutex
	at  []time.Duration
}

func (r *readTimes) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.mu.Lock()
	r.at = append(r.at, r.clk.Monotonic())
	r.mu.Unlock()
	return r.DynamoDBAPI.GetItem(ctx, in, o...)
}

// since returns the times of the reads sent after from.
func (r *readTimes) since(from time.Duration) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for _, at := range r.at {
		if at > from {
			out = append(out, at)
		}
	}
	return out
}

func gaps(times []time.Duration) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(times); i++ {
		out = append(out, times[i]-times[i-1])
	}
	return out
}

// Waiters whose reads of a key are throttled back off: their reads come
// further and further apart (a retry period plus a random part that
// doubles with each throttled read, up to a cap), and at one read per
// retry period again once a read goes through. The fault proxy throttles
// the reads; the fake clock times them.
func TestWaitersBackOffWhileThrottled(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.Throttling, faultproxy.ThroughputExceeded} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			holder := e.client(ddblock.WithOwnerName("holder"))
			if _, err := holder.AcquireLock(ctx, "hot"); err != nil {
				t.Fatal(err)
			}
			proxy, ddb := e.proxied()
			clk := fakeClock()
			reads := &readTimes{DynamoDBAPI: ddb, clk: clk}
			c := e.clientOn(reads, ddblock.WithClock(clk))
			const (
				n      = 5
				period = 100 * time.Millisecond
			)
			pool := startWaiters(c, n, "hot", ddblock.WithRetryPeriod(period), ddblock.WithRetryTimeout(time.Hour))
			defer pool.stop()
			sleepers := n + 1
			advancePeriods(t, clk, sleepers, 2, period)

			from := clk.Monotonic()
			advancePeriods(t, clk, sleepers, 20, period)
			before := reads.since(from)

			fault := proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "GetItem"})
			from = clk.Monotonic()
			const throttledPeriods = 60
			advancePeriods(t, clk, sleepers, throttledPeriods, period)
			throttled := reads.since(from)
			fault.Remove()
			if fault.Injected() == 0 {
				t.Fatal("no read was throttled")
			}

			// Once a read goes through (at most 17 periods later, the cap
			// plus one), the reads are a period apart again.
			advancePeriods(t, clk, sleepers, 20, period)
			from = clk.Monotonic()
			advancePeriods(t, clk, sleepers, 20, period)
			after := reads.since(from)

			t.Logf("reads in 20 periods before: %d; in %d periods throttled: %d, %v apart; in 20 periods after: %d",
				len(before), throttledPeriods, len(throttled), gaps(throttled), len(after))
			for name, rs := range map[string][]time.Duration{"before": before, "after": after} {
				if len(rs) != 20 {
					t.Errorf("%s the throttling: %d reads in 20 periods; want 20", name, len(rs))
				}
				for _, g := range gaps(rs) {
					if g != period {
						t.Errorf("%s the throttling: reads %v apart; want %v", name, g, period)
						break
					}
				}
			}
			if len(throttled) > throttledPeriods/3 {
				t.Errorf("%d reads in %d throttled periods; want them to back off", len(throttled), throttledPeriods)
			}
			var longest time.Duration
			for _, g := range gaps(throttled) {
				longest = max(longest, g)
			}
			if longest < 4*period {
				t.Errorf("the longest gap between throttled reads is %v; want the spacing to grow past %v", longest, 4*period)
			}
			if len(pool.won()) != 0 || len(pool.failed()) != 0 {
				t.Errorf("the waiters ended: %d won, errors %v; want them still waiting", len(pool.won()), pool.failed())
			}
		})
	}
}
