package ddblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// The retry timeout bounds the whole wait, however long each call takes:
// a call in flight when the wait runs out is cut a HeartbeatTimeout
// later at the most. Here every put of the lock is black-holed (it never
// answers), or throttled with the SDK backing off between its ten
// attempts of each call: with a 1 s retry timeout and a 500 ms call
// bound the acquire answers ACQUIRE_TIMEOUT about 1.5 s after it began.
// Before, the black-holed put held it until its context ended (never,
// here: the test's own 60 s guard), and the throttled puts took their
// ten attempts' back-off, tens of seconds. The limit checked, 15 s, is
// ten times the bound, so that a busy machine cannot fail the test; the
// old behaviour cannot pass it.
func TestRetryTimeoutCutsTheCallInFlight(t *testing.T) {
	for _, kind := range []faultproxy.Kind{faultproxy.BlackHole, faultproxy.Throttling} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t)
			p, err := faultproxy.Start(ddbtest.Shared(t).Endpoint)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			c := e.clientOn(ddbtest.Shared(t).ClientFor(p.URL(), 10), ddblock.WithHeartbeatTimeout(500*time.Millisecond))
			p.MustInject(faultproxy.Rule{Kind: kind, Op: "PutItem"})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			_, err = c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(200*time.Millisecond), ddblock.WithRetryTimeout(time.Second))
			took := time.Since(start)
			if !errors.Is(err, ddblock.CodeAcquireTimeout) {
				t.Fatalf("AcquireLock with every put %s: %v; want ACQUIRE_TIMEOUT", kind, err)
			}
			if took > 15*time.Second {
				t.Fatalf("AcquireLock with a 1 s retry timeout and a 500 ms call bound answered after %v", took)
			}
			t.Logf("answered after %v: %v", took, err)
		})
	}
}
