// Command worker is one OS process of ddblock's mutual-exclusion checker:
// it runs a few lock clients, each contending for the same keys as the
// test's other holders, and writes every verified step to a log file (see
// internal/mutexcheck). The test that starts it kills it (SIGKILL) and
// pauses it (SIGSTOP/SIGCONT) at random.
//
// With -counter-table, its clients run the lost-update workload instead
// (mutexcheck.Incrementer): under each lock they increment the key's
// counter item in that table by read-modify-write, guarded with
// -guarded, and log every write and its outcome before going on.
//
// It stops cleanly, releasing what it holds, when its standard input
// closes or it receives SIGTERM; a test that dies therefore never leaves
// a worker behind. On a clean stop it prints its clients' counters as
// one JSON line on standard output.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/mutexcheck"
	"github.com/ddblock/ddblock/internal/testserver"
)

// Result is what a worker prints on a clean stop.
type Result struct {
	ID    string        `json:"id"`
	Stats ddblock.Stats `json:"stats"`
}

func main() {
	var (
		endpoint   = flag.String("endpoint", "", "DynamoDB endpoint (the test's fault proxy)")
		table      = flag.String("table", "", "lock table")
		keys       = flag.String("keys", "", "comma-separated partition keys to contend for")
		clients    = flag.Int("clients", 2, "lock clients (holders) in this process")
		id         = flag.String("id", "w", "name of this process in the log")
		logPath    = flag.String("log", "", "event log file")
		heartbeat  = flag.Duration("heartbeat", 100*time.Millisecond, "heartbeat period")
		safe       = flag.Duration("safe", 400*time.Millisecond, "safe period")
		lease      = flag.Duration("lease", 600*time.Millisecond, "lease duration")
		holdMin    = flag.Duration("hold-min", 5*time.Millisecond, "shortest tenure")
		holdMax    = flag.Duration("hold-max", 40*time.Millisecond, "longest tenure")
		longShare  = flag.Float64("long-share", 0.15, "share of long tenures")
		longMin    = flag.Duration("long-min", 100*time.Millisecond, "shortest long tenure")
		longMax    = flag.Duration("long-max", time.Second, "longest long tenure")
		step       = flag.Duration("step", 2*time.Millisecond, "pause between verified steps")
		retry      = flag.Duration("retry-period", 25*time.Millisecond, "acquire retry period")
		acqTimeout = flag.Duration("acquire-timeout", 3*time.Second, "deadline of one acquire")
		attempts   = flag.Int("attempts", 3, "SDK attempts per call")
		seed       = flag.Uint64("seed", 1, "random seed")
		flavour    = flag.Int("flavour", 0, "client i uses mutexcheck.Flavours()[(flavour+i) % len(Flavours())]")
		skew       = flag.Duration("max-clock-skew", 50*time.Millisecond, "MaxClockSkew of the fast flavour")
		trustCtx   = flag.Bool("trust-context", false, "WithLock holders check only fn's context, not Lock.Err() (an experiment)")
		elections  = flag.Bool("elections", false, "odd clients campaign in elections (Election.Campaign) instead of using WithLock")
		fair       = flag.Bool("fair", false, "even clients wait fairly (mutexcheck.Fair)")
		semSlots   = flag.Int("semaphore-slots", 0, "when positive, even clients take the keys as semaphores of this many slots")
		fairTO     = flag.Duration("fair-timeout", 0, "when positive, the deadline (and RetryTimeout) of a fair waiter's acquire, instead of -acquire-timeout")
		crowd      = flag.Int("crowd", 0, "this many more clients, each waiting fairly for the first key's lock only: a kill of the process takes several fair waiters of one line at once")
		setSize    = flag.Int("set-size", 0, "when at least 2, the first client takes sets of 2 to this many keys at once (AcquireLocks)")
		counters   = flag.String("counter-table", "", "run the lost-update workload on the counter items of this table")
		guarded    = flag.Bool("guarded", false, "with -counter-table: write the counters with guarded writes")
		incMin     = flag.Int("inc-min", 1, "with -counter-table: fewest increments of one tenure")
		incMax     = flag.Int("inc-max", 5, "with -counter-table: most increments of one tenure")
		stallShare = flag.Float64("stall-share", 0, "with -counter-table: share of writes that wait -stall after the lock was checked")
		stall      = flag.Duration("stall", 40*time.Millisecond, "with -counter-table: how long a stalled write waits (the window the test's pauses aim at)")
		callTO     = flag.Duration("call-timeout", 3*time.Second, "with -counter-table: deadline of one call for a counter")
		resolveFor = flag.Duration("resolve-for", 20*time.Second, "with -counter-table: how long an unknown outcome is retried")
	)
	flag.Parse()
	hold := mutexcheck.Holder{
		HoldMin: *holdMin, HoldMax: *holdMax,
		LongShare: *longShare, LongMin: *longMin, LongMax: *longMax,
		StepEvery: *step, AcquireTimeout: *acqTimeout,
		AcquireOptions: []ddblock.AcquireOption{ddblock.WithRetryPeriod(*retry)},
		TrustContext:   *trustCtx,
		UseElection:    *elections,
		Slots:          *semSlots,
		SetSize:        *setSize,
	}
	var counter *mutexcheck.Incrementer
	if *counters != "" {
		counter = &mutexcheck.Incrementer{
			DataTable: *counters, Guarded: *guarded, IncMin: *incMin, IncMax: *incMax,
			StallShare: *stallShare, CallTimeout: *callTO, ResolveFor: *resolveFor,
		}
		if *stallShare > 0 {
			d := *stall
			counter.Stall = func(context.Context) func() {
				time.Sleep(d)
				return nil
			}
		}
	}
	flavours := mutexcheck.Flavours(*skew)
	if err := run(*endpoint, *table, *keys, *clients, *crowd, *id, *logPath, *heartbeat, *safe, *lease, *fairTO,
		hold, counter, *attempts, *seed, func(i int) mutexcheck.Flavour {
			fl := flavours[(*flavour+i)%len(flavours)]
			if (*fair && i%2 == 0) || i >= *clients {
				fl = mutexcheck.Fair(fl)
			}
			return fl
		}); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
}

// run starts the clients, each with a copy of the holder settings in
// hold (or, when counter is not nil, of the incrementer settings in
// counter), and crowd more fair waiters for the first key's lock, and
// runs them until told to stop. A fair waiter's acquire has fairTimeout
// as its deadline and RetryTimeout, when it is positive.
func run(endpoint, table, keys string, clients, crowd int, id, logPath string, heartbeat, safe, lease, fairTimeout time.Duration,
	hold mutexcheck.Holder, counter *mutexcheck.Incrementer, attempts int, seed uint64, flavour func(int) mutexcheck.Flavour) error {
	if endpoint == "" || table == "" || keys == "" || logPath == "" || clients <= 0 {
		return fmt.Errorf("-endpoint, -table, -keys, -log and a positive -clients are required")
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	events := mutexcheck.NewLog(f)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		// The parent holds our stdin open for as long as it wants us.
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ddb := testserver.ChildClient(endpoint, attempts)
	// Whether this process runs on time, for the progress check: a
	// paused (SIGSTOP) or starved process's waiters cannot look.
	stalls, stopStalls := context.WithCancel(context.Background())
	defer stopStalls()
	go mutexcheck.WatchStalls(stalls, events, id)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		runErrs []error
		all     []*ddblock.Client
	)
	if counter != nil {
		crowd = 0
	}
	for i := range clients + crowd {
		fl := flavour(i)
		inCrowd := i >= clients
		sets := i == 0 && hold.SetSize >= 2 && !inCrowd
		name := fmt.Sprintf("%s/c%d-%s", id, i, fl.Name)
		if sets {
			name = fmt.Sprintf("%s/c%d-set-%s", id, i, fl.Name)
		}
		if inCrowd {
			name = fmt.Sprintf("%s/k%d-crowd-%s", id, i, fl.Name)
		}
		// Every call of the lock client on record, for the progress
		// check (the counters' calls go straight to ddb).
		api := &mutexcheck.Recorder{API: ddb, Client: name, Log: events}
		c, err := ddblock.New(api, append([]ddblock.Option{
			ddblock.WithTableName(table),
			ddblock.WithOwnerName(name),
			ddblock.WithHeartbeatPeriod(heartbeat),
			ddblock.WithSafePeriod(safe),
			ddblock.WithLeaseDuration(lease),
			ddblock.WithLogger(quiet)}, fl.Options...)...)
		if err != nil {
			return err
		}
		all = append(all, c)
		if counter != nil {
			inc := &mutexcheck.Incrementer{
				ID: name, Client: c, Data: ddb, DataTable: counter.DataTable, Keys: strings.Split(keys, ","), Log: events,
				Guarded: counter.Guarded, IncMin: counter.IncMin, IncMax: counter.IncMax,
				StallShare: counter.StallShare, Stall: counter.Stall,
				CallTimeout: counter.CallTimeout, ResolveFor: counter.ResolveFor,
				AcquireTimeout: hold.AcquireTimeout, AcquireOptions: append(slices.Clone(hold.AcquireOptions), fl.Acquire...),
				UseWithLock:   i%2 == 1 && !hold.UseElection,
				UseElection:   i%2 == 1 && hold.UseElection,
				UseSemaphore:  i%2 == 0 && hold.Slots > 0,
				Slots:         hold.Slots,
				Seed:          seed*1000 + uint64(i),
				Proc:          id,
				CallsRecorded: true,
			}
			wg.Go(func() {
				if err := inc.Run(ctx); err != nil {
					mu.Lock()
					runErrs = append(runErrs, err)
					mu.Unlock()
				}
			})
			continue
		}
		acquireTimeout, acquireOpts := hold.AcquireTimeout, append(slices.Clone(hold.AcquireOptions), fl.Acquire...)
		if strings.HasSuffix(fl.Name, "-fair") && fairTimeout > 0 {
			acquireTimeout = fairTimeout
			acquireOpts = append(acquireOpts, ddblock.WithRetryTimeout(fairTimeout))
		}
		h := &mutexcheck.Holder{
			ID: name, Client: c, Keys: strings.Split(keys, ","), Log: events,
			HoldMin: hold.HoldMin, HoldMax: hold.HoldMax,
			LongShare: hold.LongShare, LongMin: hold.LongMin, LongMax: hold.LongMax,
			StepEvery: hold.StepEvery, AcquireTimeout: acquireTimeout,
			AcquireOptions: acquireOpts,
			UseWithLock:    i%2 == 1 && !hold.UseElection && !inCrowd,
			UseElection:    i%2 == 1 && hold.UseElection && !inCrowd,
			UseSemaphore:   i%2 == 0 && hold.Slots > 0 && !inCrowd,
			Slots:          hold.Slots,
			TrustContext:   hold.TrustContext,
			Seed:           seed*1000 + uint64(i),
			Proc:           id,
			CallsRecorded:  true,
		}
		if inCrowd {
			h.Keys = h.Keys[:1]
		}
		if sets {
			h.SetSize = hold.SetSize
			h.UseWithLock, h.UseElection, h.UseSemaphore = false, false, false
			// A set needs all its keys free at one look: it waits longer.
			h.AcquireTimeout = 5 * time.Second
			h.AcquireOptions = append(slices.Clone(h.AcquireOptions), ddblock.WithRetryTimeout(h.AcquireTimeout))
		}
		holders := []*mutexcheck.Holder{h}
		if strings.HasPrefix(fl.Name, "session") && !inCrowd {
			// A second holder on the same client: a session client
			// killed here leaves several locks on one session, which
			// waiters take over together (and each holder meets the
			// other's locks: ALREADY_HELD).
			twin := *h
			twin.ID, twin.Seed = name+"+twin", h.Seed+500
			twin.UseWithLock, twin.UseElection, twin.UseSemaphore = false, false, false
			holders = append(holders, &twin)
		}
		for _, h := range holders {
			wg.Go(func() {
				if err := h.Run(ctx); err != nil {
					mu.Lock()
					runErrs = append(runErrs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()

	var total ddblock.Stats
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	for _, c := range all {
		if err := c.Close(cctx, true); err != nil {
			runErrs = append(runErrs, fmt.Errorf("closing a client: %w", err))
		}
		mutexcheck.AddStats(&total, c.Stats())
	}
	if err := events.Err(); err != nil {
		runErrs = append(runErrs, fmt.Errorf("writing the log: %w", err))
	}
	if len(runErrs) > 0 {
		return fmt.Errorf("%v", runErrs)
	}
	return json.NewEncoder(os.Stdout).Encode(Result{ID: id, Stats: total})
}
