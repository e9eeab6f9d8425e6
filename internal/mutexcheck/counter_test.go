package mutexcheck

import (
	"bytes"
	"strings"
	"testing"
)

// Writes, their outcomes and the final counts: lost updates, duplicates,
// unresolved writes and excess are counted per counter.
func TestCountIncrements(t *testing.T) {
	events := logOf(t, func(l *Log) {
		// "a": two holders read 0 and both wrote 1, acknowledged: one
		// increment is lost, and the final value shows it.
		l.Write("h1#1", "a", 1, 0, "w1")
		l.Write("h2#1", "a", 2, 0, "w2")
		l.Incremented("h2#1", "a", 3, 1, "w2")
		l.Incremented("h1#1", "a", 4, 1, "w1")
		// "b": an acknowledged write, one known not applied, one whose
		// outcome is unknown (it landed: the final value says 2).
		l.Write("h1#2", "b", 5, 0, "w3")
		l.Incremented("h1#2", "b", 6, 1, "w3")
		l.Write("h1#2", "b", 7, 1, "w4")
		l.NotApplied("h1#2", "b", 8, 2, "w4", "LOCK_NOT_HELD")
		l.Write("h1#2", "b", 9, 1, "w5")
		l.Failure("h1", "guarded-write", 10, "OUTCOME_UNKNOWN", "no answer")
		l.Failure("h1", "resolve", 11, "UNRESOLVED", "still unknown")
		// "c": the final value is above what was acknowledged or may
		// have landed: a write reported not applied was applied.
		l.Write("h3#1", "c", 12, 0, "w6")
		l.NotApplied("h3#1", "c", 13, 1, "w6", "TRANSACTION_CONFLICT")
	})
	r := CountIncrements(events, map[string]int64{"a": 1, "b": 2, "c": 1, "d": 0})
	if len(r.Problems) != 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	want := map[string]KeyCount{
		"a": {Key: "a", Writes: 2, Acked: 2, Final: 1, Lost: 1, Duplicates: 1},
		"b": {Key: "b", Writes: 3, Acked: 1, NotApplied: 1, Unresolved: 1, Final: 2},
		"c": {Key: "c", Writes: 1, NotApplied: 1, Final: 1, Excess: 1},
		"d": {Key: "d"},
	}
	if len(r.Counters) != len(want) {
		t.Fatalf("counters %+v", r.Counters)
	}
	for _, kc := range r.Counters {
		if kc != want[kc.Key] {
			t.Errorf("counter %s = %+v; want %+v", kc.Key, kc, want[kc.Key])
		}
	}
	if r.Writes != 6 || r.Acked != 3 || r.Unresolved != 1 || r.Final != 4 || r.Lost != 1 || r.Duplicates != 1 || r.Excess != 1 {
		t.Errorf("totals %+v", r)
	}
	if r.NotApplied["LOCK_NOT_HELD"] != 1 || r.NotApplied["TRANSACTION_CONFLICT"] != 1 ||
		r.GuardedFailures["OUTCOME_UNKNOWN"] != 1 || r.Resolutions["UNRESOLVED"] != 1 {
		t.Errorf("codes: not applied %v, guarded failures %v, resolutions %v", r.NotApplied, r.GuardedFailures, r.Resolutions)
	}
	if len(r.Examples) != 1 || !strings.Contains(r.Examples[0], "h2#1") || !strings.Contains(r.Examples[0], "h1#1") {
		t.Errorf("examples %q", r.Examples)
	}
	if !strings.Contains(r.Summary(), "LOST UPDATES 1") {
		t.Errorf("summary:\n%s", r.Summary())
	}
}

// An outcome without its write, or two outcomes of one write, is a
// harness problem, not a count.
func TestCountIncrementsProblems(t *testing.T) {
	events := logOf(t, func(l *Log) {
		l.Incremented("h#1", "a", 1, 1, "ghost")
		l.Write("h#1", "a", 2, 0, "w1")
		l.Incremented("h#1", "a", 3, 1, "w1")
		l.NotApplied("h#1", "a", 4, 1, "w1", "LOCK_NOT_HELD")
		l.Write("h#1", "a", 5, 1, "w1")
	})
	r := CountIncrements(events, map[string]int64{"a": 1})
	if len(r.Problems) != 3 {
		t.Errorf("problems %q; want 3", r.Problems)
	}
	if r.Acked != 1 || r.Lost != 0 {
		t.Errorf("acked %d, lost %d; want 1, 0", r.Acked, r.Lost)
	}
}

// The counter events survive a round trip through the line format, a
// name with white space included, and a torn last line is ignored.
func TestCounterEventsParse(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(&buf)
	l.Write("w0.1/c0-session fast#3", "key-0/slot-1", 10, 41, "0123abcd")
	l.Incremented("w0.1/c0-session fast#3", "key-0/slot-1", 11, 42, "0123abcd")
	l.NotApplied("t#1", "k", 12, 7, "id2", "resolved-LOCK_NOT_HELD")
	buf.WriteString("W t#1 k 13 7")
	events, err := Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Kind: Write, Tenure: "w0.1/c0-session_fast#3", Key: "key-0/slot-1", T: 10, Token: 41, Note: "0123abcd"},
		{Kind: Incremented, Tenure: "w0.1/c0-session_fast#3", Key: "key-0/slot-1", T: 11, Token: 42, Note: "0123abcd"},
		{Kind: NotApplied, Tenure: "t#1", Key: "k", T: 12, Token: 7, Note: "id2", Detail: "resolved-LOCK_NOT_HELD"},
	}
	if len(events) != len(want) {
		t.Fatalf("events %+v", events)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Errorf("event %d = %+v; want %+v", i, events[i], want[i])
		}
	}
	if _, err := Parse(strings.NewReader("I t#1 k 13 x id\n")); err == nil {
		t.Error("a counter value that is not a number parsed")
	}
}
