package ddblock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ddblock/ddblock"
)

// Every context of Lock.Context ends with the lock, however many there
// are: two calls once shared one entry, and the first context outlived
// the lock.
func TestLockContextsEndTogether(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lock, err := e.client().AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	first, stop1 := lock.Context(ctx)
	defer stop1()
	second, stop2 := lock.Context(ctx)
	defer stop2()
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range []context.Context{first, second} {
		select {
		case <-c.Done():
			if !errors.Is(context.Cause(c), ddblock.CodeLockReleased) {
				t.Errorf("context %d: cause %v, want LOCK_RELEASED", i+1, context.Cause(c))
			}
		default:
			t.Errorf("context %d still open after the release", i+1)
		}
	}
}
