package ddblock

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock/internal/clock"
)

// newPoolForTest returns a callback pool with `workers` running workers,
// and a function that closes it and waits for them.
func newPoolForTest(t *testing.T, workers int) (*callbackPool, *Client, func()) {
	t.Helper()
	c := &Client{log: slog.New(slog.NewTextHandler(io.Discard, nil)), clock: clock.NewSystem()}
	c.opts.SafePeriod, c.opts.Metrics = time.Hour, NoMetrics{}
	p := newCallbackPool(c, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { defer wg.Done(); p.work() }()
	}
	return p, c, func() { p.close(); wg.Wait() }
}

type recorder struct {
	mu   sync.Mutex
	seen map[string][]Code
}

func (r *recorder) callback(code Code, l *Lock) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string][]Code{}
	}
	r.seen[l.pk] = append(r.seen[l.pk], code)
}

func (r *recorder) of(pk string) []Code {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen[pk])
}

func TestCallbacksInOrderPerLock(t *testing.T) {
	p, _, stop := newPoolForTest(t, 5)
	var r recorder
	seq := []Code{CodeLockInDanger, CodeLockRecovered, CodeLockInDanger, CodeLockStolen}
	var locks []*Lock
	for _, pk := range []string{"a", "b", "c", "d", "e", "f"} {
		locks = append(locks, &Lock{pk: pk, callback: r.callback})
	}
	for _, code := range seq {
		for _, l := range locks {
			p.enqueue(l, code)
		}
	}
	stop()
	for _, l := range locks {
		if diff := cmp.Diff(seq, r.of(l.pk)); diff != "" {
			t.Errorf("lock %s (-want +got):\n%s", l.pk, diff)
		}
	}
}

func TestSlowCallbackDoesNotBlockOthers(t *testing.T) {
	p, _, stop := newPoolForTest(t, 2)
	defer stop()
	gate := make(chan struct{})
	slow := &Lock{pk: "slow", callback: func(Code, *Lock) { <-gate }}
	fast := make(chan Code, 1)
	quick := &Lock{pk: "quick", callback: func(c Code, _ *Lock) { fast <- c }}
	p.enqueue(slow, CodeLockInDanger)
	p.enqueue(quick, CodeLockStolen)
	select {
	case got := <-fast:
		if got != CodeLockStolen {
			t.Errorf("got %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a slow callback held up another lock's callback")
	}
	close(gate)
}

func TestCallbackPanicRecovered(t *testing.T) {
	p, c, stop := newPoolForTest(t, 1)
	var r recorder
	l := &Lock{pk: "k", callback: func(code Code, l *Lock) {
		r.callback(code, l)
		if code == CodeLockInDanger {
			panic("app bug")
		}
	}}
	p.enqueue(l, CodeLockInDanger)
	p.enqueue(l, CodeLockRecovered)
	stop()
	if diff := cmp.Diff([]Code{CodeLockInDanger, CodeLockRecovered}, r.of("k")); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if got := c.stats.callbackPanics.Load(); got != 1 {
		t.Errorf("panics counted: %d", got)
	}
}

// While a lock's callback is stuck, its later events queue up to
// maxPendingEvents; older ones are dropped and counted, the newest kept,
// and the producer never waits.
func TestCallbackBacklogBounded(t *testing.T) {
	p, c, stop := newPoolForTest(t, 1)
	entered := make(chan struct{})
	gate := make(chan struct{})
	var r recorder
	first := true
	l := &Lock{pk: "k", callback: func(code Code, l *Lock) {
		if first {
			first = false
			close(entered)
			<-gate
		}
		r.callback(code, l)
	}}
	p.enqueue(l, CodeLockInDanger)
	<-entered
	codes := []Code{CodeLockRecovered, CodeLockInDanger, CodeLockRecovered, CodeLockInDanger, CodeLockRecovered, CodeLockInDanger, CodeLockStolen}
	for _, code := range codes {
		p.enqueue(l, code) // must not block
	}
	for range 10000 {
		p.enqueue(&Lock{pk: "other"}, CodeLockStolen) // no callback: ignored
	}
	close(gate)
	stop()
	want := append([]Code{CodeLockInDanger}, codes[len(codes)-maxPendingEvents:]...)
	if diff := cmp.Diff(want, r.of("k")); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
	if got := c.stats.callbacksDropped.Load(); got != uint64(len(codes)-maxPendingEvents) {
		t.Errorf("dropped %d", got)
	}
}

// Delivery is round-robin across locks: a lock with a backlog gets one
// event delivered and then waits its turn behind the other locks, so a
// lock's event never waits behind another lock's whole backlog; each
// lock's own events still arrive in order.
func TestCallbacksRoundRobin(t *testing.T) {
	p, _, stop := newPoolForTest(t, 1)
	entered := make(chan struct{})
	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	record := func(code Code, l *Lock) {
		mu.Lock()
		order = append(order, l.pk+":"+string(code))
		mu.Unlock()
	}
	first := true
	busy := &Lock{pk: "busy", callback: func(code Code, l *Lock) {
		if first {
			first = false
			close(entered)
			<-gate
		}
		record(code, l)
	}}
	other := &Lock{pk: "other", callback: record}
	p.enqueue(busy, CodeLockInDanger)
	<-entered // the one worker is inside busy's first callback
	p.enqueue(busy, CodeLockRecovered)
	p.enqueue(busy, CodeLockInDanger)
	p.enqueue(busy, CodeLockStolen)
	p.enqueue(other, CodeLockStolen)
	close(gate)
	stop()
	want := []string{"busy:LOCK_IN_DANGER", "other:LOCK_STOLEN", "busy:LOCK_RECOVERED", "busy:LOCK_IN_DANGER", "busy:LOCK_STOLEN"}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("delivery order (-want +got):\n%s", diff)
	}
}

// abandon drops what is queued, counts it, reports the callbacks still
// running, and no callback starts after it.
func TestCallbackPoolAbandon(t *testing.T) {
	p, c, stop := newPoolForTest(t, 1)
	entered := make(chan struct{})
	gate := make(chan struct{})
	var r recorder
	stuck := &Lock{pk: "stuck", callback: func(code Code, l *Lock) {
		close(entered)
		<-gate
		r.callback(code, l)
	}}
	p.enqueue(stuck, CodeLockInDanger)
	<-entered
	p.enqueue(stuck, CodeLockStolen)
	waiting := &Lock{pk: "waiting", callback: r.callback}
	p.enqueue(waiting, CodeLockStolen)
	running, dropped := p.abandon()
	if running != 1 || dropped != 2 {
		t.Errorf("abandon: %d running, %d dropped; want 1, 2", running, dropped)
	}
	p.enqueue(waiting, CodeLockInDanger) // after abandon: refused
	close(gate)
	stop()
	if diff := cmp.Diff([]Code{CodeLockInDanger}, r.of("stuck")); diff != "" {
		t.Errorf("stuck (-want +got):\n%s", diff)
	}
	if got := r.of("waiting"); len(got) != 0 {
		t.Errorf("a callback started after abandon: %v", got)
	}
	if got := c.stats.callbacksDropped.Load(); got != 2 {
		t.Errorf("dropped counted: %d", got)
	}
}
