package mutexcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// Holder contends for a few keys with one ddblock client, over and over,
// and records what it does in a Log: it acquires a random key, works in
// verified steps for a random time, and releases it. It stops working
// the moment its lock is not safe, and goes on to the next acquire.
type Holder struct {
	// ID names the holder in the log; it must be unique in a run and
	// contain no white space.
	ID string
	// Client is the holder's own lock client.
	Client *ddblock.Client
	// Keys are the partition keys to contend for.
	Keys []string
	// Log receives the holder's events.
	Log *Log
	// HoldMin and HoldMax bound how long a tenure works.
	HoldMin, HoldMax time.Duration
	// LongShare is the share of tenures, in [0, 1], that work between
	// LongMin and LongMax instead: long enough to be heartbeated, and so
	// to meet heartbeat faults and go into danger.
	LongShare        float64
	LongMin, LongMax time.Duration
	// StepEvery is the pause between steps.
	StepEvery time.Duration
	// AcquireTimeout is the deadline of the context each AcquireLock
	// gets; with UseWithLock, it is the acquire's RetryTimeout instead.
	AcquireTimeout time.Duration
	// AcquireOptions are passed to every acquire.
	AcquireOptions []ddblock.AcquireOption
	// UseWithLock works through Client.WithLock, checking both the
	// function's context and Lock.Err() at each step, instead of
	// AcquireLock, a step loop and Release.
	UseWithLock bool
	// UseElection takes each key as an election's name: it campaigns
	// (Election.Campaign, with AcquireTimeout as the context's deadline),
	// works under the leadership (checking Lock.Err() and the
	// leadership's context at each step) and resigns.
	UseElection bool
	// UseSemaphore takes each key as the name of a semaphore of Slots
	// slots: it acquires a slot (Semaphore.Acquire, with AcquireTimeout
	// as the context's deadline), works under it as under any lock, and
	// releases it. Its tenures' keys are "KEY/slot-I", and it declares
	// the limit (Log.Limit) so that Check counts the holders of each key.
	UseSemaphore bool
	Slots        int
	// DirectSlots, for a holder of none of the modes above, makes a
	// quarter of its tenures take one of a key's first DirectSlots slots
	// with AcquireLock on the slot's own key, as a python_dynamodb_lock
	// client would: the semaphore's holders must count it.
	DirectSlots int
	// SetSize, when at least 2, makes the holder take sets of 2 to
	// SetSize of its keys at once (Client.AcquireLocks), work under all
	// of them, and release each; its attempts are logged under SetKey.
	SetSize int
	// TrustContext, with UseWithLock, checks only the function's context
	// at each step, not Lock.Err(): it shows whether the context alone is
	// a safe guard (it is cancelled by the client's monitor, which may
	// run after the holder when a paused process resumes).
	TrustContext bool
	// Seed seeds the holder's random choices.
	Seed uint64
	// Proc names the holder's process in the log ("inproc" when empty),
	// for the stalls WatchStalls logs of it; CallsRecorded says that its
	// client's DynamoDB calls are logged (its API is a [Recorder]).
	Proc          string
	CallsRecorded bool

	rng      *rand.Rand
	tenures  int
	declared map[string]bool // the groups whose limit is logged
}

// Run contends until ctx ends or the holder's client is closed. It
// returns nil then; any other end is a bug it reports.
func (h *Holder) Run(ctx context.Context) error {
	if h.Client == nil || h.Log == nil || len(h.Keys) == 0 || h.HoldMax < h.HoldMin || h.StepEvery <= 0 ||
		h.LongShare < 0 || h.LongShare > 1 || (h.LongShare > 0 && h.LongMax < h.LongMin) ||
		(h.UseSemaphore && h.Slots < 1) || h.DirectSlots < 0 {
		return errors.New("mutexcheck: Holder needs a Client, a Log, Keys, HoldMin <= HoldMax, LongMin <= LongMax, a LongShare in [0, 1], a positive StepEvery, and positive Slots with UseSemaphore")
	}
	h.rng = rand.New(rand.NewPCG(h.Seed, uint64(len(h.ID))))
	h.logParams()
	for ctx.Err() == nil {
		key := h.Keys[h.rng.IntN(len(h.Keys))]
		lo, hi := h.HoldMin, h.HoldMax
		if h.LongShare > 0 && h.rng.Float64() < h.LongShare {
			lo, hi = h.LongMin, h.LongMax
		}
		hold := lo
		if hi > lo {
			hold += time.Duration(h.rng.Int64N(int64(hi - lo)))
		}
		var closed bool
		switch {
		case h.SetSize >= 2 && len(h.Keys) >= 2:
			closed = h.roundSet(ctx, hold)
		case h.UseSemaphore:
			closed = h.roundSemaphore(ctx, key, hold)
		case h.UseElection:
			closed = h.roundElection(ctx, key, hold)
		case h.UseWithLock:
			closed = h.roundWithLock(ctx, key, hold)
		default:
			closed = h.round(ctx, key, hold)
		}
		if closed {
			return nil
		}
	}
	return nil
}

// logParams records the settings that bound the holder's waits.
func (h *Holder) logParams() {
	co := h.Client.Options()
	retry, fair := hooks.AcquireSettings(h.AcquireOptions)
	switch {
	case h.UseElection:
		retry = ddblock.DefaultElectionRetryPeriod
	case retry <= 0:
		retry = co.HeartbeatPeriod // AcquireLock's default
	}
	var flags []string
	if fair && !h.UseElection { // a campaign does not wait in line
		flags = append(flags, "fair")
	}
	if co.SessionLease {
		flags = append(flags, "session")
	}
	if h.CallsRecorded {
		flags = append(flags, "calls")
	}
	proc := h.Proc
	if proc == "" {
		proc = "inproc"
	}
	h.Log.Params(h.ID, co.OwnerName, proc, Now(), co.LeaseDuration, retry, co.HeartbeatPeriod, flags...)
}

// attempting logs the start of an acquire of key and returns the
// function that logs its end, with its error (nil: acquired).
func (h *Holder) attempting(key string) func(err error) {
	start := Now()
	h.Log.Attempting(h.ID, key, start)
	return func(err error) {
		outcome := "acquired"
		if err != nil {
			outcome = string(ddblock.CodeOf(err))
			if outcome == "" {
				outcome = CodeUnclear
			}
		}
		h.Log.Attempted(h.ID, key, start, Now(), outcome)
	}
}

// round is one acquire, tenure and release; true when the client is
// closed.
func (h *Holder) round(ctx context.Context, key string, hold time.Duration) bool {
	opts := h.AcquireOptions
	if h.DirectSlots > 0 && h.rng.IntN(4) == 0 {
		slot := fmt.Sprintf("slot-%d", h.rng.IntN(h.DirectSlots))
		opts = append(slices.Clone(opts), ddblock.WithSortKeyValue(slot))
		return h.roundOn(ctx, key, key+"/"+slot, opts, hold)
	}
	return h.roundOn(ctx, key, key, opts, hold)
}

// roundOn is round on the lock of partition key pk, logged as logKey.
func (h *Holder) roundOn(ctx context.Context, pk, key string, opts []ddblock.AcquireOption, hold time.Duration) bool {
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.attempting(key)
	lock, err := h.Client.AcquireLock(actx, pk, opts...)
	ended(err)
	cancel()
	if err != nil {
		return h.failed("acquire", err)
	}
	if lock == nil {
		h.Log.Failure(h.ID, "acquire", Now(), CodeUnclear, "AcquireLock returned neither a lock nor an error")
		return false
	}
	tenure := h.work(ctx, nil, lock, key, hold)
	h.release(ctx, tenure, lock)
	return false
}

// release gives back the lock of a tenure and logs how that went.
func (h *Holder) release(ctx context.Context, tenure string, lock *ddblock.Lock) {
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), h.AcquireTimeout)
	err := lock.Release(rctx, ddblock.WithBestEffort(false))
	rcancel()
	outcome := "ok"
	if err != nil {
		h.failed("release", err)
		outcome = string(ddblock.CodeOf(err))
	} else if reason := ddblock.CodeOf(lock.Err()); reason != ddblock.CodeLockReleased {
		// Release does nothing to a lock that was not held any more
		// (stolen, or its client closed), and says nil.
		outcome = "not-held-" + string(reason)
	}
	h.Log.Released(tenure, Now(), outcome)
}

// roundSemaphore is one slot's acquire, tenure and release; true when
// the client is closed.
func (h *Holder) roundSemaphore(ctx context.Context, key string, hold time.Duration) bool {
	sem, err := h.Client.NewSemaphore(key, h.Slots)
	if err != nil {
		return h.failed("acquire", err)
	}
	if h.declared == nil {
		h.declared = map[string]bool{}
	}
	if !h.declared[key] {
		h.declared[key] = true
		h.Log.Limit(h.ID, key, Now(), h.Slots)
	}
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.attempting(key + "/slot-*")
	lock, err := sem.Acquire(actx, h.AcquireOptions...)
	ended(err)
	cancel()
	if err != nil {
		return h.failed("acquire", err)
	}
	slot, ok := sem.SlotOf(lock)
	if !ok {
		h.Log.Failure(h.ID, "acquire", Now(), CodeUnclear, "Semaphore.Acquire returned a lock that is not one of its slots: "+lock.ID())
		return false
	}
	tenure := h.work(ctx, nil, lock, fmt.Sprintf("%s/slot-%d", key, slot), hold)
	h.release(ctx, tenure, lock)
	return false
}

// roundElection is one campaign, leadership and resignation; true when
// the client is closed.
func (h *Holder) roundElection(ctx context.Context, key string, hold time.Duration) bool {
	election, err := h.Client.NewElection(key)
	if err != nil {
		return h.failed("campaign", err)
	}
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.attempting(key)
	lead, err := election.Campaign(actx, h.ID)
	ended(err)
	cancel()
	if err != nil {
		return h.failed("acquire", err)
	}
	tenure := h.work(ctx, lead.Context(), lead.Lock, key, hold)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), h.AcquireTimeout)
	err = election.Resign(rctx)
	rcancel()
	outcome := "unknown" // Resign releases best effort
	if err != nil {
		h.failed("resign", err)
		outcome = string(ddblock.CodeOf(err))
	} else if reason := ddblock.CodeOf(lead.Err()); reason != ddblock.CodeLockReleased {
		outcome = "not-held-" + string(reason)
	}
	h.Log.Released(tenure, Now(), outcome)
	return false
}

func (h *Holder) roundWithLock(ctx context.Context, key string, hold time.Duration) bool {
	var (
		held   *ddblock.Lock
		tenure string
	)
	opts := append(append([]ddblock.AcquireOption(nil), h.AcquireOptions...), ddblock.WithRetryTimeout(h.AcquireTimeout))
	ended := h.attempting(key)
	err := h.Client.WithLock(ctx, key, func(lctx context.Context, lock *ddblock.Lock) error {
		ended(nil)
		held = lock
		tenure = h.work(ctx, lctx, lock, key, hold)
		return nil
	}, opts...)
	ran := held != nil
	if !ran {
		ended(err)
	}
	if ran {
		// WithLock releases by itself, best effort: whether the delete
		// landed is not known, only whether it was attempted.
		outcome := "unknown"
		if reason := ddblock.CodeOf(held.Err()); reason != ddblock.CodeLockReleased {
			outcome = "not-held-" + string(reason)
		}
		h.Log.Released(tenure, Now(), outcome)
	}
	switch {
	case err == nil:
		return false
	case !ran:
		return h.failed("acquire", err)
	default:
		// The function returned nil, but the lock was lost while it ran:
		// WithLock must say so with the lock's own error.
		h.failed("withlock", err)
		return false
	}
}

// work is one tenure: verified steps until the hold time is up or the
// lock is not safe any more. It returns the tenure's name.
func (h *Holder) work(ctx, lctx context.Context, lock *ddblock.Lock, key string, hold time.Duration) string {
	h.tenures++
	tenure := fmt.Sprintf("%s#%d", h.ID, h.tenures)
	start := Now()
	from := ""
	if prev := lock.TakenOverFrom(); prev != nil {
		from = prev.OwnerName
	}
	h.Log.Acquired(tenure, key, start, lock.RecordVersionNumber(), lock.FencingToken(), from)
	deadline := start + int64(hold)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		// The time is read before the check: a step stands for a moment
		// at which the lock was verified safe, at that moment or later.
		t := Now()
		reason := ""
		switch {
		case ctx.Err() != nil:
			reason = "stopped"
		case lctx != nil && h.TrustContext:
			if lctx.Err() != nil {
				reason = "fn-context-" + string(ddblock.CodeOf(context.Cause(lctx)))
			}
		case lock.Err() != nil:
			reason = string(ddblock.CodeOf(lock.Err()))
		case lctx != nil && lctx.Err() != nil:
			reason = "fn-context-" + string(ddblock.CodeOf(context.Cause(lctx)))
		}
		if reason != "" {
			h.Log.Ended(tenure, Now(), reason)
			return tenure
		}
		h.Log.Step(tenure, t)
		if t >= deadline {
			h.Log.Ended(tenure, Now(), "done")
			return tenure
		}
		timer.Reset(h.StepEvery)
		select {
		case <-timer.C:
		case <-lock.Done():
		case <-ctx.Done():
		}
	}
}

// failed logs a failed call with its code, or as unclear when the error
// is not a clear ddblock error; true when the client is closed.
func (h *Holder) failed(op string, err error) bool {
	code := ddblock.CodeOf(err)
	detail := err.Error()
	var lerr *ddblock.Error
	switch {
	case !errors.As(err, &lerr) || code == "":
		code = CodeUnclear
		detail = fmt.Sprintf("not a *ddblock.Error: %T: %v", err, err)
	case code == ddblock.CodeUnknown && lerr.Err == nil:
		code = CodeUnclear
		detail = "UNKNOWN without a cause: " + detail
	}
	h.Log.Failure(h.ID, op, Now(), string(code), detail)
	// A closed client ends the holder's rounds, whichever call of a
	// round's start found it closed (NewElection too says so now): going
	// on would spin, logging a failure each time.
	return code == ddblock.CodeClientShutdown && (op == "acquire" || op == "campaign")
}

// AddStats adds the counters of s that the reliability runs report
// (heartbeats, late rounds, danger, recoveries, thefts, locks of dead
// sessions) to total: the test's and the worker processes' one sum.
func AddStats(total *ddblock.Stats, s ddblock.Stats) {
	total.HeartbeatsSent += s.HeartbeatsSent
	total.HeartbeatsFailed += s.HeartbeatsFailed
	total.HeartbeatsSkipped += s.HeartbeatsSkipped
	total.LateRounds += s.LateRounds
	total.InDanger += s.InDanger
	total.Recovered += s.Recovered
	total.Stolen += s.Stolen
	total.DeadSessionLocks += s.DeadSessionLocks
}
