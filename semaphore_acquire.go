package ddblock

import (
	"context"
	"fmt"
	"math/rand/v2"
)

// Acquiring a semaphore's slot: which slots to try, in what order, and
// the check that the slot taken is still within the number in force.

// Acquire takes a free slot, or waits for one under the rules of
// AcquireLock: the retry period and retry timeout options, the
// context's deadline, and the same errors (CodeAcquireTimeout,
// CodeCanceled, CodeClientShutdown, CodeInvalidArgument,
// CodeTableNotFound, CodeInvalidItem, …), plus CodeSemaphoreMismatch when
// the semaphore was made with another number of slots and never resized.
// It takes only slots below the number in force (see Resize).
//
// Waiting costs reads only: each retry period it reads every slot and
// the metadata item with one strongly consistent Query (a GetItem each
// on a table without a sort key), and it writes only to a slot that the
// read showed free (no item, or one kept after its release), or whose
// holder is presumed dead: the same record version number seen unchanged
// for the slot's lease on this client's clock (or stale by its stamp,
// with [Options.MaxClockSkew]). Contenders start at a random slot, so
// that they do not all race for the first free one. A slot won is
// confirmed by one more read of the metadata item, and given back if a
// Resize took it out of the semaphore meanwhile.
//
// With [WithFairWaiting] the semaphore's fair waiters take slots in the
// order they came, from one line for the whole semaphore: its first
// waiter takes any free slot.
//
// WithSortKeyValue is refused: the semaphore names its slots.
func (s *Semaphore) Acquire(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return s.acquire(ctx, false, opts)
}

// TryAcquire makes one attempt: one read of the slots, then a write to a
// slot that the read showed free or whose holder is presumed dead. It
// returns the slot's lock, or an error of CodeLockHeld when every slot is
// held. As with TryAcquireLock, a slot seen held by an earlier call is
// taken over by a later one once it has stood unchanged for its lease.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...AcquireOption) (*Lock, error) {
	return s.acquire(ctx, true, opts)
}

// semaphoreAcquire is one Acquire or TryAcquire call in progress.
type semaphoreAcquire struct {
	retryLoop
	s    *Semaphore
	opts acquireOptions
}

func (s *Semaphore) acquire(ctx context.Context, once bool, opts []AcquireOption) (*Lock, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	c := s.c
	o := acquireOptions{
		RetryPeriod:  c.opts.HeartbeatPeriod,
		RetryTimeout: c.opts.LeaseDuration + c.opts.HeartbeatPeriod,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.SortKey != "" {
		return nil, invalidArg("SortKey", "a semaphore names its slots' keys itself")
	}
	pk, sk := s.slotKey(0)
	o.SortKey = sk
	if err := c.checkAcquire(pk, &o); err != nil {
		return nil, err
	}
	o.SortKey = ""
	o.traceCtx = c.traceCtx(ctx)
	ctx, span := c.startSpan(ctx, spanAcquire)
	if span != nil {
		span.SetProperty(attrSemaphore, s.name)
		setLockProperties(span, pk, "", c.opts.OwnerName)
	}
	sa := &semaphoreAcquire{retryLoop: retryLoop{c: c, once: once, start: c.clock.Monotonic()}, s: s, opts: o}
	if o.FairWaiting && !once && o.RetryTimeout > 0 {
		// One line for the semaphore, at its metadata item's key: its
		// head takes any free slot.
		mpk, msk := s.metaKey()
		if err := checkLineKey(mpk); err != nil {
			return nil, err
		}
		sa.line = c.newLine(mpk, msk, o.RetryPeriod, sa.start+o.RetryTimeout)
	}
	lock, err := sa.run(ctx, sa, &sa.opts)
	sa.line.leave()
	c.opts.Metrics.AcquireFinished(c.clock.Monotonic()-sa.start, sa.attempts, err)
	if span != nil {
		endAcquireSpan(span, sa.attempts, lock, err)
	}
	return lock, err
}

// attempt reads the slots and writes to those a write can take, until
// one is won. It returns the lock when acquired, an error when the
// acquire must end or failed in a way worth another try, and neither
// when every slot is held.
func (sa *semaphoreAcquire) attempt(ctx context.Context) (*Lock, error) {
	s := sa.s
	if sa.line != nil {
		// A fair waiter tries only in its turn (line.go).
		if mine, err := sa.line.turn(ctx, sa.semaphoreLook); err != nil || !mine {
			if err != nil {
				return nil, sa.callError(ctx, "waiting in line", err)
			}
			return nil, nil
		}
	}
	view, err := s.read(ctx)
	if err != nil {
		return nil, sa.callError(ctx, "reading the semaphore", err)
	}
	meta := view.meta
	if meta == nil {
		// No slot is written before the number of slots is settled: two
		// clients with different numbers race for this one item, and
		// the loser learns the winner's number.
		if meta, err = s.createMeta(ctx); err != nil {
			return nil, sa.callError(ctx, "writing the semaphore's metadata", err)
		}
		if meta == nil {
			return nil, nil
		}
	}
	n, err := s.inForce(meta)
	if err != nil {
		return nil, err
	}
	// Every slot's observation is brought up to date, whether or not it
	// is tried this round: a dead holder's lease is timed from the first
	// sight of its version number.
	first := rand.IntN(n)
	var free, stale []*acquisition
	for k := range n {
		i := (first + k) % n
		a := sa.slotAcquisition(i)
		// A slot on a session is watched with its session item.
		if err := a.look(ctx, view.slots[i]); err != nil {
			return nil, err
		}
		switch {
		case a.seen == nil || a.seen.Released:
			free = append(free, a)
		case a.mayWrite():
			stale = append(stale, a)
		}
	}
	for _, a := range append(free, stale...) {
		lock, err := a.putWithSession(ctx)
		if lock == nil && err == nil && a.mayWrite() {
			// Lost, but what the put found can be taken now (released
			// or deleted meanwhile), as AcquireLock does.
			lock, err = a.putWithSession(ctx)
		}
		if err != nil {
			return nil, err
		}
		if lock != nil {
			return sa.confirm(ctx, lock)
		}
	}
	return nil, nil
}

// confirm reads the metadata item again after a slot was won, and gives
// the slot back if a Resize took it out of the semaphore since the read
// that chose it. This is what makes a Resize's promise hold whatever
// that read showed: see the comment on Resize.
func (sa *semaphoreAcquire) confirm(ctx context.Context, lock *Lock) (*Lock, error) {
	s := sa.s
	i, _ := s.SlotOf(lock)
	meta, err := s.readMeta(ctx)
	if err == nil && (meta == nil || i < meta.slots) {
		if meta != nil {
			s.slots.Store(int64(meta.slots))
		}
		return lock, nil
	}
	// Given back before anyone is told it is held.
	lock.mu.Lock()
	lock.unreported = true
	lock.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.HeartbeatTimeout)
	defer cancel()
	if rerr := lock.Release(rctx); rerr != nil {
		s.c.log.Warn("ddblock: could not give back a slot taken out of its semaphore", "semaphore", s.name, "slot", i, "err", rerr)
	}
	if err != nil {
		return nil, sa.callError(ctx, "reading the semaphore's metadata", err)
	}
	s.slots.Store(int64(meta.slots))
	return nil, nil // resized meanwhile: the next attempt tries the slots in force
}

// slotAcquisition is AcquireLock's machinery pointed at slot i, with
// what this client remembers of the slot.
func (sa *semaphoreAcquire) slotAcquisition(i int) *acquisition {
	c := sa.s.c
	pk, sk := sa.s.slotKey(i)
	o := sa.opts
	o.SortKey = sk
	a := &acquisition{retryLoop: retryLoop{c: c, once: sa.once, start: sa.start}, pk: pk, opts: o, id: lockID(pk, sk)}
	a.seen, a.seenAt = c.observations.get(a.id)
	return a
}

// heldError is the answer when the attempts ran out with every slot
// held.
func (sa *semaphoreAcquire) heldError() error {
	switch {
	case sa.once:
		return sa.fail(CodeLockHeld, fmt.Sprintf("all %d slots are held", sa.s.Slots()), nil)
	default:
		return sa.fail(CodeAcquireTimeout, fmt.Sprintf("no slot free within %v", sa.opts.RetryTimeout), nil)
	}
}

func (sa *semaphoreAcquire) callError(ctx context.Context, doing string, err error) error {
	pk, sk := sa.s.metaKey()
	return sa.s.c.classifyCallError(ctx, sa.fail, doing, err, pk, sk)
}

func (sa *semaphoreAcquire) retryingAfter(err error) {
	sa.s.c.log.Warn("ddblock: semaphore acquire attempt failed; will retry", "semaphore", sa.s.name, "err", err)
}

// fail is an error about the semaphore as a whole, keyed by its name.
func (sa *semaphoreAcquire) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: fmt.Sprintf("semaphore %q: %s", sa.s.name, msg), PartitionKey: sa.s.name, Err: cause}
}
