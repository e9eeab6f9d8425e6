package ddblock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
)

// sendLog records, on the fake clock, when each lock's writes were sent:
// the acquire's PutItem and each heartbeat's UpdateItem that succeeded.
type sendLog struct {
	ddblock.DynamoDBAPI
	clk   *clock.Fake
	mu    sync.Mutex
	sends []send
}

type send struct {
	key     string
	at      time.Duration
	acquire bool // the acquire's PutItem, not a heartbeat
}

func (s *sendLog) note(key string, at time.Duration, acquire bool) {
	s.mu.Lock()
	s.sends = append(s.sends, send{key, at, acquire})
	s.mu.Unlock()
}

func (s *sendLog) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	at := s.clk.Monotonic()
	out, err := s.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err == nil {
		s.note(in.Key["lock_key"].(*types.AttributeValueMemberS).Value, at, false)
	}
	return out, err
}

func (s *sendLog) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	at := s.clk.Monotonic()
	out, err := s.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		s.note(in.Item["lock_key"].(*types.AttributeValueMemberS).Value, at, true)
	}
	return out, err
}

// heartbeats returns the heartbeats sent from `from` on, times relative
// to from.
func (s *sendLog) heartbeats(from time.Duration) []send {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []send
	for _, sd := range s.sends {
		if !sd.acquire && sd.at >= from {
			out = append(out, send{key: sd.key, at: sd.at - from})
		}
	}
	return out
}

// checkGaps checks issue 14's items 1 and 2 on every write of every lock
// key: each heartbeat comes at most a period, and at least half a period,
// after the key's previous write (its acquire or its last heartbeat), and
// a key still held at `now` was written within the last period. A key
// released is written again only by its next acquire.
func (s *sendLog) checkGaps(t *testing.T, period, now time.Duration, held ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	last := map[string]time.Duration{}
	for _, sd := range s.sends {
		prev, seen := last[sd.key]
		last[sd.key] = sd.at
		if sd.acquire {
			continue
		}
		if !seen {
			t.Errorf("%s heartbeated at %v before any acquire", sd.key, sd.at)
			continue
		}
		if gap := sd.at - prev; gap > period || gap < period/2 {
			t.Errorf("%s heartbeated at %v, %v after its previous write; want within [%v, %v]", sd.key, sd.at, gap, period/2, period)
		}
	}
	for _, k := range held {
		if now-last[k] > period {
			t.Errorf("%s last written at %v, nothing since (now %v)", k, last[k], now)
		}
	}
}

// drive moves the fake clock from timer to timer until it reaches until,
// waiting before each step for the client's heartbeats to finish and its
// two background timers (heartbeater and monitor) to be set again.
func drive(t *testing.T, clk *clock.Fake, c *ddblock.Client, until time.Duration) {
	t.Helper()
	quiet := func() bool { return clk.Timers() >= 2 && c.Stats().HeartbeatsInFlight == 0 }
	for {
		waitFor(t, "the client to settle", quiet)
		d, ok := clk.NextDeadline()
		if !ok || clk.Monotonic()+d > until {
			if now := clk.Monotonic(); until > now {
				clk.Advance(until - now)
			}
			waitFor(t, "the client to settle", quiet)
			return
		}
		clk.AdvanceToNext()
	}
}

func acquireN(t *testing.T, c *ddblock.Client, keys ...string) []*ddblock.Lock {
	t.Helper()
	var locks []*ddblock.Lock
	for _, k := range keys {
		l, err := c.AcquireLock(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	return locks
}

// scheduleClient returns a client on the fake clock whose writes are
// logged, with a 1 s heartbeat.
func scheduleClient(t *testing.T, opts ...ddblock.Option) (*ddblock.Client, *clock.Fake, *sendLog) {
	t.Helper()
	e := newEnv(t)
	clk := fakeClock()
	rec := &sendLog{DynamoDBAPI: e.ddb, clk: clk}
	c := e.clientOn(rec, append([]ddblock.Option{ddblock.WithClock(clk), ddblock.WithHeartbeatPeriod(time.Second),
		ddblock.WithSafePeriod(4 * time.Second), ddblock.WithLeaseDuration(6 * time.Second)}, opts...)...)
	return c, clk, rec
}

// In adaptive mode N locks acquired together are first heartbeated a
// period after their acquire, then spread: from the third period on,
// a send every period/N and each lock once a period.
func TestAdaptiveSpacing(t *testing.T) {
	c, clk, rec := scheduleClient(t)
	start := clk.Monotonic()
	acquireN(t, c, "a", "b", "c", "d")
	drive(t, clk, c, start+5*time.Second)
	rec.checkGaps(t, time.Second, clk.Monotonic(), "a", "b", "c", "d")

	got := rec.heartbeats(start + 2250*time.Millisecond)
	if len(got) != 12 {
		t.Fatalf("%d heartbeats in three periods of four locks: %v", len(got), got)
	}
	for i, s := range got {
		if want := time.Duration(i) * 250 * time.Millisecond; s.at != want {
			t.Errorf("send %d (%s) at 2.25 s + %v; want + %v", i, s.key, s.at, want)
		}
		if i >= 4 && s.key != got[i-4].key {
			t.Errorf("send %d is %s; want each lock in turn (%v)", i, s.key, got)
		}
	}
	if s := c.Stats(); s.LateRounds != 0 || s.HeartbeatsFailed != 0 || s.HeartbeatsSkipped != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// Issue 14, item 1: a lock acquired in the middle of a round is first
// heartbeated at most one period after its acquire's write, and no
// sooner than half a period after it, while the other locks keep their
// schedule.
func TestFirstHeartbeatWithinAPeriodOfAcquire(t *testing.T) {
	c, clk, rec := scheduleClient(t)
	start := clk.Monotonic()
	acquireN(t, c, "a", "b", "c", "d", "e")
	drive(t, clk, c, start+2630*time.Millisecond) // mid-round
	acquireN(t, c, "late")
	drive(t, clk, c, start+6*time.Second)
	rec.checkGaps(t, time.Second, clk.Monotonic(), "a", "b", "c", "d", "e", "late")
	var first time.Duration
	for _, s := range rec.heartbeats(start) {
		if s.key == "late" {
			first = s.at
			break
		}
	}
	if want := 2630 * time.Millisecond; first < want+500*time.Millisecond || first > want+time.Second {
		t.Errorf("the lock acquired at %v was first heartbeated at %v", want, first)
	}
}

// A lock released and acquired again within one round is heartbeated on
// the new acquire's schedule: nothing between the release and the new
// acquire, and the first heartbeat between half a period and a period
// after it.
func TestReleaseAndReacquireWithinRound(t *testing.T) {
	c, clk, rec := scheduleClient(t)
	start := clk.Monotonic()
	locks := acquireN(t, c, "a", "b", "c", "d")
	drive(t, clk, c, start+2400*time.Millisecond)
	if err := locks[1].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	drive(t, clk, c, start+2550*time.Millisecond)
	acquireN(t, c, "b")
	drive(t, clk, c, start+6*time.Second)
	// checkGaps measures b's first heartbeat after the new acquire from
	// that acquire's write, and finds any heartbeat of the released lock
	// between the release and the new acquire too soon after its write.
	rec.checkGaps(t, time.Second, clk.Monotonic(), "a", "b", "c", "d")
	for _, s := range rec.heartbeats(start + 2400*time.Millisecond) {
		if s.key == "b" && s.at < 150*time.Millisecond+500*time.Millisecond {
			t.Errorf("b heartbeated at 2.4 s + %v, within half a period of its new acquire at 2.55 s", s.at)
		}
	}
}

// With an explicit TPS, sends go exactly 1/TPS apart, every lock in
// turn, and the client holds at most TPS × period locks: one lock more
// would make every lock's heartbeats late (before, a fourth lock at two
// a second and a one-second period made each lock wait two periods, and
// the rounds were counted late). The acquire past the limit is refused
// at once with TOO_MANY_LOCKS, with no write; a release makes room.
func TestExplicitTPSPacingAndLimit(t *testing.T) {
	c, clk, rec := scheduleClient(t, ddblock.WithHeartbeatTPS(2))
	start := clk.Monotonic()
	locks := acquireN(t, c, "a", "b") // 2 a second, 1 s period: room for 2
	_, err := c.AcquireLock(context.Background(), "c", ddblock.WithRetryTimeout(time.Minute))
	if !errors.Is(err, ddblock.CodeTooManyLocks) {
		t.Fatalf("a third lock at 2 heartbeats a second and a 1 s period: %v; want TOO_MANY_LOCKS", err)
	}
	if _, err := c.TryAcquireLock(context.Background(), "c"); !errors.Is(err, ddblock.CodeTooManyLocks) {
		t.Fatalf("TryAcquireLock of a third lock: %v; want TOO_MANY_LOCKS", err)
	}
	if _, err := c.GetLock(context.Background(), "c", ""); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("the refused lock's item: %v; want none written", err)
	}
	// Two locks put at once cannot both be sent on time in their first
	// period, 1/TPS apart; from the third period on, every round is.
	drive(t, clk, c, start+2*time.Second)
	lateAtFirst := c.Stats().LateRounds
	drive(t, clk, c, start+8*time.Second)
	got := rec.heartbeats(start)
	if len(got) < 12 {
		t.Fatalf("only %d heartbeats in 8 s at 2 a second: %v", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if d := got[i].at - got[i-1].at; d != 500*time.Millisecond {
			t.Errorf("sends %d and %d are %v apart; want 500ms (%v)", i-1, i, d, got)
		}
		if i >= 2 && got[i].key != got[i-2].key {
			t.Errorf("send %d is %s; want each lock in turn (%v)", i, got[i].key, got)
		}
	}
	if n := c.Stats().LateRounds - lateAtFirst; n != 0 {
		t.Errorf("%d late rounds after the first two periods, with the locks within what the TPS keeps", n)
	}
	if err := locks[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireLock(context.Background(), "c"); err != nil {
		t.Fatalf("a lock after a release made room: %v", err)
	}
}

// A session lease's one heartbeat covers every lock: an explicit TPS
// limits nothing then.
func TestExplicitTPSWithSessionHasNoLockLimit(t *testing.T) {
	c, _, _ := scheduleClient(t, ddblock.WithHeartbeatTPS(1), ddblock.WithSessionLease())
	acquireN(t, c, "a", "b", "c", "d")
	if n := len(c.HeldLocks()); n != 4 {
		t.Fatalf("%d locks held; want 4", n)
	}
}

type events struct {
	mu  sync.Mutex
	got []ddblock.Code
}

func (e *events) callback(code ddblock.Code, _ *ddblock.Lock) {
	e.mu.Lock()
	e.got = append(e.got, code)
	e.mu.Unlock()
}

func (e *events) list() []ddblock.Code {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func TestHeartbeatKeepsAttributesAndRefreshes(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	ctx := context.Background()
	lock, err := c.AcquireLock(ctx, "k", ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{
		"app": &types.AttributeValueMemberS{Value: "data"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	first := lock.RecordVersionNumber()
	drive(t, clk, c, clk.Monotonic()+12*time.Second) // two heartbeats at most
	info, err := c.GetLock(ctx, "k", "-")
	if err != nil {
		t.Fatal(err)
	}
	if info.RecordVersionNumber == first || info.RecordVersionNumber != lock.RecordVersionNumber() {
		t.Errorf("version number %q; want a new one, the lock's %q", info.RecordVersionNumber, lock.RecordVersionNumber())
	}
	if v, ok := info.AdditionalAttributes["app"].(*types.AttributeValueMemberS); !ok || v.Value != "data" {
		t.Errorf("additional attributes after heartbeats: %v", info.AdditionalAttributes)
	}
	if want := clk.Now().Add(time.Hour).Unix(); info.ExpiryTime.Unix() < want-10 || info.ExpiryTime.Unix() > want {
		t.Errorf("expiry %v; want about %v", info.ExpiryTime.Unix(), want)
	}
	if got := c.Stats().HeartbeatsSent; got < 2 {
		t.Errorf("%d heartbeats sent", got)
	}
}

func TestStolenDetected(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	var ev events
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "thief")
	drive(t, clk, c, clk.Monotonic()+6*time.Second)
	waitFor(t, "the callback", func() bool { return len(ev.list()) > 0 })
	if diff := cmp.Diff([]ddblock.Code{ddblock.CodeLockStolen}, ev.list()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	if lock.Status() != ddblock.StatusInvalid || !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
		t.Errorf("status %s, err %v", lock.Status(), lock.Err())
	}
	select {
	case <-lock.Done():
	default:
		t.Error("Done open after the lock was stolen")
	}
	if s := c.Stats(); s.HeldLocks != 0 || s.Stolen != 1 {
		t.Errorf("stats: %+v", s)
	}
	if info, _ := c.GetLock(context.Background(), "k", "-"); info.RecordVersionNumber != "thief" {
		t.Errorf("the thief's item was changed: %+v", info)
	}
}

// A process paused past its safe period (the clock jumps with nothing
// running) finds its lock in danger before it can do more work, and the
// lock recovers when the next heartbeat succeeds.
func TestDangerAfterPauseThenRecovery(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	var ev events
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the client to settle", func() bool { return clk.Timers() >= 2 })
	clk.Advance(21 * time.Second) // the pause: past the 20 s safe period
	if !errors.Is(lock.Err(), ddblock.CodeLockInDanger) {
		t.Fatalf("right after the pause Err() = %v; want LOCK_IN_DANGER", lock.Err())
	}
	select {
	case <-lock.Done():
	default:
		t.Fatal("Done open right after the pause")
	}
	// Nobody took the lock over: the next heartbeat brings it back.
	waitFor(t, "recovery", func() bool { return lock.Status() == ddblock.StatusLocked })
	waitFor(t, "the callbacks", func() bool { return len(ev.list()) == 2 })
	if diff := cmp.Diff([]ddblock.Code{ddblock.CodeLockInDanger, ddblock.CodeLockRecovered}, ev.list()); diff != "" {
		t.Errorf("callbacks (-want +got):\n%s", diff)
	}
	if s := c.Stats(); s.InDanger != 1 || s.Recovered != 1 {
		t.Errorf("stats: %+v", s)
	}
	// Done stays closed: the work that stopped does not silently resume.
	if !errors.Is(lock.Err(), ddblock.CodeLockInDanger) {
		t.Errorf("Err after recovery = %v; want the original LOCK_IN_DANGER", lock.Err())
	}
}

// The context of WithLock's function reports a lock in danger the
// instant a paused process wakes, before the monitor has run.
func TestWithLockContextAfterPause(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	err := c.WithLock(context.Background(), "k", func(ctx context.Context, lock *ddblock.Lock) error {
		if ctx.Err() != nil {
			t.Fatalf("cancelled at once: %v", context.Cause(ctx))
		}
		clk.Advance(21 * time.Second) // paused past the 20 s safe period
		if ctx.Err() == nil {
			t.Error("ctx.Err() is nil right after the pause")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, ddblock.CodeLockInDanger) {
			t.Errorf("cause = %v; want LOCK_IN_DANGER", cause)
		}
		return nil
	})
	if !errors.Is(err, ddblock.CodeLockInDanger) {
		t.Errorf("WithLock = %v; want LOCK_IN_DANGER", err)
	}
}
