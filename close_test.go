package ddblock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
)

func TestCloseKeepsLocksByDefault(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, false); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.client().GetLock(ctx, "k", "-"); err != nil {
		t.Fatalf("Close released the lock: %v", err)
	}
	select {
	case <-lock.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if !errors.Is(lock.Err(), ddblock.CodeClientShutdown) {
		t.Errorf("Err = %v; want CLIENT_SHUTDOWN", lock.Err())
	}
	if lock.Status() != ddblock.StatusLocked {
		t.Errorf("Status = %s; a kept lock is still held", lock.Status())
	}
	if held := c.HeldLocks(); len(held) != 1 || held[0] != lock {
		t.Errorf("HeldLocks = %v; want the kept lock", held)
	}
	if _, err := c.AcquireLock(ctx, "other"); !errors.Is(err, ddblock.CodeClientShutdown) {
		t.Errorf("acquire after Close: %v; want CLIENT_SHUTDOWN", err)
	}
}

// A lock kept by Close(ctx, false) is still held in the table: Status,
// Err, its Release's answer and the table agree, whichever way it ends.
func TestLockKeptByClose(t *testing.T) {
	type outcome struct {
		releaseErr ddblock.Code // "" for nil
		status     ddblock.Status
		err        ddblock.Code
		itemRVN    string // "" when the item is gone; "ours" for the lock's own
	}
	for _, tc := range []struct {
		name  string
		stole bool // another client took the key after the Close
		end   func(ctx context.Context, c *ddblock.Client, l *ddblock.Lock) error
		want  outcome
	}{
		{"Release", false, func(ctx context.Context, _ *ddblock.Client, l *ddblock.Lock) error { return l.Release(ctx) },
			outcome{"", ddblock.StatusReleased, ddblock.CodeLockReleased, ""}},
		{"Release not best effort", false, func(ctx context.Context, _ *ddblock.Client, l *ddblock.Lock) error {
			return l.Release(ctx, ddblock.WithBestEffort(false))
		}, outcome{"", ddblock.StatusReleased, ddblock.CodeLockReleased, ""}},
		{"Close releasing", false, func(ctx context.Context, c *ddblock.Client, _ *ddblock.Lock) error { return c.Close(ctx, true) },
			outcome{"", ddblock.StatusReleased, ddblock.CodeLockReleased, ""}},
		{"Close keeping again", false, func(ctx context.Context, c *ddblock.Client, _ *ddblock.Lock) error { return c.Close(ctx, false) },
			outcome{"", ddblock.StatusLocked, ddblock.CodeClientShutdown, "ours"}},
		{"stolen, Release", true, func(ctx context.Context, _ *ddblock.Client, l *ddblock.Lock) error { return l.Release(ctx) },
			outcome{"", ddblock.StatusInvalid, ddblock.CodeLockStolen, "thief"}},
		{"stolen, Release not best effort", true, func(ctx context.Context, _ *ddblock.Client, l *ddblock.Lock) error {
			return l.Release(ctx, ddblock.WithBestEffort(false))
		}, outcome{ddblock.CodeLockStolen, ddblock.StatusInvalid, ddblock.CodeLockStolen, "thief"}},
		{"stolen, Close releasing", true, func(ctx context.Context, c *ddblock.Client, _ *ddblock.Lock) error { return c.Close(ctx, true) },
			outcome{"", ddblock.StatusInvalid, ddblock.CodeLockStolen, "thief"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			c := e.client()
			lock, err := c.AcquireLock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			ours := lock.RecordVersionNumber()
			if err := c.Close(ctx, false); err != nil {
				t.Fatal(err)
			}
			if tc.stole {
				setRVN(t, e, "k", "-", ours, "thief")
			}
			err = tc.end(ctx, c, lock)
			if got := ddblock.CodeOf(err); got != tc.want.releaseErr || (err == nil) != (tc.want.releaseErr == "") {
				t.Errorf("answer = %v; want code %q", err, tc.want.releaseErr)
			}
			if got := lock.Status(); got != tc.want.status {
				t.Errorf("Status = %s; want %s", got, tc.want.status)
			}
			if got := ddblock.CodeOf(lock.Err()); got != tc.want.err {
				t.Errorf("Err = %v; want %s", lock.Err(), tc.want.err)
			}
			info, err := e.client().GetLock(ctx, "k", "-")
			switch want := tc.want.itemRVN; {
			case want == "" && !errors.Is(err, ddblock.CodeLockNotFound):
				t.Errorf("the item is still there: %+v, %v", info, err)
			case want == "ours" && (err != nil || info.RecordVersionNumber != ours):
				t.Errorf("the kept lock's item: %+v, %v", info, err)
			case want == "thief" && (err != nil || info.RecordVersionNumber != "thief"):
				t.Errorf("the thief's item was touched: %+v, %v", info, err)
			}
			wantHeld := 0
			if tc.want.status == ddblock.StatusLocked {
				wantHeld = 1
			}
			if n := len(c.HeldLocks()); n != wantHeld {
				t.Errorf("HeldLocks: %d; want %d", n, wantHeld)
			}
		})
	}
}

// A kept lock is not heartbeated: its Status turns IN_DANGER by the
// clock once the safe period has passed, while Err keeps saying why work
// stopped, and its Release still deletes the item nobody took.
func TestLockKeptByCloseDriftsIntoDanger(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	clk.Advance(c.Options().SafePeriod - time.Millisecond)
	if lock.Status() != ddblock.StatusLocked {
		t.Fatalf("within the safe period: %s", lock.Status())
	}
	clk.Advance(2 * time.Millisecond)
	if lock.Status() != ddblock.StatusInDanger {
		t.Fatalf("past the safe period: %s; want IN_DANGER", lock.Status())
	}
	if !errors.Is(lock.Err(), ddblock.CodeClientShutdown) {
		t.Fatalf("Err = %v; want CLIENT_SHUTDOWN", lock.Err())
	}
	if s := c.Stats(); s.HeartbeatsSent != 0 {
		t.Errorf("a closed client heartbeated: %+v", s)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if _, err := e.client().GetLock(ctx, "k", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("item after Release: %v", err)
	}
	if lock.Status() != ddblock.StatusReleased || !errors.Is(lock.Err(), ddblock.CodeLockReleased) {
		t.Fatalf("after Release: %s, %v", lock.Status(), lock.Err())
	}
}

func TestCloseReleasingLocks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.AcquireLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	for info, err := range e.client().ListLocks(ctx) {
		t.Errorf("left after Close(release): %+v %v", info, err)
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.client().AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	got := make(chan error, 1)
	go func() {
		_, err := c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Hour), ddblock.WithRetryTimeout(10*time.Hour))
		got <- err
	}()
	waitForSleepers(t, clk, 2) // the monitor, and the acquire in its hour-long wait
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ddblock.CodeClientShutdown) {
			t.Fatalf("err = %v; want CLIENT_SHUTDOWN", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting acquire outlived Close")
	}
}

// ddblockGoroutines counts the goroutines running the library's code.
func ddblockGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/ddblock/ddblock.(*") && !strings.Contains(g, "_test.") {
			n++
		}
	}
	return n
}

func TestGoroutinesBoundedAndStopped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := ddblockGoroutines()
	c, err := ddblock.New(e.ddb, append(e.names, ddblock.WithLogger(quiet), ddblock.WithCallbackWorkers(3),
		ddblock.WithHeartbeatPeriod(20*time.Millisecond), ddblock.WithLeaseDuration(30*time.Second), ddblock.WithHeartbeatConcurrency(4))...)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(ddblock.Code, *ddblock.Lock) {}
	for i := range 100 {
		if _, err := c.AcquireLock(ctx, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), ddblock.WithCallback(noop)); err != nil {
			t.Fatal(err)
		}
	}
	// heartbeater + monitor + 3 workers + at most 4 sends, whatever the
	// number of locks.
	for range 20 {
		if n := ddblockGoroutines() - before; n > 2+3+4 {
			t.Fatalf("%d goroutines for 100 locks; want at most 9", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := ddblockGoroutines() - before; n != 0 {
		t.Fatalf("%d goroutines left after Close", n)
	}
}
