package compat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// TestLockSetSeenByPython: every item of a set that AcquireLocks wrote is
// an ordinary python_dynamodb_lock item. A Python peer waits for each
// key while the set holds it (with both custom and default names), and
// takes it once the set is released; a Python holder of one key keeps
// the whole set away, none of its other keys written meanwhile.
func TestLockSetSeenByPython(t *testing.T) {
	ddb := server(t)
	for _, cfg := range []struct {
		name  string
		names func(*testing.T) names
	}{
		{"default names", defaultNames},
		{"custom names", customNames},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			n := cfg.names(t)
			createTable(t, ddb, n)
			ctx := context.Background()
			// A lease longer than Python's wait, and a Go wait shorter
			// than Python's lease: each side's wait ends before it could
			// take the other's lock over, however late the heartbeats of
			// a busy machine are, so each must time out.
			goc := newGoClient(t, ddb, n, ddblock.WithLeaseDuration(5*time.Second), ddblock.WithHeartbeatPeriod(500*time.Millisecond))
			keys := []string{"warehouse-1", "warehouse-2", "ledger"}
			if !ddbtest.Shared(t).HasTransactions() {
				if _, err := goc.AcquireLocks(ctx, keys); !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
					t.Fatalf("AcquireLocks on a server without transactions: %v; want TRANSACTIONS_UNSUPPORTED", err)
				}
				return
			}
			py := newPyClient(ddb, pyTiming(n))
			t.Cleanup(func() { py.close(false) })

			set, err := goc.AcquireLocks(ctx, keys)
			if err != nil {
				t.Fatalf("AcquireLocks: %v", err)
			}
			// The set's items read as Python's, and Python waits for each
			// key (a second, against the set's 5 s lease).
			for i, k := range keys {
				item := rawItem(t, ddb, n, k, "-")
				pl, err := pyLockFromItem(n, item)
				if err != nil {
					t.Fatalf("Python cannot read the set's item %s: %v", k, err)
				}
				if pl.OwnerName != goc.Options().OwnerName || pl.RecordVersionNumber == "" || pl.LeaseDuration != goc.Options().LeaseDuration.Seconds() {
					t.Errorf("Python reads %s as %+v", k, pl)
				}
				_, err = py.acquireLock(ctx, k, pyAcquireOptions{RetryPeriod: 50 * time.Millisecond, RetryTimeout: time.Second})
				var pe *pyLockError
				if !errors.As(err, &pe) || pe.Code != "ACQUIRE_TIMEOUT" {
					t.Fatalf("Python's acquire of %s while the set holds it: %v; want ACQUIRE_TIMEOUT", k, err)
				}
				if st := set.Locks()[i].Status(); st != ddblock.StatusLocked {
					t.Fatalf("the set's lock on %s is %s while Python waited", k, st)
				}
			}
			if err := set.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				t.Fatal(err)
			}

			// Python holds one key: the set waits, writes none of the
			// others, and gets them all once Python lets go.
			pl, err := py.acquireLock(ctx, keys[1], pyAcquireOptions{})
			if err != nil {
				t.Fatalf("Python's acquire of a free key: %v", err)
			}
			_, err = goc.AcquireLocks(ctx, keys, ddblock.WithRetryPeriod(20*time.Millisecond), ddblock.WithRetryTimeout(pyTiming(n).LeaseDuration/2))
			if !errors.Is(err, ddblock.CodeAcquireTimeout) {
				t.Fatalf("AcquireLocks while Python holds %s: %v; want ACQUIRE_TIMEOUT", keys[1], err)
			}
			for _, k := range []string{keys[0], keys[2]} {
				if item := rawItem(t, ddb, n, k, "-"); item != nil {
					t.Fatalf("the set wrote %s while Python held %s: %v", k, keys[1], item)
				}
			}
			if pl.Status() != "LOCKED" {
				t.Fatalf("Python's lock is %s after the set's wait", pl.Status())
			}
			if err := py.releaseLock(ctx, pl, false); err != nil {
				t.Fatal(err)
			}
			set, err = goc.AcquireLocks(ctx, keys, ddblock.WithRetryTimeout(0))
			if err != nil {
				t.Fatalf("AcquireLocks after Python's release: %v", err)
			}
			if err := set.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
