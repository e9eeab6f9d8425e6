package mutexcheck

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// logOf writes events through a Log and parses them back, so that every
// test also round-trips the line format.
func logOf(t *testing.T, write func(l *Log)) []Event {
	t.Helper()
	var buf bytes.Buffer
	l := NewLog(&buf)
	write(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	events, err := Parse(&buf)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, buf.String())
	}
	return events
}

// tenure writes one tenure with steps at the given times.
func tenure(l *Log, id, key string, end string, steps ...int64) {
	fencedTenure(l, id, key, 0, end, steps...)
}

func fencedTenure(l *Log, id, key string, token int64, end string, steps ...int64) {
	takenFrom := ""
	if strings.HasPrefix(id, "c") {
		takenFrom = "someone" // c-holders take over a held item
	}
	l.Acquired(id, key, steps[0]-1, "rvn-"+id, token, takenFrom)
	for _, s := range steps {
		l.Step(id, s)
	}
	if end != "" {
		l.Ended(id, steps[len(steps)-1]+1, end)
		if end == "done" {
			l.Released(id, steps[len(steps)-1]+2, "ok")
		}
	}
}

func TestCheckDisjointTenures(t *testing.T) {
	events := logOf(t, func(l *Log) {
		tenure(l, "a#1", "k", "done", 10, 20, 30)
		tenure(l, "b#1", "k", "LOCK_IN_DANGER", 40, 50)
		tenure(l, "c#1", "k", "done", 250, 260)   // a takeover 200 after b's last step
		tenure(l, "a#2", "other", "", 15, 25)     // killed: no end record
		l.Acquired("d#1", "k", 300, "rvn", 0, "") // acquired, never worked
		l.Ended("d#1", 301, "LOCK_IN_DANGER")
		l.Failure("a", "acquire", 5, "ACQUIRE_TIMEOUT", "ddblock: ACQUIRE_TIMEOUT: not acquired")
		l.Released("c#1", 262, "LOCK_STOLEN") // overrides c#1's "ok": a release whose delete landed
	})
	r := Check(events)
	if len(r.Violations) != 0 || len(r.Problems) != 0 || len(r.Unclear) != 0 {
		t.Fatalf("violations %v, problems %v, unclear %v; want none", r.Violations, r.Problems, r.Unclear)
	}
	want := Report{
		Keys: 2, Acquisitions: 5, Tenures: 4, Steps: 9,
		Handoffs:  3, // a#1 → b#1 → c#1 → d#1 on k
		Takeovers: 1, MinTakeoverGap: 200,
		Ends:            map[string]int{"done": 2, "LOCK_IN_DANGER": 2, "killed": 1},
		MaxToken:        map[string]int64{"k": 0, "other": 0},
		Limits:          map[string]int{},
		PeakHolders:     map[string]int{},
		ByKind:          map[string]int{"other": 4}, // IDs a#1..d#1 name no kind
		StolenAfterDone: 1,
		Failures:        map[string]int{"acquire ACQUIRE_TIMEOUT": 1},
	}
	if diff := cmp.Diff(want, r, cmpopts.IgnoreFields(Report{}, "Closest")); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if r.Closest[0].ID != "b#1" || r.Closest[1].ID != "c#1" {
		t.Errorf("closest takeover = %s then %s, want b#1 then c#1", r.Closest[0].ID, r.Closest[1].ID)
	}
}

func TestCheckFindsOverlaps(t *testing.T) {
	events := logOf(t, func(l *Log) {
		tenure(l, "a#1", "k", "LOCK_IN_DANGER", 10, 20, 30, 40) // works on after b began
		tenure(l, "b#1", "k", "done", 35, 45)
		tenure(l, "c#1", "k", "done", 40, 41) // inside both
		tenure(l, "d#1", "j", "done", 35, 45) // another key: no conflict
	})
	r := Check(events)
	if len(r.Violations) != 2 {
		t.Fatalf("got %d violations, want 2:\n%v", len(r.Violations), r.Violations)
	}
	v := r.Violations[0]
	if v.Key != "k" || v.A.ID != "a#1" || v.B.ID != "b#1" || v.Overlap != 5 {
		t.Errorf("first violation = %v", v)
	}
	if !strings.Contains(v.String(), "a#1") || !strings.Contains(v.String(), "b#1") {
		t.Errorf("violation text names neither holder: %s", v)
	}
	if v := r.Violations[1]; v.B.ID != "c#1" || v.A.ID != "b#1" {
		t.Errorf("second violation = %v; want c#1 inside b#1's reach", v)
	}
	if !strings.Contains(r.Summary(), "VIOLATIONS 2") {
		t.Errorf("summary hides the violations:\n%s", r.Summary())
	}
}

// A step at the very instant another tenure's last step happened is an
// overlap: both verified the lock at once.
func TestCheckTouchingIsOverlap(t *testing.T) {
	r := Check(logOf(t, func(l *Log) {
		tenure(l, "a#1", "k", "LOCK_STOLEN", 10, 20)
		tenure(l, "b#1", "k", "done", 20, 30)
	}))
	if len(r.Violations) != 1 {
		t.Errorf("got %d violations, want 1", len(r.Violations))
	}
}

func TestCheckUnclearAndProblems(t *testing.T) {
	r := Check(logOf(t, func(l *Log) {
		l.Failure("a", "release", 1, CodeUnclear, "not a *ddblock.Error:\n *errors.errorString: boom")
		l.Step("ghost#1", 5)
		tenure(l, "a#1", "k", "", 10, 20)
		l.Ended("a#1", 15, "done") // ends before its last step
	}))
	if len(r.Unclear) != 1 || r.Unclear[0].Detail != "not a *ddblock.Error: *errors.errorString: boom" {
		t.Errorf("unclear = %+v", r.Unclear)
	}
	if len(r.Problems) != 2 {
		t.Errorf("problems = %q, want an unknown tenure and a step after the end", r.Problems)
	}
}

func TestParseTornAndBadLines(t *testing.T) {
	events, err := Parse(strings.NewReader("A a#1 k 1 rvn 0 -\nS a#1 2\nS a#1 3")) // killed mid-line
	if err != nil || len(events) != 2 {
		t.Errorf("Parse of a torn log = %d events, %v; want 2, nil", len(events), err)
	}
	for _, bad := range []string{"Q a 1\n", "S a#1\n", "S a#1 x\n", "\n", "A a#1 k 1 rvn 0\n", "A a#1 k 1 rvn x -\n"} {
		if _, err := Parse(strings.NewReader(bad + "S a#1 4\n")); err == nil {
			t.Errorf("Parse(%q) accepted a malformed line", bad)
		}
	}
}

func TestNowIsMonotonic(t *testing.T) {
	a := Now()
	time.Sleep(time.Millisecond)
	b := Now()
	if b-a < int64(time.Millisecond) {
		t.Errorf("Now advanced %v over a 1 ms sleep", time.Duration(b-a))
	}
}

func TestCheckFencingTokens(t *testing.T) {
	r := Check(logOf(t, func(l *Log) {
		fencedTenure(l, "a#1", "k", 7, "done", 10, 20)
		tenure(l, "b#1", "k", "done", 30, 40) // no token: not compared
		fencedTenure(l, "c#1", "k", 8, "done", 50, 60)
		fencedTenure(l, "d#1", "k", 8, "done", 70, 80) // not greater than c's
		fencedTenure(l, "e#1", "j", 1, "done", 75, 85) // another key
	}))
	if r.MaxToken["k"] != 8 || r.MaxToken["j"] != 1 {
		t.Errorf("max tokens = %v", r.MaxToken)
	}
	if r.Fenced != 4 || len(r.Violations) != 0 {
		t.Errorf("fenced %d, violations %v; want 4 and none", r.Fenced, r.Violations)
	}
	if len(r.FencingViolations) != 1 || r.FencingViolations[0].A.ID != "c#1" || r.FencingViolations[0].B.ID != "d#1" {
		t.Errorf("fencing violations = %v, want c#1 then d#1", r.FencingViolations)
	}
}

// A semaphore's limit: N holders of distinct slots at once pass; one
// more, even on a slot of its own (so that no key has two holders), is
// caught, once per stretch over the limit; a group with no declared
// limit is not counted.
func TestCheckSemaphoreLimit(t *testing.T) {
	events := logOf(t, func(l *Log) {
		l.Limit("a", "s", 1, 2)
		l.Limit("b", "s", 1, 2) // declared by every holder, the same
		tenure(l, "a#1", "s/slot-0", "done", 10, 20, 30)
		tenure(l, "b#1", "s/slot-1", "done", 15, 25)
		tenure(l, "c#1", "s/slot-1", "done", 30, 40) // b's slot, after b: 2 at once
		tenure(l, "d#1", "s/slot-2", "done", 60, 70) // alone
		// Unlimited group: any number at once.
		tenure(l, "e#1", "free/slot-0", "done", 10, 20)
		tenure(l, "f#1", "free/slot-1", "done", 10, 20)
		tenure(l, "g#1", "free/slot-2", "done", 10, 20)
	})
	r := Check(events)
	if len(r.LimitViolations) != 0 || len(r.Violations) != 0 || len(r.Problems) != 0 {
		t.Fatalf("limit violations %v, violations %v, problems %v; want none", r.LimitViolations, r.Violations, r.Problems)
	}
	if r.Limits["s"] != 2 || r.PeakHolders["s"] != 2 || len(r.Limits) != 1 || r.SlotTenures != 4 {
		t.Errorf("limits %v, peaks %v, slot tenures %d; want s: 2 of 2, 4 tenures", r.Limits, r.PeakHolders, r.SlotTenures)
	}

	// The negative control: a third holder on a third slot while two
	// work; and, later, a third that starts the instant another's last
	// step was taken (closed intervals touch).
	events = logOf(t, func(l *Log) {
		l.Limit("a", "s", 1, 2)
		tenure(l, "a#1", "s/slot-0", "done", 10, 50)
		tenure(l, "b#1", "s/slot-1", "done", 20, 30)
		tenure(l, "x#1", "s/slot-2", "done", 25, 26) // the third at once
		tenure(l, "b#2", "s/slot-1", "done", 100, 110)
		tenure(l, "a#2", "s/slot-0", "done", 105, 120)
		tenure(l, "y#1", "s/slot-2", "done", 110, 115) // touches b#2's last step
	})
	r = Check(events)
	if len(r.Violations) != 0 {
		t.Fatalf("per-key violations %v; the slots were never shared", r.Violations)
	}
	if len(r.LimitViolations) != 2 || r.PeakHolders["s"] != 3 {
		t.Fatalf("limit violations %d (%v), peak %d; want 2 stretches of 3 holders", len(r.LimitViolations), r.LimitViolations, r.PeakHolders["s"])
	}
	v := r.LimitViolations[0]
	var ids []string
	for _, w := range v.Working {
		ids = append(ids, w.ID)
	}
	if v.Group != "s" || v.Limit != 2 || v.At != 25 || strings.Join(ids, ",") != "a#1,b#1,x#1" {
		t.Errorf("first violation: %s", v)
	}
	if v := r.LimitViolations[1]; v.At != 110 || len(v.Working) != 3 {
		t.Errorf("second violation: %s", v)
	}
	if !strings.Contains(r.Summary(), "s 3 of 2; OVER THE LIMIT 2") {
		t.Errorf("summary:\n%s", r.Summary())
	}

	events = logOf(t, func(l *Log) {
		l.Limit("a", "s", 1, 2)
		l.Limit("b", "s", 1, 3)
	})
	if r := Check(events); len(r.Problems) != 1 {
		t.Errorf("two limits for one group: problems %v", r.Problems)
	}
	if g, ok := SlotGroup("jobs/slot-3"); !ok || g != "jobs" {
		t.Errorf("SlotGroup = %q, %v", g, ok)
	}
	if _, ok := SlotGroup("key-0"); ok {
		t.Error("a plain key is a slot")
	}
}

func TestKindOf(t *testing.T) {
	for id, want := range map[string]string{
		"g3.1-session#4":         "session",
		"w0.1/c1-session-fast#3": "session-fast",
		"w1.2/c0-plain#12":       "plain",
		"a#1":                    "other",
	} {
		if got := kindOf(id); got != want {
			t.Errorf("kindOf(%q) = %q; want %q", id, got, want)
		}
	}
}
