package ddblock_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
)

func TestCloseKeepsLocksByDefault(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	lock, err := c.AcquireLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.client().GetLock(ctx, "k", "-"); err != nil {
		t.Fatalf("Close released the lock: %v", err)
	}
	select {
	case <-lock.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if !errors.Is(lock.Err(), ddblock.ErrClientShutdown) {
		t.Errorf("Err = %v; want CLIENT_SHUTDOWN", lock.Err())
	}
	if _, err := c.AcquireLock(ctx, "other"); !errors.Is(err, ddblock.ErrClientShutdown) {
		t.Errorf("acquire after Close: %v; want CLIENT_SHUTDOWN", err)
	}
}

func TestCloseReleasingLocks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := c.AcquireLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	for info, err := range e.client().ListLocks(ctx) {
		t.Errorf("left after Close(release): %+v %v", info, err)
	}
}

func TestCloseEndsWaitingAcquire(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.client().AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	c := e.client()
	got := make(chan error, 1)
	go func() {
		_, err := c.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Hour), ddblock.WithRetryTimeout(10*time.Hour))
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if !errors.Is(err, ddblock.ErrClientShutdown) {
			t.Fatalf("err = %v; want CLIENT_SHUTDOWN", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting acquire outlived Close")
	}
}

// ddblockGoroutines counts the goroutines running the library's code.
func ddblockGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/ddblock/ddblock.(*") && !strings.Contains(g, "_test.") {
			n++
		}
	}
	return n
}

func TestGoroutinesBoundedAndStopped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := ddblockGoroutines()
	c, err := ddblock.New(e.ddb, append(e.names, ddblock.WithLogger(quiet), ddblock.WithCallbackWorkers(3),
		ddblock.WithHeartbeatPeriod(20*time.Millisecond), ddblock.WithHeartbeatConcurrency(4))...)
	if err != nil {
		t.Fatal(err)
	}
	noop := func(ddblock.Code, *ddblock.Lock) {}
	for i := range 100 {
		if _, err := c.AcquireLock(ctx, "k"+string(rune('a'+i%26))+string(rune('a'+i/26)), ddblock.WithCallback(noop)); err != nil {
			t.Fatal(err)
		}
	}
	// heartbeater + monitor + 3 workers + at most 4 sends, whatever the
	// number of locks.
	for range 20 {
		if n := ddblockGoroutines() - before; n > 2+3+4 {
			t.Fatalf("%d goroutines for 100 locks; want at most 9", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := ddblockGoroutines() - before; n != 0 {
		t.Fatalf("%d goroutines left after Close", n)
	}
}

func TestCloseHonoursContext(t *testing.T) {
	e := newEnv(t)
	c := e.client(ddblock.WithCallbackWorkers(1), ddblock.WithHeartbeatPeriod(10*time.Millisecond),
		ddblock.WithSafePeriod(15*time.Millisecond), ddblock.WithLeaseDuration(time.Hour))
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	slow := func(ddblock.Code, *ddblock.Lock) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}
	lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(slow))
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "thief") // LOCK_STOLEN at the next heartbeat
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Close(ctx, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close with a callback stuck: %v; want the context's error", err)
	}
	close(release)
	if err := c.Close(context.Background(), false); err != nil {
		t.Fatalf("Close once the callback returned: %v", err)
	}
}
