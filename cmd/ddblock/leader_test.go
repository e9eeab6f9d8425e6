package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
)

// ddblock leader prints the leader of a library Election, exits 1 when
// there is none, and with --watch prints each change until interrupted.
func TestLeader(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	r := f.run("leader", "svc")
	if r.code != exitNotFound {
		t.Fatalf("leader with nobody leading: want exit %d: %v", exitNotFound, r)
	}
	oneLineOn(t, r, `no leader of "svc"`)

	watch := f.start("leader", "--watch", "--every", "20ms", "svc")
	watch.eventuallyWhileRunning("--watch to say none", func() bool { return strings.Contains(watch.stdout.String(), "\tnone\n") })

	election, err := f.holder("host-a").NewElection("svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := election.Campaign(ctx, "10.0.0.7:8080"); err != nil {
		t.Fatal(err)
	}
	r = f.run("leader", "svc")
	if r.code != 0 || r.stdout != "10.0.0.7:8080\t(owner host-a)\n" {
		t.Errorf("leader: %v", r)
	}
	watch.eventuallyWhileRunning("--watch to see the leader", func() bool {
		return strings.Contains(watch.stdout.String(), "\t10.0.0.7:8080\t(owner host-a)\n")
	})
	if err := election.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	watch.eventuallyWhileRunning("--watch to see leadership end", func() bool {
		return strings.Count(watch.stdout.String(), "\tnone\n") == 2
	})
	watch.signal(syscall.SIGINT)
	if res := watch.wait(); res.code != 0 || strings.Count(res.stdout, "\n") != 3 {
		t.Errorf("leader --watch: want 3 lines (none, the leader, none) and exit 0 on SIGINT: %v", res)
	}

	// A plain lock on the name is not an election's.
	f.acquire("plain", "other")
	if r := f.run("leader", "other"); r.code == 0 || !strings.Contains(r.stderr, "INVALID_ITEM") {
		t.Errorf("leader of a plain lock: %v", r)
	}
	if r := f.run("leader", ""); r.code != exitUsage {
		t.Errorf("leader of an empty name: want exit %d: %v", exitUsage, r)
	}
}
