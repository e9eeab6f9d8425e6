package ddblock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// BenchmarkFairSetWait times how long a set of two keys (AcquireLocks)
// waits against a stream of fair single-key holders of both keys: three
// a key, each holding its key 5 ms (hold=5ms) or 50 ms (hold=50ms),
// giving it back and coming again at the back of the key's line
// (WithFairWaiting, retry period 50 ms, as the set's).
//
//   - fair: the set waits fairly too (it climbs the two lines and keeps
//     the first while it waits in the second);
//   - polling: the set polls (no WithFairWaiting), with a retry timeout
//     of 10 s: its keys are free together only between two turns of both
//     lines at once.
//
// Reported per set acquire (ns/op is the mean wait, including the
// timeouts' 10 s): wait-ms (the mean of those won), p50-ms, max-ms,
// handoffs (turns of the stream on the set's two keys during one wait)
// and timeouts (the share of waits that ended in ACQUIRE_TIMEOUT). It
// asserts nothing about speed; it fails if a fair set fails or two
// holders of one key overlap. Between two waits the set pauses a random
// part of a retry period, at a random phase of the stream.
//
//	go test -run '^$' -bench FairSetWait -benchtime 20x .
func BenchmarkFairSetWait(b *testing.B) {
	if !ddbtest.Shared(b).HasTransactions() {
		b.Skipf("%s has no transactions", ddbtest.Shared(b).Name())
	}
	for _, hold := range []time.Duration{fsHold, 50 * time.Millisecond} {
		for _, fair := range []bool{true, false} {
			name := "hold=" + hold.String() + "/fair"
			if !fair {
				name = "hold=" + hold.String() + "/polling"
			}
			benchFairSetWait(b, name, hold, fair)
		}
	}
}

// benchFairSetWait runs one case of BenchmarkFairSetWait.
func benchFairSetWait(b *testing.B, name string, hold time.Duration, fair bool) {
	b.Run(name, func(b *testing.B) {
		ddb, table := benchTable(b)
		keys := []string{"a", "b"}
		x := &fsExclusion{holders: map[string]int{}}
		stream := startStream(b, func(owner string) *ddblock.Client {
			c, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithLogger(quiet), ddblock.WithOwnerName(owner))
			if err != nil {
				b.Fatalf("New: %v", err)
			}
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = c.Close(ctx, true)
			})
			return c
		}, keys, 3, hold, x)
		// Stopped before the clients close (Cleanup runs last in, first out).
		b.Cleanup(stream.end)
		for stream.count("a") < 6 || stream.count("b") < 6 {
			time.Sleep(10 * time.Millisecond)
		}
		c := benchClient(b, ddb, table)
		opts := []ddblock.AcquireOption{ddblock.WithRetryPeriod(fsPeriod), ddblock.WithRetryTimeout(10 * time.Second)}
		if fair {
			opts = []ddblock.AcquireOption{ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fsPeriod), ddblock.WithRetryTimeout(2 * time.Minute)}
		}
		var waits []time.Duration
		var handoffs, timeouts int64
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			time.Sleep(rand.N(fsPeriod))
			before := stream.count("a") + stream.count("b")
			b.StartTimer()
			start := time.Now()
			set, err := c.AcquireLocks(context.Background(), keys, opts...)
			waited := time.Since(start)
			b.StopTimer()
			handoffs += stream.count("a") + stream.count("b") - before
			switch {
			case err == nil:
				waits = append(waits, waited)
				x.in(keys...)
				x.out(keys...)
				if err := set.Release(context.Background(), ddblock.WithBestEffort(false)); err != nil {
					b.Fatalf("Release: %v", err)
				}
			case !fair && errors.Is(err, ddblock.CodeAcquireTimeout):
				timeouts++
			default:
				b.Fatalf("AcquireLocks: %v", err)
			}
			b.StartTimer()
		}
		b.StopTimer()
		if n := x.overlaps.Load(); n != 0 {
			b.Fatalf("%d overlapping holds of a key", n)
		}
		b.ReportMetric(float64(handoffs)/float64(b.N), "handoffs")
		b.ReportMetric(float64(timeouts)/float64(b.N), "timeouts")
		if len(waits) > 0 {
			slices.Sort(waits)
			var sum time.Duration
			for _, w := range waits {
				sum += w
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(sum/time.Duration(len(waits))), "wait-ms")
			b.ReportMetric(ms(waits[len(waits)/2]), "p50-ms")
			b.ReportMetric(ms(waits[len(waits)-1]), "max-ms")
		}
	})
}
