package reliability

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// TestMutualExclusion is the short run of the checker that the normal
// suite runs: about 20 seconds of contention under faults, kills and
// pauses, with short leases.
func TestMutualExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	res := runChaos(t, defaultChaos(20*time.Second))
	t.Logf("\n%s", res.Summary())
	rep := res.Report
	// The run must have done what it claims, or a zero proves nothing.
	if res.faults() == 0 || res.Kills == 0 || res.Pauses == 0 || res.Abandons == 0 {
		t.Errorf("faults %d, kills %d, pauses %d, abandons %d: every kind of trouble must happen at least once",
			res.faults(), res.Kills, res.Pauses, res.Abandons)
	}
	// A floor far below the ~300 handoffs of a normal run: it catches a
	// run that did nothing, not a slow machine.
	if rep.Handoffs < 50 {
		t.Errorf("only %d handoffs: too little contention to show anything", rep.Handoffs)
	}
	if rep.Takeovers == 0 {
		t.Error("no takeover after a lost lock: the faults never made a holder lose its lock")
	}
}

// TestSoak is the long run, documented in doc/reliability.md:
//
//	go test ./reliability_test -run TestSoak -soak=10m -v -timeout 0
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=10m to run the soak")
	}
	cfg := defaultChaos(*soakFor)
	cfg.InProcess, cfg.Workers = 6, 3
	res := runChaos(t, cfg)
	fmt.Printf("\n=== ddblock reliability soak ===\n%s\n", res.Summary())
	if len(res.Report.Violations) > 0 {
		t.Errorf("%d violations", len(res.Report.Violations))
	}
}

// The checker must be able to fail: a holder that ignores its lock's
// state keeps working after its heartbeats are cut off, and the
// checker sees the next holder's steps inside its tenure. The same scene
// with a careful holder shows no overlap.
func TestCheckerCatchesCarelessHolder(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(fmt.Sprintf("careful=%v", careful), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.proxy()
			opts := times(50*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond)
			a := e.client(ddbtest.Shared(t).ClientFor(p.URL(), 1), append(opts, ddblock.WithOwnerName("a"))...)
			b := e.client(e.direct, append(opts, ddblock.WithOwnerName("b"))...)
			var buf bytes.Buffer
			log := mutexcheck.NewLog(&buf)
			ctx := context.Background()

			lockA, err := a.AcquireLock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			log.Acquired("a#1", "k", mutexcheck.Now(), lockA.RecordVersionNumber(), lockA.FencingToken(), "")
			p.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole}) // a is cut off

			aDone := make(chan struct{})
			go func() {
				defer close(aDone)
				// a works for a full second, a lease and more.
				for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
					t := mutexcheck.Now()
					if careful && lockA.Err() != nil {
						log.Ended("a#1", mutexcheck.Now(), string(ddblock.CodeOf(lockA.Err())))
						return
					}
					log.Step("a#1", t)
				}
				log.Ended("a#1", mutexcheck.Now(), "done")
			}()

			lockB, err := b.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(10*time.Millisecond), ddblock.WithRetryTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			log.Acquired("b#1", "k", mutexcheck.Now(), lockB.RecordVersionNumber(), lockB.FencingToken(), takenFrom(lockB))
			for range 20 {
				tb := mutexcheck.Now()
				if lockB.Err() != nil {
					t.Fatalf("b lost the lock: %v", lockB.Err())
				}
				log.Step("b#1", tb)
				time.Sleep(2 * time.Millisecond)
			}
			log.Ended("b#1", mutexcheck.Now(), "done")
			<-aDone

			events, err := mutexcheck.Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			rep := mutexcheck.Check(events)
			if careful && len(rep.Violations) != 0 {
				t.Errorf("a careful holder overlapped: %v", rep.Violations)
			}
			if !careful && len(rep.Violations) == 0 {
				t.Errorf("the checker missed a holder that worked on after losing its lock:\n%s", rep.Summary())
			}
			if careful && rep.Takeovers != 1 {
				t.Errorf("takeovers = %d, want 1", rep.Takeovers)
			}
		})
	}
}

// WithLock's function context is cancelled by the client's monitor
// goroutine when the lock goes into danger; when a paused process resumes
// (SIGCONT, a long GC pause, a frozen VM), the holder's goroutine may run
// before the monitor does. The context's Err therefore checks the clock
// itself. Holders here trust the context alone, and workers are paused
// past the lease while they hold locks: the checker must find no overlap.
func TestWithLockContextAfterPause(t *testing.T) {
	cfg := defaultChaos(20 * time.Second)
	cfg.InProcess, cfg.Workers, cfg.ClientsPerWorker = 4, 2, 2
	cfg.FaultEvery, cfg.AbandonEvery = time.Hour, time.Hour
	cfg.ProcEvery, cfg.PausesOnly, cfg.TrustContext = 300*time.Millisecond, true, true
	cfg.PauseMin, cfg.PauseMax = cfg.Lease+200*time.Millisecond, cfg.Lease+800*time.Millisecond
	cfg.LongShare = 0.5
	res := runChaos(t, cfg)
	t.Logf("\n%s", res.Summary())
}

// takenFrom names the owner of the held item lock took over, if any.
func takenFrom(lock *ddblock.Lock) string {
	if prev := lock.TakenOverFrom(); prev != nil {
		return prev.OwnerName
	}
	return ""
}
