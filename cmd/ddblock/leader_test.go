package main

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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
	if res := watch.wait(); res.code != 0 || strings.Count(res.stdout, "\n") != 3 || res.stderr != "" {
		t.Errorf("leader --watch: want 3 lines (none, the leader, none) and exit 0 on SIGINT: %v", res)
	}

	// Each line is stamped to the millisecond.
	for line := range strings.Lines(watch.res.stdout) {
		if !stampMillis.MatchString(line) {
			t.Errorf("leader --watch line %q: want an RFC 3339 UTC time to the millisecond first", line)
		}
	}

	// A plain lock on the name is not an election's: said plainly, once,
	// with exit 1 (nobody leads through an Election).
	f.acquire("plain", "other")
	r = f.run("leader", "other")
	if r.code != exitNotFound {
		t.Errorf("leader of a plain lock: want exit %d: %v", exitNotFound, r)
	}
	oneLineOn(t, r, `ddblock leader: no leader: "other" is not an election: its lock was taken without an Election`)
	if strings.Contains(r.stderr, "ddblock: ") || strings.Contains(r.stderr, "INVALID_ITEM") {
		t.Errorf("leader of a plain lock says it as an internal error: %q", r.stderr)
	}
	// Under --watch, once, however many reads see it.
	w := f.start("leader", "--watch", "--every", "10ms", "other")
	w.eventuallyWhileRunning("--watch to say it", func() bool { return strings.Contains(w.stderr.String(), "not an election") })
	time.Sleep(300 * time.Millisecond) // some 30 more reads, each of which would say it again
	w.signal(syscall.SIGINT)
	res := w.wait()
	if res.code != 0 || strings.Count(res.stderr, "not an election") != 1 || res.stdout != "" {
		t.Errorf("leader --watch of a plain lock: want it said once on stderr, nothing on stdout, exit 0: %v", res)
	}

	if r := f.run("leader", ""); r.code != exitUsage || !strings.Contains(r.stderr, "NAME must not be empty") {
		t.Errorf("leader of an empty name: want exit %d naming NAME: %v", exitUsage, r)
	}
	if r := f.run("leader"); r.code != exitUsage || !strings.Contains(r.stderr, "NAME") {
		t.Errorf("leader without a name: want exit %d naming NAME: %v", exitUsage, r)
	}
	if r := f.run("leader", "--help"); r.code != 0 || !strings.Contains(r.stdout, "leader [flags] NAME") {
		t.Errorf("leader --help: %v", r)
	}
}

// stampMillis is the start of a leader --watch line.
var stampMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\t`)
