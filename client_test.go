package ddblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

func TestAcquireReleaseUncontended(t *testing.T) {
	e := newEnv(t)
	calls := newCounting(e.ddb)
	c := e.client(ddblock.WithOwnerName("reader"))
	holder := e.clientOn(calls, ddblock.WithOwnerName("owner-1"))
	ctx := context.Background()

	lock, err := holder.AcquireLock(ctx, "job")
	if err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	if diff := cmp.Diff(map[string]int{"PutItem": 1}, calls.snapshot()); diff != "" {
		t.Errorf("calls for an uncontended acquire (-want +got):\n%s", diff)
	}
	if got := lock.Status(); got != ddblock.StatusLocked {
		t.Errorf("Status = %s, want LOCKED", got)
	}
	if lock.PartitionKey() != "job" || lock.SortKey() != "-" || lock.OwnerName() != "owner-1" {
		t.Errorf("lock = %q/%q by %q", lock.PartitionKey(), lock.SortKey(), lock.OwnerName())
	}
	if lock.ID() != "job|-" {
		t.Errorf("ID = %q", lock.ID())
	}
	info, err := c.GetLock(ctx, "job", "-")
	if err != nil {
		t.Fatalf("GetLock: %v", err)
	}
	if info.OwnerName != "owner-1" || info.RecordVersionNumber != lock.RecordVersionNumber() || info.LeaseDuration != 30*time.Second {
		t.Errorf("stored lock = %+v", info)
	}
	calls.reset()
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if diff := cmp.Diff(map[string]int{"DeleteItem": 1}, calls.snapshot()); diff != "" {
		t.Errorf("calls for a release (-want +got):\n%s", diff)
	}
	if lock.Status() != ddblock.StatusReleased {
		t.Errorf("Status after release = %s", lock.Status())
	}
	select {
	case <-lock.Done():
	default:
		t.Error("Done not closed after release")
	}
	if !errors.Is(lock.Err(), ddblock.CodeLockReleased) {
		t.Errorf("Err after release = %v", lock.Err())
	}
	if _, err := c.GetLock(ctx, "job", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("GetLock after release: %v, want LOCK_NOT_FOUND", err)
	}
}
