package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/aws/smithy-go/logging"
)

// The SDK's records reach the CLI's logger: warnings as warnings, except
// the spurious checksum warning about a response without a checksum
// header, which is a debug record like the SDK's debug output.
func TestSDKLogger(t *testing.T) {
	const closeFailed = "failed to close HTTP response body, this may affect connection reuse: %v"
	tests := []struct {
		name   string
		class  logging.Classification
		format string
		args   []any
		level  string // "" when not shown at warning level
	}{
		{"no checksum header", logging.Warn, closeFailed,
			[]any{errors.New("response did not match expected checksum, 0, 1756396488")}, ""},
		{"checksum mismatch", logging.Warn, closeFailed,
			[]any{errors.New("response did not match expected checksum, 42, 1756396488")}, "WARN"},
		{"other warning", logging.Warn, "something odd: %d", []any{7}, "WARN"},
		{"debug", logging.Debug, "Request\n%s", []any{"POST / HTTP/1.1"}, ""},
	}
	t.Run("credentials redacted", func(t *testing.T) {
		var out bytes.Buffer
		c := &connFlags{stderr: &out, debug: true}
		sdkLogger{c.logger()}.Logf(logging.Debug, "Request\n%s", "POST / HTTP/1.1\r\nHost: x\r\n"+
			"Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/dynamodb/aws4_request, Signature=abc\r\n"+
			"X-Amz-Security-Token: sessiontoken\r\nX-Amz-Target: DynamoDB_20120810.GetItem\r\n")
		got := out.String()
		for _, secret := range []string{"AKIDEXAMPLE", "Signature=abc", "sessiontoken"} {
			if strings.Contains(got, secret) {
				t.Errorf("%q logged: %s", secret, got)
			}
		}
		if !strings.Contains(got, "Authorization: [redacted]") || !strings.Contains(got, "X-Amz-Target: DynamoDB_20120810.GetItem") {
			t.Errorf("want the headers redacted, the rest kept: %s", got)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, debug := range []bool{false, true} {
				var out bytes.Buffer
				c := &connFlags{stderr: &out, debug: debug}
				sdkLogger{c.logger()}.Logf(tt.class, tt.format, tt.args...)
				got := out.String()
				want := tt.level
				if want == "" && debug {
					want = "DEBUG"
				}
				switch {
				case want == "" && got != "":
					t.Errorf("debug=%v: want nothing, got %q", debug, got)
				case want != "" && !strings.Contains(got, "level="+want+` msg="aws sdk: `):
					t.Errorf("debug=%v: want a %s record from the SDK, got %q", debug, want, got)
				}
			}
		})
	}
}

// With --debug, the SDK's requests and retries are logged through the
// CLI's logger; without it, a failure is one line. No raw SDK line
// ("SDK 2026/01/02 15:04:05 WARN ...") reaches stderr either way.
func TestDebugFlag(t *testing.T) {
	f := newFixture(t)
	missing := &fixture{t: t, table: "no_such_table_" + f.table, endpoint: server.Endpoint, env: f.env}
	r := missing.run("get", "k")
	if r.code != exitUnavailable {
		t.Fatalf("want exit %d: %v", exitUnavailable, r)
	}
	oneLineOn(t, r, "does not exist")

	r = missing.run("get", "--debug", "k")
	if r.code != exitUnavailable {
		t.Fatalf("--debug: want exit %d: %v", exitUnavailable, r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "ddblock get: ") || !strings.Contains(last, "does not exist") {
		t.Errorf("--debug: the last line is not the error: %q", last)
	}
	if !strings.Contains(r.stderr, `level=DEBUG msg="aws sdk: Request`) {
		t.Errorf("--debug: no SDK request logged:\n%s", r.stderr)
	}
	for _, line := range lines[:len(lines)-1] {
		if !strings.HasPrefix(line, "time=") {
			t.Errorf("--debug: a line that is not the CLI's logging: %q", line)
		}
	}
	if strings.Contains(r.stderr, "level=WARN") {
		t.Errorf("--debug: a warning for a missing table:\n%s", r.stderr)
	}
}
