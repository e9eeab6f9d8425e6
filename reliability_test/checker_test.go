package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// TestMutualExclusion is the short run of the checker that the normal
// suite runs: about 20 seconds of contention under faults, kills and
// pauses, with short leases.
func TestMutualExclusion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	runChaosShowing(t, 20*time.Second, defaultChaos, func(res chaosResult) []string {
		var short []string
		rep := res.Report
		// The run must have done what it claims, or a zero proves nothing.
		if s := everyTrouble(res, "kill", "pause", "abandon"); s != "" {
			short = append(short, s)
		}
		// A floor far below the ~300 handoffs of a normal run: it catches
		// a run that did nothing, not a slow machine.
		if rep.Handoffs < 50 {
			short = append(short, fmt.Sprintf("only %d handoffs: too little contention to show anything", rep.Handoffs))
		}
		if rep.Takeovers == 0 {
			short = append(short, "no takeover after a lost lock: the faults never made a holder lose its lock")
		}
		return short
	}, nil)
}

// TestSoak is the long run, documented in doc/reliability.md:
//
//	go test ./reliability_test -run TestSoak -soak=10m -v -timeout 0
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=10m to run the soak")
	}
	cfg := defaultChaos(*soakFor)
	cfg.Mix = []kind{defaultInProcess(6), defaultWorkers(3, 2)}
	res := runChaos(t, cfg)
	fmt.Printf("\n=== ddblock reliability soak ===\n%s\n", res.Summary())
	if len(res.Report.Violations) > 0 {
		t.Errorf("%d violations", len(res.Report.Violations))
	}
}

// The checker must be able to fail: a holder that ignores its lock's
// state keeps working after its heartbeats are cut off, and the
// checker sees the next holder's steps inside its tenure. The same scene
// with a careful holder shows no overlap.
func TestCheckerCatchesCarelessHolder(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(fmt.Sprintf("careful=%v", careful), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p := e.proxy()
			// a's lease is short, for b to take its lock over soon; b's
			// safe period is long, for a loaded machine not to eat it
			// while b works (the takeover waits for a's lease).
			opts := times(50*time.Millisecond, 200*time.Millisecond, 300*time.Millisecond)
			a := e.client(ddbtest.Shared(t).ClientFor(p.URL(), 1), append(opts, ddblock.WithOwnerName("a"))...)
			b := e.client(e.direct, append(times(100*time.Millisecond, 10*time.Second, 15*time.Second), ddblock.WithOwnerName("b"))...)
			var buf bytes.Buffer
			log := mutexcheck.NewLog(&buf)
			ctx := context.Background()

			// The scene begins with a working under a sound lock: a
			// machine that stalls past a's safe period while a acquires
			// leaves it a lock in danger, given back and taken again.
			var lockA *ddblock.Lock
			for try := 1; ; try++ {
				var err error
				if lockA, err = a.AcquireLock(ctx, "k", uncontended); err != nil {
					t.Fatal(err)
				}
				acquired := mutexcheck.Now()
				t0 := mutexcheck.Now()
				if lockA.Err() == nil {
					log.Acquired("a#1", "k", acquired, lockA.RecordVersionNumber(), lockA.FencingToken(), "")
					log.Step("a#1", t0)
					break
				}
				if try == 10 {
					t.Fatalf("a's lock was in danger as soon as acquired, ten times: %v", lockA.Err())
				}
				_ = lockA.Release(ctx)
			}
			p.MustInject(faultproxy.Rule{Kind: faultproxy.BlackHole}) // a is cut off

			aDone := make(chan struct{})
			go func() {
				defer close(aDone)
				// a works for a full second, a lease and more.
				for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
					t := mutexcheck.Now()
					if careful && lockA.Err() != nil {
						log.Ended("a#1", mutexcheck.Now(), string(ddblock.CodeOf(lockA.Err())))
						return
					}
					log.Step("a#1", t)
				}
				log.Ended("a#1", mutexcheck.Now(), "done")
			}()

			lockB, err := b.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(10*time.Millisecond), ddblock.WithRetryTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			log.Acquired("b#1", "k", mutexcheck.Now(), lockB.RecordVersionNumber(), lockB.FencingToken(), takenFrom(lockB))
			workSteps(t, log, "b#1", lockB, 20)
			log.Ended("b#1", mutexcheck.Now(), "done")
			<-aDone

			events, err := mutexcheck.Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			rep := mutexcheck.Check(events)
			if careful && len(rep.Violations) != 0 {
				t.Errorf("a careful holder overlapped: %v", rep.Violations)
			}
			if !careful && len(rep.Violations) == 0 {
				t.Errorf("the checker missed a holder that worked on after losing its lock:\n%s", rep.Summary())
			}
			if careful && rep.Takeovers != 1 {
				t.Errorf("takeovers = %d, want 1", rep.Takeovers)
			}
		})
	}
}

// WithLock's function context is cancelled by the client's monitor
// goroutine when the lock goes into danger; when a paused process resumes
// (SIGCONT, a long GC pause, a frozen VM), the holder's goroutine may run
// before the monitor does. The context's Err therefore checks the clock
// itself. Holders here trust the context alone, and workers are paused
// past the lease while they hold locks: the checker must find no overlap.
func TestWithLockContextAfterPause(t *testing.T) {
	cfg := defaultChaos(20 * time.Second)
	cfg.FaultEvery = 0
	cfg.Mix = []kind{inProcess{N: 4, Shared: 3}, workers{N: 2, Clients: 2,
		Every: 300 * time.Millisecond, StrikeWithin: 30 * time.Millisecond, PausesOnly: true, TrustContext: true,
		PauseMin: cfg.Lease + 200*time.Millisecond, PauseMax: cfg.Lease + 800*time.Millisecond}}
	cfg.LongShare = 0.5
	res := runChaos(t, cfg)
	t.Logf("\n%s", res.Summary())
}

// workSteps records n verified steps of tenure id under lock, one every
// 2 ms: each reads the clock, then checks the lock, and only then is
// recorded with that time. A lost lock fails the test.
func workSteps(t *testing.T, log *mutexcheck.Log, id string, lock *ddblock.Lock, n int) {
	t.Helper()
	for range n {
		t0 := mutexcheck.Now()
		if err := lock.Err(); err != nil {
			t.Fatalf("%s lost its lock: %v", id, err)
		}
		log.Step(id, t0)
		time.Sleep(2 * time.Millisecond)
	}
}

// takenFrom names the owner of the held item lock took over, if any.
func takenFrom(lock *ddblock.Lock) string {
	if prev := lock.TakenOverFrom(); prev != nil {
		return prev.OwnerName
	}
	return ""
}

// The progress check must be able to fail, with real locks: a waiter
// that tries once, finds the lock held, and gives up only after its
// holder released it and a second went by (a waiter that stopped
// looking) is caught; a waiter that looks every retry period and gives
// up while the lock is still held is not.
func TestCheckerCatchesWaiterThatStoppedLooking(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(fmt.Sprintf("careful=%v", careful), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// The clients' calls are logged until they are closed, after
			// the check: the log is read under its own lock.
			buf := &lockedBuffer{}
			log := mutexcheck.NewLog(buf)
			// Nothing here waits out a lease: a long safe period that a
			// loaded machine cannot eat.
			opts := times(100*time.Millisecond, 5*time.Second, 10*time.Second)
			client := func(name string) *ddblock.Client {
				c := e.client(&mutexcheck.Recorder{API: e.direct, Client: name, Log: log}, append(opts, ddblock.WithOwnerName(name))...)
				log.Params(name, name, "inproc", mutexcheck.Now(), 10*time.Second, 10*time.Millisecond, 100*time.Millisecond, "calls")
				return c
			}
			a, w := client("a"), client("w")
			ctx := context.Background()

			start := mutexcheck.Now()
			log.Attempting("a", "k", start)
			lock, err := a.AcquireLock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			log.Attempted("a", "k", start, mutexcheck.Now(), "acquired")
			log.Acquired("a#1", "k", mutexcheck.Now(), lock.RecordVersionNumber(), lock.FencingToken(), "")
			log.Step("a#1", mutexcheck.Now())

			wStart := mutexcheck.Now()
			log.Attempting("w", "k", wStart)
			var outcome string
			if careful {
				// Gives up while a holds the lock.
				_, err := w.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(10*time.Millisecond), ddblock.WithRetryTimeout(300*time.Millisecond))
				outcome = string(ddblock.CodeOf(err))
				if outcome != string(ddblock.CodeAcquireTimeout) {
					t.Fatalf("a careful waiter while a holds the lock: %v; want ACQUIRE_TIMEOUT", err)
				}
				log.Attempted("w", "k", wStart, mutexcheck.Now(), outcome)
			} else {
				if _, err := w.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
					t.Fatalf("the first try: %v; want LOCK_HELD", err)
				}
				outcome = string(ddblock.CodeAcquireTimeout) // what it will say
			}
			// a works on, then releases.
			time.Sleep(50 * time.Millisecond)
			for range 5 {
				tl := mutexcheck.Now()
				if lock.Err() != nil {
					t.Fatalf("a lost its lock: %v", lock.Err())
				}
				log.Step("a#1", tl)
				time.Sleep(100 * time.Millisecond)
			}
			log.Ended("a#1", mutexcheck.Now(), "done")
			if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
				t.Fatal(err)
			}
			log.Released("a#1", mutexcheck.Now(), "ok")
			if !careful {
				time.Sleep(time.Second) // not looking
				log.Attempted("w", "k", wStart, mutexcheck.Now(), outcome)
			}

			events, err := mutexcheck.Parse(bytes.NewReader(buf.bytes()))
			if err != nil {
				t.Fatal(err)
			}
			rep := mutexcheck.Check(events)
			if len(rep.Problems) > 0 || rep.ProgressChecked != 1 {
				t.Fatalf("problems %v, failed waits checked %d; want 1", rep.Problems, rep.ProgressChecked)
			}
			if careful && len(rep.ProgressViolations) != 0 {
				t.Errorf("a waiter that gave up while the lock was held: %v", rep.ProgressViolations)
			}
			if !careful {
				if len(rep.ProgressViolations) != 1 {
					t.Fatalf("the checker missed a waiter that stopped looking:\n%s", rep.Summary())
				}
				// It stood free for the second w slept, at least; w made
				// no call then.
				if v := rep.ProgressViolations[0]; v.Free < time.Second || v.Holder != "w" {
					t.Errorf("violation %s", v)
				}
				t.Logf("caught: %s", rep.ProgressViolations[0])
			}
		})
	}
}

// lockedBuffer is a buffer that may be written and read at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// A put whose first attempt landed and lost its answer, and whose
// retry by the SDK failed its condition on what that attempt wrote, may
// have written: the Recorder logs it as "err", not "cond", so that the
// progress check counts the item it may have left.
func TestRecorderSeesRetriedPutAsUnknown(t *testing.T) {
	e := newEnv(t)
	p := e.proxy()
	buf := &lockedBuffer{}
	log := mutexcheck.NewLog(buf)
	rec := &mutexcheck.Recorder{API: ddbtest.Shared(t).ClientFor(p.URL(), 3), Client: "c", Log: log}
	p.MustInject(faultproxy.Rule{Kind: faultproxy.DropReply, Op: "PutItem", Count: 1})
	item := map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: "k"},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: ddblock.DefaultSortKey},
		"record_version_number":         &types.AttributeValueMemberS{Value: "v1"},
	}
	_, err := rec.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(e.table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(" + ddblock.DefaultPartitionKeyName + ")"),
	})
	var cond *types.ConditionalCheckFailedException
	if !errors.As(err, &cond) {
		t.Fatalf("the retried put: %v; want its condition failed (the first attempt landed)", err)
	}
	events, perr := mutexcheck.Parse(bytes.NewReader(buf.bytes()))
	if perr != nil || len(events) != 1 || events[0].Note != "err" || events[0].Detail != "v1" {
		t.Fatalf("logged %+v (%v); want one put of v1 with an unknown outcome", events, perr)
	}
}

// TestMutualExclusionWithSets mixes holders that take sets of keys at
// once (AcquireLocks, one transaction), polling and fair, in the test
// and in worker processes that are killed and paused, with every other
// kind of holder on the same keys: every flavour, elections, WithLock,
// semaphore slots, fair waiters and `ddblock run`, one key or two. On a
// server without transactions (dynalite) a set is refused, typed, and
// writes nothing.
func TestMutualExclusionWithSets(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if !ddbtest.Shared(t).HasTransactions() {
		setsUnsupported(t)
		return
	}
	runChaosShowing(t, 20*time.Second, setChaos, func(res chaosResult) []string {
		var short []string
		rep := res.Report
		if s := everyTrouble(res, "kill", "pause", "abandon"); s != "" {
			short = append(short, s)
		}
		sets, setFair, others := 0, 0, 0
		for kind, n := range rep.ByKind {
			switch {
			case strings.HasPrefix(kind, "set-") && strings.Contains(kind, "-fair"):
				setFair += n
				sets += n
			case strings.HasPrefix(kind, "set-"):
				sets += n
			default:
				others += n
			}
		}
		if sets < 10 || setFair == 0 || others == 0 {
			short = append(short, fmt.Sprintf("working tenures of sets %d (fair %d), of others %d (%v): the run must mix them", sets, setFair, others, rep.ByKind))
		}
		if rep.Handoffs < 50 || rep.Takeovers == 0 {
			short = append(short, fmt.Sprintf("handoffs %d, takeovers %d: too little contention to show anything", rep.Handoffs, rep.Takeovers))
		}
		if rep.Progress["ddblock-run:set-fast"].Acquired+rep.Progress["ddblock-run:set-session"].Acquired == 0 {
			short = append(short, "no `ddblock run --key` acquired its two keys")
		}
		return short
	}, nil)
}

// setChaos is the checker's mix with sets of two of eight keys: two
// in-process slots (one fair, one polling) and each worker's first
// client take sets, half of the other waiters wait fairly, the transactions meet the faults of
// transactions, and four `ddblock run` slots hold keys beside them, two
// of them two keys at once (`run --key`).
func setChaos(d time.Duration) chaosConfig {
	cfg := defaultChaos(d)
	// Eight keys: a set needs both its keys free at one look, which
	// four keys under every other kind of holder rarely are.
	cfg.Keys = 8
	cfg.SetSize, cfg.Fair, cfg.Transactions = 2, true, true
	cfg.SemaphoreSlots = 2
	cfg.Mix = []kind{inProcess{N: 8, Shared: 3, AbandonEvery: 2 * time.Second}, defaultWorkers(2, 2),
		ddblockRuns{N: 4, SetSlots: 2, HoldMin: 20 * time.Millisecond, HoldMax: time.Second, Every: time.Second}}
	return cfg
}

// setsUnsupported checks, where the server has no transactions, that a
// set is refused with TRANSACTIONS_UNSUPPORTED and nothing is written.
func setsUnsupported(t *testing.T) {
	e := newEnv(t)
	c := e.client(e.direct)
	ctx := context.Background()
	if _, err := c.AcquireLocks(ctx, []string{"a", "b"}); !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
		t.Fatalf("AcquireLocks on %s: %v; want TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), err)
	}
	for _, k := range []string{"a", "b"} {
		if _, err := c.GetLock(ctx, k, "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
			t.Fatalf("GetLock(%s) after a refused set: %v; want LOCK_NOT_FOUND", k, err)
		}
	}
}

// TestSetSoak is TestMutualExclusionWithSets for longer, on a server
// with transactions (doc/reliability.md):
//
//	DDBLOCK_TEST_SERVER=dynamodb-local go test ./reliability_test -run TestSetSoak -soak=5m -v -timeout 0
func TestSetSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=5m to run the soak")
	}
	if !ddbtest.Shared(t).HasTransactions() {
		setsUnsupported(t)
		return
	}
	res := runChaos(t, setChaos(*soakFor))
	fmt.Printf("\n=== ddblock reliability soak with sets of keys ===\n%s\n", res.Summary())
}
