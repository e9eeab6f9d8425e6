package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestTermSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "",
		"host-1 (pid 42)":          "host-1 (pid 42)",
		"Jürgen 東京 \\x1b":          "Jürgen 東京 \\x1b",
		"a\tb\nc\r":                `a\tb\nc\r`,
		"\x1b]0;pwned\x07\x1b[2J":  `\x1b]0;pwned\a\x1b[2J`,
		"\x00\x7f":                 `\x00\x7f`,
		"x\u009b31my\u0085":        `x\u009b31my\u0085`,
		"\u202egnp.exe":            `\u202egnp.exe`,
		"\u061c\u200e\u200f\u2066": `\u061c\u200e\u200f\u2066`,
		"\u202a\u202d\u2069":       `\u202a\u202d\u2069`,
		"bad\xff\xc3":              `bad\xff\xc3`,
		"ok \ufffd":                "ok \ufffd",
	} {
		got := termSafe(in)
		if got != want {
			t.Errorf("termSafe(%q) = %q, want %q", in, got, want)
		}
		if again := termSafe(got); again != got {
			t.Errorf("termSafe(termSafe(%q)) = %q, want %q", in, again, got)
		}
	}
}

// terminalUnsafe returns the first character of s that a terminal would
// act on or show in another order: a control other than newline and tab,
// a C1 control, a bidirectional control, or a byte that is not UTF-8.
func terminalUnsafe(s string) (string, bool) {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\ufffd") {
			return s[i : i+1], true
		}
		if r != '\n' && r != '\t' && unsafeRune(r) {
			return string(r), true
		}
	}
	return "", false
}

// Owners, record version numbers, keys and attribute values come from
// the table, where whoever may write it can put escape sequences: text
// output escapes them (issue 31), --json keeps them exact.
func TestTerminalSafeOutput(t *testing.T) {
	f := newFixture(t)
	const (
		owner = "mallory\x1b]0;pwned\x07\x1b[2J\u009b31m\u202egnp.exe"
		rvn   = "rvn\x1b[2J\u009b\u202e"
		key   = "evil"
		bad   = "key\x1b[2J\u009b\u202e"
	)
	put := func(k string) {
		t.Helper()
		_, err := sdk.PutItem(context.Background(), &dynamodb.PutItemInput{
			TableName: aws.String(f.table),
			Item: map[string]types.AttributeValue{
				"lock_key":              &types.AttributeValueMemberS{Value: k},
				"sort_key":              &types.AttributeValueMemberS{Value: "-"},
				"owner_name":            &types.AttributeValueMemberS{Value: owner},
				"lease_duration":        &types.AttributeValueMemberN{Value: "600"},
				"record_version_number": &types.AttributeValueMemberS{Value: rvn},
				"note":                  &types.AttributeValueMemberS{Value: "n\u009b\u202e\x7f"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(key)
	put(bad)

	check := func(what string, r result, wantCode int, escaped ...string) {
		t.Helper()
		if r.code != wantCode {
			t.Errorf("%s: exit %d, want %d: %v", what, r.code, wantCode, r)
		}
		for _, out := range []string{r.stdout, r.stderr} {
			if c, ok := terminalUnsafe(out); ok {
				t.Errorf("%s printed %q raw: %q", what, c, out)
			}
		}
		for _, e := range escaped {
			if !strings.Contains(r.stdout+r.stderr, e) {
				t.Errorf("%s does not show %s: %v", what, e, r)
			}
		}
	}
	ownerShown := `mallory\x1b]0;pwned\a\x1b[2J\u009b31m\u202egnp.exe`
	rvnShown := `rvn\x1b[2J\u009b\u202e`

	check("ls", f.run("ls"), 0, ownerShown, rvnShown, `key\x1b[2J\u009b\u202e`, `\u009b\u202e\u007f`)
	check("get", f.run("get", key), 0, ownerShown, rvnShown, `\u009b\u202e\u007f`)
	check("get of the key with escapes", f.run("get", bad), 0, ownerShown, `key\x1b[2J\u009b\u202e`)
	check("get of a missing key", f.run("get", "gone\x1b[2J\u009b\u202e"), exitNotFound, `gone\x1b[2J\u009b\u202e`)
	check("run --wait 0", f.run("run", "--wait", "0", key, "--", "true"), exitBusy, "is held by "+`"`+ownerShown)
	check("release --force --rvn", f.run("release", "--force", "--rvn", "other\x1b[2J", key), exitBusy, rvnShown, `other\x1b[2J`)

	// --json stays exact.
	for _, l := range decodeLocks(t, f.run("ls", "--json")) {
		if l.Owner != owner || l.RecordVersionNumber != rvn || (l.Key != key && l.Key != bad) {
			t.Errorf("ls --json: key %q owner %q rvn %q, want owner %q rvn %q", l.Key, l.Owner, l.RecordVersionNumber, owner, rvn)
		}
	}
	r := f.run("get", "--json", bad)
	var got lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("get --json: %v: %v", err, r)
	}
	if got.Key != bad || got.Owner != owner || got.RecordVersionNumber != rvn || got.Attributes["note"] != "n\u009b\u202e\x7f" {
		t.Errorf("get --json: %+v, want key %q owner %q rvn %q", got, bad, owner, rvn)
	}

	check("release --force", f.run("release", "--force", key), 0, ownerShown, rvnShown)
	if f.lookup(key, "") != nil {
		t.Errorf("release --force left the lock")
	}
}
