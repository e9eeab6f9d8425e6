package ddblock

import (
	"context"
	"fmt"
	"strings"

	"github.com/ddblock/ddblock/internal/wire"
)

// Resizing a semaphore, and why it is safe.
//
// What Resize(n) promises: once it returns nil, no slot at or above n is
// held, and no Acquire (of this version of ddblock) returns one until a
// later Resize grows the semaphore again; so from that moment on there
// are at most n holders at once. While it waits, there are at most
// max(old N, n). Holders of slots at or above n when the resize begins
// keep their slots until they release them (or are presumed dead, see
// below): Resize waits for them, and does not return nil before.
//
// How: the metadata item is the only item a resize writes for the new
// number; slot items are conditionally written one at a time, so no
// transaction is needed (dynalite has none).
//
//  1. Resize writes n into the metadata item, conditioned on the number
//     of resizes it read (the item's version), and records the old N as
//     the span of slot indexes that may still be held.
//  2. Every Acquire reads the metadata item and tries only the slots
//     below its N. That read may be older than step 1 (an Acquire that
//     read N=5 just before a shrink to 3 can still win slot 4 with its
//     conditional put). So after winning a slot, Acquire reads the
//     metadata item again (confirm), and gives the slot back unless it
//     is still below N: it never returns a slot that a resize written
//     before that second read took away.
//  3. Resize then reads every slot that may be held, until none at or
//     above n is: each such holder releases in its own time, or, if it
//     stays unchanged for its lease (or its session's) on this client's
//     clock, is presumed dead and its item removed, conditioned on the
//     version seen, exactly as a waiter would take it over.
//  4. With nothing held at or above n, Resize drops the span to n (again
//     conditioned on its own version) and returns nil.
//
// Why no Acquire returns slot j >= n after step 4: such an Acquire's put
// on slot j landed at some time p, and its confirming read at c > p saw
// an N above j, so c came before step 1's write, and so did p. Then the
// winner held slot j when step 3 began, and step 3 saw it held until it
// was released or presumed dead: step 4 came after that. (The one way
// around is the one every lease has: a holder stalled for longer than
// its lease, whose lock is then lost and reported so by Lock.Err.)
// Slots below n are each held by at most one holder, as any lock is: so
// at most n holders. Growing the semaphore only writes the new N: more
// slots become free at once, which no promise forbids.
//
// Clients of earlier versions of ddblock do not confirm their slot, but
// they refuse to go on once the metadata item's N is not the number they
// were made with (CodeSemaphoreMismatch), which any resize causes.
// A python_dynamodb_lock client that takes a slot's key directly knows
// nothing of N at all: resizing is for semaphores used through ddblock.

// Resize changes the semaphore's number of slots to slots, for every
// client: the metadata item's number is the one in force from then on,
// and clients asking for another number follow it. It returns nil once
// no slot at or above the new number is held: from then on at most slots
// holders work at once (while it waits, at most the larger of the old
// and the new number). Growing returns at once; shrinking waits for the
// holders of the slots taken away to release them (they are not told,
// and keep their slots until then), and removes, as a waiter would take
// it over, a slot whose holder is presumed dead: its version number
// unchanged for its lease on this client's clock. It checks again every
// heartbeat period of the client.
//
// Should ctx end once the new number is written, the number is in force
// all the same (no new holder takes a slot above it) but holders above it
// may remain: Resize then returns an error of CodeLockHeld that names
// those it saw and wraps the context's cause; calling Resize again with
// the same number waits on. Should ctx end before, Resize returns
// CodeCanceled (or CodeAcquireTimeout for a deadline), as Acquire does,
// and the number may or may not have been written.
// It returns CodeInvalidArgument for a number below 1 or above
// [MaxSemaphoreSlots], CodeSemaphoreMismatch when another Resize changed
// the number while this one waited, and the errors of a failed read or
// write (CodeTableNotFound, CodeInvalidItem, …).
func (s *Semaphore) Resize(ctx context.Context, slots int) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := checkContext(ctx); err != nil {
		return err
	}
	if slots < 1 || slots > MaxSemaphoreSlots {
		return invalidArg("Slots", fmt.Sprintf("must be from 1 to %d, got %d", MaxSemaphoreSlots, slots))
	}
	if err := s.checkKeys(slots); err != nil {
		return err
	}
	c := s.c
	if c.isClosed() {
		return s.fail(CodeClientShutdown, "the client is closed", nil)
	}
	version, above, err := s.writeSize(ctx, slots)
	if err != nil {
		return err
	}
	s.slots.Store(int64(slots))
	// From here on the new number is in force: a context that ends is
	// answered with what is still held above it.
	ended := func(err error) error {
		if ctx.Err() == nil {
			return err
		}
		if len(above) == 0 {
			return s.fail(CodeLockHeld, fmt.Sprintf("resized to %d slots, but the context ended before the resize saw "+
				"that no slot above is held; Resize again to wait for it", slots), context.Cause(ctx))
		}
		return s.fail(CodeLockHeld, fmt.Sprintf("resized to %d slots, but %s still held above it by their holders "+
			"from before: no new holder takes a slot above %d, and these keep theirs until they release them; "+
			"Resize again to wait for them", slots, describeSlots(s, above), slots-1), context.Cause(ctx))
	}
	watch := &semaphoreAcquire{retryLoop: retryLoop{c: c, start: c.clock.Monotonic()}, s: s}
	for {
		view, err := s.read(ctx)
		if err != nil {
			return ended(s.resizeCallError(ctx, "reading the semaphore", err))
		}
		if view.meta == nil || view.meta.resizes != version {
			n := 0
			if view.meta != nil {
				n = view.meta.slots
			}
			return s.fail(CodeSemaphoreMismatch, fmt.Sprintf("resized again while this resize to %d slots waited (now %d slots)", slots, n), nil)
		}
		above = above[:0]
		for _, i := range view.held() {
			if i < slots {
				continue
			}
			above = append(above, view.slots[i])
			a := watch.slotAcquisition(i)
			if err := a.look(ctx, view.slots[i]); err != nil {
				return ended(err)
			}
			if a.mayWrite() {
				// Presumed dead: removed as a waiter would take it over.
				pk, sk := s.slotKey(i)
				err := c.giveBack(ctx, pk, sk, a.seen.RecordVersionNumber, a.seen.FencingToken > 0)
				if err != nil && !wire.ConditionFailed(err) {
					return ended(s.resizeCallError(ctx, "removing a slot of a holder presumed dead", err))
				}
				if err == nil {
					c.observations.forget(a.id)
					c.log.Info("ddblock: resize removed a slot of a holder presumed dead", "semaphore", s.name, "slot", i,
						"owner", a.seen.OwnerName)
				}
			}
		}
		if len(above) == 0 {
			if view.meta.span == slots {
				return nil
			}
			if err := s.writeSpan(ctx, slots, version); err != nil {
				return ended(err)
			}
			continue // read once more: nothing may be above it now
		}
		timer := c.clock.NewTimer(c.opts.HeartbeatPeriod)
		select {
		case <-timer.C():
		case <-ctx.Done():
			timer.Stop()
			return ended(nil)
		case <-c.ctx.Done():
			timer.Stop()
			return s.fail(CodeClientShutdown, "the client was closed while the resize waited", nil)
		}
	}
}

// describeSlots names held slots and their owners, for messages.
func describeSlots(s *Semaphore, held []*LockInfo) string {
	parts := make([]string, 0, len(held))
	for _, info := range held {
		i, _ := s.slotOfKey(info.PartitionKey, info.SortKey)
		parts = append(parts, fmt.Sprintf("slot %d (owner %q)", i, info.OwnerName))
	}
	if len(parts) == 1 {
		return parts[0] + " is"
	}
	return strings.Join(parts, ", ") + " are"
}

// writeSize writes slots as the number in force, conditioned on the
// version read; it returns the version written.
func (s *Semaphore) writeSize(ctx context.Context, slots int) (version int, above []*LockInfo, err error) {
	c := s.c
	pk, sk := s.metaKey()
	for {
		view, err := s.read(ctx)
		if err != nil {
			return 0, nil, s.resizeCallError(ctx, "reading the semaphore", err)
		}
		// Every slot index that may be held stays in the span until the
		// resize has seen it free.
		span := slots
		above = above[:0]
		for _, i := range view.held() {
			span = max(span, i+1)
			if i >= slots {
				above = append(above, view.slots[i])
			}
		}
		var seen *wire.SemaphoreMeta
		version = 1
		if m := view.meta; m != nil {
			span = max(span, m.span)
			version = m.resizes + 1
			seen = &wire.SemaphoreMeta{Slots: m.slots, Resizes: m.resizes}
		}
		next := wire.SemaphoreMeta{Slots: slots, Resizes: version}
		if span > slots {
			next.Span = span
		}
		in := c.wire().ResizeSemaphore(pk, sk, seen, next)
		_, err = c.ddb.PutItem(ctx, in, c.callOpts("PutItem")...)
		if err != nil && !wire.ConditionFailed(err) && wire.OutcomeUnknown(err) && s.written(ctx, slots, version) {
			err = nil // the reply was lost (the context ended, say), not the write
		}
		switch {
		case err == nil:
			c.log.Info("ddblock: semaphore resized", "semaphore", s.name, "slots", slots, "resizes", version)
			return version, above, nil
		case wire.ConditionFailed(err):
			continue // another resize or a first Acquire wrote it: read again
		default:
			return 0, nil, s.resizeCallError(ctx, "writing the semaphore's metadata", err)
		}
	}
}

// written reports whether the metadata item holds this resize's write,
// read on a context of its own: the caller's may have ended while the
// write was in flight.
func (s *Semaphore) written(ctx context.Context, slots, version int) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.c.opts.HeartbeatTimeout)
	defer cancel()
	meta, err := s.readMeta(rctx)
	return err == nil && meta != nil && meta.slots == slots && meta.resizes == version
}

// writeSpan drops the span to slots once nothing is held above it,
// conditioned on the resize's own version.
func (s *Semaphore) writeSpan(ctx context.Context, slots, version int) error {
	c := s.c
	pk, sk := s.metaKey()
	_, err := c.ddb.UpdateItem(ctx, c.wire().DropSemaphoreSpan(pk, sk, version), c.callOpts("UpdateItem")...)
	switch {
	case err == nil:
		return nil
	case wire.ConditionFailed(err):
		return s.fail(CodeSemaphoreMismatch, fmt.Sprintf("resized again while this resize to %d slots waited", slots), nil)
	default:
		return s.resizeCallError(ctx, "writing the semaphore's metadata", err)
	}
}

func (s *Semaphore) resizeCallError(ctx context.Context, doing string, err error) error {
	pk, sk := s.metaKey()
	return s.c.classifyCallError(ctx, s.fail, doing, err, pk, sk)
}
