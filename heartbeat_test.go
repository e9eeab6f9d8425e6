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

// sendLog records, on the fake clock, when each heartbeat was sent.
type sendLog struct {
	ddblock.DynamoDBAPI
	clk   *clock.Fake
	mu    sync.Mutex
	sends []send
}

type send struct {
	key string
	at  time.Duration
}

func (s *sendLog) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	s.mu.Lock()
	s.sends = append(s.sends, send{in.Key["lock_key"].(*types.AttributeValueMemberS).Value, s.clk.Monotonic()})
	s.mu.Unlock()
	return s.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (s *sendLog) log() []send {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sends)
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
			clk.Advance(until - clk.Monotonic())
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

// In adaptive mode each of N locks gets one heartbeat a period, period/N
// apart.
func TestAdaptiveSpacing(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	rec := &sendLog{DynamoDBAPI: e.ddb, clk: clk}
	c := e.clientOn(rec, ddblock.WithClock(clk), ddblock.WithHeartbeatPeriod(time.Second),
		ddblock.WithSafePeriod(4*time.Second), ddblock.WithLeaseDuration(6*time.Second))
	start := clk.Monotonic()
	acquireN(t, c, "a", "b", "c", "d")
	drive(t, clk, c, start+4*time.Second)

	// The first round may have started with fewer locks; from the second
	// on (after start+1s) the schedule is exact: every 250 ms a send, and
	// each lock once in every second.
	var got []send
	for _, s := range rec.log() {
		if s.at > start+time.Second {
			got = append(got, send{s.key, s.at - start})
		}
	}
	if len(got) != 12 {
		t.Fatalf("%d heartbeats in three rounds of four locks: %v", len(got), got)
	}
	for i, s := range got {
		if want := time.Second + time.Duration(i+1)*250*time.Millisecond; s.at != want {
			t.Errorf("send %d (%s) at %v; want %v", i, s.key, s.at, want)
		}
	}
	for round := range 3 {
		keys := map[string]bool{}
		for _, s := range got[4*round : 4*round+4] {
			keys[s.key] = true
		}
		if len(keys) != 4 {
			t.Errorf("round %d heartbeated %v; want each lock once", round+2, got[4*round:4*round+4])
		}
	}
	if s := c.Stats(); s.LateRounds != 0 || s.HeartbeatsFailed != 0 {
		t.Errorf("stats: %+v", s)
	}
}

// A lock acquired while a round is under way is heartbeated early in the
// next round, not after every older lock: the lock whose last successful
// write is oldest goes first.
func TestNewLockHeartbeatedFirstInNextRound(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	rec := &sendLog{DynamoDBAPI: e.ddb, clk: clk}
	c := e.clientOn(rec, ddblock.WithClock(clk), ddblock.WithHeartbeatPeriod(time.Second),
		ddblock.WithSafePeriod(4*time.Second), ddblock.WithLeaseDuration(6*time.Second))
	start := clk.Monotonic()
	acquireN(t, c, "a", "b", "c")
	drive(t, clk, c, start+1500*time.Millisecond) // mid-round
	acquireN(t, c, "late")
	drive(t, clk, c, start+3*time.Second)
	// Acquired at 1.5 s, it goes ahead of the locks heartbeated after
	// that in the round it missed: no later than 2.75 s (taken in
	// acquisition order, it would wait until the end of the round, 3 s).
	first := time.Duration(-1)
	for _, s := range rec.log() {
		if s.key == "late" {
			first = s.at - start
			break
		}
	}
	if first < 0 || first > 2750*time.Millisecond {
		t.Errorf("the lock acquired at 1.5 s was first heartbeated at %v; want by 2.75 s (log %v)", first, rec.log())
	}
}

// With an explicit TPS, sends are 1/TPS apart, and a round still starts
// once a period.
func TestExplicitTPSPacing(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	rec := &sendLog{DynamoDBAPI: e.ddb, clk: clk}
	c := e.clientOn(rec, ddblock.WithClock(clk), ddblock.WithHeartbeatTPS(4), ddblock.WithHeartbeatPeriod(5*time.Second))
	start := clk.Monotonic()
	acquireN(t, c, "a", "b", "c")
	drive(t, clk, c, start+15*time.Second)
	var got []send
	for _, s := range rec.log() {
		if s.at >= start+5*time.Second {
			got = append(got, send{s.key, s.at - start})
		}
	}
	want := []send{
		{"a", 5 * time.Second}, {"b", 5250 * time.Millisecond}, {"c", 5500 * time.Millisecond},
		{"a", 10 * time.Second}, {"b", 10250 * time.Millisecond}, {"c", 10500 * time.Millisecond},
		{"a", 15 * time.Second}, {"b", 15250 * time.Millisecond}, {"c", 15500 * time.Millisecond},
	}
	want = want[:len(got)] // the last round may be cut by the end of the drive
	if len(got) < 6 {
		t.Fatalf("only %d heartbeats after the first round: %v", len(got), got)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(send{})); diff != "" {
		t.Errorf("heartbeat schedule (-want +got):\n%s", diff)
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
	if lock.Status() != ddblock.StatusInvalid || !errors.Is(lock.Err(), ddblock.ErrLockStolen) {
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
	if !errors.Is(lock.Err(), ddblock.ErrLockInDanger) {
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
	if !errors.Is(lock.Err(), ddblock.ErrLockInDanger) {
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
		if cause := context.Cause(ctx); !errors.Is(cause, ddblock.ErrLockInDanger) {
			t.Errorf("cause = %v; want LOCK_IN_DANGER", cause)
		}
		return nil
	})
	if !errors.Is(err, ddblock.ErrLockInDanger) {
		t.Errorf("WithLock = %v; want LOCK_IN_DANGER", err)
	}
}
