package ddblock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ddblock/ddblock"
)

// A lock released with a context made from it (WithLock's function's, or
// Lock.Context's) is really given back: marking it released ends that
// context, and that end must not cancel the release's own call, which
// would leave the item to wait out its lease.
func TestReleaseWithTheLocksOwnContext(t *testing.T) {
	ctx := context.Background()
	t.Run("WithLock's context", func(t *testing.T) {
		e := newEnv(t)
		c := e.client()
		err := c.WithLock(ctx, "k", func(ctx context.Context, lock *ddblock.Lock) error {
			if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				return err
			}
			if !errors.Is(context.Cause(ctx), ddblock.CodeLockReleased) {
				t.Errorf("the function's context after the release: %v; want ended by LOCK_RELEASED", context.Cause(ctx))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("WithLock: %v", err)
		}
		if item := rawItem(t, e, "k", "-"); item != nil {
			t.Fatalf("the item is still there: %v", item)
		}
	})
	t.Run("Lock.Context", func(t *testing.T) {
		e := newEnv(t)
		c := e.client()
		lock := acquireN(t, c, "k")[0]
		lctx, cancel := lock.Context(ctx)
		defer cancel()
		if err := lock.Release(lctx, ddblock.WithBestEffort(false)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if item := rawItem(t, e, "k", "-"); item != nil {
			t.Fatalf("the item is still there: %v", item)
		}
	})
	t.Run("a context cancelled for another reason still cancels", func(t *testing.T) {
		e := newEnv(t)
		c := e.client()
		lock := acquireN(t, c, "k")[0]
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := lock.Release(cctx, ddblock.WithBestEffort(false))
		if !errors.Is(err, ddblock.CodeCanceled) {
			t.Fatalf("Release with a cancelled context: %v; want CANCELED", err)
		}
	})
}
