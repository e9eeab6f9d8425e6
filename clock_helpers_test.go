package ddblock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// fakeClock returns a fake clock for one client. Its wall clock starts at
// the real time: the items a client writes carry an expiry of its wall
// clock plus an hour, and a server with TTL deletes items whose expiry
// has passed (DynamoDB Local within a second or so).
func fakeClock() *clock.Fake { return clock.NewFake(time.Now().UTC().Truncate(time.Second)) }

// fakeTimes are a client's timings on a fake clock: only fake time passes
// them, so they can be as short as the test likes without a busy machine
// eating into them.
func fakeTimes() []ddblock.Option {
	return []ddblock.Option{
		ddblock.WithHeartbeatPeriod(time.Second),
		ddblock.WithSafePeriod(4 * time.Second),
		ddblock.WithLeaseDuration(6 * time.Second),
	}
}

// waitFor polls cond in real time until it holds, failing the test after
// ten seconds. It waits for goroutines and network calls to settle, never
// for a lease: leases run on the fake clock.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ddbtest.Eventually(t, 10*time.Second, what, cond)
}

// waitForSleepers waits, in real time, until n timers are pending on clk:
// an idle client has one (its monitor's), and an acquire waiting between
// two tries adds its own. It is how a test knows that a call has reached
// its wait, rather than sleeping and hoping it has.
func waitForSleepers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	if err := clk.WaitForTimers(n, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// stepUntil advances the fake clock from one pending timer to the next
// until done is closed. Before each step it waits until `sleepers` timers
// are pending (the client's monitor, and whatever the test drives), so
// that the clock never jumps past work in progress. It returns the fake
// monotonic time at which done closed.
func stepUntil(t *testing.T, clk *clock.Fake, sleepers int, done <-chan struct{}, limit time.Duration) time.Duration {
	t.Helper()
	start := clk.Monotonic()
	for {
		waitFor(t, "the client to sleep", func() bool {
			select {
			case <-done:
				return true
			default:
				return clk.Timers() >= sleepers
			}
		})
		select {
		case <-done:
			return clk.Monotonic()
		default:
		}
		if clk.Monotonic()-start > limit {
			t.Fatalf("still not done after %v of fake time", limit)
		}
		clk.AdvanceToNext()
	}
}

// driveUntil advances c's fake clock from one pending timer to the next
// until done is closed, within limit of fake time. Before each step it
// waits for the client to settle: its heartbeater and monitor asleep and
// no heartbeat in flight, so the clock never passes a safe period while
// a heartbeat is on the wire (drive, to a time rather than an event).
func driveUntil(t *testing.T, clk *clock.Fake, c *ddblock.Client, done <-chan struct{}, limit time.Duration) {
	t.Helper()
	start := clk.Monotonic()
	for {
		waitFor(t, "the client to settle", func() bool {
			select {
			case <-done:
				return true
			default:
				return clk.Timers() >= 2 && c.Stats().HeartbeatsInFlight == 0
			}
		})
		select {
		case <-done:
			return
		default:
		}
		if clk.Monotonic()-start > limit {
			t.Fatalf("still not done after %v of fake time", limit)
		}
		clk.AdvanceToNext()
	}
}

// acquireStepping runs acquire on a goroutine of its own and steps the
// fake clock until it returns (see stepUntil), within limit of fake time.
// It returns what acquire returned, and the fake time it ended at.
func acquireStepping(t *testing.T, clk *clock.Fake, sleepers int, limit time.Duration, acquire func() (*ddblock.Lock, error)) (*ddblock.Lock, time.Duration, error) {
	t.Helper()
	done := make(chan struct{})
	var lock *ddblock.Lock
	var err error
	go func() {
		defer close(done)
		lock, err = acquire()
	}()
	end := stepUntil(t, clk, sleepers, done, limit)
	return lock, end, err
}

// putClock records, on a fake clock, when the last successful PutItem was
// sent: the moment a lock was taken. Tests read it rather than the moment
// AcquireLock returned, by which time the stepping may have moved on.
type putClock struct {
	ddblock.DynamoDBAPI
	clk *clock.Fake
	mu  sync.Mutex
	at  time.Duration
}

func (p *putClock) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	sent := p.clk.Monotonic()
	out, err := p.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		p.mu.Lock()
		p.at = sent
		p.mu.Unlock()
	}
	return out, err
}

func (p *putClock) lastPut() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at
}
