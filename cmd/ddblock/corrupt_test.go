package main

// Items another client wrote that ddblock cannot read (issue 31, point
// 5): a lock whose owner_name is a number, a lock with an empty record
// version number, a semaphore whose metadata item holds no valid number of
// slots. The operator must always be able to see them (get), clear them
// (release --force, resize), and get a status that says what happened:
// never 70, which is for ddblock's own bugs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// corruptLock is a lock item as another client might write it: all there,
// but owner_name a number, and a note that would clear the screen and
// set the window title if printed as it is.
func corruptLock(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"lock_key":              &types.AttributeValueMemberS{Value: pk},
		"sort_key":              &types.AttributeValueMemberS{Value: "-"},
		"owner_name":            &types.AttributeValueMemberN{Value: "42"},
		"lease_duration":        &types.AttributeValueMemberN{Value: "30"},
		"record_version_number": &types.AttributeValueMemberS{Value: "rvn-1"},
		"note":                  &types.AttributeValueMemberS{Value: "\x1b[2J\x1b]0;pwned\x07"},
	}
}

// putRaw writes item into the fixture's table as it is.
func putRaw(t *testing.T, f *fixture, item map[string]types.AttributeValue) {
	t.Helper()
	_, err := sdk.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(f.table), Item: item})
	if err != nil {
		t.Fatalf("PutItem: %v", err)
	}
}

// termClean checks that nothing ddblock printed carries a raw escape or
// control character from the table.
func termClean(t *testing.T, what string, r result) {
	t.Helper()
	for _, s := range []string{r.stdout, r.stderr} {
		if strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("%s printed a raw control character from the table: %q", what, s)
		}
	}
}

// get describes an unreadable lock item, its attributes as stored and
// what is wrong, terminal-safe, and exits 65; --json is one JSON object
// saying so.
func TestCorruptLockGet(t *testing.T) {
	f := newFixture(t)
	putRaw(t, f, corruptLock("job"))

	r := f.run("get", "job")
	if r.code != exitDataErr {
		t.Errorf("get of a lock whose owner_name is a number: want exit %d: %v", exitDataErr, r)
	}
	termClean(t, "get", r)
	oneLineOn(t, r, `"owner_name"`)
	for _, want := range []string{`"owner_name" missing, or not a string`, `owner_name`, `{"N":"42"}`,
		`{"S":"\u001b[2J\u001b]0;pwned\u0007"}`, "ddblock release --force job"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("get's description lacks %q:\n%s", want, r.stdout)
		}
	}

	r = f.run("get", "--json", "job")
	if r.code != exitDataErr {
		t.Errorf("get --json: want exit %d: %v", exitDataErr, r)
	}
	var got struct {
		Key        string                    `json:"key"`
		SortKey    string                    `json:"sort_key"`
		Unreadable bool                      `json:"unreadable"`
		Problem    string                    `json:"problem"`
		Item       map[string]map[string]any `json:"item"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("get --json is not the object wanted: %v\n%s", err, r.stdout)
	}
	if got.Key != "job" || got.SortKey != "-" || !got.Unreadable || !strings.Contains(got.Problem, "owner_name") ||
		got.Item["owner_name"]["N"] != "42" || got.Item["note"]["S"] != "\x1b[2J\x1b]0;pwned\x07" || got.Item["lock_key"]["S"] != "job" {
		t.Errorf("get --json: %+v", got)
	}
}

// run on a key whose item it cannot read exits 65 at once, saying why
// and how to clear it; the command does not run.
func TestCorruptLockRun(t *testing.T) {
	f := newFixture(t)
	putRaw(t, f, corruptLock("job"))
	marker := filepath.Join(t.TempDir(), "ran")
	for _, wait := range []string{"0", "1m"} {
		r := f.run("run", append(slices.Clone(timingFlags), "--wait", wait, "job", "--", "touch", marker)...)
		if r.code != exitDataErr {
			t.Errorf("run --wait %s on an unreadable lock item: want exit %d: %v", wait, exitDataErr, r)
		}
		oneLineOn(t, r, `lock "job"/"-" is not free`)
		if !strings.Contains(r.stderr, "ddblock release --force job") || !strings.Contains(r.stderr, `"owner_name"`) {
			t.Errorf("run's message does not say what is wrong and how to clear it: %q", r.stderr)
		}
		termClean(t, "run", r)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran on an unreadable lock item")
	}
}

// release --force removes an unreadable item, after saying what it
// found; without --force it reads and removes nothing.
func TestCorruptLockReleaseForce(t *testing.T) {
	f := newFixture(t)
	putRaw(t, f, corruptLock("job"))
	if r := f.run("release", "job"); r.code != exitUsage {
		t.Errorf("release without --force: want exit %d: %v", exitUsage, r)
	}
	r := f.run("release", "--force", "job")
	if r.code != 0 {
		t.Fatalf("release --force of an unreadable lock item: %v", r)
	}
	termClean(t, "release", r)
	for _, want := range []string{`"owner_name" missing, or not a string`, `{"N":"42"}`, `removed the item at "job"/"-"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("release's output lacks %q:\n%s", want, r.stdout)
		}
	}
	if item := rawItem(t, f, "job", "-"); len(item) != 0 {
		t.Errorf("the item is still there: %v", item)
	}
	if r := f.run("run", "--wait", "0", "job", "--", "true"); r.code != 0 {
		t.Errorf("run after the removal: %v", r)
	}
}

// A lock item with an empty record version number is read, shown and
// removed like any lock.
func TestCorruptEmptyRVNReleaseForce(t *testing.T) {
	f := newFixture(t)
	item := corruptLock("job")
	item["owner_name"] = &types.AttributeValueMemberS{Value: "web-1"}
	item["record_version_number"] = &types.AttributeValueMemberS{Value: ""}
	delete(item, "note")
	putRaw(t, f, item)
	if r := f.run("get", "job"); r.code != 0 || !strings.Contains(r.stdout, "web-1") {
		t.Errorf("get of a lock with an empty record version number: %v", r)
	}
	r := f.run("release", "--force", "job")
	if r.code != 0 || !strings.Contains(r.stdout, "held by web-1") || !strings.Contains(r.stdout, `removed lock "job"/"-"`) {
		t.Fatalf("release --force of a lock with an empty record version number: %v", r)
	}
	if item := rawItem(t, f, "job", "-"); len(item) != 0 {
		t.Errorf("the item is still there: %v", item)
	}
}

// garbledSlots are semaphore metadata items no client of ddblock writes.
var garbledSlots = []struct {
	name  string
	slots types.AttributeValue // nil: missing
}{
	{"zero", &types.AttributeValueMemberN{Value: "0"}},
	{"huge", &types.AttributeValueMemberN{Value: "1000000000"}},
	{"string", &types.AttributeValueMemberS{Value: "3"}},
	{"missing", nil},
}

func putGarbledMeta(t *testing.T, f *fixture, name string, slots types.AttributeValue) {
	t.Helper()
	item := map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: name},
		"sort_key": &types.AttributeValueMemberS{Value: "slots"},
		// ls finds metadata items by this attribute: one that lacks it
		// still sits at the metadata item's key.
		"ddblock_semaphore_resizes": &types.AttributeValueMemberN{Value: "2"},
	}
	if slots != nil {
		item["ddblock_semaphore_slots"] = slots
	}
	putRaw(t, f, item)
}

// A semaphore whose metadata item is garbled: get describes it (exit
// 65), run --slots refuses it (exit 65), release --force leaves it
// (exit 64), and resize repairs it with the number asked for, after
// which the semaphore works.
func TestCorruptSemaphoreMetadata(t *testing.T) {
	for _, tc := range garbledSlots {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			holdSlots(t, f, "pool", 1)
			putGarbledMeta(t, f, "pool", tc.slots)

			r := f.run("get", "--sort-key", "slots", "pool")
			if r.code != exitDataErr || !strings.Contains(r.stdout, "ddblock_semaphore_slots") && tc.slots != nil ||
				!strings.Contains(r.stdout, "ddblock resize pool N") {
				t.Errorf("get of the garbled metadata item: want exit %d, its attributes and how to repair it: %v", exitDataErr, r)
			}
			r = f.run("get", "--json", "--sort-key", "slots", "pool")
			var got map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &got); r.code != exitDataErr || err != nil || got["unreadable"] != true {
				t.Errorf("get --json of the garbled metadata item: %v: %v", err, r)
			}

			r = f.run("run", "--slots", "2", "--wait", "0", "pool", "--", "true")
			if r.code != exitDataErr {
				t.Errorf("run --slots on a garbled metadata item: want exit %d: %v", exitDataErr, r)
			}
			oneLineOn(t, r, "ddblock resize pool N")

			r = f.run("release", "--force", "--sort-key", "slots", "pool")
			if r.code != exitUsage {
				t.Errorf("release --force of the garbled metadata item: want exit %d: %v", exitUsage, r)
			}
			oneLineOn(t, r, "ddblock resize pool N")

			r = f.run("resize", "pool", "2")
			if r.code != 0 || !strings.Contains(r.stdout, "rewriting it with 2 slots") {
				t.Fatalf("resize of a garbled semaphore: %v", r)
			}
			meta := rawItem(t, f, "pool", "slots")
			if n, ok := meta["ddblock_semaphore_slots"].(*types.AttributeValueMemberN); !ok || n.Value != "2" {
				t.Errorf("the metadata item after resize: %v; want 2 slots", meta)
			}
			if r := f.run("run", "--slots", "5", "--wait", "0", "pool", "--", "true"); r.code != 0 {
				t.Errorf("run --slots 5 after the repair to 2 slots, one free: %v", r)
			}
			if r := f.run("get", "--sort-key", "slots", "pool"); r.code != 0 || !strings.Contains(r.stdout, "(2 slots)") {
				t.Errorf("get after the repair: %v", r)
			}
		})
	}
}

// The condition of a write on an item as read: the item is there, each
// of its attributes but the key equal to the value read, each watched
// attribute it lacked still absent; within DynamoDB's 4 KB for an
// expression, the watched attributes first, whatever the item's size.
func TestCorruptAsReadConditionPure(t *testing.T) {
	tbl := (&connFlags{table: "t", pkName: "lock_key", skName: "sort_key", ttlName: "expiry_time"}).wireTable()
	item := corruptLock("job")
	delete(item, "record_version_number")
	c := asReadCondition(tbl, item)
	clauses := strings.Split(c.expr, " AND ")
	byName := map[string]string{} // attribute name: its clause
	for _, cl := range clauses {
		for ph, name := range c.names {
			if strings.Contains(cl, ph+" ") || strings.Contains(cl, ph+")") {
				byName[name] = cl
			}
		}
	}
	if byName["lock_key"] != "attribute_exists(#k)" {
		t.Errorf("the key's clause: %q; want attribute_exists alone", byName["lock_key"])
	}
	if _, ok := byName["sort_key"]; ok {
		t.Errorf("the sort key is compared: %q", c.expr)
	}
	for _, name := range []string{"owner_name", "lease_duration", "note"} {
		cl := byName[name]
		ph, val, ok := strings.Cut(cl, " = ")
		if !ok || c.names[ph] != name || c.values[val] != item[name] {
			t.Errorf("attribute %s: clause %q; want it equal to the value read", name, cl)
		}
	}
	for _, name := range []string{"record_version_number", "ddblock_tenure", "ddblock_semaphore_slots", "expiry_time"} {
		if cl := byName[name]; !strings.HasPrefix(cl, "attribute_not_exists(") {
			t.Errorf("attribute %s, absent when read: clause %q; want attribute_not_exists", name, cl)
		}
	}
	if len(clauses) != len(c.names) {
		t.Errorf("%d clauses for %d names: %q", len(clauses), len(c.names), c.expr)
	}

	big := corruptLock("job")
	for i := range 600 {
		big[fmt.Sprintf("extra_%03d", i)] = &types.AttributeValueMemberN{Value: "1"}
	}
	c = asReadCondition(tbl, big)
	if len(c.expr) > maxConditionBytes {
		t.Errorf("the condition for an item of 600 attributes is %d bytes, over %d", len(c.expr), maxConditionBytes)
	}
	for _, name := range append(watchedAttributes("expiry_time"), "extra_000") {
		if !slices.Contains(slices.Collect(maps.Values(c.names)), name) {
			t.Errorf("the condition for an item of 600 attributes leaves out %s", name)
		}
	}
	item["list"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "a"}}}
	c = asReadCondition(tbl, item)
	if !regexp.MustCompile(`attribute_type\((#a\d+), (:t\d+)\) AND size\(#a\d+\) = (:v\d+)`).MatchString(c.expr) {
		t.Errorf("a list attribute: %q; want its type and size compared", c.expr)
	}
	if c := asReadCondition(tbl, map[string]types.AttributeValue{"lock_key": item["lock_key"], "sort_key": item["sort_key"]}); c.values != nil {
		t.Errorf("an item of its key alone: values %v; want none (DynamoDB refuses an empty map)", c.values)
	}
}

// deleteAsRead, against the server: an item of every type of attribute,
// unchanged, is deleted; changed in any way between the read and the
// delete (an attribute rewritten, a record version number added, the item
// removed and written again by a new holder), it is left alone, exit 75.
func TestCorruptDeleteAsRead(t *testing.T) {
	f := newFixture(t)
	conn := &connFlags{table: f.table, pkName: "lock_key", skName: "sort_key", ttlName: ddblock.DefaultTTLAttributeName, sdk: sdk}
	every := func() map[string]types.AttributeValue {
		item := corruptLock("job")
		delete(item, "record_version_number")
		maps.Copy(item, map[string]types.AttributeValue{
			"empty":  &types.AttributeValueMemberS{Value: ""},
			"bin":    &types.AttributeValueMemberB{Value: []byte{0, 1, 2}},
			"flag":   &types.AttributeValueMemberBOOL{Value: true},
			"none":   &types.AttributeValueMemberNULL{Value: true},
			"list":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "a"}, &types.AttributeValueMemberN{Value: "1"}}},
			"map":    &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "v"}}},
			"strs":   &types.AttributeValueMemberSS{Value: []string{"x", "y"}},
			"nums":   &types.AttributeValueMemberNS{Value: []string{"1", "2"}},
			"bins":   &types.AttributeValueMemberBS{Value: [][]byte{{1}, {2}}},
			"frac":   &types.AttributeValueMemberN{Value: "0.5"},
			"nested": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{}}},
		})
		return item
	}
	ctx := context.Background()
	changes := []struct {
		name   string
		change func()
	}{
		{"an attribute rewritten", func() {
			item := every()
			item["note"] = &types.AttributeValueMemberS{Value: "other"}
			putRaw(t, f, item)
		}},
		{"a record version number added", func() {
			item := every()
			item["record_version_number"] = &types.AttributeValueMemberS{Value: "new"}
			putRaw(t, f, item)
		}},
		{"a list grown", func() {
			item := every()
			item["list"] = &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "a"}}}
			putRaw(t, f, item)
		}},
		{"a new holder's lock", func() {
			if _, err := sdk.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(f.table), Key: conn.wireTable().Key("job", "-")}); err != nil {
				t.Fatal(err)
			}
			f.acquire("new-holder", "job")
		}},
	}
	for _, tc := range changes {
		putRaw(t, f, every())
		read := rawItem(t, f, "job", "-")
		tc.change()
		err := deleteAsRead(ctx, conn, "job", "-", read)
		var e *exitError
		if !errors.As(err, &e) || e.code != exitBusy || !strings.Contains(e.msg, "changed since it was read") {
			t.Errorf("%s between the read and the delete: %v; want exit %d", tc.name, err, exitBusy)
		}
		if len(rawItem(t, f, "job", "-")) == 0 {
			t.Errorf("%s between the read and the delete: the item was deleted", tc.name)
		}
		if tc.name == "a new holder's lock" {
			if info := f.lookup("job", "-"); info == nil || info.OwnerName != "new-holder" {
				t.Errorf("the new holder's lock after the refused delete: %+v", info)
			}
		}
	}
	if _, err := sdk.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(f.table), Key: conn.wireTable().Key("job", "-")}); err != nil {
		t.Fatal(err)
	}
	putRaw(t, f, every())
	if err := deleteAsRead(ctx, conn, "job", "-", rawItem(t, f, "job", "-")); err != nil {
		t.Fatalf("delete of the item as read, unchanged: %v", err)
	}
	if item := rawItem(t, f, "job", "-"); len(item) != 0 {
		t.Errorf("the item is still there: %v", item)
	}
}

// A slot that ddblock cannot read makes its semaphore unusable: run
// --slots, get of the metadata item and resize name it and say how to
// remove it (exit 65), release --force of the metadata item refuses with
// the same advice (exit 64), and release --force of the slot removes it.
func TestCorruptSemaphoreSlot(t *testing.T) {
	f := newFixture(t)
	holdSlots(t, f, "pool", 1)
	putGarbledSlot := func() {
		item := corruptLock("pool")
		item["sort_key"] = &types.AttributeValueMemberS{Value: "slot-1"}
		putRaw(t, f, item)
	}
	putGarbledSlot()
	const hint = "ddblock release --force --sort-key slot-1 pool"
	r := f.run("run", "--slots", "1", "--wait", "0", "pool", "--", "true")
	if r.code != exitDataErr {
		t.Errorf("run --slots with a slot ddblock cannot read: want exit %d: %v", exitDataErr, r)
	}
	oneLineOn(t, r, hint)
	if r := f.run("get", "--sort-key", "slots", "pool"); r.code != exitDataErr || !strings.Contains(r.stdout, `"pool"/"slot-1" is not an item ddblock can read`) ||
		!strings.Contains(r.stdout, hint) {
		t.Errorf("get of the metadata item: want exit %d and the slot described: %v", exitDataErr, r)
	}
	r = f.run("resize", "pool", "3")
	if r.code != exitDataErr {
		t.Errorf("resize with a slot ddblock cannot read: want exit %d: %v", exitDataErr, r)
	}
	oneLineOn(t, r, hint)
	r = f.run("release", "--force", "--sort-key", "slots", "pool")
	if r.code != exitUsage {
		t.Errorf("release --force of the metadata item: want exit %d: %v", exitUsage, r)
	}
	oneLineOn(t, r, hint)
	if r := f.run("release", "--force", "--sort-key", "slot-1", "pool"); r.code != 0 || !strings.Contains(r.stdout, `removed the item at "pool"/"slot-1"`) {
		t.Fatalf("release --force of the slot: %v", r)
	}
	if r := f.run("run", "--slots", "1", "--wait", "0", "pool", "--", "true"); r.code != exitBusy {
		t.Errorf("run --slots 1 with its one slot held, after the removal: want exit %d: %v", exitBusy, r)
	}
	if r := f.run("resize", "pool", "3"); r.code != 0 {
		t.Errorf("resize after the removal: %v", r)
	}
}

// On a table without a sort key, where the slots are read one key at a
// time up to the span, the repaired semaphore's span covers every slot a
// semaphore can have: resize finds a holder above the new number, waits
// for it, and then narrows the span.
func TestCorruptSemaphoreMetadataPartitionKeyOnly(t *testing.T) {
	f := newFixture(t)
	f.table += "_pk_only"
	pk := []string{"--partition-key-only"}
	if r := f.run("create-table", append(pk, "--on-demand", "--poll-interval", "10ms")...); r.code != 0 {
		t.Fatalf("create-table: %v", r)
	}
	ctx := context.Background()
	locks := map[int]*ddblock.Lock{}
	for i := range 3 {
		c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithPartitionKeyOnly(),
			ddblock.WithOwnerName(fmt.Sprintf("owner-%d", i)), ddblock.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background(), true) })
		s, err := c.NewSemaphore("pool", 3)
		if err != nil {
			t.Fatal(err)
		}
		lock, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := s.SlotOf(lock)
		locks[slot] = lock
	}
	putRaw(t, f, map[string]types.AttributeValue{
		"lock_key":                &types.AttributeValueMemberS{Value: "pool#slots"},
		"ddblock_semaphore_slots": &types.AttributeValueMemberN{Value: "1000000000"},
	})
	if r := f.run("get", append(pk, "pool#slots")...); r.code != exitDataErr || !strings.Contains(r.stdout, "ddblock resize pool N") {
		t.Errorf("get of the garbled metadata item: %v", r)
	}
	p := f.start("resize", append(pk, "--every", "50ms", "pool", "2")...)
	p.eventuallyWhileRunning("resize to wait for slot 2", func() bool {
		return strings.Contains(p.stdout.String(), "slot 2 (owner "+locks[2].OwnerName()+")")
	})
	if err := locks[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r := p.wait(); r.code != 0 || !strings.Contains(r.stdout, "rewriting it with 2 slots") {
		t.Fatalf("resize of the garbled metadata item: %v", r)
	}
	out, err := sdk.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"lock_key": &types.AttributeValueMemberS{Value: "pool#slots"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := out.Item["ddblock_semaphore_slots"].(*types.AttributeValueMemberN); !ok || n.Value != "2" {
		t.Errorf("the metadata item after resize: %v; want 2 slots", out.Item)
	}
	if _, ok := out.Item["ddblock_semaphore_span"]; ok {
		t.Errorf("the metadata item after resize still has a span: %v", out.Item)
	}
}

// Status 65 is documented where every status is.
func TestCorruptExitStatusDocumented(t *testing.T) {
	f := newFixture(t)
	if help := f.runRaw("--help").stdout; !strings.Contains(help, "65 an item") {
		t.Errorf("ddblock --help does not list exit status 65:\n%s", help)
	}
	if help := f.runRaw("run", "--help").stdout; !strings.Contains(help, "65 an item") {
		t.Errorf("ddblock run --help does not list exit status 65:\n%s", help)
	}
	doc, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\n| 65 |") {
		t.Errorf("%s's table of exit statuses has no row for 65", cliDoc)
	}
}

// doc/cli.md's commands for items ddblock cannot read, run as the page
// shows them: each "$ ddblock ..." of the section, on the items it
// describes, must exit as the page says and print the lines it shows
// ("…" stands for lines left out).
func TestCorruptDocRecipe(t *testing.T) {
	const heading = "### An item that ddblock cannot read"
	steps := docSteps(t, heading)
	// The statuses the section gives in its text.
	codes := []int{exitDataErr, 0, 0}
	if len(steps) != len(codes) {
		t.Fatalf("%s, %q: %d blocks of \"$ ddblock\" commands; want get, release and resize", cliDoc, heading, len(steps))
	}

	f := newFixture(t)
	putRaw(t, f, map[string]types.AttributeValue{
		"lock_key":              &types.AttributeValueMemberS{Value: "nightly-report"},
		"sort_key":              &types.AttributeValueMemberS{Value: "-"},
		"owner_name":            &types.AttributeValueMemberN{Value: "42"},
		"lease_duration":        &types.AttributeValueMemberN{Value: "30"},
		"record_version_number": &types.AttributeValueMemberS{Value: "5d1e0b6e"},
	})
	putRaw(t, f, map[string]types.AttributeValue{
		"lock_key":                &types.AttributeValueMemberS{Value: "migrations"},
		"sort_key":                &types.AttributeValueMemberS{Value: "slots"},
		"ddblock_semaphore_slots": &types.AttributeValueMemberN{Value: "0"},
	})
	runDocSteps(t, f, steps, codes, func(line string) string { return strings.Join(strings.Fields(line), " ") })
	if item := rawItem(t, f, "nightly-report", "-"); len(item) != 0 {
		t.Errorf("the item left after the recipe: %v", item)
	}
	if n, ok := rawItem(t, f, "migrations", "slots")["ddblock_semaphore_slots"].(*types.AttributeValueMemberN); !ok || n.Value != "2" {
		t.Errorf("the metadata item after the recipe: %v; want 2 slots", n)
	}
}
