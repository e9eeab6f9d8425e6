package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ddblock/ddblock"
)

// holdSlots takes every slot of an n-slot semaphore, one in-process
// client each (owner-0, owner-1, …), and returns the locks by slot.
func holdSlots(t *testing.T, f *fixture, name string, n int) map[int]*ddblock.Lock {
	t.Helper()
	locks := map[int]*ddblock.Lock{}
	for i := range n {
		s, err := f.holder(fmt.Sprintf("owner-%d", i)).NewSemaphore(name, n)
		if err != nil {
			t.Fatal(err)
		}
		lock, err := s.TryAcquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := s.SlotOf(lock)
		locks[slot] = lock
	}
	return locks
}

// ls shows a semaphore as one line (name, slots, held, holders) after
// the locks, not as its slots' lock items; --json lists it as one object;
// --key finds it by its name.
func TestLsSemaphore(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	locks := holdSlots(t, f, "pool", 3)
	if err := locks[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	f.acquire("plain", "other")

	r := f.run("ls")
	if r.code != 0 {
		t.Fatalf("ls: %v", r)
	}
	if strings.Contains(r.stdout, "slot-0  ") || strings.Count(r.stdout, "slot-") != 2 {
		t.Errorf("ls lists the slots as locks, or not in the semaphore's line:\n%s", r.stdout)
	}
	line := lineWith(r.stdout, "pool ")
	if f := strings.Fields(line); len(f) < 4 || f[0] != "pool" || f[1] != "3" || f[2] != "2" ||
		!strings.Contains(line, "slot-0 "+locks[0].OwnerName()) || !strings.Contains(line, "slot-2 "+locks[2].OwnerName()) {
		t.Errorf("semaphore line %q; want pool, 3 slots, slots 0 and 2 held:\n%s", line, r.stdout)
	}
	if !strings.Contains(r.stdout, "SEMAPHORE") || lineWith(r.stdout, "other") == "" {
		t.Errorf("ls: want the plain lock and a SEMAPHORE table:\n%s", r.stdout)
	}

	r = f.run("ls", "--json")
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); r.code != 0 || err != nil {
		t.Fatalf("ls --json: %v, %v", err, r)
	}
	var sem map[string]any
	for _, e := range entries {
		if s, ok := e["semaphore"].(map[string]any); ok {
			if sem != nil {
				t.Fatalf("two semaphore entries: %s", r.stdout)
			}
			sem = s
			if e["key"] != "pool" || e["sort_key"] != "slots" {
				t.Errorf("semaphore entry's key: %v/%v", e["key"], e["sort_key"])
			}
		} else if e["key"] == "pool" {
			t.Errorf("a slot listed as a lock: %v", e)
		}
	}
	if sem == nil || sem["slots"] != 3.0 || sem["held"] != 2.0 || len(sem["holders"].([]any)) != 2 {
		t.Fatalf("ls --json's semaphore: %v", sem)
	}
	if h := sem["holders"].([]any)[1].(map[string]any); h["slot"] != 2.0 || h["owner"] != locks[2].OwnerName() || h["sort_key"] != "slot-2" {
		t.Errorf("second holder: %v", h)
	}

	r = f.run("ls", "--key", "pool")
	if r.code != 0 || !strings.HasPrefix(lineWith(r.stdout, "pool "), "pool ") || lineWith(r.stdout, "other") != "" {
		t.Errorf("ls --key pool: want the semaphore alone:\n%v", r)
	}
}

// get on a semaphore's metadata item explains it and shows the
// semaphore; release --force refuses it with an explanation (exit 64)
// and leaves it.
func TestGetAndReleaseSemaphoreMetadata(t *testing.T) {
	f := newFixture(t)
	holdSlots(t, f, "pool", 2)

	r := f.run("get", "--sort-key", "slots", "pool")
	if r.code != 0 || !strings.Contains(r.stdout, `this is the metadata item of semaphore pool (2 slots)`) ||
		!strings.Contains(r.stdout, "held                   2") && !strings.Contains(lineWith(r.stdout, "held"), "2") ||
		!strings.Contains(r.stdout, "ddblock resize pool N") || lineWith(r.stdout, "slot 1") == "" {
		t.Errorf("get of the metadata item:\n%v", r)
	}
	r = f.run("get", "--json", "--sort-key", "slots", "pool")
	var got semaphoreJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.Semaphore.Slots != 2 || got.Semaphore.Held != 2 {
		t.Errorf("get --json of the metadata item: %+v, %v: %v", got, err, r)
	}

	r = f.run("release", "--force", "--sort-key", "slots", "pool")
	if r.code != exitUsage {
		t.Errorf("release --force of the metadata item: want exit %d: %v", exitUsage, r)
	}
	oneLineOn(t, r, "this is the metadata item of semaphore pool (2 slots, 2 held), not a lock")
	if !strings.Contains(r.stderr, "ddblock resize pool N") || !strings.Contains(r.stderr, "--sort-key slot-I pool") {
		t.Errorf("release's refusal does not say what to do instead: %q", r.stderr)
	}
	if r := f.run("get", "--sort-key", "slots", "pool"); r.code != 0 {
		t.Errorf("the metadata item after the refusal: %v", r)
	}
}

// resize grows at once; shrinking waits for the holders above the new
// number (exit 75 naming them when interrupted, the new number in
// force all the same), and exits 0 once they released. A run asking for
// the old number follows the new one.
func TestResize(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	locks := holdSlots(t, f, "pool", 3)

	// Interrupted once the new number is written (however slow the
	// machine), while it waits for slot 2.
	p := f.start("resize", "--every", "50ms", "pool", "2")
	watcher, err := f.holder("watcher").NewSemaphore("pool", 3)
	if err != nil {
		t.Fatal(err)
	}
	p.eventuallyWhileRunning("the new number to be written", func() bool {
		_, err := watcher.Holders(ctx)
		return err == nil && watcher.Slots() == 2
	})
	p.signal(syscall.SIGINT)
	r := p.wait()
	if r.code != exitBusy {
		t.Fatalf("resize with slot 2 held, interrupted: want exit %d: %v", exitBusy, r)
	}
	top := locks[2].OwnerName()
	oneLineOn(t, r, fmt.Sprintf(`slot 2 (owner %q) is still held above it`, top))
	if !strings.Contains(r.stdout, "pool: 3 slots, now 2") || !strings.Contains(r.stdout, "slot 2 (owner "+top+")") {
		t.Errorf("resize's stdout: %q", r.stdout)
	}
	// While the resize is not done, the old number bounds the holders:
	// slot 2's holder works on, and new holders take slots below 2 only.
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := f.run("run", "--slots", "3", "--wait", "0", "pool", "--", "sh", "-c", `test "$DDBLOCK_SLOT" = 0`); r.code != 0 {
		t.Errorf("a run during the drain, slot 0 free: want slot 0 and exit 0: %v", r)
	}
	if err := locks[2].Err(); err != nil {
		t.Fatalf("slot 2's holder lost its lock during the drain: %v", err)
	}

	p = f.start("resize", "--every", "50ms", "pool", "2")
	p.eventuallyWhileRunning("resize to say what it waits for", func() bool { return strings.Contains(p.stdout.String(), "waiting for") })
	if err := locks[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := p.wait(); r.code != 0 || !strings.Contains(r.stdout, "at most 2 holders") {
		t.Fatalf("resize once slot 2 was released: %v", r)
	}
	if r := f.run("run", "--slots", "3", "--wait", "0", "pool", "--", "true"); r.code != 0 {
		t.Errorf("a run asking for 3 slots after the resize to 2, one free: %v", r)
	}

	if r := f.run("resize", "pool", "4"); r.code != 0 || !strings.Contains(r.stdout, "2 slots, now 4") {
		t.Errorf("growing: %v", r)
	}
	r = f.run("ls", "--key", "pool")
	if l := strings.Fields(lineWith(r.stdout, "pool ")); len(l) < 3 || l[1] != "4" || l[2] != "1" {
		t.Errorf("ls after growing to 4 with slot 1 held: %v", r)
	}
	if r := f.run("resize", "fresh", "2"); r.code != 0 || !strings.Contains(r.stdout, "is new") {
		t.Errorf("resize of a new name: %v", r)
	}

	for _, args := range [][]string{{}, {"pool"}, {"pool", "0"}, {"pool", "x"}, {"pool", "1001"}, {"", "2"}, {"--wait", "-1s", "pool", "2"}} {
		if r := f.run("resize", args...); r.code != exitUsage {
			t.Errorf("resize %q: want exit %d: %v", args, exitUsage, r)
		}
	}
}

// lineWith returns the first line of s that contains sub, "" if none.
func lineWith(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return strings.TrimRight(line, "\n")
		}
	}
	return ""
}

// On a table without a sort key, where a semaphore's items are the keys
// NAME#slot-I and NAME#slots, ls (with and without --key), get, release
// and resize treat the semaphore as on any table.
func TestSemaphoreCommandsPartitionKeyOnly(t *testing.T) {
	f := newFixture(t)
	f.table += "_pk_only"
	pk := []string{"--partition-key-only"}
	if r := f.run("create-table", append(pk, "--on-demand", "--poll-interval", "10ms")...); r.code != 0 {
		t.Fatalf("create-table: %v", r)
	}
	c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithPartitionKeyOnly(),
		ddblock.WithOwnerName("pk-holder"), ddblock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background(), true) }()
	s, err := c.NewSemaphore("pool", 2)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := s.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slot, _ := s.SlotOf(lock)
	for _, args := range [][]string{pk, append(slices.Clone(pk), "--key", "pool")} {
		r := f.run("ls", args...)
		if l := strings.Fields(lineWith(r.stdout, "pool ")); r.code != 0 || len(l) < 4 || l[1] != "2" || l[2] != "1" ||
			!strings.Contains(r.stdout, fmt.Sprintf("slot-%d pk-holder", slot)) || strings.Contains(r.stdout, "pool#slot") {
			t.Errorf("ls %v: want the semaphore as one line, one slot held: %v", args, r)
		}
	}
	if r := f.run("get", append(pk, "pool#slots")...); r.code != 0 || !strings.Contains(r.stdout, "metadata item of semaphore pool (2 slots)") ||
		!strings.Contains(r.stdout, `ddblock get pool#slot-0`) {
		t.Errorf("get of the metadata item: %v", r)
	}
	r := f.run("release", append(pk, "--force", "pool#slots")...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "ddblock release --force pool#slot-I") {
		t.Errorf("release of the metadata item: %v", r)
	}
	if r := f.run("resize", append(pk, "pool", "3")...); r.code != 0 {
		t.Errorf("resize: %v", r)
	}
	if r := f.run("ls", append(pk, "--json")...); r.code != 0 || !strings.Contains(r.stdout, `"key": "pool#slots"`) || !strings.Contains(r.stdout, `"slots": 3`) {
		t.Errorf("ls --json after the resize: %v", r)
	}
}
