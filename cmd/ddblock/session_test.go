package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// waitForFileScript marks "start $1", records the DDBLOCK_ environment in
// $3, waits until the file $4 exists, and marks "end $1".
const waitForFileScript = `echo "start $1 $(date +%s.%N) $$" >> "$2"; env | grep '^DDBLOCK_' | sort > "$3"; ` +
	`while [ ! -e "$4" ]; do sleep 0.05; done; echo "end $1 $(date +%s.%N) $$" >> "$2"`

// A --session run holds its lock through its session item's heartbeats:
// a second run waits past the lease, the lock item names the session and
// carries the year-long lease, the command gets DDBLOCK_SESSION_KEY, and
// a normal end removes both the lock and the session item.
func TestRunSession(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	marks, envA, envB, goA := filepath.Join(dir, "marks"), filepath.Join(dir, "envA"), filepath.Join(dir, "envB"), filepath.Join(dir, "goA")
	a := f.start("run", append(slices.Clone(timingFlags), "--session", "--owner", "owner-A", "job", "--",
		"sh", "-c", waitForFileScript, "sh", "A", marks, envA, goA)...)
	a.eventuallyWhileRunning("A's command to start", func() bool { return strings.Contains(readFile(t, marks), "start A") })

	info := f.lookup("job", "-")
	if info == nil || info.Session == nil || info.Session.Item == nil {
		t.Fatalf("the lock of a --session run: %+v; want one naming a session that is there", info)
	}
	sessionKey := info.Session.PartitionKey
	if !strings.HasPrefix(sessionKey, "ddblock_session#") || info.Session.LeaseDuration != testLease ||
		info.Session.Item.OwnerName != "owner-A" || info.OwnerName != "owner-A" {
		t.Errorf("session %q, lease %v, session owner %q, lock owner %q: want a ddblock_session# key, lease %v, owner-A",
			sessionKey, info.Session.LeaseDuration, info.Session.Item.OwnerName, info.OwnerName, testLease)
	}
	raw := rawItem(t, f, "job", "-")
	if s, ok := raw["ddblock_session"].(*types.AttributeValueMemberS); !ok || s.Value != sessionKey {
		t.Errorf("the lock item's ddblock_session: %#v; want %q", raw["ddblock_session"], sessionKey)
	}
	if n, ok := raw["lease_duration"].(*types.AttributeValueMemberN); !ok || n.Value != "31536000" {
		t.Errorf("the lock item's lease_duration: %#v; want a year, 31536000", raw["lease_duration"])
	}

	b := f.start("run", append(slices.Clone(timingFlags), "--session", "--owner", "owner-B", "--wait", "30s", "job", "--",
		"sh", "-c", waitForFileScript, "sh", "B", marks, envB, filepath.Join(dir, "goB"))...)
	b.eventuallyWhileRunning("B to wait for A", func() bool { return strings.Contains(b.stderr.String(), "is held by owner-A") })
	// Past A's lease, only the session's heartbeats keep the lock A's:
	// the lock item itself is never rewritten.
	waitStart, sessionRVN, heartbeats := time.Now(), info.Session.Item.RecordVersionNumber, 0
	a.eventuallyWhileRunning("A's session to be heartbeated for twice the lease", func() bool {
		now := f.lookup(sessionKey, "-")
		if now == nil {
			t.Fatalf("A's session item is gone while A runs")
		}
		if now.RecordVersionNumber != sessionRVN {
			sessionRVN, heartbeats = now.RecordVersionNumber, heartbeats+1
		}
		return heartbeats >= 2 && time.Since(waitStart) > 2*testLease
	})
	if strings.Contains(readFile(t, marks), "start B") {
		t.Fatal("B's command started while A's ran")
	}
	if now := f.lookup("job", "-"); now == nil || now.RecordVersionNumber != info.RecordVersionNumber {
		t.Errorf("the session lock was rewritten while held: %+v; want version %s", now, info.RecordVersionNumber)
	}
	if err := os.WriteFile(goA, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := a.wait(); r.code != 0 {
		t.Fatalf("run A: %v", r)
	}
	if s := f.lookup(sessionKey, "-"); s != nil {
		t.Errorf("A's session item is still there after A ended: %+v", s)
	}
	b.eventuallyWhileRunning("B's command to start", func() bool { return strings.Contains(readFile(t, marks), "start B") })
	if err := os.WriteFile(filepath.Join(dir, "goB"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := b.wait(); r.code != 0 {
		t.Fatalf("run B: %v", r)
	}
	m := readMarkers(t, marks)
	if len(m) != 4 || m[0].event+m[0].who+m[1].event+m[1].who+m[2].event+m[2].who+m[3].event+m[3].who != "startAendAstartBendB" {
		t.Errorf("markers %+v: want A's command wholly before B's", m)
	}
	for _, env := range []string{envA, envB} {
		got := readFile(t, env)
		for _, want := range []string{"DDBLOCK_KEY=job\n", "DDBLOCK_SORT_KEY=-\n", "DDBLOCK_TABLE=" + f.table + "\n", "DDBLOCK_SESSION_KEY=ddblock_session#", "DDBLOCK_RECORD_VERSION_NUMBER="} {
			if !strings.Contains(got, want) {
				t.Errorf("a --session command's environment lacks %q:\n%s", want, got)
			}
		}
	}
	if r := f.run("ls", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("the table after both runs ended: %v; want no lock and no session item", r)
	}
}

// rawItem reads an item as it is stored, or nil.
func rawItem(t *testing.T, f *fixture, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	return ddbtest.RawItem(t, sdk, f.table, map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: pk},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: sk},
	})
}

// sessionHolder is an in-process client with sessions on the fixture's
// table; its session item is heartbeated every heartbeat.
func (f *fixture) sessionHolder(owner string, lease, heartbeat time.Duration) *ddblock.Client {
	f.t.Helper()
	return f.inProcess(owner, ddblock.WithSessionLease(), ddblock.WithHeartbeatPeriod(heartbeat),
		ddblock.WithSafePeriod(lease*2/3), ddblock.WithLeaseDuration(lease))
}

func (f *fixture) acquireWith(c *ddblock.Client, key string) *ddblock.Lock {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.AcquireLock(ctx, key)
	if err != nil {
		f.t.Fatalf("AcquireLock(%q): %v", key, err)
	}
	return l
}

// ls and get show a session's lock with its session (lease, item,
// version), judge its holder by the session item (gone: presumed dead;
// with --watch, by the session item's version), and list session items
// marked as such.
func TestLsAndGetSessions(t *testing.T) {
	f := newFixture(t)
	live := f.sessionHolder("carol", 10*time.Second, 100*time.Millisecond)
	liveLock := f.acquireWith(live, "live-job")
	dead := f.sessionHolder("dave", 3*time.Minute, time.Minute)
	deadLock := f.acquireWith(dead, "dead-job")
	// dave's session item removed behind its back: its lock's holder is
	// then presumed dead.
	if _, err := sdk.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(f.table),
		Key: map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: deadLock.SessionKey()},
			ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
		},
	}); err != nil {
		t.Fatal(err)
	}

	byKey := func(locks []lockJSON) map[string]lockJSON {
		m := map[string]lockJSON{}
		for _, l := range locks {
			m[l.Key] = l
		}
		return m
	}
	got := byKey(decodeLocks(t, f.run("ls", "--json")))
	if len(got) != 3 {
		t.Fatalf("ls --json: %v; want the two locks and carol's session item", got)
	}
	l := got["live-job"]
	if l.Session == nil || l.Session.Key != liveLock.SessionKey() || l.Session.LeaseSeconds != 10 || !l.Session.ItemPresent ||
		l.Session.RecordVersionNumber == "" || l.SessionItem || l.LeaseSeconds != 31536000 || l.Holder.State != holderUnknown {
		t.Errorf("carol's lock: %+v (session %+v)", l, l.Session)
	}
	s := got[liveLock.SessionKey()]
	if !s.SessionItem || s.Session != nil || s.Owner != "carol" || s.LeaseSeconds != 10 {
		t.Errorf("carol's session item: %+v", s)
	}
	d := got["dead-job"]
	wantDead := holderJSON{State: holderPresumedDead, Evidence: evidenceSession, Detail: "its session item is gone"}
	if d.Session == nil || d.Session.ItemPresent || d.Session.RecordVersionNumber != "" || d.Session.LeaseSeconds != 180 || d.Holder != wantDead {
		t.Errorf("dave's lock: %+v (session %+v); want its session item gone and holder %+v", d, d.Session, wantDead)
	}

	r := f.run("ls")
	rows := map[string][]string{}
	for _, row := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		c := cells(row)
		rows[c[0]] = c
	}
	if c := rows["live-job"]; len(c) != 8 || c[4] != "10s (session)" {
		t.Errorf("ls row of carol's lock %q: want LEASE 10s (session): %v", c, r)
	}
	if c := rows["dead-job"]; len(c) != 8 || c[3] != "presumed dead (its session item is gone)" || c[4] != "3m0s (session)" {
		t.Errorf("ls row of dave's lock %q: %v", c, r)
	}
	if c := rows[liveLock.SessionKey()]; len(c) != 8 || c[2] != "carol (session item)" || c[4] != "10s" {
		t.Errorf("ls row of carol's session item %q: %v", c, r)
	}

	// carol's session heartbeats every 100ms: a 2s watch spans twenty
	// heartbeat periods, so even a loaded machine sees one. dave's lock
	// has no session item.
	got = byKey(decodeLocks(t, f.run("ls", "--json", "--watch", "2s")))
	wantLive := holderJSON{State: holderLive, Evidence: evidenceWatch, Detail: "session heartbeated during the 2s watch"}
	if h := got["live-job"].Holder; h != wantLive {
		t.Errorf("carol's lock by watch: %+v; want %+v", h, wantLive)
	}
	if h := got["dead-job"].Holder; h.State != holderPresumedDead || h.Detail != "its session item is gone" {
		t.Errorf("dave's lock by watch: %+v; want presumed dead, its session item gone", h)
	}
	if h := got[liveLock.SessionKey()].Holder; h.State != holderLive {
		t.Errorf("carol's session item by watch: %+v; want live", h)
	}

	r = f.run("get", "dead-job")
	fields := map[string]string{}
	for line := range strings.Lines(r.stdout) {
		label, value, _ := strings.Cut(strings.TrimSpace(line), "  ")
		fields[label] = strings.TrimSpace(value)
	}
	if r.code != 0 || fields["session"] != deadLock.SessionKey() || fields["lease"] != "3m0s (session)" ||
		!strings.HasPrefix(fields["session item"], "gone") || fields["holder"] != "presumed dead (its session item is gone)" ||
		!strings.HasPrefix(fields["lock item lease"], "8760h0m0s") {
		t.Errorf("get of dave's lock: %v", r)
	}
	r = f.run("get", "live-job", "--json")
	var one lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || one.Session == nil || !one.Session.ItemPresent || one.Session.Key != liveLock.SessionKey() {
		t.Errorf("get --json of carol's lock: %v (%v)", r, err)
	}
}

// stolenWithin waits for a lock to be lost, and checks that it was lost
// as stolen.
func stolenWithin(t *testing.T, what string, l *ddblock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the holder did not learn of the removal at its heartbeats", what)
	}
	if code := ddblock.CodeOf(l.Err()); code != ddblock.CodeLockStolen {
		t.Errorf("%s: the holder's lock ended with %v; want %s", what, l.Err(), ddblock.CodeLockStolen)
	}
}

// release --force leaves a session's lock alone while its session item is
// there (exit 75, pointing at --with-session); --with-session removes the
// session item, then the lock, and the holder learns of it; a session
// item itself can be removed, after which its lock is presumed dead and
// removed without --with-session; a 'ddblock run --session' holder stops
// its command and exits 76.
func TestReleaseSession(t *testing.T) {
	f := newFixture(t)
	// Heartbeats every 100ms: releases race them, and must not fail
	// for that.
	carol := f.sessionHolder("carol", 10*time.Second, 100*time.Millisecond)
	job := f.acquireWith(carol, "job")

	r := f.run("release", "--force", "job")
	if r.code != exitBusy {
		t.Errorf("release --force of a session's lock: want exit %d: %v", exitBusy, r)
	}
	oneLineOn(t, r, "attached to session "+job.SessionKey()+", whose item is there")
	if !strings.Contains(r.stderr, "--with-session") || !strings.Contains(r.stdout, "attached to session "+job.SessionKey()) {
		t.Errorf("release --force of a session's lock does not offer --with-session or name the session: %v", r)
	}
	if info := f.lookup("job", "-"); info == nil || info.Session == nil || info.Session.Item == nil {
		t.Fatalf("after a refused release, the lock or its session item is gone: %+v", info)
	}
	if job.Err() != nil {
		t.Fatalf("after a refused release, the holder's lock ended: %v", job.Err())
	}

	r = f.run("release", "--force", "--with-session", "job")
	if r.code != 0 || !strings.Contains(r.stdout, "removed session item \""+job.SessionKey()+"\"/\"-\"\n") ||
		!strings.Contains(r.stdout, "loses every lock attached to it") || !strings.HasSuffix(r.stdout, "removed lock \"job\"/\"-\"\n") {
		t.Errorf("release --force --with-session: %v", r)
	}
	if info := f.lookup("job", "-"); info != nil {
		t.Errorf("the lock is still there after release --with-session: %+v", info)
	}
	if s := f.lookup(job.SessionKey(), "-"); s != nil {
		t.Errorf("the session item is still there after release --with-session: %+v", s)
	}
	stolenWithin(t, "release --with-session", job)

	// The session item alone: the lock stays, its holder is presumed
	// dead, and it is removed then without --with-session.
	dave := f.sessionHolder("dave", 10*time.Second, 100*time.Millisecond)
	other := f.acquireWith(dave, "other")
	r = f.run("release", "--force", other.SessionKey())
	if r.code != 0 || !strings.HasPrefix(r.stdout, strconv.Quote(other.SessionKey())+"/\"-\" is the session item of dave") ||
		!strings.Contains(r.stdout, "removed session item") {
		t.Errorf("release --force of a session item: %v", r)
	}
	if s := f.lookup(other.SessionKey(), "-"); s != nil {
		t.Errorf("the session item is still there after its release: %+v", s)
	}
	stolenWithin(t, "release of the session item", other)
	got := decodeLocks(t, f.run("ls", "--json"))
	if len(got) != 1 || got[0].Key != "other" || got[0].Session == nil || got[0].Session.ItemPresent ||
		got[0].Holder.State != holderPresumedDead {
		t.Errorf("ls after the session item's release: %+v; want the lock alone, its session item gone", got)
	}
	if r = f.run("release", "--force", "other"); r.code != 0 || !strings.Contains(r.stdout, "session item gone") ||
		!strings.HasSuffix(r.stdout, "removed lock \"other\"/\"-\"\n") {
		t.Errorf("release --force of a lock whose session item is gone: %v", r)
	}
	if r = f.run("release", "--force", "ddblock_session#00000000000000000000000000000000"); r.code != exitNotFound {
		t.Errorf("release --force of a missing session item: want exit %d: %v", exitNotFound, r)
	}

	// --with-session on a lock without a session removes just the lock.
	f.acquire("erin", "plain")
	if r = f.run("release", "--force", "--with-session", "plain"); r.code != 0 ||
		!strings.Contains(r.stdout, "not attached to a session") || f.lookup("plain", "-") != nil {
		t.Errorf("release --force --with-session of a lock without a session: %v", r)
	}

	// A 'ddblock run --session' holder learns at its next heartbeat.
	dir := t.TempDir()
	marks := filepath.Join(dir, "marks")
	run := f.start("run", append(slices.Clone(timingFlags), "--session", "--owner", "runner", "nightly", "--",
		"sh", "-c", waitForFileScript, "sh", "R", marks, filepath.Join(dir, "env"), filepath.Join(dir, "never"))...)
	run.eventuallyWhileRunning("the run's command to start", func() bool { return strings.Contains(readFile(t, marks), "start R") })
	if r = f.run("release", "--force", "--with-session", "nightly"); r.code != 0 {
		t.Errorf("release --force --with-session of a run's lock: %v", r)
	}
	if res := run.wait(); res.code != exitLockLost {
		t.Errorf("the run whose session was removed: want exit %d: %v", exitLockLost, res)
	}
}
