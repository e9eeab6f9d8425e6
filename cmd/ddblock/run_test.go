package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// marker is a line a test command appends to a file: "start A <time>".
type marker struct {
	event, who string
	at         time.Time
	pid        int // the shell's, which may exec the real work
}

func readMarkers(t *testing.T, path string) []marker {
	t.Helper()
	var out []marker
	for line := range strings.Lines(readFile(t, path)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Fatalf("bad marker line %q", line)
		}
		secs, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			t.Fatalf("bad time in %q: %v", line, err)
		}
		m := marker{event: f[0], who: f[1], at: time.Unix(0, int64(secs*1e9))}
		if len(f) > 3 {
			m.pid, _ = strconv.Atoi(f[3])
		}
		out = append(out, m)
	}
	return out
}

// markScript appends "EVENT $1 <now>" to the file $2 (its arguments).
func markScript(event string) string {
	return `echo "` + event + ` $1 $(date +%s.%N) $$" >> "$2"`
}

// Two runs of one key started together never overlap: one waits, saying
// whom for, and runs once the other's command has ended and released the
// lock. Each command runs longer than the lease: heartbeats keep the lock.
func TestRunTwoRunsNeverOverlap(t *testing.T) {
	f := newFixture(t)
	marks := filepath.Join(t.TempDir(), "marks")
	script := markScript("start") + "; sleep 1.5; " + markScript("end")
	var procs []*proc
	for _, who := range []string{"A", "B"} {
		args := append(slices.Clone(timingFlags), "--owner", "owner-"+who, "--wait", "30s", "job", "--", "sh", "-c", script, "sh", who, marks)
		procs = append(procs, f.start("run", args...))
	}
	var results []result
	for _, p := range procs {
		r := p.wait()
		if r.code != 0 {
			t.Fatalf("a run failed: %v", r)
		}
		results = append(results, r)
	}
	m := readMarkers(t, marks)
	if len(m) != 4 {
		t.Fatalf("want 4 markers, got %v", m)
	}
	first, second := m[0].who, m[2].who
	if m[0].event != "start" || m[1].event != "end" || m[1].who != first ||
		m[2].event != "start" || m[3].event != "end" || m[3].who != second || first == second {
		t.Fatalf("the commands overlapped or ran twice: %v", m)
	}
	if m[2].at.Before(m[1].at) {
		t.Errorf("%s started at %v, before %s ended at %v", second, m[2].at, first, m[1].at)
	}
	waiter := results[slices.Index([]string{"A", "B"}, second)]
	if !strings.Contains(waiter.stderr, "is held by owner-"+first) || !strings.Contains(waiter.stderr, "waiting up to 30s") {
		t.Errorf("the waiting run did not say whom it waited for:\n%s", waiter.stderr)
	}
	if info := f.lookup("job", "-"); info != nil {
		t.Errorf("the lock is still in the table after both runs: %+v", info)
	}
}

// When the holding ddblock is killed (SIGKILL, no release), its command
// dies with it, and a waiting run takes the lock over once the dead
// holder's lease has passed without a heartbeat.
func TestRunTakesOverFromKilledHolder(t *testing.T) {
	f := newFixture(t)
	marks := filepath.Join(t.TempDir(), "marks")
	a := f.start("run", append(slices.Clone(timingFlags), "--owner", "owner-A", "job", "--",
		"sh", "-c", markScript("start")+"; exec sleep 60", "sh", "A", marks)...)
	a.eventuallyWhileRunning("A's command to start", func() bool { return strings.Contains(readFile(t, marks), "start A") })
	childPid := readMarkers(t, marks)[0].pid
	if childPid <= 0 {
		t.Fatalf("no pid in the marker: %q", readFile(t, marks))
	}
	t.Cleanup(func() {
		if !processGone(childPid) {
			_ = syscall.Kill(childPid, syscall.SIGKILL)
		}
	})

	b := f.start("run", append(slices.Clone(timingFlags), "--owner", "owner-B", "--wait", "30s", "job", "--",
		"sh", "-c", markScript("start"), "sh", "B", marks)...)
	b.eventuallyWhileRunning("B to wait for A", func() bool { return strings.Contains(b.stderr.String(), "is held by owner-A") })
	killed := time.Now()
	a.signal(syscall.SIGKILL)
	if r := a.wait(); r.code != -1 {
		t.Errorf("A should have died of SIGKILL: %v", r)
	}
	eventually(t, "A's command to die with A", func() bool { return processGone(childPid) })

	r := b.wait()
	if r.code != 0 || !strings.Contains(r.stderr, "acquired lock") {
		t.Fatalf("B did not take over: %v", r)
	}
	m := readMarkers(t, marks)
	if len(m) != 2 || m[1].who != "B" {
		t.Fatalf("markers: %v", m)
	}
	// A's last heartbeat was at most a safe period before it died (or
	// its command would have been stopped); B must then still wait out
	// the rest of the lease.
	if waited := m[1].at.Sub(killed); waited < testLease-testSafe {
		t.Errorf("B started %v after A was killed, less than the %v left of A's lease", waited, testLease-testSafe)
	}
}

// ddblock run exits with its command's status, shell style, and releases
// the lock however the command ended.
func TestRunExitStatus(t *testing.T) {
	f := newFixture(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		command []string
		want    int
		stderr  string
	}{
		{"success", []string{"true"}, 0, ""},
		{"failure", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"high status", []string{"sh", "-c", "exit 125"}, 125, ""},
		{"killed by a signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM), ""},
		{"not found", []string{"ddblock-no-such-command"}, 127, "command not found: ddblock-no-such-command"},
		{"no such path", []string{"/nonexistent/ddblock-cmd"}, 127, "command not found: /nonexistent/ddblock-cmd"},
		{"not executable", []string{notExec}, 126, "cannot run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.run("run", append(append(slices.Clone(timingFlags), "job", "--"), tt.command...)...)
			if r.code != tt.want {
				t.Fatalf("want exit %d: %v", tt.want, r)
			}
			if tt.stderr != "" {
				oneLineOn(t, r, tt.stderr)
			}
			if info := f.lookup("job", "-"); info != nil {
				t.Errorf("lock left in the table: %+v", info)
			}
		})
	}
}

// A lock held elsewhere: --wait 0 tries once, --wait D gives up after D;
// both exit 75, name the holder, and never run the command.
func TestRunLockNotAcquired(t *testing.T) {
	f := newFixture(t)
	f.acquire("someone-else", "job")
	ran := filepath.Join(t.TempDir(), "ran")
	command := []string{"sh", "-c", "touch " + ran}

	r := f.run("run", append(append(slices.Clone(timingFlags), "--wait", "0", "job", "--"), command...)...)
	if r.code != exitBusy {
		t.Fatalf("--wait 0: want exit %d: %v", exitBusy, r)
	}
	oneLineOn(t, r, "is held by someone-else (lease 3m0s); not waiting (--wait 0)")

	r = f.run("run", append(append(slices.Clone(timingFlags), "--wait", "400ms", "job", "--"), command...)...)
	if r.code != exitBusy {
		t.Fatalf("--wait 400ms: want exit %d: %v", exitBusy, r)
	}
	if !strings.Contains(r.stderr, "waiting up to 400ms") || !strings.Contains(r.stderr, "not acquired within 400ms: held by someone-else") {
		t.Errorf("stderr: %s", r.stderr)
	}
	if readFile(t, ran) != "" || fileExists(ran) {
		t.Error("the command ran without the lock")
	}
	if info := f.lookup("job", "-"); info == nil || info.OwnerName != "someone-else" {
		t.Errorf("the holder's lock changed: %+v", info)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// trapScript marks its start, and on SIGTERM marks that too and exits 0;
// it loops on short sleeps so that the shell runs its trap promptly.
const trapScript = `trap 'echo TERM >> "$1"; exit 0' TERM; echo started >> "$1"; while :; do sleep 0.05; done`

// The lock is lost while the command runs: the command is told with
// SIGTERM (then SIGKILL if it does not stop), and ddblock exits 76 even
// though the command itself exited 0.
func TestRunLockLost(t *testing.T) {
	t.Run("force released by an operator", func(t *testing.T) {
		f := newFixture(t)
		marks := filepath.Join(t.TempDir(), "marks")
		p := f.start("run", append(slices.Clone(timingFlags), "--owner", "runner", "job", "--", "sh", "-c", trapScript, "sh", marks)...)
		p.eventuallyWhileRunning("the command to start", func() bool { return strings.Contains(readFile(t, marks), "started") })

		// The holder heartbeats every 250 ms, so the force release's
		// delete (conditioned on the version it read) may meet a newer
		// version: it then exits 75, and an operator runs it again.
		rel := f.run("release", "job", "--force")
		for try := 1; rel.code == exitBusy && try < 20; try++ {
			rel = f.run("release", "job", "--force")
		}
		if rel.code != 0 || !strings.Contains(rel.stdout, "held by runner") {
			t.Fatalf("release --force: %v", rel)
		}
		r := p.wait()
		if r.code != exitLockLost {
			t.Fatalf("want exit %d: %v", exitLockLost, r)
		}
		if !strings.Contains(r.stderr, "LOCK_STOLEN") {
			t.Errorf("stderr does not say the lock was stolen:\n%s", r.stderr)
		}
		if !strings.Contains(readFile(t, marks), "TERM") {
			t.Error("the command never got SIGTERM")
		}
	})

	t.Run("overwritten, and the command ignores SIGTERM", func(t *testing.T) {
		f := newFixture(t)
		marks := filepath.Join(t.TempDir(), "marks")
		script := `trap '' TERM; echo started >> "$1"; while :; do sleep 0.05; done`
		p := f.start("run", append(slices.Clone(timingFlags), "--grace", "200ms", "job", "--", "sh", "-c", script, "sh", marks)...)
		p.eventuallyWhileRunning("the command to start", func() bool { return strings.Contains(readFile(t, marks), "started") })

		// Someone else's item replaces ours, as a buggy client might do.
		_, err := sdk.PutItem(context.Background(), &dynamodb.PutItemInput{
			TableName: aws.String(f.table),
			Item: map[string]types.AttributeValue{
				"lock_key":              &types.AttributeValueMemberS{Value: "job"},
				"sort_key":              &types.AttributeValueMemberS{Value: "-"},
				"owner_name":            &types.AttributeValueMemberS{Value: "intruder"},
				"lease_duration":        &types.AttributeValueMemberN{Value: "30"},
				"record_version_number": &types.AttributeValueMemberS{Value: "11111111-2222-4333-8444-555555555555"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		r := p.wait()
		if r.code != exitLockLost {
			t.Fatalf("want exit %d: %v", exitLockLost, r)
		}
		if !strings.Contains(r.stderr, "LOCK_STOLEN") || !strings.Contains(r.stderr, "sending SIGKILL") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
		if info := f.lookup("job", "-"); info == nil || info.OwnerName != "intruder" {
			t.Errorf("ddblock removed the new holder's lock: %+v", info)
		}
	})

	t.Run("in danger when heartbeats fail", func(t *testing.T) {
		needServer(t)
		if server.External {
			t.Skip("the proxy speaks plain HTTP to a local server")
		}
		f := newFixture(t)
		proxy := newCutProxy(t, strings.TrimPrefix(server.Endpoint, "http://"))
		f.endpoint = proxy.endpoint()
		marks := filepath.Join(t.TempDir(), "marks")
		p := f.start("run", append(slices.Clone(timingFlags), "job", "--", "sh", "-c", trapScript, "sh", marks)...)
		p.eventuallyWhileRunning("the command to start", func() bool { return strings.Contains(readFile(t, marks), "started") })

		proxy.sever()
		r := p.wait()
		if r.code != exitLockLost {
			t.Fatalf("want exit %d: %v", exitLockLost, r)
		}
		if !strings.Contains(r.stderr, "LOCK_IN_DANGER") {
			t.Errorf("stderr does not say the lock was in danger:\n%s", r.stderr)
		}
		if !strings.Contains(readFile(t, marks), "TERM") {
			t.Error("the command never got SIGTERM")
		}
	})
}

// Signals sent to ddblock reach the command, whose status ddblock then
// returns; a signal while waiting ends the wait without running anything.
func TestRunSignals(t *testing.T) {
	t.Run("forwarded to the command", func(t *testing.T) {
		f := newFixture(t)
		marks := filepath.Join(t.TempDir(), "marks")
		script := `trap 'echo HUP >> "$1"; exit 7' HUP; echo started >> "$1"; while :; do sleep 0.05; done`
		p := f.start("run", append(slices.Clone(timingFlags), "job", "--", "sh", "-c", script, "sh", marks)...)
		p.eventuallyWhileRunning("the command to start", func() bool { return strings.Contains(readFile(t, marks), "started") })
		p.signal(syscall.SIGHUP)
		if r := p.wait(); r.code != 7 {
			t.Fatalf("want the command's exit 7: %v", r)
		}
		if !strings.Contains(readFile(t, marks), "HUP") {
			t.Error("the command never got SIGHUP")
		}
		if info := f.lookup("job", "-"); info != nil {
			t.Errorf("lock left in the table: %+v", info)
		}
	})

	t.Run("while waiting", func(t *testing.T) {
		f := newFixture(t)
		f.acquire("someone-else", "job")
		ran := filepath.Join(t.TempDir(), "ran")
		p := f.start("run", append(slices.Clone(timingFlags), "--wait", "30s", "job", "--", "touch", ran)...)
		p.eventuallyWhileRunning("ddblock to wait", func() bool { return strings.Contains(p.stderr.String(), "waiting up to 30s") })
		p.signal(syscall.SIGTERM)
		r := p.wait()
		if r.code != 128+int(syscall.SIGTERM) || !strings.Contains(r.stderr, "interrupted by terminated while waiting") {
			t.Fatalf("want exit 143 and a word on stderr: %v", r)
		}
		if fileExists(ran) {
			t.Error("the command ran")
		}
	})
}

// The command sees its lock in its environment; the SDK's own
// AWS_ENDPOINT_URL_DYNAMODB finds the server; a ddblock started by the
// command looks at the same table without being told.
func TestRunEnvironment(t *testing.T) {
	f := newFixture(t)
	f.env = append(f.env, "AWS_ENDPOINT_URL_DYNAMODB="+server.Endpoint, "DDBLOCK_BIN="+binPath)
	out := filepath.Join(t.TempDir(), "env")
	script := `env | grep '^DDBLOCK_' | grep -v '^DDBLOCK_BIN=' | sort > "$1"; "$DDBLOCK_BIN" get "$DDBLOCK_KEY" --sort-key "$DDBLOCK_SORT_KEY" --json >> "$1"`
	r := f.runRaw(append([]string{"run", "--table", f.table, "--owner", "me", "--sort-key", "eu", "--attr", "host=web-1"},
		append(slices.Clone(timingFlags), "nightly", "--", "sh", "-c", script, "sh", out)...)...)
	if r.code != 0 {
		t.Fatalf("run: %v", r)
	}
	// The nested ddblock get's JSON starts on a line of its own.
	lines, rest, _ := strings.Cut(readFile(t, out), "\n{")
	lines += "\n"
	want := `DDBLOCK_GUARD_CHECK=<guard>
DDBLOCK_KEY=nightly
DDBLOCK_OWNER=me
DDBLOCK_PARTITION_KEY_NAME=lock_key
DDBLOCK_RECORD_VERSION_NUMBER=<rvn>
DDBLOCK_SORT_KEY=eu
DDBLOCK_SORT_KEY_NAME=sort_key
DDBLOCK_TABLE=` + f.table + `
DDBLOCK_TENURE=<tenure>
`
	rvn := regexp.MustCompile(`(?m)^DDBLOCK_RECORD_VERSION_NUMBER=[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	got := rvn.ReplaceAllString(lines, "DDBLOCK_RECORD_VERSION_NUMBER=<rvn>")
	// TestRunGuardedWrite checks these two.
	got = regexp.MustCompile(`(?m)^DDBLOCK_GUARD_CHECK=\{.*\}$`).ReplaceAllString(got, "DDBLOCK_GUARD_CHECK=<guard>")
	got = regexp.MustCompile(`(?m)^DDBLOCK_TENURE=.+$`).ReplaceAllString(got, "DDBLOCK_TENURE=<tenure>")
	if got != want {
		t.Errorf("the command's environment:\n%s\nwant:\n%s", got, want)
	}
	var seen lockJSON
	if err := json.Unmarshal([]byte("{"+rest), &seen); err != nil {
		t.Fatalf("the nested ddblock get printed %q: %v", rest, err)
	}
	if seen.Key != "nightly" || seen.SortKey != "eu" || seen.Owner != "me" || seen.Attributes["host"] != "web-1" {
		t.Errorf("the lock as the command saw it: %+v", seen)
	}
}

// With --fencing-token every run's lock carries a token greater than all
// earlier ones of the key, and the command gets it in its environment.
func TestRunFencingToken(t *testing.T) {
	f := newFixture(t)
	f.env = append(f.env, "DDBLOCK_BIN="+binPath)
	dir := t.TempDir()
	script := `echo "$DDBLOCK_FENCING_TOKEN" > "$1"; "$DDBLOCK_BIN" get --endpoint "$2" "$DDBLOCK_KEY" --json >> "$1"`
	token := func(i int, flags ...string) int64 {
		t.Helper()
		out := filepath.Join(dir, strconv.Itoa(i))
		args := append(append(slices.Clone(timingFlags), flags...), "job", "--", "sh", "-c", script, "sh", out, f.endpoint)
		if r := f.run("run", args...); r.code != 0 {
			t.Fatalf("run %d: %v", i, r)
		}
		env, js, _ := strings.Cut(readFile(t, out), "\n")
		n, err := strconv.ParseInt(env, 10, 64)
		if err != nil {
			t.Fatalf("run %d: DDBLOCK_FENCING_TOKEN=%q", i, env)
		}
		var seen lockJSON
		if err := json.Unmarshal([]byte(js), &seen); err != nil || seen.FencingToken != n {
			t.Errorf("run %d: the table showed %+v (%v), want fencing token %d", i, seen, err, n)
		}
		return n
	}
	first := token(1, "--fencing-token")
	second := token(2, "--fencing-token")
	if first <= 0 || second <= first {
		t.Errorf("fencing tokens %d then %d: want positive and increasing", first, second)
	}
	// The kept item goes on counting for a run without the flag.
	if third := token(3); third <= second {
		t.Errorf("fencing token %d after %d", third, second)
	}
}

// With --max-clock-skew, a run that arrives after a crashed holder's
// stamp plus lease plus skew has passed takes the lock at once (even with
// --wait 0), and its command learns whom it took over from.
func TestRunFastTakeover(t *testing.T) {
	f := newFixture(t)
	skew := []string{"--max-clock-skew", "100ms"}
	marks := filepath.Join(t.TempDir(), "marks")
	a := f.start("run", append(append(slices.Clone(timingFlags), skew...), "--owner", "crashed", "job", "--",
		"sh", "-c", markScript("start")+"; exec sleep 60", "sh", "A", marks)...)
	a.eventuallyWhileRunning("A's command to start", func() bool { return strings.Contains(readFile(t, marks), "start A") })
	childPid := readMarkers(t, marks)[0].pid
	t.Cleanup(func() {
		if !processGone(childPid) {
			_ = syscall.Kill(childPid, syscall.SIGKILL)
		}
	})
	a.signal(syscall.SIGKILL)
	a.wait()
	// Without the option, a newcomer must watch the dead lock for a lease.
	if r := f.run("run", append(slices.Clone(timingFlags), "--wait", "0", "job", "--", "true")...); r.code != exitBusy {
		t.Fatalf("without --max-clock-skew, right after the crash: want exit %d: %v", exitBusy, r)
	}
	// Past the stamp + lease + skew the newcomer needs no watching. (The
	// lease itself must pass: this waits on the real clock of processes.)
	time.Sleep(testLease + 300*time.Millisecond)
	out := filepath.Join(t.TempDir(), "from")
	r := f.run("run", append(append(slices.Clone(timingFlags), skew...), "--wait", "0", "job", "--",
		"sh", "-c", `echo "$DDBLOCK_TAKEN_OVER_FROM" > "$1"`, "sh", out)...)
	if r.code != 0 {
		t.Fatalf("with --max-clock-skew after the stamp aged: %v", r)
	}
	if got := strings.TrimSpace(readFile(t, out)); got != "crashed" {
		t.Errorf("DDBLOCK_TAKEN_OVER_FROM=%q; want crashed", got)
	}
}

// ensure-table creates a missing table on demand, accepts it the next
// time, and refuses one with other keys, saying what differs.
func TestEnsureTable(t *testing.T) {
	f := newFixture(t)
	f.table += "_new"
	r := f.run("ensure-table", "--poll-interval", "10ms")
	if r.code != 0 || !strings.Contains(r.stdout, "created") || !strings.Contains(r.stdout, "on-demand") {
		t.Fatalf("ensure-table of a missing table: %v", r)
	}
	if r := f.run("ensure-table"); r.code != 0 || !strings.Contains(r.stdout, "exists already") {
		t.Errorf("ensure-table again: %v", r)
	}
	r = f.run("ensure-table", "--partition-key-name", "id")
	if r.code != exitConfig || !strings.Contains(r.stderr, `partition key is "lock_key", want "id"`) {
		t.Errorf("ensure-table with other keys: %v", r)
	}
}

// A holder's owner name comes from the table, where any writer may have
// put a NUL byte, which no environment can hold: a run that takes such a
// lock over still runs its command, and gives it the name percent-encoded
// and named in DDBLOCK_ENCODED.
func TestRunTakeoverFromAnOwnerWithANul(t *testing.T) {
	f := newFixture(t)
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	// A crashed holder's item, its heartbeat stamped an hour ago.
	_, err := sdk.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: map[string]types.AttributeValue{
		"lock_key": s("job"), "sort_key": s("-"),
		"owner_name":            s("cra\x00shed 100%"),
		"lease_duration":        &types.AttributeValueMemberN{Value: "1"},
		"record_version_number": s("rvn-1"),
		"ddblock_heartbeat_ms":  &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "from")
	r := f.run("run", append(slices.Clone(timingFlags), "--max-clock-skew", "100ms", "--wait", "0", "job", "--",
		"sh", "-c", `printf '%s|%s' "$DDBLOCK_TAKEN_OVER_FROM" "$DDBLOCK_ENCODED" > "$1"`, "sh", out)...)
	if r.code != 0 {
		t.Fatalf("taking over from an owner name with a NUL: %v", r)
	}
	if got, want := readFile(t, out), "cra%00shed 100%25|DDBLOCK_TAKEN_OVER_FROM"; got != want {
		t.Errorf("DDBLOCK_TAKEN_OVER_FROM|DDBLOCK_ENCODED = %q; want %q", got, want)
	}
}
