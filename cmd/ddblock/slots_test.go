package main

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// slotScript records its run's DDBLOCK_SLOT in the file $3, then becomes
// a writer of COUNT lines (writer_test.go), whose CLOCK_MONOTONIC stamps
// say when the command ran.
func slotCommand(t *testing.T, who, lines, slots string, count int) []string {
	t.Helper()
	w := writerCommand(t, who, lines, writerEvery, count)
	return append([]string{"sh", "-c", `echo "$1 ${DDBLOCK_SLOT-unset}" >> "$2"; shift 2; exec "$@"`, "sh", who, slots}, w...)
}

// Five runs of a 2-slot semaphore started together: at no moment do more
// than two commands write, every run gets its turn and exits 0, and two
// commands that ran at once held different slots, each told its slot in
// DDBLOCK_SLOT.
func TestRunSlotsAtMostN(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	lines, slots := filepath.Join(dir, "lines"), filepath.Join(dir, "slots")
	whos := []string{"A", "B", "C", "D", "E"}
	var procs []*proc
	for _, who := range whos {
		// A lease longer than timingFlags': five runs starting at once
		// keep a server busy, and a slow heartbeat must not end a run.
		args := append([]string{"--lease", "6s", "--heartbeat", "500ms"}, "--slots", "2", "--owner", "owner-"+who, "--wait", "50s", "pool", "--")
		procs = append(procs, f.start("run", append(args, slotCommand(t, who, lines, slots, 15)...)...))
	}
	for i, p := range procs {
		if r := p.wait(); r.code != 0 {
			t.Fatalf("run %s: %v", whos[i], r)
		}
	}
	slotOf := map[string]string{}
	for line := range strings.Lines(readFile(t, slots)) {
		f := strings.Fields(line)
		if len(f) != 2 || (f[1] != "0" && f[1] != "1") {
			t.Fatalf("DDBLOCK_SLOT line %q; want WHO and 0 or 1", line)
		}
		slotOf[f[0]] = f[1]
	}
	type span struct {
		who         string
		first, last int64
	}
	var spans []span
	all := readWriterLines(t, lines)
	for _, who := range whos {
		ls := linesOf(all, who)
		if len(ls) != 15 || slotOf[who] == "" {
			t.Fatalf("%s wrote %d lines and recorded slot %q; want 15 and a slot", who, len(ls), slotOf[who])
		}
		spans = append(spans, span{who, ls[0].at, ls[len(ls)-1].at})
	}
	// Sweep the commands' spans in time order.
	type edge struct {
		at    int64
		start bool
		who   string
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.first, true, s.who}, edge{s.last, false, s.who})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		if a.start == b.start {
			return 0
		}
		if a.start {
			return -1 // touching spans count as overlapping
		}
		return 1
	})
	open, peak := map[string]bool{}, 0
	for _, e := range edges {
		if !e.start {
			delete(open, e.who)
			continue
		}
		for other := range open {
			if slotOf[other] == slotOf[e.who] {
				t.Errorf("%s and %s ran at once in the same slot %s", other, e.who, slotOf[e.who])
			}
		}
		open[e.who] = true
		peak = max(peak, len(open))
		if len(open) > 2 {
			t.Errorf("%d commands at once (%v) under a 2-slot semaphore", len(open), open)
		}
	}
	t.Logf("most commands at once: %d of 2; slots %v", peak, slotOf)
	// The semaphore is left as it should be: no slot held.
	for _, sk := range []string{"slot-0", "slot-1"} {
		if info := f.lookup("pool", sk); info != nil && !info.Released {
			t.Errorf("slot %s still held after every run ended: %+v", sk, info)
		}
	}
}

// A run with another number of slots than the semaphore's is refused
// with exit 78 and one clear line, and its command never runs; bad
// --slots values are usage errors; with --wait 0 and every slot held, a
// run says who holds them and exits 75.
func TestRunSlotsRefused(t *testing.T) {
	f := newFixture(t)
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"sh", "-c", `echo ran >> "$1"`, "sh", marker}

	hold := f.start("run", append(append(slices.Clone(timingFlags), "--slots", "1", "--owner", "owner-A", "one", "--"),
		"sh", "-c", `echo ran >> "$1"; sleep 30`, "sh", marker)...)
	hold.eventuallyWhileRunning("the holder's command to run", func() bool { return readFile(t, marker) != "" })

	r := f.run("run", append([]string{"--slots", "2", "--wait", "0", "one", "--"}, touch...)...)
	if r.code != exitConfig {
		t.Errorf("another number of slots: want exit %d: %v", exitConfig, r)
	}
	oneLineOn(t, r, `SEMAPHORE_MISMATCH: semaphore "one" has 1 slots, not the 2 asked for`)

	r = f.run("run", append([]string{"--slots", "1", "--wait", "0", "--owner", "owner-B", "one", "--"}, touch...)...)
	if r.code != exitBusy {
		t.Errorf("every slot held, --wait 0: want exit %d: %v", exitBusy, r)
	}
	oneLineOn(t, r, "owner-A")

	for _, args := range [][]string{
		{"--slots", "0", "k", "--", "true"},
		{"--slots", "-1", "k", "--", "true"},
		{"--slots", "1001", "k", "--", "true"},
		{"--slots", "2", "--sort-key", "x", "k", "--", "true"},
		{"--slots", "two", "k", "--", "true"},
	} {
		if r := f.run("run", args...); r.code != exitUsage {
			t.Errorf("run %v: want exit %d: %v", args, exitUsage, r)
		}
	}
	if got := strings.Count(readFile(t, marker), "ran"); got != 1 {
		t.Errorf("commands run: %d; want only the holder's", got)
	}
	// Signals reach the command as under a plain run; its status is
	// ddblock's.
	hold.signal(os.Interrupt)
	if r := hold.wait(); r.code != 128+2 {
		t.Errorf("the holder, interrupted: want exit 130: %v", r)
	}
	if r := f.run("run", append([]string{"--slots", "1", "one", "--"}, "true")...); r.code != 0 {
		t.Errorf("after the holder ended, its slot: %v", r)
	}
}
