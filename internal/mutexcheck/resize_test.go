package mutexcheck

import (
	"strings"
	"testing"
)

// A resized group is checked against the limit in force at each moment:
// the larger of the old and the new number while a resize is in flight
// (or after it failed), the new number once it is done; tenures still
// working when the limit falls count at that moment.
func TestCheckSemaphoreResize(t *testing.T) {
	events := logOf(t, func(l *Log) {
		l.Limit("a", "s", 1, 2)
		l.Resize("r1", "s", 100, 3, "begin")
		tenure(l, "a#1", "s/slot-0", "done", 110, 120)
		tenure(l, "b#1", "s/slot-1", "done", 110, 120)
		tenure(l, "c#1", "s/slot-2", "done", 110, 120) // 3 while growing: allowed
		l.Resize("r1", "s", 130, 3, "done")
		l.Resize("r2", "s", 200, 1, "begin")
		tenure(l, "a#2", "s/slot-0", "done", 210, 220)
		tenure(l, "b#2", "s/slot-2", "done", 210, 225) // above the new number, draining
		l.Resize("r2", "s", 230, 1, "done")
		tenure(l, "a#3", "s/slot-0", "done", 240, 250) // alone under 1
		l.Resize("r3", "s", 300, 3, "begin")
		l.Resize("r3", "s", 310, 3, "failed") // may have written 3
		tenure(l, "a#4", "s/slot-0", "done", 320, 330)
		tenure(l, "b#4", "s/slot-1", "done", 320, 330)
		tenure(l, "c#4", "s/slot-2", "done", 320, 330)
	})
	r := Check(events)
	if len(r.LimitViolations) != 0 || len(r.Violations) != 0 || len(r.Problems) != 0 {
		t.Fatalf("limit violations %v, violations %v, problems %v; want none", r.LimitViolations, r.Violations, r.Problems)
	}
	if r.Resizes["s"] != 2 || r.PeakHolders["s"] != 3 || !strings.Contains(r.Summary(), "resizes done") {
		t.Errorf("resizes %v, peak %d; want 2 done, a peak of 3:\n%s", r.Resizes, r.PeakHolders["s"], r.Summary())
	}

	// Negative controls: two at once after a shrink to 1 is done; a
	// holder above the new number still working when the shrink is done;
	// three after a failed grow was followed by a shrink to 2 done.
	events = logOf(t, func(l *Log) {
		l.Limit("a", "s", 1, 2)
		l.Resize("r1", "s", 100, 1, "begin")
		l.Resize("r1", "s", 110, 1, "done")
		tenure(l, "a#1", "s/slot-0", "done", 120, 130)
		tenure(l, "x#1", "s/slot-1", "done", 125, 126) // second under 1
		l.Resize("r2", "s", 200, 2, "begin")
		l.Resize("r2", "s", 201, 2, "done")
		tenure(l, "a#2", "s/slot-0", "done", 210, 250)
		tenure(l, "y#1", "s/slot-1", "done", 215, 245)
		l.Resize("r3", "s", 220, 1, "begin")
		l.Resize("r3", "s", 230, 1, "done") // acknowledged with y#1 still working
		l.Resize("r4", "s", 300, 3, "begin")
		l.Resize("r4", "s", 301, 3, "failed")
		l.Resize("r5", "s", 302, 2, "begin")
		l.Resize("r5", "s", 303, 2, "done")
		tenure(l, "a#3", "s/slot-0", "done", 310, 320)
		tenure(l, "b#3", "s/slot-1", "done", 310, 320)
		tenure(l, "z#1", "s/slot-2", "done", 315, 316) // third under 2
	})
	r = Check(events)
	if len(r.Violations) != 0 {
		t.Fatalf("per-key violations %v; the slots were never shared", r.Violations)
	}
	var at []int64
	for _, v := range r.LimitViolations {
		at = append(at, v.At)
	}
	if len(at) != 3 || at[0] != 125 || at[1] != 230 || at[2] != 315 {
		t.Fatalf("limit violations at %v; want at 125, 230 and 315:\n%v", at, r.LimitViolations)
	}
	if v := r.LimitViolations[1]; v.Limit != 1 || len(v.Working) != 2 {
		t.Errorf("the violation at the shrink's done: %s", v)
	}
}

// Resize lines are parsed back as written; a bad phase is an error.
func TestParseResize(t *testing.T) {
	events := logOf(t, func(l *Log) { l.Resize("r 1", "g", 42, 3, "done") })
	if len(events) != 1 || events[0].Kind != Resize || events[0].Tenure != "r_1" || events[0].Key != "g" ||
		events[0].T != 42 || events[0].Token != 3 || events[0].Note != "done" {
		t.Fatalf("parsed %+v", events)
	}
	for _, line := range []string{"Z r g 1 3 maybe\n", "Z r g 1 0 done\n", "Z r g 1 3\n"} {
		if _, err := Parse(strings.NewReader(line)); err == nil {
			t.Errorf("Parse(%q) took a bad resize line", line)
		}
	}
}
