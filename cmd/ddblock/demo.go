package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/testserver"
)

const demoAbout = `
Shows the library at work in well under a minute, with nothing to set up
but Node.js: it starts a local DynamoDB-compatible server (dynalite) on a
free loopback port, creates a lock table, and prints a timeline of

  1. two workers contending for one lock; the holder dies without
     releasing it, and the other takes over once the lease has passed;
  2. a holder whose heartbeats start failing: its lock goes into danger
     (its callback fires and its Done channel closes), another worker takes
     it over, and the first learns that it was stolen.

It stops the server when done, or when interrupted, and leaves nothing
running. Leases are 2 s here so that the story is short; real ones are
longer (the default is 30 s).

The first run installs dynalite, at the version ddblock pins, into the
user's cache directory with npm (from the npm registry); later runs reuse
it. It works from any directory: no source tree needed.`

// The demo's timing: short, so that the story takes seconds.
const (
	demoLease     = 2 * time.Second
	demoHeartbeat = 250 * time.Millisecond
	demoSafe      = 1250 * time.Millisecond
	demoWait      = 15 * time.Second // no act waits nearly this long
)

func cmdDemo(ctx context.Context, env *environ, args []string) error {
	f := newFlags(env, "demo", "demo", demoAbout)
	if _, _, err := f.parse(args, 0, false); err != nil {
		return err
	}
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stopSignals()
	go func() {
		// After the first Ctrl-C the demo winds down; a second one ends
		// it at once (the server exits with its parent anyway).
		<-ctx.Done()
		stopSignals()
	}()

	fmt.Fprintln(env.stdout, "ddblock demo: starting a local DynamoDB-compatible server (dynalite)...")
	srv, err := testserver.StartReporting(testserver.Dynalite, env.stdout)
	if err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	var stopOnce sync.Once
	stopServer := func() { stopOnce.Do(srv.Stop) }
	defer stopServer()

	d := &demo{
		out:   env.stdout,
		ddb:   srv.Client(0),
		table: "ddblock-demo",
		quiet: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if srv.External {
		d.table = fmt.Sprintf("ddblock-demo-%d", time.Now().UnixNano())
	}
	err = d.run(ctx, srv.Endpoint)
	stopServer()
	switch {
	case ctx.Err() != nil:
		return fail(exitSignalBase+int(syscall.SIGINT), "interrupted; the server is stopped")
	case err != nil:
		return fail(exitInternal, "%v (the server is stopped)", err)
	}
	fmt.Fprintln(env.stdout, "\nThe server is stopped; nothing is left running. Next: doc/cli.md (ddblock run) and the package docs.")
	return nil
}

// demo is one run of the story.
type demo struct {
	out   io.Writer
	ddb   *dynamodb.Client
	table string
	quiet *slog.Logger

	mu      sync.Mutex
	start   time.Time
	workers []*worker
}

// say prints one line of the timeline: elapsed time, who, what.
func (d *demo) say(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "  %6.2fs  %-9s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

func (d *demo) heading(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "\n"+format+"\n", args...)
}

func (d *demo) run(ctx context.Context, endpoint string) error {
	ctx2, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := ddblock.CreateTable(ctx2, d.ddb, ddblock.WithNamesFromOptions(ddblock.Options{
		TableName:        d.table,
		PartitionKeyName: ddblock.DefaultPartitionKeyName,
		SortKeyName:      ddblock.DefaultSortKeyName,
		TTLAttributeName: ddblock.DefaultTTLAttributeName,
	}), ddblock.WithOnDemand(), ddblock.WithPollInterval(10*time.Millisecond))
	ttl := "TTL enabled"
	if errors.Is(err, ddblock.CodeTTLUnsupported) {
		ttl, err = "this server has no TTL, which the demo does not need", nil
	}
	if err != nil {
		return fmt.Errorf("creating the table: %w", err)
	}
	fmt.Fprintf(d.out, "server at %s, table %q created (%s).\n", endpoint, d.table, ttl)
	fmt.Fprintf(d.out, "Every worker is a ddblock.Client of its own: lease %v, heartbeat every %v, in danger after %v without one.\n",
		demoLease, demoHeartbeat, demoSafe)
	defer d.closeWorkers()

	fmt.Fprintln(d.out, "The timeline below gives seconds since the start, who, and what.")
	d.start = time.Now()
	if err := d.actOne(ctx); err != nil {
		return err
	}
	if err := d.actTwo(ctx); err != nil {
		return err
	}
	return d.showTable(ctx)
}

// actOne: two workers contend; the holder dies; the other takes over.
func (d *demo) actOne(ctx context.Context) error {
	const key = "nightly-report"
	d.heading("1. Two workers want %q; the holder dies without releasing it.", key)
	a, err := d.worker("worker-a")
	if err != nil {
		return err
	}
	b, err := d.worker("worker-b")
	if err != nil {
		return err
	}
	if _, err := a.client.AcquireLock(ctx, key); err != nil {
		return err
	}
	d.say(a.name, "acquired %q and starts the report", key)

	taken := make(chan struct{})
	waited := make(chan error, 1)
	go func() { waited <- d.waitAndWork(ctx, b, key, 500*time.Millisecond, taken) }()

	if err := sleep(ctx, 1500*time.Millisecond); err != nil {
		return err
	}
	d.say(a.name, "has sent %d heartbeats: each changes the lock's record version number,", a.client.Stats().HeartbeatsSent)
	d.say("", "which tells worker-b that the holder is alive")
	d.say(a.name, "CRASHES: stops heartbeating and never releases the lock")
	closeCtx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	if err := a.client.Close(closeCtx, false); err != nil {
		return err
	}
	return <-waited
}

// actTwo: a holder's heartbeats fail; its lock goes into danger and is
// taken over; when its network comes back it learns the lock was stolen.
func (d *demo) actTwo(ctx context.Context) error {
	const key = "db-migration"
	d.heading("2. The holder of %q loses its network: heartbeats fail.", key)
	c, err := d.worker("worker-c")
	if err != nil {
		return err
	}
	e, err := d.worker("worker-d")
	if err != nil {
		return err
	}
	events := make(chan ddblock.Code, 8)
	lock, err := c.client.AcquireLock(ctx, key, ddblock.WithCallback(func(code ddblock.Code, _ *ddblock.Lock) {
		d.say(c.name, "callback: %s", code)
		events <- code
	}))
	if err != nil {
		return err
	}
	d.say(c.name, "acquired %q and starts the migration, watching lock.Done()", key)
	go func() {
		<-lock.Done()
		d.say(c.name, "lock.Done() closed, lock.Err() is %s: stops the migration at once", ddblock.CodeOf(lock.Err()))
	}()

	taken := make(chan struct{})
	waited := make(chan error, 1)
	go func() { waited <- d.waitAndWork(ctx, e, key, time.Second, taken) }()

	if err := sleep(ctx, 750*time.Millisecond); err != nil {
		return err
	}
	d.say("network", "worker-c's heartbeats start failing (its UpdateItem calls return errors)")
	c.ddb.failUpdates.Store(true)
	if err := awaitEvent(ctx, events, ddblock.CodeLockInDanger); err != nil {
		return err
	}
	select {
	case <-taken:
	case err := <-waited:
		return fmt.Errorf("worker-d ended before taking the lock: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	d.say("network", "worker-c's network is back")
	c.ddb.failUpdates.Store(false)
	if err := awaitEvent(ctx, events, ddblock.CodeLockStolen); err != nil {
		return err
	}
	d.say("", "worker-c had stopped before worker-d could take over: the safe period (%v) ends before the lease (%v)",
		demoSafe, demoLease)
	return <-waited
}

// waitAndWork is a second worker: it says whom it waits for, waits for
// the lock, holds it for work, and releases it. taken closes once it
// holds the lock.
func (d *demo) waitAndWork(ctx context.Context, w *worker, key string, work time.Duration, taken chan<- struct{}) error {
	info, err := w.client.GetLock(ctx, key, "")
	if err != nil {
		return err
	}
	d.say(w.name, "wants %q: held by %s (lease %v), so it waits", key, info.OwnerName, info.LeaseDuration)
	start := time.Now()
	lock, err := w.client.AcquireLock(ctx, key, ddblock.WithRetryTimeout(demoWait))
	if err != nil {
		return err
	}
	close(taken)
	d.say(w.name, "acquired %q after waiting %.2fs: the version stayed unchanged for a whole lease, so it took over",
		key, time.Since(start).Seconds())
	if err := sleep(ctx, work); err != nil {
		return err
	}
	if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		return err
	}
	d.say(w.name, "finished its work and released %q", key)
	return nil
}

func (d *demo) showTable(ctx context.Context) error {
	w, err := d.worker("observer")
	if err != nil {
		return err
	}
	d.heading("Locks left in the table (what `ddblock ls` would show):")
	n := 0
	for info, err := range w.client.ListLocks(ctx) {
		if err != nil {
			return err
		}
		n++
		fmt.Fprintf(d.out, "  %s held by %s\n", lockName(info.PartitionKey, info.SortKey), info.OwnerName)
	}
	if n == 0 {
		fmt.Fprintln(d.out, "  none: every lock was released or taken over and released")
	}
	return nil
}

// worker is a ddblock client of its own, on a DynamoDB client whose
// heartbeats the demo can make fail.
type worker struct {
	name   string
	ddb    *flakyDynamoDB
	client *ddblock.Client
}

func (d *demo) worker(name string) (*worker, error) {
	ddb := &flakyDynamoDB{DynamoDBAPI: d.ddb}
	c, err := ddblock.New(ddb,
		ddblock.WithTableName(d.table),
		ddblock.WithOwnerName(name),
		ddblock.WithLeaseDuration(demoLease),
		ddblock.WithHeartbeatPeriod(demoHeartbeat),
		ddblock.WithSafePeriod(demoSafe),
		ddblock.WithLogger(d.quiet), // the timeline tells the story
	)
	if err != nil {
		return nil, err
	}
	w := &worker{name: name, ddb: ddb, client: c}
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
	return w, nil
}

// closeWorkers closes every client, so that no goroutine outlives the
// demo. A crashed worker's client is closed already; closing again is safe.
func (d *demo) closeWorkers() {
	d.mu.Lock()
	workers := d.workers
	d.mu.Unlock()
	for _, w := range workers {
		closeClient(w.client)
	}
}

// flakyDynamoDB fails UpdateItem, the heartbeat's call, on demand: the
// demo's stand-in for a network that drops a worker's requests.
type flakyDynamoDB struct {
	ddblock.DynamoDBAPI
	failUpdates atomic.Bool
}

var errNetworkDown = errors.New("demo: network down")

// UpdateItem fails while failUpdates is set.
func (f *flakyDynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.failUpdates.Load() {
		return nil, errNetworkDown
	}
	return f.DynamoDBAPI.UpdateItem(ctx, in, opts...)
}

func awaitEvent(ctx context.Context, events <-chan ddblock.Code, want ddblock.Code) error {
	timeout := time.NewTimer(demoWait)
	defer timeout.Stop()
	for {
		select {
		case got := <-events:
			if got == want {
				return nil
			}
		case <-timeout.C:
			return fmt.Errorf("no %s callback within %v", want, demoWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
