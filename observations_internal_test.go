package ddblock

import (
	"fmt"
	"testing"
	"time"
)

func TestObservationsBounded(t *testing.T) {
	o := newObservations(3)
	for i := range 5 {
		o.remember(fmt.Sprint(i), &LockInfo{RecordVersionNumber: fmt.Sprint("v", i)}, time.Duration(i))
	}
	if o.len() != 3 {
		t.Fatalf("%d remembered; want 3", o.len())
	}
	if info, _ := o.get("0"); info != nil {
		t.Error("the oldest was not forgotten")
	}
	// Using an entry keeps it: "2" survives the next addition, "3" does not.
	if info, at := o.get("2"); info == nil || at != 2 {
		t.Fatalf("get(2) = %v, %v", info, at)
	}
	o.remember("5", &LockInfo{}, 5)
	if info, _ := o.get("3"); info != nil {
		t.Error("3 should have been forgotten")
	}
	if info, _ := o.get("2"); info == nil {
		t.Error("2 was used recently and should be kept")
	}
	o.forget("2")
	if info, _ := o.get("2"); info != nil || o.len() != 2 {
		t.Errorf("forget: %v, len %d", info, o.len())
	}
}
