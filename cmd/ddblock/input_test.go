package main

// Arguments are checked the same way by every command, before anything
// is sent to DynamoDB; exit statuses follow their meaning, and the help
// and doc/cli.md list every one of them.

import (
	"context"
	"errors"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// Every command refuses the same bad keys with the same words, exit 64,
// and never reaches DynamoDB: the endpoint here is a closed port, which
// would answer "connection refused" (exit 69) to any call.
func TestKeysCheckedByEveryCommand(t *testing.T) {
	f := newFixture(t)
	f.endpoint = "http://127.0.0.1:1"
	long := strings.Repeat("k", maxPartitionKeyBytes+1)
	longSort := strings.Repeat("s", maxSortKeyBytes+1)
	bad := []struct {
		name, key, sortKey, want string
	}{
		{"empty key", "", "-", "KEY must not be empty"},
		{"key not UTF-8", "\xff", "-", `KEY "\xff" is not valid UTF-8`},
		{"key too long", long, "-", "KEY is 2049 bytes, over DynamoDB's limit of 2048"},
		{"empty sort key", "k", "", "--sort-key must not be empty"},
		{"sort key not UTF-8", "k", "a\xc0", `--sort-key "a\xc0" is not valid UTF-8`},
		{"sort key too long", "k", longSort, "--sort-key is 1025 bytes, over DynamoDB's limit of 1024"},
	}
	commands := map[string]func(key, sortKey string) []string{
		"run":     func(k, s string) []string { return []string{"run", "--sort-key", s, "--", k, "--", "true"} },
		"get":     func(k, s string) []string { return []string{"get", "--sort-key", s, "--", k} },
		"release": func(k, s string) []string { return []string{"release", "--force", "--sort-key", s, "--", k} },
	}
	for _, tt := range bad {
		for _, name := range slices.Sorted(maps.Keys(commands)) {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				args := commands[name](tt.key, tt.sortKey)
				r := f.run(args[0], args[1:]...)
				if r.code != exitUsage {
					t.Errorf("want exit %d: %v", exitUsage, r)
				}
				oneLineOn(t, r, "ddblock "+name+": "+tt.want)
			})
		}
	}
	for _, key := range []string{"", "\xff", long} {
		r := f.run("ls", "--key", key)
		if r.code != exitUsage || !strings.Contains(r.stderr, "ddblock ls: --key ") {
			t.Errorf("ls --key %q: want exit %d: %v", key[:min(len(key), 8)], exitUsage, r)
		}
		r = f.run("run", "--key", key, "k", "--", "true")
		if r.code != exitUsage || !strings.Contains(r.stderr, "ddblock run: --key ") {
			t.Errorf("run --key %q: want exit %d: %v", key[:min(len(key), 8)], exitUsage, r)
		}
	}
}

// The CLI's key checks refuse exactly what the library refuses when it
// acquires a lock, and accept what it accepts (up to the size limits).
func TestKeyChecksAgreeWithLibrary(t *testing.T) {
	f := newFixture(t)
	c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(c)
	keys := []string{"", "\xff", "ok", "é", strings.Repeat("k", maxPartitionKeyBytes), strings.Repeat("k", maxPartitionKeyBytes+1)}
	sortKeys := []string{"", "\xfe", "-", strings.Repeat("s", maxSortKeyBytes), strings.Repeat("s", maxSortKeyBytes+1)}
	conn := &connFlags{f: newFlags(&environ{getenv: func(string) string { return "" }}, "t", "", "")}
	for _, k := range keys {
		for _, s := range sortKeys {
			_, cliErr := conn.lockKey(k, s)
			lock, libErr := c.TryAcquireLock(context.Background(), k, ddblock.WithSortKeyValue(s))
			if lock != nil {
				if err := lock.Release(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			libRefused := errors.Is(libErr, ddblock.CodeInvalidArgument)
			if libErr != nil && !libRefused {
				t.Fatalf("TryAcquireLock(%d bytes, %d bytes): %v", len(k), len(s), libErr)
			}
			if (cliErr != nil) != libRefused {
				t.Errorf("key of %d bytes %q, sort key of %d bytes: the CLI says %v, the library %v",
					len(k), k[:min(len(k), 4)], len(s), cliErr, libErr)
			}
		}
	}
}

// Each exit status has its meaning, pinned here or next to its feature:
// 0 and the command's own statuses, 126, 127 (TestRunExitStatus); 1
// (TestLsAndGet, TestReleaseForce); 64 and 69 (TestBadInput,
// TestKeysCheckedByEveryCommand); 73 and 78 (TestCreateTable,
// TestEnsureTable, and the table with other keys below); 75
// (TestRunLockNotAcquired); 76 (TestRunLockLost and the guard tests); 70
// (TestGuardKilled).
func TestExitStatusOfATableWithOtherKeys(t *testing.T) {
	f := newFixture(t)
	other := f.table + "_other_keys"
	ddbtest.CreateTable(t, sdk, other, ddblock.WithNamesFromOptions(ddblock.Options{
		TableName: other, PartitionKeyName: "id", SortKeyName: "range", TTLAttributeName: "ttl",
	}))
	f.table = other
	for _, args := range [][]string{{"get", "k"}, {"run", "k", "--", "true"}, {"release", "--force", "k"}} {
		r := f.run(args[0], args[1:]...)
		if r.code != exitConfig {
			t.Errorf("%s on a table with other keys: want exit %d: %v", args[0], exitConfig, r)
		}
		oneLineOn(t, r, "TABLE_MISMATCH")
	}
}

// ddblock --help, ddblock run --help and doc/cli.md list every exit
// status ddblock gives; run --help lists every variable the command gets.
func TestExitStatusesDocumented(t *testing.T) {
	f := newFixture(t)
	statuses := []int{exitOK, exitNotFound, exitUsage, exitDataErr, exitUnavailable, exitInternal, exitCantCreate,
		exitBusy, exitLockLost, exitNoPerm, exitConfig, exitCannotExecute, exitCommandNotFound}
	help := f.runRaw("--help").stdout
	doc, err := os.ReadFile("../../doc/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range statuses {
		n := strconv.Itoa(s)
		if !regexp.MustCompile(`\b` + n + `\b`).MatchString(help) {
			t.Errorf("ddblock --help does not list exit status %d", s)
		}
		if !strings.Contains(string(doc), "\n| "+n+" |") {
			t.Errorf("doc/cli.md's table of exit statuses has no row for %d", s)
		}
	}
	run := f.runRaw("run", "--help").stdout
	for _, s := range []int{exitBusy, exitLockLost, exitCannotExecute, exitCommandNotFound, exitUsage, exitUnavailable, exitInternal, exitNoPerm, exitConfig} {
		if !strings.Contains(run, strconv.Itoa(s)) {
			t.Errorf("ddblock run --help does not list exit status %d", s)
		}
	}
	for _, v := range []string{"DDBLOCK_KEY", "DDBLOCK_SORT_KEY", "DDBLOCK_OWNER", "DDBLOCK_TABLE",
		"DDBLOCK_RECORD_VERSION_NUMBER", "DDBLOCK_FENCING_TOKEN", "DDBLOCK_TAKEN_OVER_FROM", "DDBLOCK_SLOT",
		"DDBLOCK_SESSION_KEY", "DDBLOCK_PARTITION_KEY_NAME", "DDBLOCK_SORT_KEY_NAME", "DDBLOCK_TENURE", "DDBLOCK_GUARD_CHECK", "DDBLOCK_ENCODED",
		"DDBLOCK_KEYS", "DDBLOCK_KEY_I", "DDBLOCK_TENURE_I", "DDBLOCK_GUARD_CHECK_I", "DDBLOCK_GUARD_CHECKS"} {
		if !strings.Contains(run, v) {
			t.Errorf("ddblock run --help does not list %s", v)
		}
	}
}

// A table keyed by the partition key alone works with every command, given
// --partition-key-only; a lock is then named by its key alone.
func TestPartitionKeyOnly(t *testing.T) {
	f := newFixture(t)
	f.table += "_pk_only"
	pk := []string{"--partition-key-only"}
	r := f.run("create-table", append(pk, "--on-demand", "--poll-interval", "10ms")...)
	if r.code != 0 || !strings.Contains(r.stdout, "keys lock_key (no sort key)") {
		t.Fatalf("create-table --partition-key-only: %v", r)
	}
	if r := f.run("ensure-table", pk...); r.code != 0 || !strings.Contains(r.stdout, "exists already, with keys lock_key (no sort key)") {
		t.Errorf("ensure-table --partition-key-only: %v", r)
	}
	if r := f.run("ensure-table"); r.code != exitConfig {
		t.Errorf("ensure-table without --partition-key-only on a partition-key-only table: want exit %d: %v", exitConfig, r)
	}

	out := writerFile(t)
	script := `printf '%s|%s\n' "$DDBLOCK_KEY" "$DDBLOCK_SORT_KEY" > "$1"`
	if r := f.run("run", append(append(slices.Clone(pk), timingFlags...), "job", "--", "sh", "-c", script, "sh", out)...); r.code != 0 {
		t.Fatalf("run --partition-key-only: %v", r)
	}
	if got := readFile(t, out); got != "job|\n" {
		t.Errorf("the command saw DDBLOCK_KEY|DDBLOCK_SORT_KEY = %q, want %q", got, "job|\n")
	}

	// A lock held by a library client of the same table.
	c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithPartitionKeyOnly(),
		ddblock.WithOwnerName("pk-holder"), ddblock.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background(), true) }()
	if _, err := c.AcquireLock(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}
	r = f.run("ls", pk...)
	rows := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(rows) != 2 || cells(rows[0])[1] != "OWNER" || cells(rows[1])[0] != "held" || cells(rows[1])[1] != "pk-holder" {
		t.Errorf("ls --partition-key-only: want a header without SORT KEY and one row: %v", r)
	}
	r = f.run("get", append(pk, "held", "--json")...)
	if r.code != 0 || !strings.Contains(r.stdout, `"sort_key": ""`) || !strings.Contains(r.stdout, `"owner": "pk-holder"`) {
		t.Errorf("get --partition-key-only --json: %v", r)
	}
	if r := f.run("get", append(pk, "--sort-key", "-", "held")...); r.code != exitUsage {
		t.Errorf("--sort-key with --partition-key-only: want exit %d: %v", exitUsage, r)
	}
	if r := f.run("ls", append(pk, "--sort-key-name", "sk")...); r.code != exitUsage {
		t.Errorf("--sort-key-name with --partition-key-only: want exit %d: %v", exitUsage, r)
	}
	if r := f.run("get", "held"); r.code != exitConfig {
		t.Errorf("get without --partition-key-only on a partition-key-only table: want exit %d: %v", exitConfig, r)
	}
	r = f.run("release", append(pk, "--force", "held")...)
	if r.code != 0 || !strings.Contains(r.stdout, `removed lock "held"`) {
		t.Errorf("release --partition-key-only: %v", r)
	}
	if r := f.run("get", append(pk, "held")...); r.code != exitNotFound {
		t.Errorf("get after release: want exit %d: %v", exitNotFound, r)
	}
}
