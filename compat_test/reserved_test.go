package compat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

// Python reserves only its six attribute names; every other name in a
// Python item is the application's. These tests pin both sides of that
// line.

// TestPythonAttributesAreNotLockState: a Python service may store
// additional attributes under any name but Python's six (and, by
// ddblock's rule, none starting with "ddblock_"). To the Go client they
// are the application's data: GetLock returns them as written, and a Go
// waiter still waits the whole lease before taking over. Names a lock
// library might want for itself are among them: had ddblock read a
// Python item's "released": true as "nobody holds this", it would take a
// live Python holder's lock at once.
func TestPythonAttributesAreNotLockState(t *testing.T) {
	for _, tc := range []struct {
		name string
		attr types.AttributeValue
	}{
		{"released", &types.AttributeValueMemberBOOL{Value: true}},
		{"fencing_token", &types.AttributeValueMemberS{Value: "batch-2024-11-22"}},
		{"heartbeat_time_ms", &types.AttributeValueMemberN{Value: "1"}},
		{"data", &types.AttributeValueMemberB{Value: []byte("the Java client's data field")}},
		{"owner", &types.AttributeValueMemberS{Value: "team-payments"}},
		{"lease", &types.AttributeValueMemberN{Value: "1"}},
		{"status", &types.AttributeValueMemberS{Value: "RELEASED"}},
		{"expires_at", &types.AttributeValueMemberN{Value: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkPythonAttributeIsData(t, tc.name, tc.attr) })
	}
}

// checkPythonAttributeIsData stores a live Python holder's item with one
// more additional attribute, and checks that the Go client reads it as
// data and times the holder's lease as usual.
func checkPythonAttributeIsData(t *testing.T, name string, attr types.AttributeValue) {
	t.Helper()
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	item := loadFixture(t, "python_default")
	item[name] = attr
	putRaw(t, ddb, n, item)

	info, err := newGoClient(t, ddb, n).GetLock(context.Background(), "orders/42", "-")
	if err != nil {
		t.Errorf("GetLock of a Python item with the additional attribute %q: %v", name, err)
	} else if diff := cmp.Diff(map[string]types.AttributeValue{name: attr}, info.AdditionalAttributes, attrOpts); diff != "" {
		t.Errorf("additional attributes (-Python wrote +Go read):\n%s", diff)
	}

	const lease = 30 * time.Second
	w := startWaiter(t, newStepClock(), &tapDDB{DynamoDBAPI: ddb}, n, "orders/42", "-", lease/5, 3*lease)
	rvn := item["record_version_number"].(*types.AttributeValueMemberS).Value
	stillPython := func() {
		t.Helper()
		if v := rawItem(t, ddb, n, "orders/42", "-")["record_version_number"].(*types.AttributeValueMemberS).Value; v != rvn {
			t.Fatalf("at %v the Python holder's item was replaced", w.elapsed())
		}
	}
	if took := w.stepUntilAcquired(stillPython, 10); took != 5 {
		t.Errorf("took the Python holder's lock at retry %d (%v); want 5, one lease (%v) after seeing it", took, w.elapsed(), lease)
	}
}

// TestGoRefusesPythonReservedNames: Python lets additional attributes
// named like the lock's own attributes be silently replaced by the lock's
// values; the Go client refuses them up front, with a typed error. It
// also refuses its own opt-in attributes' names.
func TestGoRefusesPythonReservedNames(t *testing.T) {
	ddb := server(t)
	n := customNames(t)
	createTable(t, ddb, n)
	c := newGoClient(t, ddb, n)
	for _, name := range []string{n.PK, n.SK, n.TTL, "owner_name", "lease_duration", "record_version_number",
		"ddblock_fencing_token", "ddblock_released", "ddblock_heartbeat_ms"} {
		attrs := map[string]types.AttributeValue{name: &types.AttributeValueMemberS{Value: "x"}}
		lock, err := c.AcquireLock(context.Background(), "reserved", ddblock.WithAdditionalAttributes(attrs))
		if !errors.Is(err, ddblock.CodeInvalidArgument) {
			t.Errorf("additional attribute %q: AcquireLock = %v, %v; want INVALID_ARGUMENT", name, lock, err)
		}
		if lock != nil {
			_ = lock.Release(context.Background())
		}
	}
	if item := rawItem(t, ddb, n, "reserved", "-"); item != nil {
		t.Errorf("a refused acquire wrote an item: %v", item)
	}
}
