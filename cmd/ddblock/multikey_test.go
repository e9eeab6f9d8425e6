package main

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// `ddblock run --key K2 --key K3 KEY -- COMMAND` holds every key for the
// command, taken together in one transaction: all or none.

// incrementAll adds one to the counter in one transaction guarded by
// every check of checks (DDBLOCK_GUARD_CHECKS, as the AWS CLI reads it).
func (c counter) incrementAll(t *testing.T, checks string) error {
	t.Helper()
	var guards []cliCheck
	d := json.NewDecoder(strings.NewReader(checks))
	d.DisallowUnknownFields()
	if err := d.Decode(&guards); err != nil {
		t.Fatalf("DDBLOCK_GUARD_CHECKS=%s: %v", checks, err)
	}
	var items []types.TransactWriteItem
	for _, g := range guards {
		items = append(items, g.guardItem())
	}
	items = append(items, types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(c.f.table),
		Key:                       c.key,
		UpdateExpression:          aws.String("ADD #n :one"),
		ExpressionAttributeNames:  map[string]string{"#n": "n"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	}})
	_, err := sdk.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{TransactItems: items})
	return err
}

// lockOf is the environment of one lock of a run of several keys, as the
// variables of a run of one key name it.
func lockOf(env map[string]string, i int) map[string]string {
	n := "_" + strconv.Itoa(i)
	one := map[string]string{}
	for _, k := range []string{"DDBLOCK_TABLE", "DDBLOCK_PARTITION_KEY_NAME", "DDBLOCK_SORT_KEY_NAME", "DDBLOCK_SORT_KEY", "DDBLOCK_OWNER"} {
		one[k] = env[k]
	}
	for _, k := range []string{"DDBLOCK_KEY", "DDBLOCK_TENURE", "DDBLOCK_GUARD_CHECK", "DDBLOCK_RECORD_VERSION_NUMBER", "DDBLOCK_FENCING_TOKEN"} {
		if v, ok := env[k+n]; ok {
			one[k] = v
		}
	}
	return one
}

// A run of three keys holds all three while its command runs: nobody
// else takes any, the command's environment names each lock and guards
// a write by all of them at once, and the run ends with the command's
// status, releasing every lock. On dynalite, which has no transactions,
// the run says so, exits 69 and writes nothing.
func TestRunSeveralKeys(t *testing.T) {
	needServer(t)
	keys := []string{"a", "b", "c"}
	if !server.HasTransactions() {
		f := newFixture(t)
		ran := filepath.Join(t.TempDir(), "ran")
		r := f.run("run", "--key", "b", "--key", "c", "a", "--", "touch", ran)
		if r.code != exitUnavailable {
			t.Fatalf("a run of several keys on %s: want exit %d: %v", server.Name(), exitUnavailable, r)
		}
		oneLineOn(t, r, "one DynamoDB transaction, and this server has none")
		if fileExists(ran) {
			t.Error("the command ran")
		}
		for _, k := range keys {
			if info := f.lookup(k, "-"); info != nil {
				t.Errorf("lock %q written: %+v", k, info)
			}
		}
		return
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "plain"},
		{name: "fencing tokens", args: []string{"--fencing-token"}},
		{name: "session", args: []string{"--session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			run := f.startHeld("a", append([]string{"--owner", "me", "--key", "b", "--key", "c"}, tc.args...)...)
			env := run.env
			if env["DDBLOCK_KEYS"] != "3" || env["DDBLOCK_KEY"] != "a" {
				t.Errorf("DDBLOCK_KEYS=%q DDBLOCK_KEY=%q, want 3 and a", env["DDBLOCK_KEYS"], env["DDBLOCK_KEY"])
			}
			if env["DDBLOCK_GUARD_CHECK"] != env["DDBLOCK_GUARD_CHECK_0"] || env["DDBLOCK_TENURE"] != env["DDBLOCK_TENURE_0"] {
				t.Errorf("the first key's variables differ from its indexed ones: %v", env)
			}
			var checks []json.RawMessage
			if err := json.Unmarshal([]byte(env["DDBLOCK_GUARD_CHECKS"]), &checks); err != nil || len(checks) != len(keys) {
				t.Fatalf("DDBLOCK_GUARD_CHECKS=%s: %v; want a JSON array of %d", env["DDBLOCK_GUARD_CHECKS"], err, len(keys))
			}
			for i, k := range keys {
				one := lockOf(env, i)
				if one["DDBLOCK_KEY"] != k {
					t.Errorf("DDBLOCK_KEY_%d=%q, want %q", i, one["DDBLOCK_KEY"], k)
				}
				if tenure := f.itemTenure(one); one["DDBLOCK_TENURE"] == "" || one["DDBLOCK_TENURE"] != tenure {
					t.Errorf("DDBLOCK_TENURE_%d=%q, the item's %q", i, one["DDBLOCK_TENURE"], tenure)
				}
				got := parseGuardCheck(t, one["DDBLOCK_GUARD_CHECK"])
				got.ConditionCheck.ReturnValuesOnConditionCheckFailure = ""
				if want := documentedCheck(one); !reflect.DeepEqual(got, want) {
					t.Errorf("DDBLOCK_GUARD_CHECK_%d=%s, want the documented condition %+v", i, one["DDBLOCK_GUARD_CHECK"], want)
				}
				if string(checks[i]) != one["DDBLOCK_GUARD_CHECK"] {
					t.Errorf("DDBLOCK_GUARD_CHECKS[%d]=%s, DDBLOCK_GUARD_CHECK_%d=%s: want the same", i, checks[i], i, one["DDBLOCK_GUARD_CHECK"])
				}
				_, fenced := one["DDBLOCK_FENCING_TOKEN"]
				if fenced != slices.Contains(tc.args, "--fencing-token") {
					t.Errorf("DDBLOCK_FENCING_TOKEN_%d=%q with flags %v", i, one["DDBLOCK_FENCING_TOKEN"], tc.args)
				}
				if info := f.lookup(k, "-"); info == nil || info.OwnerName != env["DDBLOCK_OWNER"] {
					t.Errorf("lock %q while the run holds it: %+v", k, info)
				}
			}

			// Nobody else takes any of the keys meanwhile.
			for _, k := range keys {
				if r := f.run("run", "--wait", "0", k, "--", "true"); r.code != exitBusy || !strings.Contains(r.stderr, "is held by me") {
					t.Errorf("another run of %q while the keys are held: %v; want exit %d, held by me", k, r, exitBusy)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := f.holder("other").AcquireLocks(ctx, []string{"c", "d"}, ddblock.WithRetryTimeout(0)); !errors.Is(err, ddblock.CodeAcquireTimeout) {
				t.Errorf("a library client's AcquireLocks of c and d while the run holds c: %v; want ACQUIRE_TIMEOUT", err)
			}

			c := f.counter(env["DDBLOCK_PARTITION_KEY_NAME"], env["DDBLOCK_SORT_KEY_NAME"])
			if err := c.incrementAll(t, env["DDBLOCK_GUARD_CHECKS"]); err != nil {
				t.Fatalf("a write guarded by every lock while the run holds them: %v", err)
			}
			if r := run.end(t); r.code != 0 {
				t.Fatalf("run: %v", r)
			}
			for _, k := range keys {
				if info := f.lookup(k, "-"); info != nil && !info.Released {
					t.Errorf("lock %q after the run: %+v; want it released", k, info)
				}
			}
			if err := c.incrementAll(t, env["DDBLOCK_GUARD_CHECKS"]); err == nil {
				t.Error("a write guarded by every lock committed after the run released them")
			}
			if got := c.value(t); got != "1" {
				t.Errorf("counter %q, want 1", got)
			}
		})
	}
}

// A run of several keys exits with its command's status, and releases
// every lock.
func TestRunSeveralKeysExitStatus(t *testing.T) {
	needServer(t)
	if !server.HasTransactions() {
		t.Skip(server.Name() + " has no transactions (TestRunSeveralKeys checks the refusal)")
	}
	f := newFixture(t)
	r := f.run("run", append(slices.Clone(timingFlags), "--key", "y", "x", "--", "sh", "-c", "exit 3")...)
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3 and nothing on stderr: %v", r)
	}
	for _, k := range []string{"x", "y"} {
		if info := f.lookup(k, "-"); info != nil {
			t.Errorf("lock %q after the run: %+v; want it gone", k, info)
		}
	}
}

// A run whose keys overlap a held key takes none of them: with --wait 0
// or a short wait it exits 75, saying which key is held and by whom, and
// writes nothing at the free keys; a run that waits takes them all once
// the held key is released.
func TestRunSeveralKeysWait(t *testing.T) {
	needServer(t)
	if !server.HasTransactions() {
		t.Skip(server.Name() + " has no transactions (TestRunSeveralKeys checks the refusal)")
	}
	f := newFixture(t)
	lock := f.acquire("someone-else", "b")
	ran := filepath.Join(t.TempDir(), "ran")
	args := func(wait string) []string {
		return append(slices.Clone(timingFlags), "--wait", wait, "--key", "b", "--key", "c", "a", "--", "touch", ran)
	}

	r := f.run("run", args("0")...)
	if r.code != exitBusy {
		t.Fatalf("--wait 0: want exit %d: %v", exitBusy, r)
	}
	oneLineOn(t, r, `locks "a"/"-", "b"/"-", "c"/"-" are not all free: "b"/"-" is held by someone-else (lease 3m0s); not waiting (--wait 0)`)

	r = f.run("run", args("400ms")...)
	if r.code != exitBusy || !strings.Contains(r.stderr, "waiting up to 400ms") ||
		!strings.Contains(r.stderr, `not acquired within 400ms: "b"/"-" is held by someone-else`) {
		t.Fatalf("--wait 400ms: want exit %d, saying who holds b: %v", exitBusy, r)
	}
	if fileExists(ran) {
		t.Error("the command ran without the locks")
	}
	for _, k := range []string{"a", "c"} {
		if info := f.lookup(k, "-"); info != nil {
			t.Errorf("lock %q written by a run that did not get b: %+v", k, info)
		}
	}

	p := f.start("run", args("30s")...)
	p.eventuallyWhileRunning("the run to say it waits", func() bool { return strings.Contains(p.stderr.String(), "waiting up to 30s") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r = p.wait()
	if r.code != 0 || !fileExists(ran) || !strings.Contains(r.stderr, `acquired locks "a"/"-", "b"/"-", "c"/"-" after`) {
		t.Fatalf("the waiting run once b was released: %v", r)
	}
}

// One lock of the set lost while the command runs (forced away by an
// operator) stops the command, and the run exits 76 naming that lock.
func TestRunSeveralKeysLockLost(t *testing.T) {
	needServer(t)
	if !server.HasTransactions() {
		t.Skip(server.Name() + " has no transactions (TestRunSeveralKeys checks the refusal)")
	}
	f := newFixture(t)
	marks := filepath.Join(t.TempDir(), "marks")
	p := f.start("run", append(slices.Clone(timingFlags), "--owner", "runner", "--key", "b", "a", "--", "sh", "-c", trapScript, "sh", marks)...)
	p.eventuallyWhileRunning("the command to start", func() bool { return strings.Contains(readFile(t, marks), "started") })

	// A heartbeat may change the item between the release's read and
	// its delete: it then exits 75, and is run again.
	rel := f.run("release", "b", "--force")
	for try := 1; rel.code == exitBusy && try < 20; try++ {
		rel = f.run("release", "b", "--force")
	}
	if rel.code != 0 {
		t.Fatalf("release --force b: %v", rel)
	}
	r := p.wait()
	if r.code != exitLockLost || !strings.Contains(r.stderr, `lock "b"/"-" lost (LOCK_STOLEN)`) {
		t.Fatalf("want exit %d, saying lock b was stolen: %v", exitLockLost, r)
	}
	if !strings.Contains(readFile(t, marks), "TERM") {
		t.Error("the command never got SIGTERM")
	}
	if info := f.lookup("a", "-"); info != nil {
		t.Errorf("lock a after the run: %+v; want it released", info)
	}
}

// Usage errors of several keys exit 64 before anything is written, on
// either server: a key named twice, --key with --slots, an empty key,
// more keys than one transaction takes. --fair with several keys waits
// in the keys' lines.
func TestRunSeveralKeysUsage(t *testing.T) {
	f := newFixture(t)
	many := []string{}
	for i := range 100 {
		many = append(many, "--key", "k"+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a key twice", []string{"--key", "b", "--key", "a", "a"}, `key "a" is named twice`},
		{"slots", []string{"--slots", "2", "--key", "b", "a"}, "--key does not apply with --slots"},
		{"empty key", []string{"--key", "", "a"}, "--key must not be empty"},
		{"101 keys", append(many, "a"), "101 keys: one transaction takes at most 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.run("run", append(tc.args, "--", "true")...)
			if r.code != exitUsage {
				t.Fatalf("want exit %d: %v", exitUsage, r)
			}
			oneLineOn(t, r, tc.want)
		})
	}
	for _, k := range []string{"a", "b", "k0"} {
		if info := f.lookup(k, "-"); info != nil {
			t.Errorf("lock %q written by a refused run: %+v", k, info)
		}
	}

	t.Run("fair", func(t *testing.T) {
		// A set waits in its keys' lines: the run takes both keys, and
		// leaves no line behind (on dynalite: no transactions, 69).
		r := f.run("run", "--fair", "--wait", "5s", "--key", "b", "a", "--", "true")
		want := exitUnavailable
		if server.HasTransactions() {
			want = 0
		}
		if r.code != want {
			t.Fatalf("--fair with several keys: want exit %d: %v", want, r)
		}
		for _, k := range []string{"a", "b"} {
			if info := f.lookup(k, "-"); info != nil {
				t.Errorf("lock %q after the run: %+v", k, info)
			}
		}
	})
}

// With several locks the guard is told the earliest of their safe
// deadlines, whatever the keys' order: the command is safe only while
// every lock is.
func TestSupervisorSafeUntilEarliest(t *testing.T) {
	f := newFixture(t)
	c := f.holder("me")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var locks []*ddblock.Lock
	for _, k := range []string{"x", "y"} {
		l, err := c.AcquireLock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	safe := time.Minute
	want := int64(min(hooks.LastHeartbeat(locks[0]), hooks.LastHeartbeat(locks[1])) + safe)
	for _, order := range [][]*ddblock.Lock{locks, {locks[1], locks[0]}} {
		s := &supervisor{held: held{locks: order}, tm: timing{safe: safe}}
		if got := s.safeUntil(); got != want {
			t.Errorf("safeUntil of %s, %s = %d, want the earliest, %d", order[0].PartitionKey(), order[1].PartitionKey(), got, want)
		}
	}
}

// ddblock holding two keys is stopped past the lease while B waits for
// the second key: the guard stops A's command when the safe period runs
// out, B takes the key once the lease has passed, and A's command wrote
// its last line before B's first. On SIGCONT, A exits 76.
func TestRunSeveralKeysDdblockStopped(t *testing.T) {
	needServer(t)
	if !server.HasTransactions() {
		t.Skip(server.Name() + " has no transactions (TestRunSeveralKeys checks the refusal)")
	}
	f := newFixture(t)
	lines := writerFile(t)
	a := f.start("run", append(append(slices.Clone(timingFlags), "--owner", "owner-A", "--key", "job-2", "job", "--"),
		writerCommand(t, "A", lines, writerEvery, 0)...)...)
	a.eventuallyWhileRunning("A's command to write", func() bool { return len(linesOf(readWriterLines(t, lines), "A")) > 0 })
	first := linesOf(readWriterLines(t, lines), "A")[0]
	t.Cleanup(func() {
		for _, pid := range []int{first.pid, first.ppid} {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	b := f.start("run", append([]string{"--lease", "10s", "--heartbeat", "1s", "--owner", "owner-B", "--wait", "30s", "job-2", "--"},
		writerCommand(t, "B", lines, writerEvery, 10)...)...)
	b.eventuallyWhileRunning("B to wait for A", func() bool { return strings.Contains(b.stderr.String(), "is held by owner-A") })

	a.signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	if rb := b.wait(); rb.code != 0 || !strings.Contains(rb.stderr, "acquired lock") {
		t.Fatalf("B did not run after A's lease passed: %v", rb)
	}
	if !processGone(first.pid) {
		t.Error("A's command still runs after B ran")
	}
	a.signal(syscall.SIGCONT)
	stopped = false
	ra := a.wait()
	if ra.code != exitLockLost || !strings.Contains(ra.stderr, `locks "job"/"-", "job-2"/"-" not renewed within the safe period`) {
		t.Errorf("A after SIGCONT: want exit %d saying the locks were not renewed: %v", exitLockLost, ra)
	}
	exclusive(t, readWriterLines(t, lines))
}
