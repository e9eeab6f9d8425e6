package ddblock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// gatedObservers is an application's logger and Metrics that block
// while their gate is shut: a slog.Handler whose Handle waits on every
// record with a chosen message, and Metrics whose chosen method waits
// the first time it is called. Each call that waits is announced on
// blocked (with the record's key, or the Metrics method's name), so a
// test knows that the library is stuck in application code before it
// checks what still answers.
type gatedObservers struct {
	ddblock.NoMetrics

	blockMessage string // Handle waits on records with this message
	blockMethod  string // this Metrics method waits once ("HeartbeatFinished"…)

	gate    chan struct{} // closed: nothing waits any more
	once    sync.Once
	blocked chan string

	mu           sync.Mutex
	methodWaited bool     // blockMethod was called once
	messages     []string // "message key" of every record handled
	inDanger     int      // Metrics.LockInDanger calls
}

func newGatedObservers(message, method string) *gatedObservers {
	return &gatedObservers{
		blockMessage: message,
		blockMethod:  method,
		gate:         make(chan struct{}),
		blocked:      make(chan string, 100),
	}
}

// open lets every waiting call return, and every later one go through.
func (g *gatedObservers) open() { g.once.Do(func() { close(g.gate) }) }

func (g *gatedObservers) wait(what string) {
	select {
	case <-g.gate:
		return
	default:
	}
	g.blocked <- what
	<-g.gate
}

// awaitBlocked returns what the next call stuck at the gate is.
func (g *gatedObservers) awaitBlocked(t *testing.T, doing string) string {
	t.Helper()
	select {
	case what := <-g.blocked:
		return what
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing blocked in the application's code %s", doing)
		return ""
	}
}

func (g *gatedObservers) Enabled(context.Context, slog.Level) bool { return true }
func (g *gatedObservers) WithAttrs([]slog.Attr) slog.Handler       { return g }
func (g *gatedObservers) WithGroup(string) slog.Handler            { return g }

func (g *gatedObservers) Handle(_ context.Context, r slog.Record) error {
	key := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "key" {
			key = a.Value.String()
		}
		return true
	})
	if r.Message == g.blockMessage {
		g.wait(key)
	}
	g.mu.Lock()
	g.messages = append(g.messages, r.Message+" "+key)
	g.mu.Unlock()
	return nil
}

// method waits at the gate if it is blockMethod, called for the first
// time.
func (g *gatedObservers) method(name string) {
	g.mu.Lock()
	first := name == g.blockMethod && !g.methodWaited
	if first {
		g.methodWaited = true
	}
	g.mu.Unlock()
	if first {
		g.wait(name)
	}
}

func (g *gatedObservers) HeartbeatFinished(time.Duration, time.Duration, error) {
	g.method("HeartbeatFinished")
}

func (g *gatedObservers) LockInDanger() {
	g.method("LockInDanger")
	g.mu.Lock()
	g.inDanger++
	g.mu.Unlock()
}

func (g *gatedObservers) LockStolen() { g.method("LockStolen") }

func (g *gatedObservers) logged(message string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var keys []string
	for _, m := range g.messages {
		if key, ok := strings.CutPrefix(m, message+" "); ok {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

func (g *gatedObservers) lockInDangerCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inDanger
}

// answers runs call on a goroutine of its own and fails the test if it
// does not return within ten seconds of real time: it is stuck behind
// application code (the clock of the test is fake; nothing here waits
// for a lease).
func answers(t *testing.T, what string, call func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return while the application's logger or Metrics was blocked", what)
	}
}

// A log handler or Metrics implementation that blocks holds up only the
// goroutine that called it: every lock's Err and Status still answer,
// the lock whose event is stuck included, and the monitor still marks
// every lock in danger.
func TestBlockingLoggerAndMetricsStallNoLock(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	clk := fakeClock()
	obs := newGatedObservers("ddblock: lock in danger", "HeartbeatFinished")
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithLogger(slog.New(obs)), ddblock.WithMetrics(obs))
	t.Cleanup(obs.open) // runs before the client's Close
	locks := acquireN(t, c, "a", "b", "c")
	start := clk.Monotonic()
	// Heartbeats fail from now on, so the locks go into danger and stay.
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem"})

	// The first heartbeat's Metrics call blocks, on a sender.
	stepUntilBlocked(t, clk, c, obs, start+10*time.Second)
	for _, l := range locks {
		answers(t, "Err of "+l.PartitionKey(), func() {
			if err := l.Err(); err != nil {
				t.Errorf("Err of %s = %v before the safe period", l.PartitionKey(), err)
			}
		})
		answers(t, "Status of "+l.PartitionKey(), func() {
			if s := l.Status(); s != ddblock.StatusLocked {
				t.Errorf("Status of %s = %s before the safe period", l.PartitionKey(), s)
			}
		})
	}

	// Past the safe period, with that heartbeat still blocked, the
	// monitor marks every lock in danger (nobody else asks), and then
	// blocks in the log handler reporting the first of them.
	clk.Advance(start + 21*time.Second - clk.Monotonic())
	for _, l := range locks {
		waitFor(t, "the monitor to mark "+l.PartitionKey()+" in danger", func() bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		})
	}
	stuck := obs.awaitBlocked(t, "reporting the danger")
	if !slices.Contains([]string{"a", "b", "c"}, stuck) {
		t.Fatalf("blocked on %q; want the danger record of a lock", stuck)
	}
	for _, l := range locks {
		answers(t, "Err of "+l.PartitionKey(), func() {
			if err := l.Err(); !errors.Is(err, ddblock.CodeLockInDanger) {
				t.Errorf("Err of %s = %v; want LOCK_IN_DANGER", l.PartitionKey(), err)
			}
		})
		answers(t, "Status of "+l.PartitionKey(), func() {
			if s := l.Status(); s != ddblock.StatusInDanger {
				t.Errorf("Status of %s = %s; want IN_DANGER", l.PartitionKey(), s)
			}
		})
	}
	if got := c.Stats().InDanger; got != 3 {
		t.Errorf("Stats().InDanger = %d while a report is blocked; want 3", got)
	}

	// Once the application's code returns, every event is reported, once.
	obs.open()
	waitFor(t, "every danger to be logged", func() bool { return len(obs.logged("ddblock: lock in danger")) == 3 })
	if got := obs.logged("ddblock: lock in danger"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("danger logged for %v; want a, b and c once each", got)
	}
	waitFor(t, "every danger to be counted", func() bool { return obs.lockInDangerCalls() == 3 })
}

// stepUntilBlocked steps the fake clock from one timer to the next until
// a call into the application's code blocks, within limit. Each step
// waits for the heartbeats in flight to finish.
func stepUntilBlocked(t *testing.T, clk *clock.Fake, c *ddblock.Client, obs *gatedObservers, limit time.Duration) {
	t.Helper()
	for {
		select {
		case <-obs.blocked:
			return
		case <-time.After(time.Millisecond):
		}
		if clk.Monotonic() > limit {
			t.Fatalf("nothing blocked by %v of fake time (now %v)", limit, clk.Monotonic())
		}
		if clk.Timers() >= 2 && c.Stats().HeartbeatsInFlight == 0 {
			clk.AdvanceToNext()
		}
	}
}

// A session found lost marks every lock on it stolen before it reports
// any of them: a Metrics call that blocks on the first holds up neither
// the others' loss nor any lock's Err and Status.
func TestBlockingMetricsStallNoSessionLock(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	obs := newGatedObservers("", "LockStolen")
	c := e.client(ddblock.WithClock(clk), ddblock.WithSessionLease(), ddblock.WithLogger(slog.New(obs)), ddblock.WithMetrics(obs))
	t.Cleanup(obs.open) // runs before the client's Close
	locks := acquireN(t, c, "a", "b", "c")
	start := clk.Monotonic()
	// Someone removes the session item: its next heartbeat finds it gone.
	key := locks[0].SessionKey()
	if _, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: itemKey(key, "-")}); err != nil {
		t.Fatal(err)
	}
	stepUntilBlocked(t, clk, c, obs, start+10*time.Second)
	for _, l := range locks {
		waitFor(t, "the session's end to mark "+l.PartitionKey()+" stolen", func() bool {
			select {
			case <-l.Done():
				return true
			default:
				return false
			}
		})
		answers(t, "Err of "+l.PartitionKey(), func() {
			if err := l.Err(); !errors.Is(err, ddblock.CodeLockStolen) {
				t.Errorf("Err of %s = %v; want LOCK_STOLEN", l.PartitionKey(), err)
			}
		})
		answers(t, "Status of "+l.PartitionKey(), func() {
			if s := l.Status(); s != ddblock.StatusInvalid {
				t.Errorf("Status of %s = %s; want INVALID", l.PartitionKey(), s)
			}
		})
	}
	if s := c.Stats(); s.Stolen != 3 || s.HeldLocks != 0 {
		t.Errorf("stats while a report is blocked: %+v; want 3 stolen, none held", s)
	}
	obs.open()
	waitFor(t, "the session's loss to be logged", func() bool {
		return len(obs.logged("ddblock: session lost, and with it its locks")) == 1
	})
}
