package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fairChaos is the semaphore set-up (locks, slots, elections, WithLock,
// direct slot keys, every flavour) with half the holders waiting fairly:
// the even in-process slots and the workers' even clients, each in its
// flavour. Fair waiters are killed while in line, paused while first in
// line (a worker's SIGSTOP), closed while waiting (abandoned clients),
// and meet lost replies to their coming into line and leaving it (the
// fault proxy's drop-reply on every operation).
func fairChaos(d time.Duration) chaosConfig {
	cfg := semaphoreChaos(d)
	cfg.Fair = true
	return cfg
}

// TestMutualExclusionWithFairWaiters: the line decides who tries, never
// who holds; mutual exclusion and the slot limit hold with fair waiters
// mixed among every other kind of holder, under faults, kills and
// pauses.
func TestMutualExclusionWithFairWaiters(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	res := runChaos(t, fairChaos(20*time.Second))
	t.Logf("\n%s", res.Summary())
	rep := res.Report
	if res.faults() == 0 || res.Kills == 0 || res.Pauses == 0 || res.Abandons == 0 {
		t.Errorf("faults %d, kills %d, pauses %d, abandons %d: every kind of trouble must happen at least once",
			res.faults(), res.Kills, res.Pauses, res.Abandons)
	}
	fair, unfair, fairKinds := 0, 0, 0
	for kind, n := range rep.ByKind {
		if strings.Contains(kind, "-fair") {
			fair += n
			fairKinds++
		} else {
			unfair += n
		}
	}
	// Fair waiters of at least three flavours, among the others (which
	// flavours get their turns in 20 seconds is luck).
	if fair == 0 || unfair == 0 || fairKinds < 3 {
		t.Errorf("working tenures of fair waiters %d in %d flavours, of others %d (%v): the run must mix them", fair, fairKinds, unfair, rep.ByKind)
	}
	if rep.Handoffs < 50 || rep.Takeovers == 0 {
		t.Errorf("handoffs %d, takeovers %d: too little contention to show anything", rep.Handoffs, rep.Takeovers)
	}
}

// TestFairSoak is the long run with fair waiters, recorded in
// doc/waiting.md:
//
//	go test ./reliability_test -run TestFairSoak -soak=5m -v -timeout 0
func TestFairSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=5m to run the soak")
	}
	res := runChaos(t, fairChaos(*soakFor))
	fmt.Printf("\n=== ddblock reliability soak with fair waiters ===\n%s\n", res.Summary())
}
