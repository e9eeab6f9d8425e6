package ddblock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
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

	if _, err := e1.Leader(ctx); !errors.Is(err, ddblock.ErrLockNotFound) {
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
	if _, err := e1.Campaign(ctx, "again"); ddblock.CodeOf(err) != ddblock.CodeInvalidArgument {
		t.Errorf("a second Campaign while leading: %v; want INVALID_ARGUMENT", err)
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
	if cause := context.Cause(lead1.Context()); !errors.Is(cause, ddblock.ErrLockStolen) {
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
