package compat_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

// ddblock's opt-in features (doc/beyond-python.md) on a table shared with
// Python clients: what each side sees, and that mixing stays safe.

// TestFastTakeoverWatchesPythonItems: a Go client with MaxClockSkew takes
// over stamped items by its wall clock, but a Python item carries no
// stamp, so it watches the version number for the whole lease as Python
// does. The item's expiry is also past by the waiter's wall clock, set
// two hours ahead: expiry never decides a lease either.
func TestFastTakeoverWatchesPythonItems(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	item := loadFixture(t, "python_default")
	expiry := putRaw(t, ddb, n, item)
	rvn := item["record_version_number"].(*types.AttributeValueMemberS).Value

	const lease = 30 * time.Second
	clk := newStepClock()
	clk.JumpWall(2 * time.Hour)
	if !clk.Now().After(expiry.Add(time.Hour - time.Second)) {
		t.Fatalf("the waiter's wall clock %v should be well past the item's expiry %v", clk.Now(), expiry)
	}
	w := startWaiter(t, clk, &tapDDB{DynamoDBAPI: ddb}, n, "orders/42", "-", lease/5, 3*lease, ddblock.WithMaxClockSkew(time.Second))
	stillPython := func() {
		t.Helper()
		if v := rawItem(t, ddb, n, "orders/42", "-")["record_version_number"].(*types.AttributeValueMemberS).Value; v != rvn {
			t.Fatalf("at %v the Python holder's item was replaced", w.elapsed())
		}
	}
	if took := w.stepUntilAcquired(stillPython, 10); took != 5 {
		t.Errorf("took over at retry %d (%v); want 5, one lease after first seeing the item", took, w.elapsed())
	}
}

// TestFencingTokensAcrossPython: fencing tokens on a key that a Python
// client also takes. Python reads ddblock's attributes as additional
// attributes; it waits a lease on a released (kept) item, then its
// takeover drops the count; after Python's release deleted the item, the
// next Go token is still larger than every earlier one.
func TestFencingTokensAcrossPython(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	const pk = "ledger"

	goTokens := newGoClient(t, ddb, n, append(goTiming, ddblock.WithFencingTokens())...)
	first, err := goTokens.AcquireLock(ctx, pk)
	if err != nil {
		t.Fatalf("Go acquire: %v", err)
	}
	token1 := first.FencingToken()
	if token1 <= 0 {
		t.Fatalf("FencingToken = %d, want positive", token1)
	}

	// Python reads the Go item; ddblock's attributes are extra to it.
	py := newPyClient(ddb, pyTiming(n))
	t.Cleanup(func() { py.close(false) })
	seen, err := py.getLockFromDynamoDB(ctx, pk, "-")
	if err != nil || seen == nil {
		t.Fatalf("Python reads the Go item: %+v, %v", seen, err)
	}
	if diff := cmp.Diff([]string{"ddblock_fencing_token", "ddblock_tenure"}, sortedKeys(seen.AdditionalAttributes)); diff != "" {
		t.Errorf("Python's additional attributes of a Go item with a token (-want +got):\n%s", diff)
	}

	if err := first.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("Go release: %v", err)
	}
	released := time.Now()
	kept := rawItem(t, ddb, n, pk, "-")
	if v, ok := kept["ddblock_released"].(*types.AttributeValueMemberBOOL); !ok || !v.Value {
		t.Fatalf("after the release the item is %v, want it kept with ddblock_released = true", kept)
	}

	// To Python a kept item is held: it waits the item's lease first.
	l, err := py.acquireLock(ctx, pk, pyAcquireOptions{RetryTimeout: waitLimit})
	if err != nil {
		t.Fatalf("Python acquire: %v", err)
	}
	if waited := time.Since(released); waited < goTokens.Options().LeaseDuration {
		t.Errorf("Python took the released item %v after the release; it must wait the item's lease, %v", waited, goTokens.Options().LeaseDuration)
	}
	pyItem := rawItem(t, ddb, n, pk, "-")
	for _, name := range []string{"ddblock_fencing_token", "ddblock_released"} {
		if _, ok := pyItem[name]; ok {
			t.Errorf("Python's takeover kept %s: %v", name, pyItem)
		}
	}
	if err := py.releaseLock(ctx, l, false); err != nil {
		t.Fatalf("Python release: %v", err)
	}
	if item := rawItem(t, ddb, n, pk, "-"); item != nil {
		t.Fatalf("Python's release left the item: %v", item)
	}

	// The count was lost twice over; the next one still goes up.
	second, err := newGoClient(t, ddb, n, append(goTiming, ddblock.WithFencingTokens())...).AcquireLock(ctx, pk)
	if err != nil {
		t.Fatalf("Go acquire after Python: %v", err)
	}
	if token2 := second.FencingToken(); token2 <= token1 {
		t.Errorf("token after Python held the key = %d, not above the earlier %d", token2, token1)
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
