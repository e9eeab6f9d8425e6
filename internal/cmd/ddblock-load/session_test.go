package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// TestMain runs the tests against one server; started as a contention
// worker (by TestContentionSmoke, which re-executes this binary), it is
// that worker instead.
func TestMain(m *testing.M) {
	if isWorker() {
		os.Exit(workerMain(os.Stdin, os.Stdout))
	}
	ddbtest.Main(m)
}

// --session gives the client WithSessionLease: one session item takes
// every heartbeat, no lock item is rewritten, each lock's gaps are its
// session's, and the JSON object says so. The same scenario without the
// flag heartbeats the lock items themselves.
func TestScenarioSession(t *testing.T) {
	srv := ddbtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, session := range []bool{true, false} {
		// A period long enough that a busy machine (the race detector, a
		// load average of 10) does not put the session in danger: the
		// test is about what is written, not about speed.
		args := []string{"--locks", "40", "--period", "300ms", "--duration", "2s", "--settle", "300ms",
			"--acquire-workers", "4", "--probe-every", "0", "--no-ceiling"}
		if session {
			args = append(args, "--session")
		}
		cfg, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.session != session {
			t.Fatalf("parseFlags(%q).session = %v", args, cfg.session)
		}
		r, err := runScenario(ctx, srv.Client(0), cfg, 40)
		if err != nil {
			t.Fatalf("session %v: %v", session, err)
		}
		j := r.json("test", cfg.lease, cfg.tps, nil)
		if j.Session != session || j.Locks != 40 || j.InDangerTotal != r.statsEnd.InDanger {
			t.Errorf("session %v: JSON session %v, locks %d, in_danger_total %d (Stats %d)", session, j.Session, j.Locks, j.InDangerTotal, r.statsEnd.InDanger)
		}
		if len(r.perLockGap) != 40 || len(r.firstGap) != 40 || len(r.perLockBeats) != 40 {
			t.Fatalf("session %v: %d gaps, %d first gaps, %d beat counts; want one per lock", session, len(r.perLockGap), len(r.firstGap), len(r.perLockBeats))
		}
		if !session {
			if r.sessions != 0 || r.lockItemUpdates == 0 {
				t.Errorf("per-lock mode: %d sessions, %d lock item heartbeats; want none and some", r.sessions, r.lockItemUpdates)
			}
			continue
		}
		if r.sessions != 1 {
			t.Errorf("session mode: %d session items written; want 1", r.sessions)
		}
		if r.lockItemUpdates != 0 {
			t.Errorf("session mode: %d heartbeats of lock items; want none", r.lockItemUpdates)
		}
		// One session: every lock's gaps and beats are that session's.
		for i := range r.perLockGap {
			if r.perLockGap[i] != r.perLockGap[0] || r.perLockGapSent[i] != r.perLockGapSent[0] || r.perLockBeats[i] != r.perLockBeats[0] {
				t.Fatalf("session mode: lock %d: gap %v/%v, %d beats; lock 0: %v/%v, %d beats; want the session's for all",
					i, r.perLockGap[i], r.perLockGapSent[i], r.perLockBeats[i], r.perLockGap[0], r.perLockGapSent[0], r.perLockBeats[0])
			}
		}
		if r.perLockGap[0] <= 0 || j.LargestGapMaxS != r.perLockGap[0].Seconds() {
			t.Errorf("session mode: largest_gap_max_s %v, the session's gap %v", j.LargestGapMaxS, r.perLockGap[0])
		}
	}
}

// A lock's first refresh is the first session write sent after its
// acquire was sent, even when an earlier-sent write came back later.
func TestFirstSessionRefresh(t *testing.T) {
	r := newRecorder(nil, ddblock.DefaultPartitionKeyName, nil, time.Second)
	for _, w := range []sessionWrite{{0, 5}, {10, 15}, {12, 20}, {18, 22}, {30, 31}} {
		r.noteSessionWrite(w.sent, w.landed)
	}
	for _, tc := range []struct {
		acquireSent int64
		want        sessionWrite
		ok          bool
	}{
		{-1, sessionWrite{0, 5}, true},
		{0, sessionWrite{10, 15}, true},
		{11, sessionWrite{12, 20}, true},
		{12, sessionWrite{18, 22}, true},
		{25, sessionWrite{30, 31}, true},
		{30, sessionWrite{}, false},
	} {
		got, ok := r.firstSessionRefresh(tc.acquireSent)
		if got != tc.want || ok != tc.ok {
			t.Errorf("firstSessionRefresh(%d) = %v, %v; want %v, %v", tc.acquireSent, got, ok, tc.want, tc.ok)
		}
	}
}
