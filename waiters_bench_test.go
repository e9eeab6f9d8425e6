package ddblock_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
)

// BenchmarkHandoff times a handoff: from the holder calling Release to
// the waiter's AcquireLock returning the lock, the waiter asleep for a
// random part of its 100 ms retry period when the release comes. It
// asserts nothing about speed; the figures are in doc/benchmarks.md.
//
//   - in-process: the waiter is a goroutine of the holder's own client
//     (WithWaitOnOwn): the release hands it the key, and its put goes out
//     as soon as the release's delete is answered;
//   - poll-bound: the waiter has a client of its own, as any waiter had
//     before: it finds the key free at its next read.
//
// Besides ns/op (the handoff, the waiter's set-up excluded) it reports
// the median and the 90th percentile of the handoffs, and the median of
// the Release calls alone.
//
//	go test -run '^$' -bench Handoff -benchtime 40x .
func BenchmarkHandoff(b *testing.B) {
	const period = 100 * time.Millisecond
	for _, inProcess := range []bool{true, false} {
		name := "poll-bound"
		if inProcess {
			name = "in-process"
		}
		b.Run(name, func(b *testing.B) {
			ddb, table := benchTable(b)
			holder := benchClient(b, ddb, table)
			waiter := holder
			if !inProcess {
				waiter = benchClient(b, ddb, table)
			}
			ctx := context.Background()
			var handoffs, releases []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				held, err := holder.AcquireLock(ctx, "handoff")
				if err != nil {
					b.Fatal(err)
				}
				got := make(chan error, 1)
				var next *ddblock.Lock
				go func() {
					var err error
					next, err = waiter.AcquireLock(ctx, "handoff", ddblock.WithRetryPeriod(period), ddblock.WithWaitOnOwn())
					got <- err
				}()
				// Let the waiter look once and fall asleep, then release at
				// a random point of its period.
				time.Sleep(20*time.Millisecond + rand.N(period))
				b.StartTimer()
				start := time.Now()
				if err := held.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					b.Fatal(err)
				}
				released := time.Now()
				if err := <-got; err != nil {
					b.Fatal(err)
				}
				done := time.Now()
				b.StopTimer()
				handoffs = append(handoffs, done.Sub(start))
				releases = append(releases, released.Sub(start))
				if err := next.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(percentileMs(handoffs, 50), "p50-ms")
			b.ReportMetric(percentileMs(handoffs, 90), "p90-ms")
			b.ReportMetric(percentileMs(releases, 50), "release-p50-ms")
		})
	}
}

func percentileMs(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100]) / float64(time.Millisecond)
}
