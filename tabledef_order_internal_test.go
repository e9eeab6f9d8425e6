package ddblock

import (
	"fmt"
	"testing"
	"time"
)

// Table options give the same result in any order: every pair, applied
// both ways, for CreateTable's defaults and EnsureTable's.
func TestTableOptionOrderDoesNotMatter(t *testing.T) {
	reps := []struct {
		name, setting string
		opt           TableOption
	}{
		{"on-demand", "billing", WithOnDemand()},
		{"capacity 3/4", "capacity", WithProvisionedCapacity(3, 4)},
		{"capacity 0/0", "capacity", WithProvisionedCapacity(0, 0)},
		{"poll 1s", "poll", WithPollInterval(time.Second)},
		{"poll 0", "poll", WithPollInterval(0)},
		{"single-region writes", "regions", WithSingleRegionWrites()},
		{"names", "names", WithNamesFromOptions(Options{TableName: "t", PartitionKeyName: "p", SortKeyName: "s", TTLAttributeName: "x"})},
		{"partition key only", "names", WithNamesFromOptions(Options{TableName: "t", PartitionKeyName: "p", TTLAttributeName: "x", PartitionKeyOnly: true})},
		{"nil", "nil", nil},
	}
	outcome := func(opts []TableOption, ensure bool) string {
		o := tableOptionsFor(opts, ensure)
		return fmt.Sprintf("%+v / %v", o, o.check())
	}
	check := func(opts []TableOption, ensure bool) error {
		o := tableOptionsFor(opts, ensure)
		return o.check()
	}
	refused := 0
	for i, a := range reps {
		for j, b := range reps {
			if i >= j || a.setting == b.setting { // same setting: the last one wins, by design
				continue
			}
			for _, ensure := range []bool{false, true} {
				ab, ba := outcome([]TableOption{a.opt, b.opt}, ensure), outcome([]TableOption{b.opt, a.opt}, ensure)
				if ab != ba {
					t.Errorf("%s then %s (ensure %v): %s\nthe other way: %s", a.name, b.name, ensure, ab, ba)
				}
				if check([]TableOption{a.opt, b.opt}, ensure) != nil {
					refused++
				}
			}
		}
	}
	if refused == 0 {
		t.Error("no pair was refused: the conflicting pairs are not exercised")
	}
	// The conflict is named; EnsureTable's default yields to a capacity.
	if err := check([]TableOption{WithProvisionedCapacity(3, 4), WithOnDemand()}, false); CodeOf(err) != CodeInvalidArgument {
		t.Errorf("on-demand with a capacity: %v; want INVALID_ARGUMENT", err)
	}
	if o := tableOptionsFor([]TableOption{WithProvisionedCapacity(3, 4)}, true); o.OnDemand || o.ReadCapacity != 3 {
		t.Errorf("EnsureTable with a capacity: %+v; want provisioned 3/4", o)
	}
	if o := tableOptionsFor(nil, true); !o.OnDemand {
		t.Errorf("EnsureTable's default: %+v; want on-demand", o)
	}
}
