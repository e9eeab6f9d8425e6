package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock/internal/ddbtest"
)

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		xs   []int
		want float64
	}{
		{nil, 0},
		{[]int{0, 0, 0}, 0},
		{[]int{5}, 1},
		{[]int{7, 7, 7, 7}, 1},
		{[]int{10, 0, 0, 0}, 0.25},           // one takes everything: 1/n
		{[]int{1, 3}, 16.0 / (2 * 10)},       // (1+3)² / (2·(1+9))
		{[]int{3, 1, 0, 2}, 36.0 / (4 * 14)}, // 6² / (4·(9+1+0+4))
		{[]int{16, 240, 100}, 356.0 * 356 / (3 * (256 + 57600 + 10000))}, // the extremes
	} {
		if got := jainIndex(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("jainIndex(%v) = %v; want %v", tc.xs, got, tc.want)
		}
	}
}

func TestLongestStreak(t *testing.T) {
	for _, tc := range []struct {
		seq       []int
		len, whom int
	}{
		{nil, 0, -1},
		{[]int{4}, 1, 4},
		{[]int{1, 2, 1, 2}, 1, 1},          // ties: the first run wins
		{[]int{1, 1, 2, 2, 2, 1}, 3, 2},    // in the middle
		{[]int{0, 3, 3, 0, 0, 0, 0}, 4, 0}, // at the end
		{[]int{5, 5, 5, 1, 5, 5}, 3, 5},    // runs of one contender do not join across another's
	} {
		if l, w := longestStreak(tc.seq); l != tc.len || w != tc.whom {
			t.Errorf("longestStreak(%v) = %d, %d; want %d, %d", tc.seq, l, w, tc.len, tc.whom)
		}
	}
}

// Percentiles are nearest-rank, over the sample in any order.
func TestDurationsPct(t *testing.T) {
	var d durations
	for i := 100; i >= 1; i-- { // 100ms down to 1ms
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := d.pct(tc.p); got != tc.want {
			t.Errorf("pct(%v) = %v; want %v", tc.p, got, tc.want)
		}
	}
	if d[0] != 100*time.Millisecond {
		t.Error("pct sorted the caller's sample")
	}
	if got := (durations{7 * time.Millisecond}).pct(99); got != 7*time.Millisecond {
		t.Errorf("pct of one = %v; want it", got)
	}
	if got := (durations{}).pct(50); got != 0 {
		t.Errorf("pct of none = %v; want 0", got)
	}
}

// A handoff runs from the previous holder's call to Release to the next
// AcquireLock's return; a next holder before that call is an overlap,
// counted and left out.
func TestHandoffsOf(t *testing.T) {
	ev := []keyedEvent{
		{acqEvent{WaitStart: 0, Acquired: 10, ReleaseStart: 40, ReleaseDone: 45}, 1},
		{acqEvent{WaitStart: 40, Acquired: 47, ReleaseStart: 80, ReleaseDone: 82}, 1}, // back to the releaser
		{acqEvent{WaitStart: 5, Acquired: 90, ReleaseStart: 120, ReleaseDone: 125}, 2},
		{acqEvent{WaitStart: 6, Acquired: 110, ReleaseStart: 140, ReleaseDone: 150}, 3}, // before 2 released
	}
	hs, others, toSelf, overlaps := handoffsOf(ev)
	if want := (durations{7, 10}); !slices.Equal(hs, want) || !slices.Equal(others, durations{10}) || toSelf != 1 || overlaps != 1 {
		t.Errorf("handoffsOf = %v (to others %v), %d to self, %d overlaps; want %v ([10]), 1, 1", hs, others, toSelf, overlaps, want)
	}
	if hs, others, toSelf, overlaps := handoffsOf(ev[:1]); len(hs) != 0 || len(others) != 0 || toSelf != 0 || overlaps != 0 {
		t.Errorf("handoffsOf(one) = %v, %v, %d, %d; want nothing", hs, others, toSelf, overlaps)
	}
}

// The most acquisitions by others inside one wait: a FIFO line gives
// K−1, a waiter passed over again and again more.
func TestOvertakenIn(t *testing.T) {
	e := func(who int, w, a int64) keyedEvent { return keyedEvent{acqEvent{WaitStart: w, Acquired: a}, who} }
	inOrder := []keyedEvent{ // three contenders in turn, each waiting for the two others
		e(0, 0, 10), e(1, 1, 20), e(2, 2, 30), e(0, 11, 40), e(1, 21, 50), e(2, 31, 60),
	}
	if got := overtakenIn(inOrder, nil); got != 2 {
		t.Errorf("three in turn: %d; want 2", got)
	}
	passedOver := []keyedEvent{ // 2 waits from 0 while 0 and 1 take turns
		e(0, 0, 10), e(1, 1, 20), e(0, 11, 30), e(1, 21, 40), e(2, 0, 50),
	}
	if got := overtakenIn(passedOver, nil); got != 4 {
		t.Errorf("one passed over four times: %d; want 4", got)
	}
	if got := overtakenIn(inOrder, []int64{15}); got != 5 {
		t.Errorf("a wait open since 15: %d; want 5 (the acquisitions at 20 to 60)", got)
	}
	if got := overtakenIn(nil, []int64{5}); got != 0 {
		t.Errorf("no acquisitions: %d; want 0", got)
	}
}

// The parent's aggregation of what the workers reported: per contender
// counts (a contender that never won counts as 0), waits with the open
// ones in the max, streaks and handoffs per key in acquire order across
// processes, calls summed per key.
func TestAggregate(t *testing.T) {
	const ms = int64(time.Millisecond)
	ev := func(w, a, r, d int64) acqEvent { return acqEvent{w * ms, a * ms, r * ms, d * ms} }
	reports := []contenderReport{ // not in ID order, as workers report them
		{ID: 3, Proc: 1, Key: "b",
			Acquisitions:  []acqEvent{ev(1200, 1200, 1230, 1235), ev(1235, 1236, 1266, 1270)},
			Calls:         map[string]wireCounts{"b": {Put: 2, Delete: 2}},
			ReleaseErrors: 2},
		{ID: 0, Proc: 0, Key: "a",
			Acquisitions: []acqEvent{
				ev(900, 990, 1000, 1005), // before the window: ignored
				ev(1000, 1010, 1040, 1045), ev(1045, 1050, 1080, 1085), ev(1085, 1090, 1120, 1125),
				ev(1990, 2000, 2030, 2035), // at the end: ignored
			},
			Calls: map[string]wireCounts{"a": {Get: 10, Put: 3, Delete: 3}}},
		{ID: 2, Proc: 0, Key: "a", OpenWait: 900 * ms, // waiting all along: counted from the start
			Calls: map[string]wireCounts{"a": {Get: 30}}},
		{ID: 1, Proc: 1, Key: "a",
			Acquisitions:  []acqEvent{ev(1000, 1130, 1160, 1165)},
			OpenWait:      1165 * ms,
			Calls:         map[string]wireCounts{"a": {Get: 20, Put: 1, Delete: 1}},
			AcquireErrors: 1, FirstError: "boom"},
	}
	s := aggregate(reports, 1000*ms, 2000*ms)

	if s.window != time.Second {
		t.Errorf("window %v; want 1s", s.window)
	}
	if !slices.Equal(s.contenders, []int{0, 1, 2, 3}) || !slices.Equal(s.perContender, []int{3, 1, 0, 2}) {
		t.Errorf("contenders %v with %v acquisitions; want [0 1 2 3] with [3 1 0 2]", s.contenders, s.perContender)
	}
	if s.total != 6 || s.minAcq != 0 || s.maxAcq != 3 || math.Abs(s.jain-36.0/56) > 1e-12 {
		t.Errorf("total %d, min %d, max %d, Jain %v; want 6, 0, 3, %v", s.total, s.minAcq, s.maxAcq, s.jain, 36.0/56)
	}
	waits := slices.Clone(s.waits)
	slices.Sort(waits)
	if want := (durations{0, 1, 5, 5, 10, 130}); !slices.Equal(waits, scale(want, time.Millisecond)) {
		t.Errorf("waits %v; want %v ms", waits, want)
	}
	open := slices.Clone(s.openWaits)
	slices.Sort(open)
	if want := (durations{835, 1000}); !slices.Equal(open, scale(want, time.Millisecond)) {
		t.Errorf("open waits %v; want %v ms", open, want)
	}
	if s.waitMax != time.Second {
		t.Errorf("wait max %v; want the open wait of 1s", s.waitMax)
	}
	if s.streak != 3 || s.streakBy != 0 || s.streakKey != "a" {
		t.Errorf("streak %d by %d on %q; want 3 by 0 on a", s.streak, s.streakBy, s.streakKey)
	}
	hs := slices.Clone(s.handoffs)
	slices.Sort(hs)
	if want := (durations{6, 10, 10, 10}); !slices.Equal(hs, scale(want, time.Millisecond)) || s.handoffSelf != 3 || s.overlaps != 0 {
		t.Errorf("handoffs %v (%d to self, %d overlaps); want %v ms, 3, 0", hs, s.handoffSelf, s.overlaps, want)
	}
	if want := scale(durations{10}, time.Millisecond); !slices.Equal(s.handoffOther, want) {
		t.Errorf("handoffs to others %v; want %v (c0 → c1 only)", s.handoffOther, want)
	}
	if len(s.keys) != 2 {
		t.Fatalf("%d keys; want 2", len(s.keys))
	}
	a, b := s.keys[0], s.keys[1]
	if a.key != "a" || a.contenders != 3 || a.acquisitions != 4 || a.readsPerS != 60 || a.writesPerS != 8 || a.streak != 3 || len(a.handoffs) != 3 || a.handoffToSelf != 2 {
		t.Errorf("key a: %+v", a)
	}
	if b.key != "b" || b.contenders != 1 || b.acquisitions != 2 || b.readsPerS != 0 || b.writesPerS != 4 || b.streak != 2 || b.streakBy != 3 || len(b.handoffs) != 1 {
		t.Errorf("key b: %+v", b)
	}
	if a.overtaken != 4 || b.overtaken != 0 || s.overtaken != 4 {
		t.Errorf("overtaken: key a %d, key b %d, most %d; want 4 (c2's open wait saw every acquisition of a), 0, 4", a.overtaken, b.overtaken, s.overtaken)
	}
	// c2 was never served: no wait is past the first round.
	if len(s.steadyWaits) != 0 {
		t.Errorf("steady waits %v; want none (contender 2 never served)", s.steadyWaits)
	}
	if len(s.holds) != 6 || s.holds.min() != 30*time.Millisecond || s.holds.max() != 30*time.Millisecond {
		t.Errorf("holds %v; want six of 30ms", s.holds)
	}
	if s.acquireErrors != 1 || s.releaseErrors != 2 || s.firstError != "boom" {
		t.Errorf("errors %d acquire, %d release, first %q; want 1, 2, boom", s.acquireErrors, s.releaseErrors, s.firstError)
	}
}

// The steady waits leave out those begun before every contender was
// served once.
func TestAggregateSteadyWaits(t *testing.T) {
	const ms = int64(time.Millisecond)
	ev := func(w, a, r, d int64) acqEvent { return acqEvent{w * ms, a * ms, r * ms, d * ms} }
	reports := []contenderReport{
		{ID: 0, Key: "k", Acquisitions: []acqEvent{ev(0, 10, 20, 21), ev(21, 40, 50, 51), ev(51, 60, 70, 71)}},
		{ID: 1, Key: "k", Acquisitions: []acqEvent{ev(1, 30, 38, 39), ev(39, 80, 90, 91)}},
	}
	s := aggregate(reports, 0, 100*ms)
	got := slices.Clone(s.steadyWaits)
	slices.Sort(got)
	if want := scale(durations{9, 41}, time.Millisecond); !slices.Equal(got, want) {
		t.Errorf("steady waits %v; want %v (begun at 51 and 39 ms, after the first round ended at 30 ms)", got, want)
	}
	if s.firstAcquired != 10*time.Millisecond {
		t.Errorf("first acquisition %v after the window opened; want 10ms", s.firstAcquired)
	}
}

func scale(d durations, unit time.Duration) durations {
	out := make(durations, len(d))
	for i, x := range d {
		out[i] = x * unit
	}
	return out
}

// contentionReport runs the contention scenario in-process against srv, with
// args and --json, and returns its text report and its JSON line.
func contentionReport(t *testing.T, srv *ddbtest.Server, args ...string) (text, js string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := parseFlags(append([]string{"--scenario", "contention", "--json"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	var tb, jb bytes.Buffer
	if err := contentionMain(ctx, srv.Client(0), srv.Endpoint, srv.ChildEnv(os.Environ()), string(srv.Kind), cfg, &tb, &jb); err != nil {
		t.Fatalf("%v\n%s", err, tb.String())
	}
	t.Logf("report:\n%s", tb.String())
	return tb.String(), jb.String()
}

// decodeContention decodes the scenario's JSON line.
func decodeContention(t *testing.T, js string) jsonContention {
	t.Helper()
	var j jsonContention
	if err := json.Unmarshal([]byte(js), &j); err != nil {
		t.Fatalf("decoding %s: %v", js, err)
	}
	return j
}

// The scenario's flags: defaults as the issue measured, and refusals.
func TestParseFlagsContention(t *testing.T) {
	cfg, err := parseFlags([]string{"--scenario", "contention"})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.contention
	if c.contenders != 12 || c.procs != 3 || c.keys != 1 || c.hold != 30*time.Millisecond || c.retry != 50*time.Millisecond || c.think != 0 || c.mode != "unfair" || cfg.duration != 45*time.Second {
		t.Errorf("defaults %+v, duration %v; want 12 contenders in 3 processes on 1 key, hold 30ms, retry 50ms, no think time, unfair, 45s", c, cfg.duration)
	}
	if cfg, err := parseFlags(nil); err != nil || cfg.scenario != scenarioHeartbeats {
		t.Errorf("parseFlags(nil): scenario %q, %v; want heartbeats", cfg.scenario, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "chaos"}, `--scenario "chaos"`},
		{[]string{"--scenario", "contention", "--wait-mode", "polite"}, `--wait-mode "polite": want one of fair, unfair`},
		{[]string{"--scenario", "contention", "--contenders", "2", "--procs", "3"}, "a worker would have none"},
		{[]string{"--scenario", "contention", "--contenders", "2", "--keys", "3"}, "a key would have none"},
		{[]string{"--scenario", "contention", "--contenders", "0"}, "must be positive"},
		{[]string{"--scenario", "contention", "--retry-period", "0s"}, "--retry-period must be positive"},
		{[]string{"--scenario", "contention", "--hold", "-1s"}, "--hold must not be negative"},
		{[]string{"--scenario", "contention", "--think", "-1s"}, "--think must not be negative"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// A short run against the real server, 4 contenders in 2 worker
// processes (copies of this test binary, see TestMain): the report is
// well-formed and every contender got the key at least once. Nothing is
// timed. The contenders pause 100 ms after each release, two retry
// periods: with none, a releaser asking again at once can keep the key
// from a waiter for the whole of a short run (that is what the scenario
// measures), and "everyone acquired" would depend on the machine's luck.
func TestContentionSmoke(t *testing.T) {
	srv := ddbtest.Shared(t)
	text, js := contentionReport(t, srv, "--contenders", "4", "--procs", "2", "--duration", "4s", "--think", "100ms")
	for _, want := range []string{"acquisitions: ", "Jain's fairness index", "wait: ", "begun after every contender was served once", "order: ", "hold: ", "streak: ", "handoff: ", "key contention-0:"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text report has no %q", want)
		}
	}

	// One JSON object, on one line, with every field and nothing else.
	if n := strings.Count(js, "\n"); n != 1 {
		t.Fatalf("--json printed %d lines; want 1: %s", n, js)
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	var j jsonContention
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("decoding %s: %v", js, err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(js), &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"scenario", "server", "wait_mode", "contenders", "processes", "keys", "hold_ms", "retry_period_ms", "think_ms", "window_s",
		"acquisitions", "acquisitions_per_contender", "acquisitions_min", "acquisitions_max", "jain_index",
		"wait_p50_s", "wait_p99_s", "wait_max_s", "waits_open_at_end", "longest_streak", "longest_streak_contender",
		"handoff_p50_ms", "handoff_p99_ms", "handoffs", "handoff_other_p50_ms", "handoff_other_p99_ms", "handoffs_other", "handoffs_to_self", "overlaps", "overtaken_max",
		"hold_p50_ms", "hold_p99_ms", "hold_max_ms", "steady_wait_p50_s", "steady_wait_p99_s", "steady_wait_max_s", "steady_waits", "first_acquired_ms", "per_key",
		"acquire_errors", "release_errors", "load_average_start", "load_average_end"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("the JSON object has no %q: %s", f, js)
		}
	}
	if j.Scenario != "contention" || j.WaitMode != "unfair" || j.Server != string(srv.Kind) || j.Contenders != 4 || j.Processes != 2 || j.Keys != 1 {
		t.Errorf("JSON header %+v", j)
	}
	if len(j.AcquisitionsPerContender) != 4 {
		t.Fatalf("acquisitions_per_contender %v; want 4 counts", j.AcquisitionsPerContender)
	}
	sum := 0
	for id, n := range j.AcquisitionsPerContender {
		if n < 1 {
			t.Errorf("contender %d never acquired the key: %v", id, j.AcquisitionsPerContender)
		}
		sum += n
	}
	if sum != j.Acquisitions || j.AcquisitionsMin != slices.Min(j.AcquisitionsPerContender) || j.AcquisitionsMax != slices.Max(j.AcquisitionsPerContender) {
		t.Errorf("acquisitions %d, min %d, max %d from %v", j.Acquisitions, j.AcquisitionsMin, j.AcquisitionsMax, j.AcquisitionsPerContender)
	}
	if j.JainIndex < 0.25 || j.JainIndex > 1 {
		t.Errorf("Jain's index %v outside [1/n, 1]", j.JainIndex)
	}
	if j.Handoffs != j.Acquisitions-1-j.Overlaps || j.HandoffsOther+j.HandoffsToSelf != j.Handoffs || j.LongestStreak < 1 || len(j.PerKey) != 1 || j.PerKey[0].Key != "contention-0" || j.PerKey[0].Acquisitions != j.Acquisitions {
		t.Errorf("handoffs %d for %d acquisitions, streak %d, per key %+v", j.Handoffs, j.Acquisitions, j.LongestStreak, j.PerKey)
	}
	// Waiting costs reads, and every acquisition a write.
	if j.PerKey[0].ReadsPerS <= 0 || j.PerKey[0].WritesPerS <= 0 {
		t.Errorf("reads %v/s, writes %v/s on the wire; want some of each", j.PerKey[0].ReadsPerS, j.PerKey[0].WritesPerS)
	}
	// Not a timing: one holder at a time, on one clock across processes.
	if j.Overlaps != 0 {
		t.Errorf("%d overlaps: a contender had the key before its previous holder called Release", j.Overlaps)
	}
}

// The fair mode on the real server: 4 contenders in 2 processes, with no
// pause after a release, which in the unfair mode lets a releaser keep
// the key (see TestContentionSmoke): waiting in line, every contender
// gets the key, and the report says the mode. Nothing is timed: a
// machine so busy that the window closed before every contender's turn
// came (a handoff of a second or more has been seen at a load average of
// 10) runs it again with a window four times as long.
func TestContentionFairSmoke(t *testing.T) {
	var j jsonContention
	for _, window := range []string{"4s", "16s"} {
		_, js := contentionReport(t, ddbtest.Shared(t), "--wait-mode", "fair", "--contenders", "4", "--procs", "2", "--duration", window)
		j = decodeContention(t, js)
		if j.Overlaps != 0 || !slices.Contains(j.AcquisitionsPerContender, 0) {
			break
		}
		t.Logf("a contender's turn had not come within %s: %v; trying a longer window", window, j.AcquisitionsPerContender)
	}
	if j.WaitMode != "fair" || len(j.AcquisitionsPerContender) != 4 {
		t.Fatalf("wait mode %q, %d contenders; want fair, 4", j.WaitMode, len(j.AcquisitionsPerContender))
	}
	for id, n := range j.AcquisitionsPerContender {
		if n < 1 {
			t.Errorf("contender %d never acquired the key waiting in line: %v", id, j.AcquisitionsPerContender)
		}
	}
	if j.Overlaps != 0 || j.AcquireErrors != 0 {
		t.Errorf("%d overlaps, %d acquire errors; want none", j.Overlaps, j.AcquireErrors)
	}
}
