package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/ddblock/ddblock/internal/ddbtest"
)

// The "unfair-shared" mode runs against the real server: the contenders
// of a process share one client and wait on one another's locks, every
// contender gets the key, and never two at once. Nothing is timed.
func TestContentionSharedClient(t *testing.T) {
	srv := ddbtest.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, err := parseFlags([]string{"--scenario", "contention", "--wait-mode", "unfair-shared", "--contenders", "4", "--procs", "2", "--duration", "3s", "--think", "100ms", "--json"})
	if err != nil {
		t.Fatal(err)
	}
	var text, js bytes.Buffer
	if err := contentionMain(ctx, srv.Client(0), srv.Endpoint, srv.ChildEnv(os.Environ()), string(srv.Kind), cfg, &text, &js); err != nil {
		t.Fatalf("%v\n%s", err, text.String())
	}
	t.Logf("report:\n%s", text.String())
	var j jsonContention
	if err := json.Unmarshal(js.Bytes(), &j); err != nil {
		t.Fatalf("decoding %s: %v", js.String(), err)
	}
	if j.WaitMode != "unfair-shared" || j.Contenders != 4 || j.Processes != 2 {
		t.Errorf("JSON header %+v", j)
	}
	for id, n := range j.AcquisitionsPerContender {
		if n < 1 {
			t.Errorf("contender %d never acquired the key: %v", id, j.AcquisitionsPerContender)
		}
	}
	if j.Overlaps != 0 || j.AcquireErrors != 0 || j.ReleaseErrors != 0 {
		t.Errorf("overlaps %d, acquire errors %d, release errors %d; want none", j.Overlaps, j.AcquireErrors, j.ReleaseErrors)
	}
}
