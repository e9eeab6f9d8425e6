package ddblock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ddblock/ddblock"
)

// A nil context is refused with INVALID_ARGUMENT by every exported call
// that takes one, before anything changes: never a panic, never a lock
// marked released or a client shut down on the way.
func TestNilContextRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context // a nil interface, as a new user passes it
	listErr := func(seq func(func(*ddblock.LockInfo, error) bool)) error {
		var got error
		n := 0
		for _, err := range seq {
			got = err
			n++
		}
		if n != 1 {
			t.Errorf("listing yielded %d times; want once", n)
		}
		return got
	}
	calls := map[string]func() error{
		"AcquireLock": func() error { _, err := c.AcquireLock(nilCtx, "other"); return err },
		"TryAcquireLock": func() error {
			_, err := c.TryAcquireLock(nilCtx, "other")
			return err
		},
		"ReleaseLock":          func() error { return c.ReleaseLock(nilCtx, lock) },
		"ReleaseLock not best": func() error { return c.ReleaseLock(nilCtx, lock, ddblock.WithBestEffort(false)) },
		"Lock.Release":         func() error { return lock.Release(nilCtx) },
		"WithLock": func() error {
			return c.WithLock(nilCtx, "other", func(context.Context, *ddblock.Lock) error { return nil })
		},
		"Close":                   func() error { return c.Close(nilCtx, true) },
		"GetLock":                 func() error { _, err := c.GetLock(nilCtx, "k", ""); return err },
		"ListLocks":               func() error { return listErr(c.ListLocks(nilCtx)) },
		"ListLocksByPartitionKey": func() error { return listErr(c.ListLocksByPartitionKey(nilCtx, "k")) },
		"ForceRelease":            func() error { return c.ForceRelease(nilCtx, "k", "", lock.RecordVersionNumber()) },
		"CreateTable":             func() error { return ddblock.CreateTable(nilCtx, e.ddb) },
		"EnsureTable":             func() error { _, err := ddblock.EnsureTable(nilCtx, e.ddb); return err },
		"Lock.Context": func() error {
			lctx, cancel := lock.Context(nilCtx)
			defer cancel()
			if lctx.Err() == nil {
				return errors.New("the context is not cancelled")
			}
			return context.Cause(lctx)
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				err = call()
			}()
			var lerr *ddblock.Error
			if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeInvalidArgument || lerr.Setting != "Context" {
				t.Fatalf("err = %v; want INVALID_ARGUMENT for Context", err)
			}
		})
	}
	// Nothing changed: the lock is held and heartbeated, its item is
	// there, and the client still works.
	if lock.Status() != ddblock.StatusLocked || lock.Err() != nil {
		t.Fatalf("the lock changed: %s, %v", lock.Status(), lock.Err())
	}
	if info, err := c.GetLock(ctx, "k", ""); err != nil || info.RecordVersionNumber == "" {
		t.Fatalf("the item: %+v, %v", info, err)
	}
	if len(c.HeldLocks()) != 1 {
		t.Fatalf("HeldLocks: %v", c.HeldLocks())
	}
	other, err := c.AcquireLock(ctx, "other")
	if err != nil {
		t.Fatalf("the client was shut down: %v", err)
	}
	if err := other.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
}
