package compat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
)

// Operating a shared table: what an operator's Go tools do to Python
// holders, and what a configuration mismatch does.

// TestForceReleaseOfPythonLock: an operator removes a stuck lock held by
// a Python client with Client.ForceRelease (ddblock release on the
// command line). The removal is guarded by the version number the
// operator read, and the live Python holder learns of it at its next
// heartbeat, as LOCK_STOLEN, and stops.
func TestForceReleaseOfPythonLock(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	py := newPyClient(ddb, pyTiming(n))
	t.Cleanup(func() { py.close(false) })
	events := make(chan string, 4)
	l, err := py.acquireLock(ctx, "stuck-job", pyAcquireOptions{AppCallback: func(code string, _ *pyLock) { events <- code }})
	if err != nil {
		t.Fatalf("Python acquire: %v", err)
	}
	op := newGoClient(t, ddb, n)

	// A version number read a heartbeat ago is refused.
	if err := op.ForceRelease(ctx, "stuck-job", "-", uuid4()); !errors.Is(err, ddblock.CodeLockStolen) {
		t.Fatalf("ForceRelease with a stale version number = %v, want LOCK_STOLEN (nothing removed)", err)
	}
	// With the current one it goes through; the holder heartbeats every
	// 50 ms, so the operator may have to read again.
	removed := false
	for range 100 {
		info, err := op.GetLock(ctx, "stuck-job", "-")
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		if info.OwnerName != py.owner {
			t.Fatalf("GetLock owner = %q, want the Python holder %q", info.OwnerName, py.owner)
		}
		err = op.ForceRelease(ctx, "stuck-job", "-", info.RecordVersionNumber)
		if err == nil {
			removed = true
			break
		}
		if !errors.Is(err, ddblock.CodeLockStolen) {
			t.Fatalf("ForceRelease: %v", err)
		}
	}
	if !removed {
		t.Fatal("ForceRelease never caught the Python holder between two heartbeats")
	}
	select {
	case code := <-events:
		if code != pyLockStolen {
			t.Errorf("Python callback = %s, want %s", code, pyLockStolen)
		}
	case <-time.After(waitLimit):
		t.Fatal("the Python holder was never told")
	}
	if s := l.Status(); s != pyInvalid {
		t.Errorf("Python lock status = %s, want %s", s, pyInvalid)
	}
	if _, err := op.GetLock(ctx, "stuck-job", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("GetLock after the removal: %v, want LOCK_NOT_FOUND", err)
	}
}

// TestTTLNameMustMatch: the TTL attribute's name is not part of the
// table's key, so nothing stops a Go client configured with another name
// from writing; but Python requires its own TTL attribute in every item
// it reads, and cannot read the Go client's.
func TestTTLNameMustMatch(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	wrong := n
	wrong.TTL = "purge_at"
	if _, err := newGoClient(t, ddb, wrong).AcquireLock(ctx, "misconfigured"); err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	py := newPyClient(ddb, pyDefaults(n))
	t.Cleanup(func() { py.close(false) })
	if l, err := py.getLockFromDynamoDB(ctx, "misconfigured", "-"); err == nil {
		t.Errorf("Python read a lock item without its TTL attribute: %+v", l)
	}
	_, err := py.acquireLock(ctx, "misconfigured", pyAcquireOptions{RetryTimeout: time.Millisecond})
	var perr *pyLockError
	if !errors.As(err, &perr) || perr.Code != pyUnknown {
		t.Errorf("Python acquire of the Go lock = %v, want UNKNOWN (the KeyError)", err)
	}
}
