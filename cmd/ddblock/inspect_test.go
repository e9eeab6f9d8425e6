package main

import (
	"context"
	"encoding/json"
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
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ddblock/ddblock"
)

// ls and get show what is in the table, for people and for scripts.
func TestLsAndGet(t *testing.T) {
	f := newFixture(t)

	r := f.run("ls")
	if r.code != 0 || r.stdout != "no locks in table \""+f.table+"\"\n" {
		t.Errorf("ls on an empty table: %v", r)
	}
	if r := f.run("ls", "--json"); r.code != 0 || strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("ls --json on an empty table: %v", r)
	}

	f.acquire("alice", "job-1", ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{
		"host":  &types.AttributeValueMemberS{Value: "web-1"},
		"tries": &types.AttributeValueMemberN{Value: "3"},
	}))
	f.acquire("bob", "job-2", ddblock.WithSortKeyValue("eu"))

	// These holders write no heartbeat stamp, and plain ls reads once.
	unknown := holderJSON{State: holderUnknown, Detail: "no heartbeat stamp; ls --watch tells"}
	want := []lockJSON{
		{Key: "job-1", SortKey: "-", Owner: "alice", LeaseSeconds: 180, Holder: unknown,
			Attributes: map[string]any{"host": "web-1", "tries": json.Number("3")}},
		{Key: "job-2", SortKey: "eu", Owner: "bob", LeaseSeconds: 180, Holder: unknown, Attributes: map[string]any{}},
	}
	ignoreVolatile := cmpopts.IgnoreFields(lockJSON{}, "RecordVersionNumber", "ExpiryTime")

	r = f.run("ls", "--json")
	got := decodeLocks(t, r)
	if diff := cmp.Diff(want, got, ignoreVolatile); diff != "" {
		t.Errorf("ls --json (-want +got):\n%s", diff)
	}
	for _, l := range got {
		if len(l.RecordVersionNumber) != 36 {
			t.Errorf("record version number %q", l.RecordVersionNumber)
		}
		if exp, err := time.Parse(time.RFC3339, l.ExpiryTime); err != nil || time.Until(exp) < 30*time.Minute {
			t.Errorf("expiry time %q (%v): want about an hour from now", l.ExpiryTime, err)
		}
	}

	r = f.run("ls", "--key", "job-2", "--json")
	if diff := cmp.Diff(want[1:], decodeLocks(t, r), ignoreVolatile); diff != "" {
		t.Errorf("ls --key job-2 --json (-want +got):\n%s", diff)
	}

	r = f.run("ls")
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(rows) != 3 {
		t.Fatalf("ls: want a header and two rows: %v", r)
	}
	wantRows := [][]string{
		{"KEY", "SORT KEY", "OWNER", "HOLDER", "LEASE", "RECORD VERSION NUMBER", "EXPIRES (TTL)", "ATTRIBUTES"},
		{"job-1", "-", "alice", "unknown (no heartbeat stamp; ls --watch tells)", "3m0s", got[0].RecordVersionNumber, got[0].ExpiryTime, `host="web-1" tries=3`},
		{"job-2", "eu", "bob", "unknown (no heartbeat stamp; ls --watch tells)", "3m0s", got[1].RecordVersionNumber, got[1].ExpiryTime, "-"},
	}
	for i, row := range rows {
		if diff := cmp.Diff(wantRows[i], cells(row)); diff != "" {
			t.Errorf("ls row %d (-want +got):\n%s", i, diff)
		}
	}

	r = f.run("get", "job-1")
	if r.code != 0 {
		t.Fatalf("get: %v", r)
	}
	fields := map[string]string{}
	for line := range strings.Lines(r.stdout) {
		// Labels and values are separated by two spaces or more.
		label, value, _ := strings.Cut(strings.TrimSpace(line), "  ")
		fields[label] = strings.TrimSpace(value)
	}
	wantFields := map[string]string{
		"key": "job-1", "sort key": "-", "owner": "alice", "lease": "3m0s",
		"holder":                "unknown (no heartbeat stamp; ls --watch tells)",
		"record version number": got[0].RecordVersionNumber, "expires (TTL)": got[0].ExpiryTime,
		"attribute host": `"web-1"`, "attribute tries": "3",
	}
	if diff := cmp.Diff(wantFields, fields); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}

	r = f.run("get", "job-2", "--sort-key", "eu", "--json")
	var one lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || r.code != 0 {
		t.Fatalf("get --json: %v (%v)", r, err)
	}
	if diff := cmp.Diff(want[1], one, ignoreVolatile); diff != "" {
		t.Errorf("get --json (-want +got):\n%s", diff)
	}

	r = f.run("get", "job-3")
	if r.code != exitNotFound {
		t.Errorf("get of a missing lock: want exit %d: %v", exitNotFound, r)
	}
	oneLineOn(t, r, `no lock "job-3"/"-" in table`)
}

// cells splits a row of ls's table: columns are two spaces or more apart.
func cells(row string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(row), -1)
}

func decodeLocks(t *testing.T, r result) []lockJSON {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("ls failed: %v", r)
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber()
	var out []lockJSON
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("ls --json printed %q: %v", r.stdout, err)
	}
	return out
}

// release --force removes a stuck lock, guarded by the version just read
// or given; without --force it touches nothing.
func TestReleaseForce(t *testing.T) {
	f := newFixture(t)
	stuck := f.acquire("stuck-worker", "job")

	r := f.run("release", "job")
	if r.code != exitUsage {
		t.Errorf("release without --force: want exit %d: %v", exitUsage, r)
	}
	oneLineOn(t, r, "without --force")

	r = f.run("release", "job", "--force", "--rvn", "00000000-0000-4000-8000-000000000000")
	if r.code != exitBusy {
		t.Errorf("release --rvn of another version: want exit %d: %v", exitBusy, r)
	}
	if info := f.lookup("job", "-"); info == nil {
		t.Fatal("the lock was removed without --force or with the wrong version")
	}

	r = f.run("release", "--force", "--rvn", stuck.RecordVersionNumber(), "job")
	if r.code != 0 || !strings.Contains(r.stdout, `lock "job"/"-" is held by stuck-worker`) || !strings.Contains(r.stdout, "removed") {
		t.Fatalf("release --force: %v", r)
	}
	if info := f.lookup("job", "-"); info != nil {
		t.Errorf("the lock is still there: %+v", info)
	}

	f.acquire("other", "job2", ddblock.WithSortKeyValue("s"))
	if r := f.run("release", "job2", "--sort-key", "s", "--force"); r.code != 0 {
		t.Errorf("release --force --sort-key: %v", r)
	}
	if info := f.lookup("job2", "s"); info != nil {
		t.Errorf("the lock is still there: %+v", info)
	}

	r = f.run("release", "job", "--force")
	if r.code != exitNotFound {
		t.Errorf("release of a missing lock: want exit %d: %v", exitNotFound, r)
	}
	oneLineOn(t, r, `no lock "job"/"-"`)
}

// create-table makes a table that run can use, and says when the server
// cannot enable TTL.
func TestCreateTable(t *testing.T) {
	needServer(t)
	f := &fixture{t: t, table: "ct_" + strings.ReplaceAll(t.Name(), "/", "_") + "_" + time.Now().Format("150405.000000"),
		endpoint: server.Endpoint, env: baseEnv()}

	r := f.run("create-table", "--on-demand", "--poll-interval", "10ms")
	if r.code != 0 {
		t.Fatalf("create-table: %v", r)
	}
	ttlSaid := "cannot enable TTL" // dynalite has no TTL
	if server.HasTTL() {
		ttlSaid = "with TTL on expiry_time"
	}
	if !strings.Contains(r.stdout, `created table "`+f.table+`"`) || !strings.Contains(r.stdout, ttlSaid) {
		t.Errorf("create-table on %s said: %v; want %q", server.Name(), r, ttlSaid)
	}
	if r := f.run("run", append(slices.Clone(timingFlags), "job", "--", "true")...); r.code != 0 {
		t.Errorf("run on the new table: %v", r)
	}

	r = f.run("create-table", "--on-demand")
	if r.code != exitCantCreate {
		t.Errorf("create-table of an existing table: want exit %d: %v", exitCantCreate, r)
	}
	oneLineOn(t, r, "exists already")
	if r := f.run("create-table", "--if-not-exists"); r.code != 0 || !strings.Contains(r.stdout, "exists already, with keys lock_key, sort_key") {
		t.Errorf("create-table --if-not-exists: %v", r)
	}
	r = f.run("create-table", "--if-not-exists", "--sort-key-name", "other")
	if r.code != exitConfig {
		t.Errorf("create-table --if-not-exists on a table with other keys: want exit %d: %v", exitConfig, r)
	}
	oneLineOn(t, r, `sort key is "sort_key", want "other"`)

	f.table += "_ensured"
	r = f.run("create-table", "--if-not-exists", "--on-demand", "--poll-interval", "10ms")
	if r.code != 0 || !strings.Contains(r.stdout, `created table "`+f.table+`"`) {
		t.Errorf("create-table --if-not-exists of a new table: %v", r)
	}

	f.table += "_provisioned"
	r = f.run("create-table", "--read-capacity", "2", "--write-capacity", "3", "--poll-interval", "10ms")
	if r.code != 0 || !strings.Contains(r.stdout, "provisioned 2 read / 3 write") {
		t.Errorf("create-table with capacity: %v", r)
	}
}

// Mistakes get one clear line on stderr and a non-zero status.
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	missing := &fixture{t: t, table: "no_such_table_" + f.table, endpoint: server.Endpoint, env: f.env}
	tests := []struct {
		name   string
		run    func() result
		code   int
		stderr string
	}{
		{"no command", func() result { return f.runRaw() }, exitUsage, "missing command"},
		{"unknown command", func() result { return f.runRaw("frobnicate") }, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", func() result { return f.run("ls", "--bogus") }, exitUsage, "flag provided but not defined: -bogus"},
		{"bad duration", func() result { return f.run("run", "--lease", "soon", "k", "--", "true") }, exitUsage, `invalid value "soon" for flag -lease`},
		{"missing key", func() result { return f.run("get") }, exitUsage, "missing KEY"},
		{"extra argument", func() result { return f.run("get", "a", "b") }, exitUsage, `unexpected argument "b"`},
		{"missing command", func() result { return f.run("run", "k") }, exitUsage, "missing COMMAND"},
		{"missing key before --", func() result { return f.run("run", "--", "sh", "-c", "true") }, exitUsage, "missing KEY before --"},
		{"guard run by hand", func() result { return f.runRaw("__guard", "--", "true") }, exitUsage, "internal command of ddblock run, not for direct use"},
		{"negative watch", func() result { return f.run("ls", "--watch", "-1s") }, exitUsage, "--watch must not be negative"},
		{"negative lease", func() result { return f.run("run", "--lease", "-1s", "k", "--", "true") }, exitUsage, "--lease must be positive"},
		{"heartbeat too long", func() result { return f.run("run", "--lease", "1s", "--heartbeat", "400ms", "k", "--", "true") }, exitUsage, "at least two heartbeats"},
		{"safe not below lease", func() result { return f.run("run", "--lease", "1s", "--safe", "1s", "k", "--", "true") }, exitUsage, "--safe 1s must be shorter than --lease 1s"},
		{"grace too long", func() result { return f.run("run", "--lease", "3s", "--grace", "2s", "k", "--", "true") }, exitUsage, "--grace 2s is longer than the 1s"},
		{"negative wait", func() result { return f.run("run", "--wait", "-1s", "k", "--", "true") }, exitUsage, "--wait must not be negative"},
		{"bad attribute", func() result { return f.run("run", "--attr", "novalue", "k", "--", "true") }, exitUsage, "want NAME=VALUE"},
		{"release without force", func() result { return f.run("release", "k") }, exitUsage, "without --force"},
		{"capacity with on-demand", func() result { return f.run("create-table", "--on-demand", "--read-capacity", "3") }, exitUsage, "exclude each other"},
		{"bad table name", func() result { return f.runRaw("ls", "--endpoint", server.Endpoint, "--table", "x") }, exitUsage, "is not a DynamoDB table name"},
		{"clashing attribute names", func() result { return f.run("ls", "--sort-key-name", "lock_key") }, exitUsage, "SortKeyName"},
		{"ls on a missing table", func() result { return missing.run("ls") }, exitUnavailable, "does not exist (create it with: ddblock create-table"},
		{"get on a missing table", func() result { return missing.run("get", "k") }, exitUnavailable, "does not exist"},
		{"run on a missing table", func() result { return missing.run("run", "k", "--", "true") }, exitUnavailable, "does not exist"},
		{"release on a missing table", func() result { return missing.run("release", "k", "--force") }, exitUnavailable, "does not exist"},
		{"server unreachable", func() result { return f.runRaw("ls", "--endpoint", "http://127.0.0.1:1", "--table", f.table) }, exitUnavailable, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.run()
			if r.code != tt.code {
				t.Errorf("want exit %d: %v", tt.code, r)
			}
			oneLineOn(t, r, tt.stderr)
		})
	}
}

// Every subcommand explains itself on --help, on stdout, with status 0.
func TestHelp(t *testing.T) {
	f := newFixture(t)
	r := f.runRaw("--help")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: ddblock COMMAND") {
		t.Errorf("ddblock --help: %v", r)
	}
	for _, c := range commands() {
		if !strings.Contains(r.stdout, "\n  "+c.name+" ") {
			t.Errorf("ddblock --help does not list %s", c.name)
		}
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := f.runRaw(args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: ddblock "+c.name) || r.stderr != "" {
				t.Errorf("ddblock %s: %v", strings.Join(args, " "), r)
			}
			if c.name != "demo" && !strings.Contains(r.stdout, "-endpoint") {
				t.Errorf("ddblock %s does not document --endpoint:\n%s", strings.Join(args, " "), r.stdout)
			}
		}
	}
}

// ls tells live holders from presumably dead ones, and says how: by the
// heartbeat stamp where holders write one, and with --watch by a second
// read, comparing record version numbers.
func TestLsHolderLiveness(t *testing.T) {
	f := newFixture(t)
	// A live ddblock run, heartbeating every 150 ms.
	lines := writerFile(t)
	run := f.start("run", append(append(slices.Clone(timingFlags), "--owner", "runner", "live", "--"),
		writerCommand(t, "A", lines, writerEvery, 0)...)...)
	run.eventuallyWhileRunning("the run's command to start", func() bool { return len(readWriterLines(t, lines)) > 0 })
	// A holder that stamps its heartbeats, with a long heartbeat period:
	// fresh by its stamp, silent through a short watch.
	stamping, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithOwnerName("stamper"),
		ddblock.WithMaxClockSkew(time.Second), ddblock.WithHeartbeatPeriod(time.Minute),
		ddblock.WithSafePeriod(2*time.Minute), ddblock.WithLeaseDuration(3*time.Minute), ddblock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stamping.Close(context.Background(), true) }()
	if _, err := stamping.AcquireLock(context.Background(), "stamped"); err != nil {
		t.Fatal(err)
	}
	// A holder that died long ago, as its stamp says.
	_, err = sdk.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(f.table),
		Item: map[string]types.AttributeValue{
			"lock_key":              &types.AttributeValueMemberS{Value: "stale"},
			"sort_key":              &types.AttributeValueMemberS{Value: "-"},
			"owner_name":            &types.AttributeValueMemberS{Value: "crashed"},
			"lease_duration":        &types.AttributeValueMemberN{Value: "30"},
			"record_version_number": &types.AttributeValueMemberS{Value: "11111111-2222-4333-8444-555555555555"},
			"ddblock_heartbeat_ms":  &types.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(-10*time.Minute).UnixMilli(), 10)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A holder without a stamp that does not heartbeat during the test.
	f.acquire("silent", "silent")

	byKey := func(locks []lockJSON) map[string]holderJSON {
		out := map[string]holderJSON{}
		for _, l := range locks {
			out[l.Key] = l.Holder
		}
		return out
	}
	got := byKey(decodeLocks(t, f.run("ls", "--json")))
	want := map[string]struct{ state, evidence, detail string }{
		"live":    {holderUnknown, "", "no heartbeat stamp"},
		"stamped": {holderLive, evidenceStamp, "lease 3m0s"},
		"stale":   {holderPresumedDead, evidenceStamp, "more than its lease of 30s"},
		"silent":  {holderUnknown, "", "no heartbeat stamp"},
	}
	for key, w := range want {
		if h := got[key]; h.State != w.state || h.Evidence != w.evidence || !strings.Contains(h.Detail, w.detail) {
			t.Errorf("ls, %s: holder %+v, want %s by %q, saying %q", key, h, w.state, w.evidence, w.detail)
		}
	}

	r := f.run("ls", "--watch", "600ms", "--json")
	if !strings.Contains(r.stderr, "reading the table again in 600ms") {
		t.Errorf("ls --watch did not say it waits: %v", r)
	}
	got = byKey(decodeLocks(t, r))
	want = map[string]struct{ state, evidence, detail string }{
		"live":    {holderLive, evidenceWatch, "heartbeated during the 600ms watch"},
		"stamped": {holderPresumedDead, evidenceWatch, "no heartbeat in 600ms"},
		"stale":   {holderPresumedDead, evidenceWatch, "no heartbeat in 600ms"},
		"silent":  {holderPresumedDead, evidenceWatch, "no heartbeat in 600ms"},
	}
	for key, w := range want {
		if h := got[key]; h.State != w.state || h.Evidence != w.evidence || h.Detail != w.detail {
			t.Errorf("ls --watch, %s: holder %+v, want %s by %q, saying %q", key, h, w.state, w.evidence, w.detail)
		}
	}
	r = f.run("ls", "--watch", "300ms")
	for _, row := range strings.Split(strings.TrimSpace(r.stdout), "\n")[1:] {
		c := cells(row)
		if c[0] == "live" && c[3] != "live (heartbeated during the 300ms watch)" || c[0] == "silent" && c[3] != "presumed dead (no heartbeat in 300ms)" {
			t.Errorf("ls --watch row %q", row)
		}
	}
	run.signal(syscall.SIGTERM)
	run.wait()
}
