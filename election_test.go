package ddblock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// fastTimings keep an election's waits short without sleeping through
// them: a resigned leader's lock is deleted, so the next campaigner
// leads at its next read, a heartbeat period later. The safe period and
// lease are long: a busy machine must not cost a leader its lock while
// the test expects it to lead.
var fastTimings = []ddblock.Option{
	ddblock.WithHeartbeatPeriod(50 * time.Millisecond),
	ddblock.WithSafePeriod(20 * time.Second),
	ddblock.WithLeaseDuration(30 * time.Second),
}

// total returns how many calls the counting client has made.
func (c *counting) total() int {
	n := 0
	for _, v := range c.snapshot() {
		n += v
	}
	return n
}

func electionOf(t *testing.T, c *ddblock.Client, name string) *ddblock.Election {
	t.Helper()
	e, err := c.NewElection(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// One leader at a time: the second campaigner waits, reading only, until
// the first resigns; Leader names whoever leads; the resigned leader's
// context ends.
func TestElectionOneLeaderAtATime(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	calls2 := newCounting(env.ddb)
	c2 := env.clientOn(calls2, append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")

	if _, err := e1.Leader(ctx); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("Leader before any campaign: %v; want LOCK_NOT_FOUND", err)
	}
	lead1, err := e1.Campaign(ctx, "10.0.0.1:80")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *ddblock.Leadership, 1)
	go func() {
		lead2, err := e2.Campaign(ctx, "10.0.0.2:80")
		if err != nil {
			t.Error(err)
		}
		got <- lead2
	}()
	// While e2 waits, e1 leads, and e2 has not, however many times e2
	// has looked (its calls on the wire say it has).
	for range 5 {
		before := calls2.total()
		info, err := e2.Leader(ctx)
		if err != nil || info.Value != "10.0.0.1:80" || info.Owner != "one" {
			t.Fatalf("Leader while one leads: %+v, %v", info, err)
		}
		waitFor(t, "e2 to look again", func() bool { return calls2.total() >= before+3 })
		select {
		case <-got:
			t.Fatal("two campaigners lead at once")
		default:
		}
	}
	if _, err := e1.Campaign(ctx, "again"); !errors.Is(err, ddblock.CodeAlreadyHeld) {
		t.Errorf("a second Campaign while leading: %v; want ALREADY_HELD", err)
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead1.Context().Done():
	default:
		t.Error("the resigned leader's context has not ended")
	}
	lead2 := <-got
	if lead2 == nil {
		t.FailNow()
	}
	if lead2.Value() != "10.0.0.2:80" || lead2.Context().Err() != nil {
		t.Errorf("the new leadership: value %q, context %v", lead2.Value(), lead2.Context().Err())
	}
	info, err := e1.Leader(ctx)
	if err != nil || info.Value != "10.0.0.2:80" || info.Owner != "two" {
		t.Errorf("Leader after the handover: %+v, %v", info, err)
	}
}

// A leadership's context ends the moment the lock is lost: here an
// operator removes the item and another client takes the name; the old
// leader's next heartbeat finds the theft.
func TestElectionLeadershipLostEndsContext(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	c2 := env.client(append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")
	lead1, err := e1.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// An operator removes the item, guarded by the version just read
	// (the leader heartbeats every 50 ms: read again if it moved on).
	for try := 0; ; try++ {
		info, err := c2.GetLock(ctx, "svc", "")
		if err != nil {
			t.Fatal(err)
		}
		err = c2.ForceRelease(ctx, "svc", "", info.RecordVersionNumber)
		if err == nil {
			break
		}
		if ddblock.CodeOf(err) != ddblock.CodeLockStolen || try == 50 {
			t.Fatalf("ForceRelease: %v", err)
		}
	}
	if _, err := e2.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lead1.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the old leader's context did not end after its lock was taken")
	}
	if cause := context.Cause(lead1.Context()); !errors.Is(cause, ddblock.CodeLockStolen) {
		t.Errorf("cause %v; want LOCK_STOLEN", cause)
	}
}

// Observe yields each change of leader, and only changes: none, the
// first leader, none again after a resignation, the second.
func TestElectionObserve(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	watched := newCounting(env.ddb)
	watcher := env.clientOn(watched, fastTimings...)
	e1, ew := electionOf(t, c1, "svc"), electionOf(t, watcher, "svc")

	type change struct{ owner, value string }
	changes := make(chan change, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for info, err := range ew.Observe(ctx, 10*time.Millisecond) {
			if err != nil {
				t.Error(err)
				continue
			}
			if info == nil {
				changes <- change{}
			} else {
				changes <- change{info.Owner, info.Value}
			}
		}
	})
	next := func(want change) {
		t.Helper()
		select {
		case got := <-changes:
			if got != want {
				t.Fatalf("Observe: %+v; want %+v", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Observe: nothing; want %+v", want)
		}
	}
	next(change{})
	if _, err := e1.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	next(change{"one", "a"})
	// Heartbeats change the item's version, not its leader: nothing. The
	// leader's heartbeats and then the watcher's reads are counted, so
	// the watcher has read a changed version before the test looks.
	hb := c1.Stats().HeartbeatsSent
	waitFor(t, "two heartbeats of the leader", func() bool { return c1.Stats().HeartbeatsSent >= hb+2 })
	reads := watched.total()
	waitFor(t, "two reads of the watcher", func() bool { return watched.total() >= reads+2 })
	select {
	case got := <-changes:
		t.Fatalf("Observe reported %+v while the leader stayed", got)
	default:
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next(change{})
	if _, err := e1.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	next(change{"one", "b"})
	cancel()
	wg.Wait()
}

// Run campaigns, calls back on leading and on stopping, feeds
// OnNewLeader, and returns CANCELED when its context ends; a second
// Run then leads.
func TestElectionRun(t *testing.T) {
	env := newEnv(t)
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	c2 := env.client(append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")

	ctx1, stop1 := context.WithCancel(context.Background())
	started, stopped := make(chan string, 4), make(chan struct{}, 4)
	var mu sync.Mutex
	var seen []string
	run := func(e *ddblock.Election, ctx context.Context, value string) <-chan error {
		done := make(chan error, 1)
		go func() {
			done <- e.Run(ctx, value, ddblock.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context, lead *ddblock.Leadership) {
					started <- lead.Value()
					<-lctx.Done()
				},
				OnStoppedLeading: func() { stopped <- struct{}{} },
				OnNewLeader: func(l *ddblock.LeaderInfo) {
					mu.Lock()
					defer mu.Unlock()
					if l != nil {
						seen = append(seen, l.Value)
					}
				},
			})
		}()
		return done
	}
	done1 := run(e1, ctx1, "first")
	if v := <-started; v != "first" {
		t.Fatalf("started %q", v)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	done2 := run(e2, ctx2, "second")
	stop1()
	if err := <-done1; ddblock.CodeOf(err) != ddblock.CodeCanceled {
		t.Errorf("Run after its context ended: %v; want CANCELED", err)
	}
	<-stopped
	if v := <-started; v != "second" {
		t.Fatalf("started %q; want the second Run to lead", v)
	}
	waitFor(t, "OnNewLeader to see the second leader", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1] == "second"
	})
	stop2()
	if err := <-done2; ddblock.CodeOf(err) != ddblock.CodeCanceled {
		t.Errorf("the second Run: %v; want CANCELED", err)
	}
	<-stopped
}

// Bad input gets typed errors, before any call.
func TestElectionBadInput(t *testing.T) {
	env := newEnv(t)
	c := env.client()
	if _, err := c.NewElection(""); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("NewElection(\"\"): %v", err)
	}
	if _, err := c.NewElection("\xff"); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("NewElection(invalid UTF-8): %v", err)
	}
	e := electionOf(t, c, "svc")
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := e.Campaign(nil, "v"); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument { //nolint:staticcheck
		t.Errorf("Campaign(nil): %v", err)
	}
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := e.Leader(nil); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument { //nolint:staticcheck
		t.Errorf("Leader(nil): %v", err)
	}
	// A lock on the name taken without an Election has no leader value.
	if _, err := c.AcquireLock(context.Background(), "svc"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Leader(context.Background()); ddblock.CodeOf(err) != ddblock.CodeInvalidItem {
		t.Errorf("Leader of a plain lock: %v; want INVALID_ITEM", err)
	}
}

// pauseClock is a fake clock whose readings can jump without firing a
// timer: a process paused and woken, before any of its sleepers (the
// client's monitor, its heartbeater) has run again.
type pauseClock struct {
	*clock.Fake
	jumped atomic.Int64
}

func (p *pauseClock) Monotonic() time.Duration {
	return p.Fake.Monotonic() + time.Duration(p.jumped.Load())
}

func (p *pauseClock) Now() time.Time { return p.Fake.Now().Add(time.Duration(p.jumped.Load())) }

// pause jumps the clock by d; no timer fires.
func (p *pauseClock) pause(d time.Duration) { p.jumped.Add(int64(d)) }

// wantInDanger asserts that ctx reports the lock in danger now.
func wantInDanger(t *testing.T, what string, ctx context.Context) {
	t.Helper()
	if ctx.Err() == nil {
		t.Errorf("%s: Err() is nil right after the pause", what)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ddblock.CodeLockInDanger) {
		t.Errorf("%s: cause %v; want LOCK_IN_DANGER", what, cause)
	}
}

// Every context the library hands to user work checks the clock: right
// after a pause past the safe period, before the monitor or a
// heartbeat could run, each says LOCK_IN_DANGER.
func TestContextsCheckTheClock(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	newClient := func() (*ddblock.Client, *pauseClock) {
		clk := &pauseClock{Fake: fakeClock()}
		c := env.client(ddblock.WithClock(clk))
		return c, clk
	}
	t.Run("Run's OnStartedLeading", func(t *testing.T) {
		c, clk := newClient()
		e := electionOf(t, c, "run")
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan error, 1)
		go func() {
			done <- e.Run(rctx, "v", ddblock.LeaderCallbacks{OnStartedLeading: func(lctx context.Context, _ *ddblock.Leadership) {
				if lctx.Err() != nil {
					t.Errorf("cancelled at once: %v", context.Cause(lctx))
				}
				clk.pause(21 * time.Second) // past the 20 s safe period
				wantInDanger(t, "OnStartedLeading's context", lctx)
				stop()
			}})
		}()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	t.Run("Leadership.Context", func(t *testing.T) {
		c, clk := newClient()
		lead, err := electionOf(t, c, "lead").Campaign(ctx, "v")
		if err != nil {
			t.Fatal(err)
		}
		if lead.Context().Err() != nil {
			t.Fatal("cancelled at once")
		}
		clk.pause(21 * time.Second)
		wantInDanger(t, "the leadership's context", lead.Context())
	})
	t.Run("WithLock", func(t *testing.T) {
		c, clk := newClient()
		err := c.WithLock(ctx, "with", func(lctx context.Context, _ *ddblock.Lock) error {
			clk.pause(21 * time.Second)
			wantInDanger(t, "WithLock's context", lctx)
			return nil
		})
		if !errors.Is(err, ddblock.CodeLockInDanger) {
			t.Errorf("WithLock: %v; want LOCK_IN_DANGER", err)
		}
	})
	t.Run("Lock.Context", func(t *testing.T) {
		c, clk := newClient()
		lock, err := c.AcquireLock(ctx, "plain")
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := lock.Context(ctx)
		defer cancel()
		clk.pause(21 * time.Second)
		wantInDanger(t, "the lock's context", lctx)
	})
	t.Run("LockSet.Context", func(t *testing.T) {
		c, clk := newClient()
		keys := []string{"set-1", "set-2"}
		if !ddbtest.Shared(t).HasTransactions() {
			keys = keys[:1] // a set of one key needs no transaction
		}
		set, err := c.AcquireLocks(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := set.Context(ctx)
		defer cancel()
		if sctx.Err() != nil {
			t.Fatal("cancelled at once")
		}
		clk.pause(21 * time.Second)
		wantInDanger(t, "the set's context", sctx)
	})
}

// A leader that panics does not stay leader: Run resigns while the
// panic unwinds, calls OnStoppedLeading, and lets the same panic go on;
// the lock is free, another candidate leads, and the same Election can
// campaign again.
func TestElectionRunPanicResigns(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	c2 := env.client(append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")
	type boom struct{ n int }
	stopped := false
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = e1.Run(ctx, "a", ddblock.LeaderCallbacks{
			OnStartedLeading: func(context.Context, *ddblock.Leadership) { panic(boom{7}) },
			OnStoppedLeading: func() { stopped = true },
			OnNewLeader:      func(*ddblock.LeaderInfo) {},
		})
	}()
	if recovered != (boom{7}) {
		t.Fatalf("recovered %v; want the callback's own panic", recovered)
	}
	if !stopped {
		t.Error("OnStoppedLeading was not called")
	}
	if _, err := e1.Leader(ctx); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("Leader after the panic: %v; want LOCK_NOT_FOUND", err)
	}
	if n := len(c1.HeldLocks()); n != 0 {
		t.Errorf("the panicked leader's client holds %d locks", n)
	}
	// Another candidate leads at once, the panicked one can campaign.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := e2.Campaign(cctx, "b"); err != nil {
		t.Fatalf("the other candidate: %v", err)
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e1.Campaign(cctx, "a"); err != nil {
		t.Errorf("the panicked Election campaigning again: %v", err)
	}
}

// Resign hands over: while another candidate waits, the resigning
// Election does not lead again first, whether it resigns from inside
// Run's OnStartedLeading or in a plain Campaign loop; and a lone
// candidate gets leadership back. The hand-over times are logged.
func TestElectionResignHandsOver(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	cnt2 := newCounting(env.ddb)
	c2 := env.clientOn(cnt2, append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")

	var mu sync.Mutex
	var order []string
	led := func(who string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, who)
	}

	t.Run("plain Campaign loop", func(t *testing.T) {
		if _, err := e1.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		cnt2.reset()
		got2 := make(chan error, 1)
		go func() {
			_, err := e2.Campaign(ctx, "b")
			led("two")
			got2 <- err
		}()
		waitForCampaigner(t, cnt2)
		if err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		// The loop's next Campaign: it must not lead before two does.
		got1 := make(chan error, 1)
		go func() {
			_, err := e1.Campaign(ctx, "a")
			led("one")
			got1 <- err
		}()
		if err := <-got2; err != nil {
			t.Fatal(err)
		}
		if err := e2.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got1; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(order) != 2 || order[0] != "two" {
			t.Errorf("led in the order %v; want two before one leads again", order)
		}
		order = nil
		if err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Resign inside Run", func(t *testing.T) {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		cnt2.reset()
		runDone := make(chan error, 1)
		go func() {
			runDone <- e1.Run(rctx, "a", ddblock.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context, _ *ddblock.Leadership) {
					led("one")
					mu.Lock()
					first := len(order) == 1
					mu.Unlock()
					if first {
						waitForCampaigner(t, cnt2)
						if err := e1.Resign(lctx); err != nil {
							t.Error(err)
						}
					}
					<-lctx.Done()
				},
			})
		}()
		waitFor(t, "Run to lead", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) > 0
		})
		if _, err := e2.Campaign(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		led("two")
		if err := e2.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "Run to lead again", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) == 3
		})
		stop()
		if err := <-runDone; ddblock.CodeOf(err) != ddblock.CodeCanceled {
			t.Errorf("Run: %v; want CANCELED", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"one", "two", "one"}; !slices.Equal(order, want) {
			t.Errorf("led in the order %v; want %v", order, want)
		}
	})
	t.Run("lone candidate", func(t *testing.T) {
		if _, err := e1.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := e1.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		t.Logf("a lone candidate led again %v after its Resign", time.Since(start).Round(time.Millisecond))
	})
}

// waitForCampaigner waits until the candidate whose calls cnt counts
// has tried to write the lock and found it held: it is then waiting.
func waitForCampaigner(t *testing.T, cnt *counting) {
	t.Helper()
	waitFor(t, "the other candidate to wait", func() bool { return cnt.snapshot()["PutItem"] >= 1 })
}

// The hand-over after Resign, measured: two candidates take turns, the
// leader resigning right after the waiter's read (the worst case: the
// waiter reads again a retry period later) and campaigning again at
// once. Each time the waiter leads first. The times are logged, not
// asserted.
func TestElectionHandoffAfterResign(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type cand struct {
		name     string
		cnt      *counting
		e        *ddblock.Election
		campaign chan error // the Campaign in flight
	}
	var cs [2]*cand
	for i, name := range []string{"one", "two"} {
		cnt := newCounting(env.ddb)
		c := env.clientOn(cnt, append(fastTimings, ddblock.WithOwnerName(name))...)
		cs[i] = &cand{name: name, cnt: cnt, e: electionOf(t, c, "svc")}
	}
	campaign := func(c *cand) {
		c.campaign = make(chan error, 1)
		go func() {
			_, err := c.e.Campaign(ctx, c.name)
			c.campaign <- err
		}()
	}
	if _, err := cs[0].e.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	cs[1].cnt.reset()
	campaign(cs[1])
	const rounds = 6
	var times []time.Duration
	for r := range rounds {
		leader, waiter := cs[r%2], cs[(r+1)%2]
		// Resign right after one of the waiter's reads.
		waitFor(t, "the waiter to poll", func() bool { return waiter.cnt.snapshot()["GetItem"] >= 2 })
		before := waiter.cnt.snapshot()["GetItem"]
		waitFor(t, "the waiter's next read", func() bool { return waiter.cnt.snapshot()["GetItem"] > before })
		start := time.Now()
		if err := leader.e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		leader.cnt.reset()
		campaign(leader) // at once: it must not lead before the waiter
		select {
		case err := <-waiter.campaign:
			if err != nil {
				t.Fatal(err)
			}
			times = append(times, time.Since(start).Round(time.Millisecond))
		case err := <-leader.campaign:
			t.Fatalf("round %d: %s led again (%v) while %s waited", r, leader.name, err, waiter.name)
		}
	}
	cancel()
	t.Logf("hand-over after Resign, resigning right after the waiter's read (retry period %v): %v",
		ddblock.DefaultElectionRetryPeriod, times)
}

// When ctx ends, Campaign, Run and Semaphore.Acquire answer alike, as
// AcquireLock does: a cancel is CANCELED, a deadline ACQUIRE_TIMEOUT,
// and either matches the context's own error with errors.Is. The retry
// timeout of Semaphore.Acquire, with no deadline, is ACQUIRE_TIMEOUT
// without the context's error.
func TestContextEndErrors(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	holder := env.client(append(fastTimings, ddblock.WithOwnerName("holder"))...)
	waiter := env.client(append(fastTimings, ddblock.WithOwnerName("waiter"))...)
	if _, err := electionOf(t, holder, "svc").Campaign(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	sem, err := holder.NewSemaphore("pool", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	wsem, err := waiter.NewSemaphore("pool", 1)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(context.Context) error{
		"Campaign": func(ctx context.Context) error {
			e, err := waiter.NewElection("svc")
			if err == nil {
				_, err = e.Campaign(ctx, "w")
			}
			return err
		},
		// A candidate that just resigned waits out its hand-over
		// first: its context's end is answered from that wait too.
		"Campaign in its hand-over": func(ctx context.Context) error {
			e, err := waiter.NewElection("other") // a fresh one: no hand-over yet
			if err != nil {
				return err
			}
			if _, err := e.Campaign(context.Background(), "r"); err != nil {
				return err
			}
			if err := e.Resign(context.Background()); err != nil {
				return err
			}
			_, err = e.Campaign(ctx, "r")
			if err == nil {
				_ = e.Resign(context.Background())
			}
			return err
		},
		"Run": func(ctx context.Context) error {
			e, err := waiter.NewElection("svc")
			if err != nil {
				return err
			}
			return e.Run(ctx, "w", ddblock.LeaderCallbacks{})
		},
		"Run while leading": func(ctx context.Context) error {
			e, err := waiter.NewElection("mine")
			if err != nil {
				return err
			}
			return e.Run(ctx, "w", ddblock.LeaderCallbacks{})
		},
		"Semaphore.Acquire": func(ctx context.Context) error {
			_, err := wsem.Acquire(ctx, ddblock.WithRetryTimeout(time.Hour))
			return err
		},
	}
	for name, call := range calls {
		t.Run(name+"/deadline", func(t *testing.T) {
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			err := call(dctx)
			if ddblock.CodeOf(err) != ddblock.CodeAcquireTimeout || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%v; want ACQUIRE_TIMEOUT matching context.DeadlineExceeded", err)
			}
		})
		t.Run(name+"/cancel", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(300*time.Millisecond, cancel)
			err := call(cctx)
			if ddblock.CodeOf(err) != ddblock.CodeCanceled || !errors.Is(err, context.Canceled) {
				t.Errorf("%v; want CANCELED matching context.Canceled", err)
			}
		})
	}
	t.Run("Semaphore.Acquire/retry timeout", func(t *testing.T) {
		_, err := wsem.Acquire(ctx, ddblock.WithRetryTimeout(100*time.Millisecond))
		if ddblock.CodeOf(err) != ddblock.CodeAcquireTimeout || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v; want ACQUIRE_TIMEOUT of its own", err)
		}
	})
}

// A leader changes its value without losing leadership, while its
// heartbeats change the item's version number under it: every
// proclamation lands, Leader and Observe see the new value, and the
// lock stays held. After the leadership is lost, Proclaim says so and
// leaves the new leader's item alone.
func TestElectionProclaim(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c1 := env.client(append(fastTimings, ddblock.WithOwnerName("one"))...)
	c2 := env.client(append(fastTimings, ddblock.WithOwnerName("two"))...)
	e1, e2 := electionOf(t, c1, "svc"), electionOf(t, c2, "svc")
	lead, err := e1.Campaign(ctx, "v0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 100)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for info, err := range e2.Observe(ctx, 5*time.Millisecond) {
			if err == nil && info != nil {
				seen <- info.Value
			}
		}
	})
	// Proclaim until the heartbeats moved the version number on a few
	// times: proclamations and heartbeats interleave.
	versions := map[string]bool{lead.RecordVersionNumber(): true}
	for i := 1; len(versions) < 4; i++ {
		if i > 2000 {
			t.Fatal("the heartbeats did not move the version number")
		}
		v := "v" + strconv.Itoa(i)
		if err := lead.Proclaim(ctx, v); err != nil {
			t.Fatalf("Proclaim %s: %v", v, err)
		}
		versions[lead.RecordVersionNumber()] = true
		if lead.Value() != v {
			t.Fatalf("Value %q after proclaiming %q", lead.Value(), v)
		}
		info, err := e2.Leader(ctx)
		if err != nil || info.Value != v || info.Owner != "one" {
			t.Fatalf("Leader after proclaiming %s: %+v, %v", v, info, err)
		}
	}
	if err := lead.Err(); err != nil {
		t.Fatalf("the leadership after proclaiming: %v", err)
	}
	attr, _ := lead.AdditionalAttributes()["ddblock_leader"].(*types.AttributeValueMemberS)
	if attr == nil || attr.Value != lead.Value() {
		t.Errorf("the lock's attributes say %v; want %q", attr, lead.Value())
	}
	waitFor(t, "Observe to see the last value", func() bool {
		for {
			select {
			case v := <-seen:
				if v == lead.Value() {
					return true
				}
			default:
				return false
			}
		}
	})
	// Lost: an operator removes the item and two leads.
	for try := 0; ; try++ {
		info, err := c2.GetLock(ctx, "svc", "")
		if err != nil {
			t.Fatal(err)
		}
		if err = c2.ForceRelease(ctx, "svc", "", info.RecordVersionNumber); err == nil {
			break
		}
		if try == 50 {
			t.Fatalf("ForceRelease: %v", err)
		}
	}
	if _, err := e2.Campaign(ctx, "two's"); err != nil {
		t.Fatal(err)
	}
	if err := lead.Proclaim(ctx, "late"); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Errorf("Proclaim after the lock was taken: %v; want LOCK_STOLEN", err)
	}
	select {
	case <-lead.Done(): // the old leader's heartbeat finds the theft too
	case <-time.After(10 * time.Second):
		t.Fatal("the old leadership did not end")
	}
	if info, err := e2.Leader(ctx); err != nil || info.Value != "two's" || info.Owner != "two" {
		t.Errorf("the new leader's item: %+v, %v", info, err)
	}
	// Resigned: the lock's own error.
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	lead2, err := e1.Campaign(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lead2.Proclaim(ctx, "x"); !errors.Is(err, ddblock.CodeLockReleased) {
		t.Errorf("Proclaim after Resign: %v; want LOCK_RELEASED", err)
	}
}

// Observe reports a new term even when the same owner wins again with
// the same value and no read fell in the gap between the two terms.
func TestElectionObserveNewTerm(t *testing.T) {
	for name, extra := range map[string][]ddblock.Option{
		"tenure":        nil,
		"fencing token": {ddblock.WithFencingTokens()},
	} {
		t.Run(name, func(t *testing.T) { testObserveNewTerm(t, extra) })
	}
}

func testObserveNewTerm(t *testing.T, extra []ddblock.Option) {
	env := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leader := env.client(append(append(fastTimings, ddblock.WithOwnerName("one")), extra...)...)
	clk := fakeClock()
	watcher := env.client(ddblock.WithClock(clk))
	changes := make(chan *ddblock.LeaderInfo, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if _, err := electionOf(t, leader, "svc").Campaign(ctx, "same"); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		for info, err := range electionOf(t, watcher, "svc").Observe(ctx, time.Second) {
			if err != nil {
				t.Error(err)
				continue
			}
			changes <- info
		}
	})
	first := <-changes
	if first == nil || first.Owner != "one" || first.Value != "same" || first.Term == "" {
		t.Fatalf("first report %+v; want one leading with a term", first)
	}
	// Out and in again between two reads: a fresh Election, so no
	// hand-over wait.
	e := electionOf(t, leader, "svc")
	if err := electionOf(t, leader, "svc").Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range leader.HeldLocks() {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Campaign(ctx, "same"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to sleep", func() bool { return clk.Timers() >= 2 })
	clk.Advance(time.Second)
	select {
	case next := <-changes:
		if next == nil || next.Owner != "one" || next.Value != "same" || next.Term == first.Term {
			t.Errorf("after a new term: %+v; want one, same, a term other than %q", next, first.Term)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Observe did not report the new term")
	}
}
