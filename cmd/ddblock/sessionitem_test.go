package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// ls describes a session item as its client's, with the locks that name
// it, never as a lock a waiter may take over: live while it heartbeats,
// and, seen still for its whole lease, presumed dead with all its locks
// free to waiters.
func TestLsDescribesSessionItems(t *testing.T) {
	f := newFixture(t)
	// A client whose clock never moves: its session is never heartbeated.
	stopped, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithOwnerName("erin"),
		ddblock.WithSessionLease(), ddblock.WithLeaseDuration(time.Second), ddblock.WithSafePeriod(600*time.Millisecond),
		ddblock.WithHeartbeatPeriod(200*time.Millisecond), hooks.Option[ddblock.Option](clock.NewFake(time.Now())), ddblock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = stopped.Close(ctx, false)
	})
	a := f.acquireWith(stopped, "job-a")
	f.acquireWith(stopped, "job-b")
	live := f.sessionHolder("frank", 10*time.Second, 100*time.Millisecond)
	idle := f.acquireWith(live, "job-c")
	if err := idle.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	sessKey, liveKey := a.SessionKey(), idle.SessionKey()

	got := map[string]lockJSON{}
	for _, l := range decodeLocks(t, f.run("ls", "--json")) {
		got[l.Key] = l
	}
	want := []lockKeyJSON{{"job-a", "-"}, {"job-b", "-"}}
	if s := got[sessKey]; !s.SessionItem || len(s.SessionLocks) != 2 || s.SessionLocks[0] != want[0] || s.SessionLocks[1] != want[1] {
		t.Errorf("erin's session item: %+v; want session_locks %v", s, want)
	}
	if s := got[liveKey]; !s.SessionItem || len(s.SessionLocks) != 0 {
		t.Errorf("frank's session item: %+v; want no session_locks", s)
	}

	r := f.run("ls", "--watch", "1s")
	rows := map[string][]string{}
	for _, row := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		c := cells(row)
		rows[c[0]] = c
	}
	c := rows[sessKey]
	if len(c) != 8 || c[2] != "erin (session item)" ||
		c[3] != "presumed dead (no session heartbeat in 1s, its whole lease: waiters may take its locks over)" ||
		c[7] != "session item of a client; its locks: job-a/-, job-b/-" {
		t.Errorf("ls --watch row of erin's session item %q: %v", c, r)
	}
	c = rows[liveKey]
	if len(c) != 8 || c[3] != "live (session heartbeated during the 1s watch)" || c[7] != "session item of a client; no lock names it" {
		t.Errorf("ls --watch row of frank's session item %q: %v", c, r)
	}
	for _, row := range rows {
		if strings.Contains(row[3], "a waiter may take it over") && strings.HasPrefix(row[0], "ddblock_session#") {
			t.Errorf("a session item described as a lock: %q", row)
		}
	}

	r = f.run("get", sessKey)
	if r.code != 0 || !strings.Contains(r.stdout, "session item of a client") {
		t.Errorf("get of a session item: %v", r)
	}
}
