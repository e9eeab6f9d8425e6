package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock/internal/testserver"
)

// The command line: defaults from the period, the server to start, and
// clear refusals of settings that cannot be measured.
func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--locks", "1000, 2000", "--period", "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.server != testserver.Dynalite || cfg.endpoint != "" {
		t.Errorf("server %q, endpoint %q; want dynalite started by the command", cfg.server, cfg.endpoint)
	}
	if len(cfg.locks) != 2 || cfg.locks[0] != 1000 || cfg.locks[1] != 2000 {
		t.Errorf("locks %v; want [1000 2000]", cfg.locks)
	}
	if cfg.safe != 4*time.Second || cfg.lease != 6*time.Second || cfg.settle != time.Second || cfg.duration != 20*time.Second {
		t.Errorf("safe %v, lease %v, settle %v, window %v; want 4s, 6s, 1s, 20s", cfg.safe, cfg.lease, cfg.settle, cfg.duration)
	}
	if !cfg.ceiling {
		t.Error("the ceiling is measured unless --no-ceiling")
	}

	cfg, err = parseFlags([]string{"--server", "dynamodb-local", "--no-ceiling"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.server != testserver.DynamoDBLocal || cfg.ceiling {
		t.Errorf("server %q, ceiling %v; want dynamodb-local, no ceiling", cfg.server, cfg.ceiling)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "cassandra"}, `--server "cassandra"`},
		{[]string{"--server", "dynalite", "--endpoint", "http://127.0.0.1:8000"}, "--server and --endpoint"},
		{[]string{"--locks", "10,-3"}, `--locks: "-3"`},
		{[]string{"--locks", ""}, "--locks: no numbers"},
		{[]string{"--period", "0s"}, "must be positive"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
}
