package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// lockKey is one lock the run may have left behind: its key, and its
// name in the event logs.
type lockKey struct{ pk, sk, log string }

// sortKeys are the sort keys a run writes under each key: the plain
// lock's, and with semaphores each slot's.
func (c *chaos) sortKeys() []string {
	sks := []string{ddblock.DefaultSortKey}
	slots := c.cfg.SemaphoreSlots
	for _, n := range c.cfg.ResizeTo {
		slots = max(slots, n)
	}
	for i := range slots {
		sks = append(sks, fmt.Sprintf("slot-%d", i))
	}
	return sks
}

// lockKeys are every lock of the run: each key's plain lock, and with
// semaphores each slot, logged as "KEY/slot-I".
func (c *chaos) lockKeys() []lockKey {
	var out []lockKey
	for _, key := range c.keys {
		for _, sk := range c.sortKeys() {
			log := key
			if sk != ddblock.DefaultSortKey {
				log = key + "/" + sk
			}
			out = append(out, lockKey{key, sk, log})
		}
	}
	return out
}

// semaphoreChaos is the checker's set-up with semaphores in the mix: two
// names of two slots each, contended by semaphore holders in every
// flavour (in-process slots 2 and 6; the workers' even clients), by
// plain holders that take a slot's key directly as a Python client
// would (in-process slots 0 and 4), and by WithLock holders and
// elections on the same names' plain locks, under faults, kills, pauses
// and abandoned clients.
func semaphoreChaos(d time.Duration) chaosConfig {
	cfg := defaultChaos(d)
	cfg.Keys = 2
	cfg.SemaphoreSlots = 2
	cfg.Mix = []kind{defaultInProcess(8), defaultWorkers(2, 4)}
	return cfg
}

// Never more than N holders of a semaphore, never two of one slot, and
// never two leaders, with everything at once. runChaos fails the test on
// any violation of either kind.
func TestMutualExclusionWithSemaphores(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	runChaosShowing(t, 20*time.Second, semaphoreChaos, func(res chaosResult) []string {
		var short []string
		rep := res.Report
		if s := everyTrouble(res, "kill", "pause", "abandon"); s != "" {
			short = append(short, s)
		}
		// The limit is only tested if it was reached: both slots of a
		// name worked at once.
		for _, group := range []string{"key-0", "key-1"} {
			if rep.PeakHolders[group] < 2 {
				short = append(short, fmt.Sprintf("semaphore %s never had two holders at once (peak %d): the run did not reach the limit", group, rep.PeakHolders[group]))
			}
		}
		if rep.Handoffs < 50 || rep.Takeovers == 0 {
			short = append(short, fmt.Sprintf("handoffs %d, takeovers %d: too little contention to show anything", rep.Handoffs, rep.Takeovers))
		}
		return short
	}, func(res chaosResult) {
		if len(res.Report.Limits) != res.Config.Keys {
			t.Errorf("limits declared for %v; want every key as a semaphore", res.Report.Limits)
		}
	})
}

// TestSemaphoreSoak is the long run with semaphores and elections,
// recorded in doc/reliability.md:
//
//	go test ./reliability_test -run TestSemaphoreSoak -soak=5m -v -timeout 0
func TestSemaphoreSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=5m to run the soak")
	}
	res := runChaos(t, semaphoreChaos(*soakFor))
	fmt.Printf("\n=== ddblock reliability soak with semaphores ===\n%s\n", res.Summary())
}

// The limit check must be able to fail, with real locks: two holders take
// both slots of a 2-slot semaphore, and a third that ignores the limit
// (it takes a third slot's key directly, as a client that believed in 3
// slots and skipped the check would) works beside them; the checker
// reports it. A careful third, asking the semaphore with 3 slots, is
// refused with SEMAPHORE_MISMATCH and never works.
func TestCheckerCatchesHolderOverLimit(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(fmt.Sprintf("careful=%v", careful), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			// Nothing here waits out a lease: a long safe period that a
			// loaded machine cannot eat, so that no holder loses its slot.
			opts := times(100*time.Millisecond, 10*time.Second, 15*time.Second)
			var buf bytes.Buffer
			log := mutexcheck.NewLog(&buf)
			steps := func(id string, lock *ddblock.Lock) { workSteps(t, log, id, lock, 5) }
			work := func(id string, lock *ddblock.Lock, key string) {
				log.Acquired(id, key, mutexcheck.Now(), lock.RecordVersionNumber(), lock.FencingToken(), "")
				steps(id, lock)
			}
			var held []*ddblock.Lock
			for _, id := range []string{"a", "b"} {
				c := e.client(e.direct, append(opts, ddblock.WithOwnerName(id))...)
				sem, err := c.NewSemaphore("s", 2)
				if err != nil {
					t.Fatal(err)
				}
				log.Limit(id, "s", mutexcheck.Now(), 2)
				lock, err := sem.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				slot, _ := sem.SlotOf(lock)
				work(id+"#1", lock, fmt.Sprintf("s/slot-%d", slot))
				held = append(held, lock)
			}
			x := e.client(e.direct, append(opts, ddblock.WithOwnerName("x"))...)
			if careful {
				sem, err := x.NewSemaphore("s", 3)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := sem.TryAcquire(ctx); !errors.Is(err, ddblock.CodeSemaphoreMismatch) {
					t.Fatalf("a third asking for 3 slots: %v; want SEMAPHORE_MISMATCH", err)
				}
			} else {
				lock, err := x.AcquireLock(ctx, "s", ddblock.WithSortKeyValue("slot-2"))
				if err != nil {
					t.Fatal(err)
				}
				work("x#1", lock, "s/slot-2")
			}
			for i, lock := range held {
				steps(fmt.Sprintf("%c#1", 'a'+i), lock) // a and b work on while x works
			}
			events, err := mutexcheck.Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			rep := mutexcheck.Check(events)
			if len(rep.Violations) != 0 || len(rep.Problems) != 0 {
				t.Errorf("per-key violations %v, problems %v: no slot was shared", rep.Violations, rep.Problems)
			}
			if careful && (len(rep.LimitViolations) != 0 || rep.PeakHolders["s"] != 2) {
				t.Errorf("careful: %v, peak %d", rep.LimitViolations, rep.PeakHolders["s"])
			}
			if !careful && (len(rep.LimitViolations) != 1 || rep.PeakHolders["s"] != 3) {
				t.Errorf("the checker missed a third holder of a 2-slot semaphore:\n%s", rep.Summary())
			}
		})
	}
}

// resizeChaos is semaphoreChaos with a resizer: every key's semaphore is
// resized in turn to 3, 2, 4 and 2 slots, never below the 2 slots that
// the holders taking a slot's key directly (as a Python client would,
// knowing nothing of the number) use.
func resizeChaos(d time.Duration) chaosConfig {
	cfg := semaphoreChaos(d)
	cfg.ResizeTo = []int{3, 2, 4, 2}
	cfg.ResizeEvery = 300 * time.Millisecond
	return cfg
}

// resizeSemaphores resizes every key's semaphore, one resize at a time
// per key, until ctx ends, logging each resize's begin and its done (once
// Resize returned nil) or failed, for the checker's limit in force. A
// shrink waits for the holders above the new number (killed and paused
// workers' included: their slots are removed once presumed dead), within
// a bound of its own.
func (c *chaos) resizeSemaphores(ctx context.Context) {
	client := c.env.client(c.env.direct, append(times(c.cfg.Heartbeat, c.cfg.Safe, c.cfg.Lease),
		ddblock.WithOwnerName("resizer"))...)
	var wg sync.WaitGroup
	for k, key := range c.keys {
		wg.Go(func() {
			sem, err := client.NewSemaphore(key, c.cfg.SemaphoreSlots)
			if err != nil {
				c.problem("NewSemaphore: %v", err)
				return
			}
			for i := 0; ctx.Err() == nil; i++ {
				n := c.cfg.ResizeTo[(i+k)%len(c.cfg.ResizeTo)]
				name := fmt.Sprintf("resize-%s.%d", key, i)
				c.log.Resize(name, key, mutexcheck.Now(), n, "begin")
				rctx, cancel := context.WithTimeout(context.Background(), 10*c.cfg.Lease)
				err := sem.Resize(rctx, n)
				cancel()
				phase := "done"
				if err != nil {
					phase = "failed"
					c.log.Failure("resizer", "resize", mutexcheck.Now(), string(ddblock.CodeOf(err)), err.Error())
				}
				c.log.Resize(name, key, mutexcheck.Now(), n, phase)
				t := time.NewTimer(c.cfg.ResizeEvery)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		})
	}
	wg.Wait()
}

// Never more than the number of slots in force, with the semaphores
// resized up and down while every kind of holder works on them under
// faults, kills, pauses and abandoned clients: after a shrink is done,
// at most the new number; while it drains, at most the old.
func TestMutualExclusionWithSemaphoreResizes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	runChaosShowing(t, 20*time.Second, resizeChaos, func(res chaosResult) []string {
		var short []string
		rep := res.Report
		for _, key := range []string{"key-0", "key-1"} {
			if rep.Resizes[key] < 4 {
				short = append(short, fmt.Sprintf("semaphore %s: %d resizes done; want every size of %v at least once", key, rep.Resizes[key], res.Config.ResizeTo))
			}
			if rep.PeakHolders[key] < 3 {
				short = append(short, fmt.Sprintf("semaphore %s never had more than %d holders at once: the grown sizes were not used", key, rep.PeakHolders[key]))
			}
		}
		if res.Struck["kill"] == 0 || res.Struck["pause"] == 0 || rep.Handoffs < 50 {
			short = append(short, fmt.Sprintf("kills %d, pauses %d, handoffs %d: too little trouble to show anything", res.Struck["kill"], res.Struck["pause"], rep.Handoffs))
		}
		return short
	}, nil)
}

// The limit in force after a resize must be checkable, with real locks:
// three holders work in the three slots of a semaphore; a resize to 2
// that is acknowledged while they all work on (a resizer that ignored
// Resize's answer) is caught by the checker. A real Resize to 2 returns
// only after the holder of slot 2 released, and once it has, a newcomer
// finds no slot while two hold: the checker then finds nothing.
func TestCheckerCatchesHoldersOverResizedLimit(t *testing.T) {
	for _, careful := range []bool{false, true} {
		t.Run(fmt.Sprintf("careful=%v", careful), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			// Nothing here waits out a lease: a long safe period that a
			// loaded machine cannot eat, so that no holder loses its slot.
			opts := times(100*time.Millisecond, 10*time.Second, 15*time.Second)
			var buf bytes.Buffer
			log := mutexcheck.NewLog(&buf)
			steps := func(id string, lock *ddblock.Lock) { workSteps(t, log, id, lock, 5) }
			held := map[int]*ddblock.Lock{}
			ids := map[int]string{}
			for _, id := range []string{"a", "b", "c"} {
				sem, err := e.client(e.direct, append(opts, ddblock.WithOwnerName(id))...).NewSemaphore("s", 3)
				if err != nil {
					t.Fatal(err)
				}
				log.Limit(id, "s", mutexcheck.Now(), 3)
				lock, err := sem.TryAcquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				slot, _ := sem.SlotOf(lock)
				log.Acquired(id+"#1", fmt.Sprintf("s/slot-%d", slot), mutexcheck.Now(), lock.RecordVersionNumber(), lock.FencingToken(), "")
				steps(id+"#1", lock)
				held[slot], ids[slot] = lock, id+"#1"
			}
			resizer, err := e.client(e.direct, opts...).NewSemaphore("s", 3)
			if err != nil {
				t.Fatal(err)
			}
			log.Resize("r", "s", mutexcheck.Now(), 2, "begin")
			if careful {
				done := make(chan error, 1)
				go func() { done <- resizer.Resize(ctx, 2) }()
				steps(ids[2], held[2]) // slot 2's holder works on during the drain
				if err := held[2].Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else {
				// Ended once the new number is written, however slow
				// the machine: the resize is left waiting for slot 2.
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- resizer.Resize(rctx, 2) }()
				for resizer.Slots() != 2 {
					if _, err := resizer.Holders(ctx); err != nil {
						t.Fatal(err)
					}
				}
				cancel()
				if err := <-done; !errors.Is(err, ddblock.CodeLockHeld) {
					t.Fatalf("Resize with slot 2 held, ended: %v; want LOCK_HELD", err)
				}
			}
			log.Resize("r", "s", mutexcheck.Now(), 2, "done")
			for slot, lock := range held {
				if careful && slot == 2 {
					continue
				}
				steps(ids[slot], lock) // work on after the resize
			}
			if careful {
				newcomer, err := e.client(e.direct, opts...).NewSemaphore("s", 3)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := newcomer.TryAcquire(ctx); !errors.Is(err, ddblock.CodeLockHeld) {
					t.Fatalf("a newcomer after the resize to 2, two holding: %v; want LOCK_HELD", err)
				}
			}
			events, err := mutexcheck.Parse(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			rep := mutexcheck.Check(events)
			if len(rep.Violations) != 0 || len(rep.Problems) != 0 {
				t.Errorf("per-key violations %v, problems %v: no slot was shared", rep.Violations, rep.Problems)
			}
			t.Logf("careful=%v: limit violations %d, peak %d, resizes done %d", careful, len(rep.LimitViolations), rep.PeakHolders["s"], rep.Resizes["s"])
			if careful && len(rep.LimitViolations) != 0 {
				t.Errorf("a real Resize: %v", rep.LimitViolations)
			}
			if !careful && len(rep.LimitViolations) != 1 {
				t.Errorf("the checker missed three holders working after a resize to 2 was acknowledged:\n%s", rep.Summary())
			}
		})
	}
}
