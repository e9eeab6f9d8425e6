package ddblock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// deniedWithin is how long a refused wait may take to end: far less than
// its one-minute retry timeout, with room for a busy machine.
const deniedWithin = 20 * time.Second

// checkDenied asserts that err is ACCESS_DENIED, matched with errors.Is,
// that its text carries AWS's message naming a refused action, and that
// it came well before the wait's minute was up.
func checkDenied(t *testing.T, what string, err error, proxy *faultproxy.Proxy, took time.Duration) {
	t.Helper()
	if !errors.Is(err, ddblock.CodeAccessDenied) || ddblock.CodeOf(err) != ddblock.CodeAccessDenied {
		t.Fatalf("%s: want ACCESS_DENIED, got %v", what, err)
	}
	named := false
	for op, kinds := range proxy.Counts().InjectedByOp {
		if kinds[faultproxy.AccessDenied] > 0 && strings.Contains(err.Error(), "not authorized to perform: dynamodb:"+op) {
			named = true
		}
	}
	if !named {
		t.Errorf("%s: the error does not carry AWS's message naming a refused action: %v", what, err)
	}
	var api interface{ ErrorCode() string }
	if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" {
		t.Errorf("%s: the error does not wrap the SDK's AccessDeniedException: %v", what, err)
	}
	if took > deniedWithin {
		t.Errorf("%s: took %v to end: a refusal must end the wait at once", what, took)
	}
}

// A refused PutItem ends AcquireLock at once with ACCESS_DENIED, however
// long its retry timeout, naming the action AWS refused.
func TestAccessDeniedEndsAcquireLock(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb)
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "PutItem"})
	start := time.Now()
	_, err := c.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(100*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
	checkDenied(t, "AcquireLock", err, proxy, time.Since(start))
	if !strings.Contains(err.Error(), "dynamodb:PutItem") || fault.Injected() != 1 {
		t.Errorf("want one refused PutItem, named: %d refused, %v", fault.Injected(), err)
	}
	_, err = c.TryAcquireLock(context.Background(), "k")
	checkDenied(t, "TryAcquireLock", err, proxy, 0)
}

// A fair waiter in line, waiting for a held lock, ends at once when AWS
// starts refusing its calls.
func TestAccessDeniedEndsFairWait(t *testing.T) {
	e := newEnv(t)
	holder := e.client()
	if _, err := holder.AcquireLock(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb)
	type answer struct {
		err  error
		took time.Duration
	}
	done := make(chan answer, 1)
	go func() {
		start := time.Now()
		_, err := c.AcquireLock(context.Background(), "k", ddblock.WithFairWaiting(),
			ddblock.WithRetryPeriod(100*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
		done <- answer{err, time.Since(start)}
	}()
	// In line (its ticket taken) and reading: then refuse everything.
	waitFor(t, "the fair waiter's reads", func() bool { return proxy.Counts().ByOp["GetItem"] >= 2 })
	at := time.Now()
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied})
	select {
	case a := <-done:
		checkDenied(t, "fair AcquireLock", a.err, proxy, time.Since(at))
	case <-time.After(time.Minute + deniedWithin):
		t.Fatal("the fair waiter never ended")
	}
}

// Semaphore.Acquire, plain and fair, ends at once on a refusal.
func TestAccessDeniedEndsSemaphoreAcquire(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb)
	s, err := c.NewSemaphore("sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied})
	for _, fair := range []bool{false, true} {
		opts := []ddblock.AcquireOption{ddblock.WithRetryPeriod(100 * time.Millisecond), ddblock.WithRetryTimeout(time.Minute)}
		if fair {
			opts = append(opts, ddblock.WithFairWaiting())
		}
		start := time.Now()
		_, err := s.Acquire(context.Background(), opts...)
		checkDenied(t, "Semaphore.Acquire", err, proxy, time.Since(start))
	}
}

// recordingHandler keeps the level and message of every record.
type recordingHandler struct {
	mu      sync.Mutex
	records []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler            { return h }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.mu.Lock()
	h.records = append(h.records, b.String())
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) find(level slog.Level, sub string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if strings.HasPrefix(r, level.String()+" ") && strings.Contains(r, sub) {
			return true
		}
	}
	return false
}

// Campaign ends at once on a refusal, and Run, which campaigns again
// after failures that may pass, logs it at error level and returns it
// rather than retrying it until its context ends.
func TestAccessDeniedEndsElection(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	logs := &recordingHandler{}
	c := e.clientOn(ddb, ddblock.WithLogger(slog.New(logs)))
	el, err := c.NewElection("leader", ddblock.WithElectionRetryPeriod(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "PutItem"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	start := time.Now()
	_, err = el.Campaign(ctx, "me")
	checkDenied(t, "Campaign", err, proxy, time.Since(start))

	started := false
	start = time.Now()
	err = el.Run(ctx, "me", ddblock.LeaderCallbacks{
		OnStartedLeading: func(context.Context, *ddblock.Leadership) { started = true },
	})
	checkDenied(t, "Run", err, proxy, time.Since(start))
	if started {
		t.Error("Run led although its PutItem was refused")
	}
	if !logs.find(slog.LevelError, "dynamodb:PutItem") {
		t.Errorf("Run did not log the refusal at error level: %q", logs.records)
	}
}

// A guarded write AWS refuses is ACCESS_DENIED, nothing written.
func TestAccessDeniedGuardedWrite(t *testing.T) {
	e := newEnv(t)
	proxy, ddb := e.proxied()
	c := e.clientOn(ddb)
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "TransactWriteItems"})
	start := time.Now()
	_, err = lock.GuardedWrite(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{e.incr("c")},
	})
	checkDenied(t, "GuardedWrite", err, proxy, time.Since(start))
	if got := e.counter("c"); got != 0 {
		t.Errorf("counter = %d after a refused guarded write", got)
	}
}
