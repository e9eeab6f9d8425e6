package ddblock_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// The memory a client keeps per held lock and per waiting acquire, the
// figures doc/operations.md gives for how many a machine can keep:
//
//	go test -run '^$' -bench 'Memory' -benchtime 1x .
//
// Each reports the heap growth divided by the count (B/lock, B/waiter:
// the library's own state, after a GC), and for waiters the stack of the
// goroutine each AcquireLock call runs on (stack-B/waiter), which is the
// caller's but goes with every wait. They assert nothing.
func BenchmarkMemoryPerHeldLock(b *testing.B) {
	for _, session := range []bool{false, true} {
		name := "per-lock"
		if session {
			name = "session"
		}
		b.Run(name, func(b *testing.B) {
			const n = 2000
			ddb, table := benchTable(b)
			opts := []ddblock.Option{ddblock.WithTableName(table), ddblock.WithLogger(quiet),
				// No heartbeat while measuring: only what a held lock keeps.
				ddblock.WithHeartbeatPeriod(time.Minute), ddblock.WithSafePeriod(4 * time.Minute), ddblock.WithLeaseDuration(5 * time.Minute)}
			if session {
				opts = append(opts, ddblock.WithSessionLease())
			}
			for range b.N {
				c, err := ddblock.New(ddb, opts...)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				// The first lock starts what a client starts once (its
				// session, its senders): not counted per lock.
				if _, err := c.AcquireLock(ctx, fmt.Sprintf("mem-%d-first", b.N)); err != nil {
					b.Fatal(err)
				}
				before := heapNow()
				for i := range n {
					if _, err := c.AcquireLock(ctx, fmt.Sprintf("mem-%d", i)); err != nil {
						b.Fatal(err)
					}
				}
				after := heapNow()
				b.ReportMetric(float64(after-before)/n, "B/lock")
				if err := c.Close(ctx, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMemoryPerWaiter(b *testing.B) {
	for _, fair := range []bool{false, true} {
		name := "polling"
		if fair {
			name = "fair"
		}
		b.Run(name, func(b *testing.B) {
			const n = 2000
			ddb, table := benchTable(b)
			holder := benchClient(b, ddb, table)
			tickets := &ticketCounter{DynamoDBAPI: ddb}
			waiter := benchClient(b, tickets, table)
			ctx := context.Background()
			for range b.N {
				held, err := holder.AcquireLock(ctx, "mem-wait")
				if err != nil {
					b.Fatal(err)
				}
				opts := []ddblock.AcquireOption{ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Hour), ddblock.WithWaitOnOwn()}
				if fair {
					opts = append(opts, ddblock.WithFairWaiting())
				}
				wctx, cancel := context.WithCancel(ctx)
				closeIdle(ddb)
				heapBefore, stackBefore := heapNow(), stackNow()
				goroutines := runtime.NumGoroutine()
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() { _, _ = waiter.AcquireLock(wctx, "mem-wait", opts...) })
				}
				// Every waiter has come in, and the fair ones have
				// written their tickets; then a few retry periods of
				// waiting, for the polling ones' first looks.
				ticketsBefore := tickets.n.Load()
				for runtime.NumGoroutine() < goroutines+n || fair && tickets.n.Load()-ticketsBefore < n {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(3 * time.Second)
				// The burst of ticket writes opened connections that the
				// HTTP client keeps idle (up to 512 in the tests): the
				// transport's, not the waiters'.
				closeIdle(ddb)
				heap, stack := heapNow()-heapBefore, stackNow()-stackBefore
				b.ReportMetric(float64(heap)/n, "B/waiter")
				b.ReportMetric(float64(stack)/n, "stack-B/waiter")
				cancel()
				wg.Wait()
				if err := held.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ticketCounter counts the fair waiters' tickets written.
type ticketCounter struct {
	ddblock.DynamoDBAPI
	n atomic.Int64
}

func (t *ticketCounter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := t.DynamoDBAPI.PutItem(ctx, in, o...)
	if pk, ok := in.Item[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS); ok && err == nil && strings.HasPrefix(pk.Value, "ddblock_wait#") {
		t.n.Add(1)
	}
	return out, err
}

// closeIdle closes the idle connections of ddb's HTTP client.
func closeIdle(ddb *dynamodb.Client) {
	if c, ok := ddb.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	time.Sleep(100 * time.Millisecond) // their read loops end
}

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

func stackNow() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.StackInuse)
}
