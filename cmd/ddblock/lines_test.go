package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock/internal/wire"
)

// lsEntry is any element of ls --json: a lock, a semaphore or a line;
// only what these tests look at.
type lsEntry struct {
	Key       string `json:"key"`
	SortKey   string `json:"sort_key"`
	Waiting   int    `json:"waiting"`
	Semaphore *struct {
		Waiting int `json:"waiting"`
	} `json:"semaphore"`
	Line *lineDetailJSON `json:"line"`
}

// lsEntries runs ls --json and returns its elements.
func lsEntries(t *testing.T, f *fixture) []lsEntry {
	t.Helper()
	r := f.run("ls", "--json")
	if r.code != 0 {
		t.Fatalf("ls --json: %v", r)
	}
	var out []lsEntry
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("ls --json printed %q: %v", r.stdout, err)
	}
	return out
}

// lsLine is the line of lock (key, sortKey) as ls --json lists it; nil
// when it is not listed.
func lsLine(t *testing.T, f *fixture, key, sortKey string) *lineDetailJSON {
	t.Helper()
	for _, e := range lsEntries(t, f) {
		if e.Line != nil && e.Line.Key == key && e.Line.SortKey == sortKey {
			if e.Key != lineKeyPrefix+key || e.SortKey != sortKey {
				t.Errorf("the line of %s/%s is listed at key %q/%q; want its counter's, %q/%q", key, sortKey, e.Key, e.SortKey, lineKeyPrefix+key, sortKey)
			}
			return e.Line
		}
	}
	return nil
}

// waitInLine starts a fair run on key (extra flags before it) that
// waits in line, and returns once its ticket is in the table (read
// there, not through ddblock: the tests look at what ddblock shows).
func waitInLine(t *testing.T, f *fixture, owner, key string, extra ...string) *proc {
	t.Helper()
	args := append([]string{"--fair", "--owner", owner, "--wait", "5m"}, extra...)
	p := f.start("run", append(args, key, "--", "true")...)
	p.eventuallyWhileRunning(owner+" to wait in line for "+key, func() bool {
		return slices.Contains(slices.Collect(maps.Values(tickets(t, f, key))), owner)
	})
	return p
}

// deadWaiter leaves the free lock key with a line whose only ticket is a
// dead waiter's: a fair run (of the default lease, 30 s, and so of a
// grace of 16 s) waits in line while an in-process client holds the
// lock, is killed (its ticket and session item stay), and the lock is
// released. Nobody else waits fairly for key, so the line stays as it
// is.
func deadWaiter(t *testing.T, f *fixture, owner, key string) {
	t.Helper()
	held := f.acquire("holder-of-"+key, key)
	p := waitInLine(t, f, owner, key)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait()
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// tickets are the ticket items of key's line in the table: the owner
// named by each, by partition key.
func tickets(t *testing.T, f *fixture, key string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var start map[string]types.AttributeValue
	for {
		page, err := sdk.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range page.Items {
			pk := item["lock_key"].(*types.AttributeValueMemberS).Value
			if _, _, lock, ok := parseTicketKey(pk); ok && lock == key {
				out[pk] = strAttr(item, wire.AttrTicketOwner)
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out
		}
		start = page.LastEvaluatedKey
	}
}

// ticketKeys are the partition keys of the ticket items of key's line.
func ticketKeys(t *testing.T, f *fixture, key string) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(tickets(t, f, key)))
}

// ls lists every line where someone waits: a held lock's, a free lock's
// and a semaphore's, with its waiters and its first; get describes a line
// and a ticket instead of failing on them as items that are not locks,
// and tells of a lock's waiters.
func TestLinesInLsAndGet(t *testing.T) {
	f := newFixture(t)
	held := f.acquire("holder", "job")
	slots := holdSlots(t, f, "pool", 1)
	deadWaiter(t, f, "waiter-F", "free-job")
	// A retry period of a second (lease/6): the live waiters take their
	// turns soon after the lock is released.
	a := waitInLine(t, f, "waiter-A", "job", "--lease", "6s")
	s := waitInLine(t, f, "waiter-S", "pool", "--lease", "6s", "--slots", "1")

	var jobRow, poolRow *lsEntry
	entries := lsEntries(t, f)
	for i, e := range entries {
		switch {
		case e.Line == nil && e.Semaphore == nil && e.Key == "job":
			jobRow = &entries[i]
		case e.Semaphore != nil && e.Key == "pool":
			poolRow = &entries[i]
		}
	}
	if jobRow == nil || jobRow.Waiting != 1 {
		t.Errorf("ls --json: lock row of job %+v; want it with waiting 1", jobRow)
	}
	if poolRow == nil || poolRow.Semaphore.Waiting != 1 {
		t.Errorf("ls --json: semaphore pool %+v; want it with waiting 1", poolRow)
	}
	for _, c := range []struct {
		key, sk, sem, owner string
		free                bool
	}{
		{"job", "-", "", "waiter-A", false},
		{"pool", "slots", "pool", "waiter-S", false},
		{"free-job", "-", "", "waiter-F", true},
	} {
		l := lsLine(t, f, c.key, c.sk)
		switch {
		case l == nil:
			t.Errorf("ls --json lists no line for %s/%s", c.key, c.sk)
		case l.Waiting != 1 || len(l.Waiters) != 1 || l.First == nil || *l.First != l.Waiters[0]:
			t.Errorf("ls --json: line of %s/%s %+v; want one waiter, first", c.key, c.sk, l)
		case l.First.Owner != c.owner || l.First.Since == "" || l.First.GraceSeconds <= 0 || l.First.ID == "":
			t.Errorf("ls --json: first in line for %s: %+v; want %s with since, grace and id", c.key, l.First, c.owner)
		case l.Semaphore != c.sem || l.Free != c.free:
			t.Errorf("ls --json: line of %s: semaphore %q, free %v; want %q, %v", c.key, l.Semaphore, l.Free, c.sem, c.free)
		}
	}

	r := f.run("ls")
	want := map[string][]string{
		"free-job": {"free-job", "-", "1", "waiter-F", "", "free"},
		"job":      {"job", "-", "1", "waiter-A", "", "held by holder"},
		"pool":     {"pool", "slots", "1", "waiter-S", "", "semaphore, 1 of 1 slots held"},
	}
	seen := 0
	inLines := false
	for line := range strings.Lines(r.stdout) {
		c := cells(line)
		if len(c) > 0 && c[0] == "WAITING IN LINE FOR" {
			inLines = true
			continue
		}
		if w, ok := want[c[0]]; inLines && ok {
			seen++
			if len(c) != 6 || c[0] != w[0] || c[1] != w[1] || c[2] != w[2] || c[3] != w[3] || !strings.HasSuffix(c[4], " ago") || c[5] != w[5] {
				t.Errorf("ls: line row %q; want %q (SINCE some time ago)", c, w)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("ls shows %d of the 3 lines:\n%v", seen, r)
	}

	// get on a line: exit 0, the waiters in order.
	r = f.run("get", "ddblock_line#free-job")
	if r.code != 0 || !strings.Contains(r.stdout, `line of fair waiters of lock "free-job"/"-"`) ||
		!regexp.MustCompile(`(?m)^lock +free$`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^waiter 1 +waiter-F \(first: the next to try\), came `).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "ddblock release --force ddblock_line#free-job") {
		t.Errorf("get of a free lock's line: %v", r)
	}
	r = f.run("get", "--json", "--sort-key", "slots", "ddblock_line#pool")
	var pool lineJSON
	if err := json.Unmarshal([]byte(r.stdout), &pool); r.code != 0 || err != nil {
		t.Fatalf("get --json of a semaphore's line: %v (%v)", r, err)
	}
	if pool.Key != "ddblock_line#pool" || pool.SortKey != "slots" || pool.Line.Semaphore != "pool" || pool.Line.Waiting != 1 ||
		pool.Line.First == nil || pool.Line.First.Owner != "waiter-S" {
		t.Errorf("get --json of a semaphore's line: %+v", pool)
	}
	if r := f.run("get", "ddblock_line#nobody"); r.code != exitNotFound {
		t.Errorf("get of a line that is not there: %v; want exit %d", r, exitNotFound)
	}

	// get on a ticket: exit 0, the waiter and its place.
	ticketPKs := ticketKeys(t, f, "free-job")
	if len(ticketPKs) != 1 {
		t.Fatalf("tickets of free-job: %q; want one", ticketPKs)
	}
	r = f.run("get", ticketPKs[0])
	if r.code != 0 || !strings.Contains(r.stdout, `ticket in the line of fair waiters of lock "free-job"/"-"`) ||
		!regexp.MustCompile(`(?m)^place +1 of 1 in line .*first`).MatchString(r.stdout) || !regexp.MustCompile(`(?m)^owner +waiter-F$`).MatchString(r.stdout) {
		t.Errorf("get of a ticket: %v", r)
	}
	r = f.run("get", "--json", ticketPKs[0])
	var tj ticketJSON
	if err := json.Unmarshal([]byte(r.stdout), &tj); r.code != 0 || err != nil {
		t.Fatalf("get --json of a ticket: %v (%v)", r, err)
	}
	if tj.Key != ticketPKs[0] || tj.Ticket.LineKey != "ddblock_line#free-job" || !tj.Ticket.InLine || tj.Ticket.Place != 1 ||
		tj.Ticket.Owner != "waiter-F" || tj.Ticket.Session == "" {
		t.Errorf("get --json of a ticket: %+v", tj)
	}

	// get on locks: how many wait in their lines.
	r = f.run("get", "job")
	if r.code != 0 || !regexp.MustCompile(`(?m)^waiting in line +1 \(first waiter-A; see: ddblock get ddblock_line#job\)$`).MatchString(r.stdout) {
		t.Errorf("get of a lock with a line: %v", r)
	}
	r = f.run("get", "--json", "job")
	var one lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &one); r.code != 0 || err != nil || one.Waiting != 1 {
		t.Errorf("get --json of a lock with a line: %v (%v)", r, err)
	}
	r = f.run("get", "--sort-key", "slots", "pool")
	if r.code != 0 || !regexp.MustCompile(`(?m)^waiting in line +1 \(first waiter-S; see: ddblock get --sort-key slots ddblock_line#pool\)$`).MatchString(r.stdout) {
		t.Errorf("get of a semaphore with a line: %v", r)
	}
	r = f.run("get", "free-job")
	if r.code != exitNotFound {
		t.Errorf("get of a free lock: %v; want exit %d", r, exitNotFound)
	}
	oneLineOn(t, r, "1 wait in its line, first waiter-F (see: ddblock get ddblock_line#free-job)")

	// The live waiters get their turns.
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := slots[0].Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, s} {
		if r := p.wait(); r.code != 0 {
			t.Errorf("fair run: %v", r)
		}
	}
}

// release --force clears a line, counter and tickets; it refuses a
// ticket alone, naming the command that clears its line.
func TestReleaseLine(t *testing.T) {
	f := newFixture(t)
	deadWaiter(t, f, "waiter-F", "free-job")
	ticketPKs := ticketKeys(t, f, "free-job")
	if len(ticketPKs) != 1 {
		t.Fatalf("tickets of free-job: %q; want one", ticketPKs)
	}

	r := f.run("release", ticketPKs[0], "--force")
	if r.code != exitUsage {
		t.Errorf("release --force of a ticket: %v; want exit %d", r, exitUsage)
	}
	oneLineOn(t, r, "To clear the whole line (waiters that are alive come again into a new one): ddblock release --force ddblock_line#free-job")
	r = f.run("release", "ddblock_line#free-job")
	if r.code != exitUsage {
		t.Errorf("release of a line without --force: %v; want exit %d", r, exitUsage)
	}
	oneLineOn(t, r, "without --force")
	if got := ticketKeys(t, f, "free-job"); !slices.Equal(got, ticketPKs) {
		t.Fatalf("the tickets after refused releases: %q; want %q, as they were", got, ticketPKs)
	}

	r = f.run("release", "--force", "ddblock_line#free-job")
	if r.code != 0 || !strings.Contains(r.stdout, `1 wait in the line of fair waiters of lock "free-job"/"-"; first waiter-F`) ||
		!strings.Contains(r.stdout, "removed its counter and 1 ticket;") {
		t.Fatalf("release --force of a line: %v", r)
	}
	if l := lsLine(t, f, "free-job", "-"); l != nil {
		t.Errorf("ls --json still lists the line: %+v", l)
	}
	if got := ticketKeys(t, f, "free-job"); len(got) != 0 {
		t.Errorf("tickets left after clearing the line: %q", got)
	}
	if r := f.run("get", "ddblock_line#free-job"); r.code != exitNotFound {
		t.Errorf("get of a cleared line: %v; want exit %d", r, exitNotFound)
	}
	if r := f.run("release", "--force", "ddblock_line#free-job"); r.code != exitNotFound {
		t.Errorf("release --force of a cleared line: %v; want exit %d", r, exitNotFound)
	}
	// A fair run comes into a new line, and takes the free lock.
	if r := f.run("run", "--fair", "--wait", "10s", "free-job", "--", "true"); r.code != 0 {
		t.Errorf("fair run after the line was cleared: %v", r)
	}
}

// A garbled line counter (not one ddblock writes) is skipped by ls with a
// warning, shown by get with the way to clear it, and cleared by release
// --force.
func TestGarbledLine(t *testing.T) {
	f := newFixture(t)
	f.acquire("holder", "job")
	_, err := sdk.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(f.table),
		Item: map[string]types.AttributeValue{
			"lock_key":         &types.AttributeValueMemberS{Value: "ddblock_line#junk"},
			"sort_key":         &types.AttributeValueMemberS{Value: "-"},
			"ddblock_line_gen": &types.AttributeValueMemberS{Value: "x"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := f.run("ls")
	if r.code != 0 || !strings.Contains(r.stdout, "job") || !strings.Contains(r.stderr, "skipped a line of fair waiters that is not valid") {
		t.Errorf("ls with a garbled line: %v", r)
	}
	r = f.run("get", "ddblock_line#junk")
	if r.code != exitDataErr {
		t.Errorf("get of a garbled line: %v; want exit %d", r, exitDataErr)
	}
	oneLineOn(t, r, "clear it with: ddblock release --force ddblock_line#junk")
	r = f.run("release", "--force", "ddblock_line#junk")
	if r.code != 0 || !strings.Contains(r.stdout, "not one ddblock could have written") {
		t.Errorf("release --force of a garbled line: %v", r)
	}
	if r := f.run("get", "ddblock_line#junk"); r.code != exitNotFound {
		t.Errorf("get of the cleared line: %v; want exit %d", r, exitNotFound)
	}
}

// run --fair --wait 0 tries once, out of line, like TryAcquireLock: a
// dead waiter's ticket in the line of a free lock does not refuse it.
func TestRunFairWaitZeroPastDeadTicket(t *testing.T) {
	f := newFixture(t)
	deadWaiter(t, f, "waiter-F", "job")
	r := f.run("run", "--fair", "--wait", "0", "job", "--", "true")
	if r.code != 0 {
		t.Fatalf("run --fair --wait 0 on a free lock with a dead ticket in line: %v; want exit 0", r)
	}
	// The try took no place in line: the dead ticket stands alone.
	if got := slices.Collect(maps.Values(tickets(t, f, "job"))); !slices.Equal(got, []string{"waiter-F"}) {
		t.Errorf("the tickets after the try: %q; want the dead waiter's alone", got)
	}
}

// doc/cli.md's recipe for a line that does not move, run as the page
// shows it: each "$ ddblock ..." command of the section, on a free lock
// whose line holds a dead waiter, must exit 0 and print the lines the page
// shows, times and ids aside ("…" stands for lines left out).
func TestDocStuckLineRecipe(t *testing.T) {
	const heading = "### A line that does not move"
	steps := docSteps(t, heading)
	if len(steps) != 3 {
		t.Fatalf("%s, %q: %d blocks of \"$ ddblock\" commands; want ls, get and release", cliDoc, heading, len(steps))
	}

	f := newFixture(t)
	deadWaiter(t, f, "web-3", "nightly-report")
	// Times and ids differ from run to run; the rest must not.
	volatile := []*regexp.Regexp{
		regexp.MustCompile(`\b\d[\w.]* ago\b`),
		regexp.MustCompile(`\bid [0-9a-f-]{36}\b`),
	}
	normal := func(line string) string {
		line = strings.Join(strings.Fields(line), " ")
		for i, re := range volatile {
			line = re.ReplaceAllString(line, fmt.Sprintf("<%d>", i))
		}
		return line
	}
	runDocSteps(t, f, steps, []int{0, 0, 0}, normal)
	if got := ticketKeys(t, f, "nightly-report"); len(got) != 0 {
		t.Errorf("tickets left after the recipe: %q", got)
	}
}

// docSteps are the "$ ddblock ..." blocks of doc/cli.md's section under
// heading: each the command line, then the output the page shows.
func docSteps(t *testing.T, heading string) [][]string {
	t.Helper()
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", cliDoc, heading)
	}
	section := page[start+1:]
	if end := regexp.MustCompile(`\n##+ `).FindStringIndex(section[len(heading):]); end != nil {
		section = section[:len(heading)+end[0]+1]
	}
	var steps [][]string
	for _, block := range fencedBlocks(section, "") {
		lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
		if strings.HasPrefix(lines[0], "$ ddblock ") {
			steps = append(steps, lines)
		}
	}
	return steps
}

// runDocSteps runs each step as the page shows it: it must exit with its
// code and print every line the page shows, compared as normal makes
// them ("…" stands for lines left out).
func runDocSteps(t *testing.T, f *fixture, steps [][]string, codes []int, normal func(string) string) {
	t.Helper()
	for i, step := range steps {
		cmd := strings.Fields(strings.TrimPrefix(step[0], "$ ddblock "))
		r := f.run(cmd[0], cmd[1:]...)
		if r.code != codes[i] {
			t.Errorf("%s: want exit %d: %v", step[0], codes[i], r)
			continue
		}
		got := map[string]bool{}
		for line := range strings.Lines(r.stdout) {
			got[normal(line)] = true
		}
		for _, want := range step[1:] {
			if !strings.Contains(want, "…") && !got[normal(want)] {
				t.Errorf("%s: the page shows %q, not printed:\n%v", step[0], want, r)
			}
		}
	}
}
