package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// Runs with --fair wait in the key's line and take the lock in the order
// they came; ls shows the line while they wait, and ls --json how many
// wait for the lock.
func TestRunFairWaitsInLine(t *testing.T) {
	f := newFixture(t)
	held := f.acquire("holder", "job")
	out := filepath.Join(t.TempDir(), "order")
	var procs []*proc
	for i, who := range []string{"A", "B", "C"} {
		// A retry period of a second (lease/6) and so a grace of four
		// (line.go): a slow machine does not cost a live run its place.
		procs = append(procs, f.start("run", "--fair", "--lease", "6s", "--owner", "owner-"+who, "--wait", "60s", "job", "--",
			"sh", "-c", `echo "$DDBLOCK_OWNER" >> "$1"`, "sh", out))
		want := i + 1
		eventually(t, "the run to wait in line", func() bool {
			for _, l := range decodeLocks(t, f.run("ls", "--json")) {
				if l.Key == "job" {
					return l.Waiting == want
				}
			}
			return false
		})
	}
	r := f.run("ls")
	if !strings.Contains(r.stdout, "WAITING IN LINE FOR") {
		t.Fatalf("ls shows no line: %v", r)
	}
	var row []string
	for _, line := range strings.Split(r.stdout, "\n") {
		if c := cells(line); len(c) == 6 && c[0] == "job" {
			row = c
		}
	}
	if row == nil || row[1] != "-" || row[2] != "3" || row[3] != "owner-A" || row[5] != "held by holder" {
		t.Errorf("ls line row %q; want job, -, 3 waiting, owner-A first, held by holder:\n%v", row, r)
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if r := p.wait(); r.code != 0 {
			t.Fatalf("run: %v", r)
		}
	}
	if got := strings.Fields(readFile(t, out)); strings.Join(got, ",") != "owner-A,owner-B,owner-C" {
		t.Errorf("the runs held the lock in the order %v; want A, B, C, the order they came", got)
	}
	r = f.run("ls")
	if strings.Contains(r.stdout, "WAITING IN LINE FOR") {
		t.Errorf("ls still shows a line after every run: %v", r)
	}
}

// A fair run's first try, made when nobody waits in line, is out of line:
// it comes into no line (no UpdateItem, no DeleteItem) when the lock is
// held; its conditional put fails and leaves the lock as it was. A try that came into the line
// and left it again would let a run that came in between stand ahead of
// it when it came back to wait (once seen as a flaky order in
// TestRunFairWaitsInLine).
func TestRunFairFirstTryOutOfLine(t *testing.T) {
	f, proxy := newProxiedFixture(t)
	held := f.acquire("holder", "job")
	r := f.run("run", "--fair", "--wait", "0", "job", "--", "true")
	if r.code != exitBusy {
		t.Fatalf("run --fair --wait 0 on a held lock: %v; want exit %d", r, exitBusy)
	}
	counts := proxy.Counts()
	if counts.ByOp["GetItem"] == 0 {
		t.Fatalf("the run read nothing through the proxy (%v): the test does not see its calls", counts.ByOp)
	}
	for _, op := range []string{"UpdateItem", "DeleteItem"} {
		if n := counts.ByOp[op]; n != 0 {
			t.Errorf("the run made %d %s calls; want none (its one try is out of line)", n, op)
		}
	}
	if info := f.lookup("job", ""); info == nil || info.OwnerName != "holder" || info.RecordVersionNumber != held.RecordVersionNumber() {
		t.Errorf("the lock after the run's try: %+v; want holder's, unchanged", info)
	}
}
