package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// The lost-update workload (issue 23, point 5): holders increment a
// counter item per key by read-modify-write under their locks, while
// faults, kills and pauses make them lose their locks between their last
// look at the lock and their write. Unguarded writes must lose updates
// (the negative control: if they lose none, the run could not have shown
// anything); guarded writes must lose none. No overlap checker is
// needed: the counters are the proof.

// counterWork is the lost-update workload of a chaos run.
type counterWork struct {
	// Guarded makes every write a guarded write.
	Guarded bool
	// IncMin and IncMax bound a tenure's increments.
	IncMin, IncMax int
	// WorkerStallShare is the share of workers' writes that wait
	// WorkerStall after the lock was checked: a window the workers'
	// SIGSTOPs aim at.
	WorkerStallShare float64
	WorkerStall      time.Duration
}

// defaultLost is the lost-update run: in-process writers and two
// worker processes of incrementers, every flavour, locks, slots of
// semaphores of 2 and elections, under faults (transactions' too),
// stalls, kills, and pauses from the lease to twice the lease and more.
func defaultLost(d time.Duration, guarded bool) chaosConfig {
	cfg := defaultChaos(d)
	cfg.Keys = 2
	cfg.FaultEvery, cfg.Transactions = 300*time.Millisecond, true
	cfg.SemaphoreSlots = 2
	cfg.Counters = &counterWork{Guarded: guarded, IncMin: 1, IncMax: 6, WorkerStallShare: 0.1, WorkerStall: 40 * time.Millisecond}
	cfg.Mix = []kind{
		writers{N: 5, StallShare: 0.08, StallMin: 1200 * time.Millisecond, StallMax: 2 * time.Second},
		workers{N: 2, Clients: 2, Every: 800 * time.Millisecond, PauseMin: cfg.Lease, PauseMax: 2*cfg.Lease + cfg.Safe},
	}
	return cfg
}

// writers is N in-process incrementers ("u0", "u1", ...), each with a
// client of its own behind a proxy of its own, in flavour i and by i%4
// with AcquireLock, WithLock, a semaphore's slot and an election. A
// StallShare of their writes are stalled after the lock was checked:
// the holder's traffic (heartbeats and the write) is held in the
// network for StallMin to StallMax, long enough for another holder to
// take the lock over.
type writers struct {
	N                  int
	StallShare         float64
	StallMin, StallMax time.Duration
}

func (k writers) describe() string { return fmt.Sprintf("%d in-process writers", k.N) }

func (k writers) start(c *chaos, ctx context.Context) party {
	for i := range k.N {
		p := c.proxy(fmt.Sprintf("u%d-*", i))
		c.running.Go(func() { k.run(c, ctx, i, p) })
	}
	return calm{}
}

// run runs in-process incrementer i until ctx ends.
func (k writers) run(c *chaos, ctx context.Context, i int, p *faultproxy.Proxy) {
	cfg := c.cfg
	if cfg.Counters == nil {
		c.problem("writers without a lost-update workload (chaosConfig.Counters)")
		return
	}
	ddb := ddbtest.SharedServer().ClientFor(p.URL(), cfg.Attempts)
	flavours := mutexcheck.Flavours(cfg.MaxClockSkew)
	fl := flavours[i%len(flavours)]
	name := fmt.Sprintf("u%d-%s", i, fl.Name)
	opts := append(slices.Clone(c.opts), ddblock.WithOwnerName(name))
	api := &mutexcheck.Recorder{API: ddb, Client: name, Log: c.log}
	client, err := ddblock.New(api, append(opts, fl.Options...)...)
	if err != nil {
		c.problem("ddblock.New: %v", err)
		return
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(100+i)))
	h := &mutexcheck.Incrementer{
		ID: name, Client: client, Data: ddb, DataTable: c.data, Keys: c.keys, Log: c.log,
		Guarded: cfg.Counters.Guarded, IncMin: cfg.Counters.IncMin, IncMax: cfg.Counters.IncMax,
		StallShare: k.StallShare,
		// The holder's traffic is held in the network, heartbeats and
		// the write alike, as a partition or a slow network would: the
		// lock goes stale and is taken over while the write is on its
		// way.
		Stall: func(context.Context) func() {
			rule := faultproxy.Rule{Kind: faultproxy.Latency, Delay: between(rng, k.StallMin, k.StallMax)}
			f, err := injectLogged(p, rule, c.log, name)
			if err != nil {
				c.problem("stall: %v", err)
				return nil
			}
			c.count("stall")
			return f.Remove
		},
		CallTimeout: k.StallMax + 2*time.Second, ResolveFor: 20 * time.Second,
		AcquireTimeout: 3 * time.Second,
		AcquireOptions: []ddblock.AcquireOption{ddblock.WithRetryPeriod(cfg.RetryPeriod)},
		UseWithLock:    i%4 == 1,
		UseSemaphore:   cfg.SemaphoreSlots > 0 && i%4 == 2,
		UseElection:    i%4 == 3,
		Slots:          cfg.SemaphoreSlots,
		Seed:           cfg.Seed + uint64(i),
		CallsRecorded:  true,
	}
	if err := h.Run(ctx); err != nil {
		c.problem("incrementer %s: %v", name, err)
	}
	c.closeClient(client, name)
}

// countIncrements reads the final counters and counts the increments.
func (c *chaos) countIncrements(events []mutexcheck.Event) mutexcheck.CountReport {
	final := map[string]int64{}
	for _, ev := range events {
		if ev.Kind == mutexcheck.Write {
			final[ev.Key] = 0
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for key := range final {
		n, err := mutexcheck.ReadCounter(ctx, c.env.direct, c.data, key)
		if err != nil {
			c.t.Fatalf("reading the counter of %s: %v", key, err)
		}
		final[key] = n
	}
	return mutexcheck.CountIncrements(events, final)
}

// TestLostUpdates is the proof by lost updates, in CI's short run (about
// ten seconds a variant) and as a soak with -soak:
//
//	DDBLOCK_TEST_SERVER=dynamodb-local go test -count=1 ./reliability_test -run TestLostUpdates -soak=5m -v -timeout 0
//
// With -soak, the guarded run lasts that long and the negative control a
// fifth of it.
func TestLostUpdates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	guardedFor, controlFor := 10*time.Second, 10*time.Second
	if *soakFor > 0 {
		guardedFor, controlFor = *soakFor, max(*soakFor/5, 10*time.Second)
	}

	t.Run("unguarded", func(t *testing.T) {
		res := runChaos(t, defaultLost(controlFor, false))
		report(t, res)
		cr := res.Counts
		// The negative control: a workload that cannot lose updates
		// without guards proves nothing about the guards.
		if cr.Lost == 0 {
			t.Errorf("the unguarded writers lost no update (%d acknowledged, final %d): the run is blind, and the guarded run's zero would prove nothing", cr.Acked, cr.Final)
		}
		if cr.Excess != 0 {
			t.Errorf("final counts exceed acknowledged+unresolved writes by %d: the records are incomplete", cr.Excess)
		}
	})

	t.Run("guarded", func(t *testing.T) {
		if !ddbtest.Shared(t).HasTransactions() {
			guardedUnsupported(t)
			return
		}
		res := runChaos(t, defaultLost(guardedFor, true))
		report(t, res)
		cr := res.Counts
		if cr.Lost != 0 || cr.Duplicates != 0 {
			t.Errorf("GUARDED WRITES LOST %d UPDATES (%d values acknowledged twice): %v", cr.Lost, cr.Duplicates, cr.Examples)
		}
		// Every increment accounted for: the counters went up by the
		// acknowledged writes, plus at most the writes whose outcome
		// stayed unknown (a worker killed between its write and its log
		// line, a resolution that ran out of time).
		if cr.Excess != 0 {
			t.Errorf("final counts exceed acknowledged+unresolved writes by %d: a guarded write reported not applied was applied", cr.Excess)
		}
		if cr.GuardedFailures[string(ddblock.CodeLockNotHeld)] == 0 {
			t.Errorf("no guarded write failed with LOCK_NOT_HELD: the guard never had to stop a write (failures: %v)", cr.GuardedFailures)
		}
		if res.Injected[faultproxy.TransactionConflict] == 0 || cr.GuardedFailures[string(ddblock.CodeTransactionConflict)] == 0 {
			t.Errorf("transaction conflicts injected %d, guarded writes failed with TRANSACTION_CONFLICT %d: both must happen",
				res.Injected[faultproxy.TransactionConflict], cr.GuardedFailures[string(ddblock.CodeTransactionConflict)])
		}
		for code, n := range cr.GuardedFailures {
			switch ddblock.Code(code) {
			case ddblock.CodeLockNotHeld, ddblock.CodeTransactionConflict, ddblock.CodeOutcomeUnknown, ddblock.CodeUnknown:
			default:
				t.Errorf("%d guarded writes failed with %s", n, code)
			}
		}
		if n := cr.Resolutions["UNRESOLVED"]; n > 0 {
			t.Errorf("%d guarded writes stayed unresolved after 20 s of retries", n)
		}
	})
}

// report logs a run's figures (prints them in a soak) and checks that
// it did what it claims: without increments, takeovers, stalls, faults,
// kills and pauses, a zero proves nothing.
func report(t *testing.T, res chaosResult) {
	t.Helper()
	if *soakFor > 0 {
		fmt.Printf("\n=== %s ===\n%s\n", t.Name(), res.Summary())
	} else {
		t.Logf("\n%s", res.Summary())
	}
	cr := res.Counts
	if cr.Acked < 100 {
		t.Errorf("only %d acknowledged increments: too little work to show anything", cr.Acked)
	}
	if res.Report.Takeovers == 0 {
		t.Error("no takeover of a lock still held: nothing made a holder lose its lock")
	}
	if s := everyTrouble(res, "stall", "kill", "pause"); s != "" {
		t.Error(s)
	}
	for _, kind := range []string{"plain", "fencing", "fast", "session", "session-fast"} {
		if res.Report.ByKind[kind] == 0 {
			t.Errorf("no working tenure of a %s client: %v", kind, res.Report.ByKind)
		}
	}
}

// guardedUnsupported checks, on a server without transactions
// (dynalite), that a guarded increment fails with the typed
// TRANSACTIONS_UNSUPPORTED error and writes nothing: the guarded run
// itself is the DynamoDB Local pass's.
func guardedUnsupported(t *testing.T) {
	e := newEnv(t)
	data := e.table + "_data"
	ddbtest.CreateTable(t, e.direct, data)
	lock, err := e.client(e.direct).AcquireLock(context.Background(), "key-0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = lock.GuardedWrite(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{Update: &types.Update{
			TableName:                 aws.String(data),
			Key:                       mutexcheck.CounterKey("key-0"),
			UpdateExpression:          aws.String("SET #n = :new"),
			ExpressionAttributeNames:  map[string]string{"#n": mutexcheck.CounterAttr},
			ExpressionAttributeValues: map[string]types.AttributeValue{":new": &types.AttributeValueMemberN{Value: "1"}},
		}}},
	})
	var lerr *ddblock.Error
	if !errors.Is(err, ddblock.CodeTransactionsUnsupported) || !errors.As(err, &lerr) {
		t.Fatalf("GuardedWrite on %s, which has no transactions: %v; want a *ddblock.Error of TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), err)
	}
	if n, err := mutexcheck.ReadCounter(context.Background(), e.direct, data, "key-0"); err != nil || n != 0 {
		t.Fatalf("counter = %d, %v after an unsupported guarded write; want 0", n, err)
	}
	if lock.Err() != nil {
		t.Errorf("the lock after an unsupported guarded write: %v; want still held", lock.Err())
	}
}
