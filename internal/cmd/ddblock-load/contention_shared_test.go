package main

import (
	"testing"

	"github.com/ddblock/ddblock/internal/ddbtest"
)

// The "unfair-shared" mode runs against the real server: the contenders
// of a process share one client and wait on one another's locks, every
// contender gets the key, and never two at once. Nothing is timed.
func TestContentionSharedClient(t *testing.T) {
	_, js := contentionReport(t, ddbtest.Shared(t), "--wait-mode", "unfair-shared", "--contenders", "4", "--procs", "2", "--duration", "3s", "--think", "100ms")
	j := decodeContention(t, js)
	if j.WaitMode != "unfair-shared" || j.Contenders != 4 || j.Processes != 2 {
		t.Errorf("JSON header %+v", j)
	}
	for id, n := range j.AcquisitionsPerContender {
		if n < 1 {
			t.Errorf("contender %d never acquired the key: %v", id, j.AcquisitionsPerContender)
		}
	}
	if j.Overlaps != 0 || j.AcquireErrors != 0 || j.ReleaseErrors != 0 {
		t.Errorf("overlaps %d, acquire errors %d, release errors %d; want none", j.Overlaps, j.AcquireErrors, j.ReleaseErrors)
	}
}

// A key's line counts with the key: its counter, its tickets, and the
// session item of a contender's own client; a shared client's session
// apart.
func TestCountingDDBKeyOf(t *testing.T) {
	own := newCountingDDB(nil, "contention-0")
	shared := newCountingDDB(nil, "")
	for _, tc := range []struct {
		w        *countingDDB
		pk, want string
	}{
		{own, "contention-0", "contention-0"},
		{own, "ddblock_line#contention-0", "contention-0"},
		{own, "ddblock_wait#0123456789abcdef#17#contention-0", "contention-0"},
		{own, "ddblock_wait#0123456789abcdef#17#a#b", "a#b"},
		{own, "ddblock_session#xyz", "contention-0"},
		{shared, "ddblock_session#xyz", "ddblock_session#xyz"},
		{shared, "ddblock_wait#0123456789abcdef#3#contention-1", "contention-1"},
		{own, "ddblock_wait#garbled", "ddblock_wait#garbled"},
	} {
		if got := tc.w.keyOf(tc.pk); got != tc.want {
			t.Errorf("keyOf(%q) with own %q = %q, want %q", tc.pk, tc.w.own, got, tc.want)
		}
	}
}
