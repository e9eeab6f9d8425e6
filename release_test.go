package ddblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
)

func TestReleaseOfStolenLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "someone-else")
	err = lock.Release(ctx, ddblock.WithBestEffort(false))
	if !errors.Is(err, ddblock.CodeLockStolen) {
		t.Fatalf("err = %v; want LOCK_STOLEN", err)
	}
	// The other holder's item is untouched.
	info, err := c.GetLock(ctx, "k", "-")
	if err != nil || info.RecordVersionNumber != "someone-else" {
		t.Fatalf("item after failed release: %+v, %v", info, err)
	}
	// Found stolen: the lock was taken, not given back.
	if lock.Status() != ddblock.StatusInvalid || !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
		t.Errorf("status %s, Err %v; want INVALID, LOCK_STOLEN", lock.Status(), lock.Err())
	}
}

func TestReleaseBestEffortSwallows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "someone-else")
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("best-effort release returned %v", err)
	}
	// Best effort is quiet, but the lock says what happened.
	if lock.Status() != ddblock.StatusInvalid || !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
		t.Errorf("status %s, Err %v; want INVALID, LOCK_STOLEN", lock.Status(), lock.Err())
	}
	// A second release changes nothing; best effort, it is quiet.
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("second release: %v", err)
	}
	// Not best effort, it says the lock is known stolen.
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Fatalf("second release: %v; want LOCK_STOLEN", err)
	}
	info, err := c.GetLock(ctx, "k", "-")
	if err != nil || info.RecordVersionNumber != "someone-else" {
		t.Fatalf("the other holder's item: %+v, %v", info, err)
	}
}

// A released lock stays released: another release is a no-op, whatever
// the options.
func TestReleaseTwice(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lock, err := e.client().AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	if lock.Status() != ddblock.StatusReleased || !errors.Is(lock.Err(), ddblock.CodeLockReleased) {
		t.Fatalf("status %s, Err %v", lock.Status(), lock.Err())
	}
}

func TestReleaseNotOwned(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, b := e.client(), e.client()
	lock, err := a.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLock(ctx, lock, ddblock.WithBestEffort(false)); !errors.Is(err, ddblock.CodeLockNotOwned) {
		t.Fatalf("release through another client: %v; want LOCK_NOT_OWNED", err)
	}
	if err := b.ReleaseLock(ctx, lock); err != nil {
		t.Fatalf("best effort: %v", err)
	}
	if lock.Status() != ddblock.StatusLocked {
		t.Fatalf("status = %s; another client's release must not touch the lock", lock.Status())
	}
	if err := b.ReleaseLock(ctx, nil, ddblock.WithBestEffort(false)); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Fatalf("nil lock: %v", err)
	}
	if _, err := a.GetLock(ctx, "k", "-"); err != nil {
		t.Fatalf("the item is gone: %v", err)
	}
}

func TestForceRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder, operator := e.client(), e.client()
	lock, err := holder.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.ForceRelease(ctx, "k", "-", "stale-version"); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Fatalf("with a stale version: %v; want LOCK_STOLEN and no delete", err)
	}
	if err := operator.ForceRelease(ctx, "k", "-", ""); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Fatalf("without a version: %v", err)
	}
	if err := operator.ForceRelease(ctx, "k", "", lock.RecordVersionNumber()); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	if err := operator.ForceRelease(ctx, "k", "", lock.RecordVersionNumber()); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("again: %v; want LOCK_NOT_FOUND", err)
	}
}

func TestWithLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	boom := errors.New("boom")
	err := c.WithLock(ctx, "k", func(ctx context.Context, lock *ddblock.Lock) error {
		if lock.Status() != ddblock.StatusLocked {
			t.Errorf("inside: status %s", lock.Status())
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithLock returned %v; want the function's error", err)
	}
	if _, err := c.GetLock(ctx, "k", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("lock not released after WithLock: %v", err)
	}
	if err := c.WithLock(ctx, "k", nil); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Fatalf("nil fn: %v", err)
	}
	// A panic in fn still releases the lock, and the panic goes on.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_ = c.WithLock(ctx, "k", func(context.Context, *ddblock.Lock) error { panic("fn") })
	}()
	if _, err := c.GetLock(ctx, "k", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("lock not released after a panic: %v", err)
	}
}

// fn's context is cancelled the moment the lock is stolen, with the lock
// error as its cause.
func TestWithLockCancelledWhenStolen(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(append(fakeTimes(), ddblock.WithClock(clk))...)
	err := c.WithLock(context.Background(), "k", func(ctx context.Context, lock *ddblock.Lock) error {
		setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "thief")
		// The next heartbeat finds the thief's version, well within the
		// safe period: the loss is a theft, not a danger.
		driveUntil(t, clk, c, ctx.Done(), time.Minute)
		if cause := context.Cause(ctx); !errors.Is(cause, ddblock.CodeLockStolen) {
			return errors.New("cause: " + cause.Error())
		}
		return nil // fn ignores the loss: WithLock must not
	})
	if !errors.Is(err, ddblock.CodeLockStolen) {
		t.Fatalf("WithLock: %v; want LOCK_STOLEN since the work was not exclusive", err)
	}
}
