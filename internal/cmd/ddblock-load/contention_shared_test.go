package main

import (
	"testing"

	"github.com/ddblock/ddblock/internal/ddbtest"
)

// The "unfair-shared" mode runs against the real server: the contenders
// of a process share one client and wait on one another's locks, every
// contender gets the key, and never two at once. Nothing is timed.
func TestContentionSharedClient(t *testing.T) {
	_, js := contentionReport(t, ddbtest.Shared(t), "--wait-mode", "unfair-shared", "--contenders", "4", "--procs", "2", "--duration", "3s", "--think", "100ms")
	j := decodeContention(t, js)
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
