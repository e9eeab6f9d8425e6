package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock/internal/faultproxy"
)

// --wait bounds the whole wait, however long each call takes: with every
// put of the lock throttled (the SDK backing off between its attempts of
// each call) or never answered, `run --wait 3s` gives up about three
// seconds after it began, plus one call's bound (the heartbeat timeout,
// here the library's default for a 1 s heartbeat), and never runs the
// command. Before, the wait counted attempts (wait ÷ retry period), each
// with the SDK's own back-off: a --wait 4s run answered after 26 to 29 s.
// The limit checked, 40 s, is ten times the bound, so that a busy
// machine cannot fail the test; the old behaviour (a black-holed put held
// the run for a minute) cannot pass it.
func TestRunWaitHoldsUnderThrottlingAndSilence(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.Throttling, faultproxy.BlackHole} {
		t.Run(string(kind), func(t *testing.T) {
			f, proxy := newProxiedFixture(t)
			proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "PutItem"})
			marker := t.TempDir() + "/ran"
			start := time.Now()
			r := f.run("run", append(slices.Clone(timingFlags), "--wait", "3s", "job", "--", "touch", marker)...)
			took := time.Since(start)
			if r.code == exitOK || r.code == exitInternal || r.code == exitUsage {
				t.Errorf("run --wait 3s with every put %s: %v; want a failure to take the lock", kind, r)
			}
			if fileExists(marker) {
				t.Errorf("run --wait 3s with every put %s ran the command", kind)
			}
			if took > 40*time.Second {
				t.Errorf("run --wait 3s with every put %s answered after %v: --wait must bound the wait", kind, took)
			}
			if !strings.Contains(r.stderr, "job") {
				t.Errorf("run --wait 3s: the message must name the key: %q", r.stderr)
			}
			t.Logf("answered after %v, exit %d: %s", took, r.code, strings.TrimSpace(r.stderr))
		})
	}
}
