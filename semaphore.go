package ddblock

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// How a semaphore lays out its items. On a table with a sort key, the
// name is the partition key of every item: the slots are the sort keys
// "slot-0" … "slot-(N-1)" and the metadata item is the sort key "slots",
// so that one Query reads them all. On a table keyed by the partition key
// alone they are the partition keys "name#slot-i" and "name#slots".
const (
	// MaxSemaphoreSlots is the most slots a semaphore may have: a waiter
	// reads every slot each retry period, and on a table keyed by the
	// partition key alone that is one GetItem per slot.
	MaxSemaphoreSlots = 1000

	semaphoreSlotPrefix = "slot-"
	semaphoreMetaKey    = "slots"
	semaphorePKOnlySep  = "#"

	// attrSemaphoreSlots holds N in a semaphore's metadata item. That
	// item is not a lock item (no owner, lease or version number), and
	// listings leave it out (see isSemaphoreMeta).
	attrSemaphoreSlots = wire.AttrSemaphoreSlots
	// attrSemaphoreResizes counts the resizes of a semaphore (absent
	// until the first): the version that a resize's write of the
	// metadata item is conditioned on, and the mark that N was set by an
	// operator, which clients asking for another number then follow.
	attrSemaphoreResizes = wire.AttrSemaphoreResizes
	// attrSemaphoreSpan is how many slot indexes may be held while a
	// shrink drains: the old N, above the new one; absent otherwise.
	attrSemaphoreSpan = wire.AttrSemaphoreSpan
)

// Semaphore is a counting semaphore under one name: at most Slots
// holders at once, across every client of the table. Each slot is an
// ordinary lock item, and a held slot is an ordinary [*Lock]: heartbeats,
// danger, Done, Context, fencing tokens (counted per slot) and Release
// all work as for any lock, and so does a python_dynamodb_lock client
// that takes a slot's key.
//
// The number of slots, N, is kept in a metadata item under the name,
// written by the first Acquire with the number given to NewSemaphore. A
// client that asks for another number gets an error of
// CodeSemaphoreMismatch, until N is changed with [Semaphore.Resize] (or
// `ddblock resize`): from then on the metadata item's N is the one in
// force, and every client follows it whatever number it asked for;
// [Semaphore.Slots] says which it last read. See Resize for what a
// change of N guarantees.
//
// A Semaphore is safe for concurrent use; one client may hold several of
// its slots.
type Semaphore struct {
	c    *Client
	name string
	// asked is the number NewSemaphore was given; slots the number in
	// force as last read from the metadata item (asked until then).
	asked int
	slots atomic.Int64
}

// NewSemaphore returns the semaphore of name with slots slots. It makes
// no call to DynamoDB: the number of slots is checked by the first
// Acquire. It refuses, with CodeInvalidArgument, an empty name, a name
// that is not UTF-8 or too long for DynamoDB's keys once a slot's suffix
// is added, and a number of slots below 1 or above [MaxSemaphoreSlots].
func (c *Client) NewSemaphore(name string, slots int) (*Semaphore, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if strings.HasPrefix(name, sessionKeyPrefix) {
		return nil, invalidArg("Name", fmt.Sprintf("names starting with %q are reserved for session items", sessionKeyPrefix))
	}
	if isLineKey(name) {
		return nil, invalidArg("Name", fmt.Sprintf("names starting with %q or %q are reserved for lines of fair waiters", lineKeyPrefix, ticketKeyPrefix))
	}
	if c.isClosed() {
		return nil, &Error{Code: CodeClientShutdown, Message: "the client is closed", PartitionKey: name}
	}
	var errs []error
	if slots < 1 || slots > MaxSemaphoreSlots {
		errs = append(errs, invalidArg("Slots", fmt.Sprintf("must be from 1 to %d, got %d", MaxSemaphoreSlots, slots)))
	}
	switch {
	case name == "":
		errs = append(errs, invalidArg("Name", "must not be empty"))
	case !utf8.ValidString(name):
		errs = append(errs, invalidArg("Name", "is not valid UTF-8"))
	default:
		s := &Semaphore{c: c, name: name}
		if err := s.checkKeys(max(slots, 1)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := &Semaphore{c: c, name: name, asked: slots}
	s.slots.Store(int64(slots))
	return s, nil
}

// checkKeys refuses a name whose keys, with slots slots, would be too
// long for DynamoDB.
func (s *Semaphore) checkKeys(slots int) *Error {
	longest, _ := s.slotKey(slots - 1)
	if meta, _ := s.metaKey(); len(meta) > len(longest) {
		longest = meta
	}
	if len(longest) > maxPartitionKeyBytes {
		return invalidArg("Name", fmt.Sprintf("makes a key of %d bytes (%q…), over DynamoDB's %d",
			len(longest), truncate(longest, 16), maxPartitionKeyBytes))
	}
	return nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Slots returns the semaphore's number of slots: the number in force as
// this Semaphore last read it from the table (by Acquire, TryAcquire,
// Holders or Resize), and until then the number NewSemaphore was given.
// After a Resize by any client it may differ from that number. A nil
// Semaphore has 0.
func (s *Semaphore) Slots() int {
	if s == nil {
		return 0
	}
	return int(s.slots.Load())
}

// slotKey returns slot i's key.
func (s *Semaphore) slotKey(i int) (pk, sk string) {
	if s.c.opts.PartitionKeyOnly {
		return s.name + semaphorePKOnlySep + semaphoreSlotPrefix + strconv.Itoa(i), ""
	}
	return s.name, semaphoreSlotPrefix + strconv.Itoa(i)
}

// metaKey returns the metadata item's key.
func (s *Semaphore) metaKey() (pk, sk string) {
	if s.c.opts.PartitionKeyOnly {
		return s.name + semaphorePKOnlySep + semaphoreMetaKey, ""
	}
	return s.name, semaphoreMetaKey
}

// SlotOf returns the index of the slot that lock holds, and whether
// lock is a slot of this semaphore at all. It reads the lock's key, so it
// also recognizes a slot taken with AcquireLock on the slot's key. The
// index is below Slots() except for a slot held from before a Resize to
// fewer slots.
func (s *Semaphore) SlotOf(lock *Lock) (int, bool) {
	if s.usable() != nil || lock == nil {
		return 0, false
	}
	return s.slotOfKey(lock.pk, lock.sk)
}

func (s *Semaphore) slotOfKey(pk, sk string) (int, bool) {
	var rest string
	if s.c.opts.PartitionKeyOnly {
		var ok bool
		if rest, ok = strings.CutPrefix(pk, s.name+semaphorePKOnlySep); !ok || sk != "" {
			return 0, false
		}
	} else {
		if pk != s.name {
			return 0, false
		}
		rest = sk
	}
	digits, ok := strings.CutPrefix(rest, semaphoreSlotPrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || i >= MaxSemaphoreSlots || strconv.Itoa(i) != digits {
		return 0, false // "slot-01" is not slot 1: only one key per slot
	}
	return i, true
}

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
	opts AcquireOptions
}

func (s *Semaphore) acquire(ctx context.Context, once bool, opts []AcquireOption) (*Lock, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	c := s.c
	o := AcquireOptions{
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

// semaphoreMeta is what a semaphore's metadata item holds.
type semaphoreMeta struct {
	slots   int // N, in force
	span    int // slot indexes that may be held: N, or more while a shrink drains
	resizes int // resizes so far: the item's version
}

// semaphoreView is what one read of a semaphore showed.
type semaphoreView struct {
	meta  *semaphoreMeta // nil: no metadata item
	slots map[int]*LockInfo
}

// held returns the held slots' indexes, in order.
func (v *semaphoreView) held() []int {
	var out []int
	for i, info := range v.slots {
		if info != nil && !info.Released {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// read reads the metadata item and every slot that may be held,
// strongly consistent: one Query (paged) on a table with a sort key,
// which finds every slot item whatever its index; a GetItem each
// without, for the metadata item and then slots 0 to its span (or the
// number asked for, when there is none).
func (s *Semaphore) read(ctx context.Context) (*semaphoreView, error) {
	c := s.c
	view := &semaphoreView{slots: map[int]*LockInfo{}}
	take := func(item map[string]types.AttributeValue) error {
		pk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
		var sk string
		if c.opts.SortKeyName != "" && !c.opts.PartitionKeyOnly {
			v, _ := item[c.opts.SortKeyName].(*types.AttributeValueMemberS)
			if v == nil {
				return nil
			}
			sk = v.Value
		}
		if pk == nil {
			return nil
		}
		if mpk, msk := s.metaKey(); pk.Value == mpk && sk == msk {
			m, err := s.parseMeta(item)
			if err != nil {
				return err
			}
			view.meta = &m
			return nil
		}
		i, ok := s.slotOfKey(pk.Value, sk)
		if !ok {
			return nil // another lock under the same partition key
		}
		info, err := c.codec.decode(item)
		if err != nil {
			return err
		}
		view.slots[i] = info
		return nil
	}
	if c.opts.PartitionKeyOnly {
		meta, err := s.readMeta(ctx)
		if err != nil {
			return nil, err
		}
		view.meta = meta
		span := s.asked
		if meta != nil {
			span = meta.span
		}
		for i := range span {
			pk, sk := s.slotKey(i)
			out, err := c.ddb.GetItem(ctx, c.wire().Get(pk, sk), c.callOpts("GetItem")...)
			if err != nil {
				return nil, err
			}
			if len(out.Item) > 0 {
				if err := take(out.Item); err != nil {
					return nil, err
				}
			}
		}
		return view, nil
	}
	var start map[string]types.AttributeValue
	for {
		out, err := c.ddb.Query(ctx, c.wire().Query(s.name, start), c.callOpts("Query")...)
		if err != nil {
			return nil, err
		}
		for _, item := range out.Items {
			if err := take(item); err != nil {
				return nil, err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return view, nil
		}
		start = out.LastEvaluatedKey
	}
}

// readMeta reads the metadata item alone, strongly consistent; nil when
// there is none.
func (s *Semaphore) readMeta(ctx context.Context) (*semaphoreMeta, error) {
	c := s.c
	pk, sk := s.metaKey()
	out, err := c.ddb.GetItem(ctx, c.wire().Get(pk, sk), c.callOpts("GetItem")...)
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	m, err := s.parseMeta(out.Item)
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// parseMeta reads a metadata item.
func (s *Semaphore) parseMeta(item map[string]types.AttributeValue) (semaphoreMeta, error) {
	m, ok := parseSemaphoreMeta(item)
	if !ok {
		return m, s.parseMetaError()
	}
	return m, nil
}

func (s *Semaphore) parseMetaError() *Error {
	pk, sk := s.metaKey()
	return &Error{Code: CodeInvalidItem, PartitionKey: pk, SortKey: sk,
		Message: fmt.Sprintf("the metadata item of semaphore %q has no whole number from 1 to %d in %q, or a bad %q or %q",
			s.name, MaxSemaphoreSlots, attrSemaphoreSlots, attrSemaphoreSpan, attrSemaphoreResizes)}
}

// parseSemaphoreMeta reads a metadata item; false when it is not a valid
// one.
func parseSemaphoreMeta(item map[string]types.AttributeValue) (semaphoreMeta, bool) {
	number := func(attr string, absent int) (int, bool) {
		v, there := item[attr]
		if !there {
			return absent, true
		}
		n, ok := v.(*types.AttributeValueMemberN)
		if !ok {
			return 0, false
		}
		i, err := strconv.Atoi(strings.TrimSpace(n.Value))
		return i, err == nil
	}
	var m semaphoreMeta
	var ok1, ok2, ok3 bool
	m.slots, ok1 = number(attrSemaphoreSlots, 0)
	m.span, ok2 = number(attrSemaphoreSpan, m.slots)
	m.resizes, ok3 = number(attrSemaphoreResizes, 0)
	if !ok1 || !ok2 || !ok3 || m.slots < 1 || m.slots > MaxSemaphoreSlots || m.resizes < 0 {
		return m, false
	}
	m.span = min(max(m.span, m.slots), MaxSemaphoreSlots)
	return m, true
}

// inForce returns the number of slots in force by the metadata item,
// which this client follows once an operator resized the semaphore;
// before that, a client asking for another number is refused.
func (s *Semaphore) inForce(meta *semaphoreMeta) (int, error) {
	if meta.slots != s.asked && meta.resizes == 0 {
		return 0, s.mismatch(meta.slots)
	}
	s.slots.Store(int64(meta.slots))
	return meta.slots, nil
}

// createMeta writes the metadata item if there is none, and returns the
// one in force: ours, or that of the client that wrote it first.
func (s *Semaphore) createMeta(ctx context.Context) (*semaphoreMeta, error) {
	c := s.c
	pk, sk := s.metaKey()
	_, err := c.ddb.PutItem(ctx, c.wire().CreateSemaphoreMeta(pk, sk, s.asked), c.callOpts("PutItem")...)
	if err == nil {
		return &semaphoreMeta{slots: s.asked, span: s.asked}, nil
	}
	failedOn, failed := wire.FailedItem(err)
	if !failed {
		return nil, err
	}
	if failedOn != nil {
		m, err := s.parseMeta(failedOn)
		return &m, err
	}
	// dynalite does not return the item that failed the condition.
	meta, err := s.readMeta(ctx)
	// nil when it was deleted again in between: the next attempt writes
	// it.
	return meta, err
}

func (s *Semaphore) mismatch(stored int) *Error {
	pk, sk := s.metaKey()
	return &Error{Code: CodeSemaphoreMismatch, PartitionKey: pk, SortKey: sk,
		Message: fmt.Sprintf("semaphore %q has %d slots, not the %d asked for (Resize or `ddblock resize` changes the number, and clients then follow it)",
			s.name, stored, s.asked)}
}

// Holders returns the slots held now, as their lock items say, in slot
// order, read as Acquire reads them (strongly consistent). Like GetLock,
// it tells who holds a slot, not that the holder is alive. Slots at or
// above Slots() are listed too: they are held from before a Resize to
// fewer slots, which waits for them. It does not check the metadata
// item's number against the one asked for, and does not write it.
func (s *Semaphore) Holders(ctx context.Context) ([]*LockInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	view, err := s.read(ctx)
	if err != nil {
		return nil, s.readError(err)
	}
	if view.meta != nil {
		s.slots.Store(int64(view.meta.slots))
	}
	var held []*LockInfo
	for _, i := range view.held() {
		held = append(held, view.slots[i])
	}
	return held, nil
}

// readError classifies a failed read of the semaphore.
func (s *Semaphore) readError(err error) *Error {
	var lerr *Error
	if errors.As(err, &lerr) {
		return lerr
	}
	pk, sk := s.metaKey()
	return s.c.tableError(err, "reading the semaphore", pk, sk)
}

// isSemaphoreMeta reports whether an item is a semaphore's metadata item
// rather than a lock: it carries the number of slots and no version
// number.
func isSemaphoreMeta(item map[string]types.AttributeValue) bool {
	_, slots := item[attrSemaphoreSlots]
	_, rvn := item[attrRVN]
	return slots && !rvn
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

// fail is an error about the semaphore as a whole, keyed by its name.
func (s *Semaphore) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: fmt.Sprintf("semaphore %q: %s", s.name, msg), PartitionKey: s.name, Err: cause}
}

// SemaphoreInfo is a semaphore as its metadata item describes it, from
// [Client.ListSemaphores] or [Client.GetSemaphore].
type SemaphoreInfo struct {
	// Name is the semaphore's name.
	Name string
	// Slots is the number of slots in force.
	Slots int
	// Span is the number of slot indexes that may be held: Slots, or
	// more while a Resize to fewer slots waits for the holders above.
	Span int
	// Resizes counts the resizes so far; 0 when the number is still the
	// one the first Acquire wrote.
	Resizes int
	// Holders are the held slots, in slot order (GetSemaphore only; nil
	// from ListSemaphores).
	Holders []*LockInfo

	pkOnly bool
}

// Slot returns the index of the slot whose lock item has the key
// (partitionKey, sortKey), and whether it is a slot of this semaphore,
// whatever the index (a slot held from before a resize included).
func (i *SemaphoreInfo) Slot(partitionKey, sortKey string) (int, bool) {
	if i == nil {
		return 0, false
	}
	s := &Semaphore{name: i.Name, c: &Client{opts: Options{PartitionKeyOnly: i.pkOnly}}}
	return s.slotOfKey(partitionKey, sortKey)
}

// SemaphoreNameOf returns the name of the semaphore whose metadata item
// would have the key (partitionKey, sortKey) on this client's table, and
// whether the key is one of a metadata item at all. It looks at the key
// alone: [Client.GetSemaphore] reads the item.
func (c *Client) SemaphoreNameOf(partitionKey, sortKey string) (string, bool) {
	if c.usable() != nil {
		return "", false
	}
	if c.opts.PartitionKeyOnly {
		name, ok := strings.CutSuffix(partitionKey, semaphorePKOnlySep+semaphoreMetaKey)
		return name, ok && name != "" && sortKey == ""
	}
	return partitionKey, partitionKey != "" && sortKey == semaphoreMetaKey
}

// GetSemaphore reads the semaphore name: its metadata item and its held
// slots (all of them, those above a shrunk number included), strongly
// consistent, as Acquire reads them. It returns an error of
// CodeLockNotFound when there is no metadata item (no Acquire wrote it),
// and CodeInvalidItem when the item is not a valid one.
func (c *Client) GetSemaphore(ctx context.Context, name string) (*SemaphoreInfo, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	if err := c.usable(); err != nil {
		return nil, err
	}
	if name == "" || !utf8.ValidString(name) {
		return nil, invalidArg("Name", "must be non-empty UTF-8")
	}
	s := &Semaphore{c: c, name: name, asked: 1}
	// The metadata item's key and the first slot's: a name DynamoDB
	// would refuse is refused before any call, as NewSemaphore does.
	if err := s.checkKeys(1); err != nil {
		return nil, err
	}
	view, err := s.read(ctx)
	if err != nil {
		return nil, s.readError(err)
	}
	if view.meta == nil {
		pk, sk := s.metaKey()
		return nil, &Error{Code: CodeLockNotFound, Message: fmt.Sprintf("no semaphore %q: no metadata item", name), PartitionKey: pk, SortKey: sk}
	}
	info := &SemaphoreInfo{Name: name, Slots: view.meta.slots, Span: view.meta.span, Resizes: view.meta.resizes, pkOnly: c.opts.PartitionKeyOnly}
	for _, i := range view.held() {
		info.Holders = append(info.Holders, view.slots[i])
	}
	return info, nil
}

// ListSemaphores returns every semaphore in the table, from its metadata
// item, with one strongly consistent Scan (paged) that returns only
// metadata items; Holders is left nil (ListLocks lists the slots, which
// [SemaphoreInfo.Slot] recognizes). An invalid metadata item yields a
// CodeInvalidItem error and the listing goes on; a failed call yields
// its error and ends the listing.
func (c *Client) ListSemaphores(ctx context.Context) iter.Seq2[*SemaphoreInfo, error] {
	if err := c.usable(); err != nil {
		return func(yield func(*SemaphoreInfo, error) bool) { yield(nil, err) }
	}
	if err := checkContext(ctx); err != nil {
		return func(yield func(*SemaphoreInfo, error) bool) { yield(nil, err) }
	}
	return func(yield func(*SemaphoreInfo, error) bool) {
		var start map[string]types.AttributeValue
		for {
			out, err := c.ddb.Scan(ctx, c.wire().ScanSemaphores(start), c.callOpts("Scan")...)
			if err != nil {
				yield(nil, c.tableError(err, "listing semaphores", "", ""))
				return
			}
			for _, item := range out.Items {
				pk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
				var sk string
				if !c.opts.PartitionKeyOnly {
					v, _ := item[c.opts.SortKeyName].(*types.AttributeValueMemberS)
					if v != nil {
						sk = v.Value
					}
				}
				if pk == nil {
					continue
				}
				name, ok := c.SemaphoreNameOf(pk.Value, sk)
				if !ok {
					continue
				}
				m, ok := parseSemaphoreMeta(item)
				var info *SemaphoreInfo
				var ierr error
				if ok {
					info = &SemaphoreInfo{Name: name, Slots: m.slots, Span: m.span, Resizes: m.resizes, pkOnly: c.opts.PartitionKeyOnly}
				} else {
					ierr = (&Semaphore{c: c, name: name}).parseMetaError()
				}
				if !yield(info, ierr) {
					return
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				return
			}
			start = out.LastEvaluatedKey
		}
	}
}
