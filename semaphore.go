package ddblock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
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
	attrSemaphoreSlots = "ddblock_semaphore_slots"
)

// Semaphore is a counting semaphore under one name: at most Slots
// holders at once, across every client of the table. Each slot is an
// ordinary lock item, and a held slot is an ordinary [*Lock]: heartbeats,
// danger, Done, Context, fencing tokens (counted per slot) and Release
// all work as for any lock, and so does a python_dynamodb_lock client
// that takes a slot's key.
//
// The number of slots is kept in a metadata item under the name, written
// once by the first Acquire; a client that asks for another number gets
// an error of CodeSemaphoreMismatch. To change the number, stop every
// holder, delete the metadata item (sort key "slots", or partition key
// "name#slots" on a table without a sort key) and start the clients with
// the new number: the first Acquire writes it again. Slots above the new
// number that are still held are not counted, which is why every holder
// must be stopped first.
//
// A Semaphore is safe for concurrent use; one client may hold several of
// its slots.
type Semaphore struct {
	c     *Client
	name  string
	slots int
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
		return nil, invalidArg("Name", fmt.Sprintf("names starting with %q are reserved for lines of fair waiters", lineKeyPrefix))
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
		s := &Semaphore{c: c, name: name, slots: max(slots, 1)}
		longest, _ := s.slotKey(s.slots - 1)
		if meta, _ := s.metaKey(); len(meta) > len(longest) {
			longest = meta
		}
		if len(longest) > maxPartitionKeyBytes {
			errs = append(errs, invalidArg("Name", fmt.Sprintf("makes a key of %d bytes (%q…), over DynamoDB's %d",
				len(longest), truncate(longest, 16), maxPartitionKeyBytes)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Semaphore{c: c, name: name, slots: slots}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Slots returns the semaphore's number of slots.
func (s *Semaphore) Slots() int {
	if s == nil {
		return 0
	}
	return s.slots
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

// SlotOf returns the index of the slot that lock holds, from 0 to
// Slots()-1, and whether lock is a slot of this semaphore at all. It
// reads the lock's key, so it also recognizes a slot taken with
// AcquireLock on the slot's key.
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
	if err != nil || i < 0 || i >= s.slots || strconv.Itoa(i) != digits {
		return 0, false // "slot-01" is not slot 1: only one key per slot
	}
	return i, true
}

// Acquire takes a free slot, or waits for one under the rules of
// AcquireLock: the retry period and retry timeout options, the
// context's deadline, and the same errors (CodeAcquireTimeout,
// CodeCanceled, CodeClientShutdown, CodeInvalidArgument,
// CodeTableNotFound, CodeInvalidItem, …), plus CodeSemaphoreMismatch when
// the semaphore was made with another number of slots.
//
// Waiting costs reads only: each retry period it reads every slot and
// the metadata item with one strongly consistent Query (a GetItem each
// on a table without a sort key), and it writes only to a slot that the
// read showed free (no item, or one kept after its release), or whose
// holder is presumed dead: the same record version number seen unchanged
// for the slot's lease on this client's clock (or stale by its stamp,
// with [Options.MaxClockSkew]). Contenders start at a random slot, so
// that they do not all race for the first free one.
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
	line *line // the semaphore's line of fair waiters; nil unless fair
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
	if o.FairWaiting && !once {
		// One line for the semaphore, at its metadata item's key: its
		// head takes any free slot.
		mpk, msk := s.metaKey()
		if err := checkLineKey(mpk); err != nil {
			return nil, err
		}
		sa.line = c.newLine(mpk, msk, o.RetryPeriod)
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
	switch {
	case view.meta == nil:
		// No slot is written before the number of slots is settled: two
		// clients with different numbers race for this one item, and
		// the loser learns the winner's number.
		if err := s.createMeta(ctx); err != nil {
			return nil, sa.callError(ctx, "writing the semaphore's metadata", err)
		}
	case *view.meta != s.slots:
		return nil, s.mismatch(*view.meta)
	}
	// Every slot's observation is brought up to date, whether or not it
	// is tried this round: a dead holder's lease is timed from the first
	// sight of its version number.
	first := rand.IntN(s.slots)
	var free, stale []*acquisition
	for k := range s.slots {
		i := (first + k) % s.slots
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
		if lock != nil || err != nil {
			return lock, err
		}
	}
	return nil, nil
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

// semaphoreView is what one read of a semaphore showed.
type semaphoreView struct {
	meta  *int        // the metadata item's number of slots; nil: no item
	slots []*LockInfo // by index; nil: no item
}

// read reads the metadata item and every slot, strongly consistent: one
// Query (paged) on a table with a sort key, a GetItem each without.
func (s *Semaphore) read(ctx context.Context) (*semaphoreView, error) {
	c := s.c
	view := &semaphoreView{slots: make([]*LockInfo, s.slots)}
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
			n, err := s.parseMeta(item)
			if err != nil {
				return err
			}
			view.meta = &n
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
		keys := make([][2]string, 0, s.slots+1)
		mpk, msk := s.metaKey()
		keys = append(keys, [2]string{mpk, msk})
		for i := range s.slots {
			pk, sk := s.slotKey(i)
			keys = append(keys, [2]string{pk, sk})
		}
		for _, k := range keys {
			out, err := c.ddb.GetItem(ctx, &dynamodb.GetItemInput{
				TableName:      aws.String(c.opts.TableName),
				Key:            c.codec.key(k[0], k[1]),
				ConsistentRead: aws.Bool(true),
			}, c.throttleWatch("GetItem")...)
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
		out, err := c.ddb.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(c.opts.TableName),
			ConsistentRead:            aws.Bool(true),
			KeyConditionExpression:    aws.String(namePK + " = :name"),
			ExpressionAttributeNames:  map[string]string{namePK: c.opts.PartitionKeyName},
			ExpressionAttributeValues: map[string]types.AttributeValue{":name": &types.AttributeValueMemberS{Value: s.name}},
			ExclusiveStartKey:         start,
		}, c.throttleWatch("Query")...)
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

// parseMeta reads N from a metadata item.
func (s *Semaphore) parseMeta(item map[string]types.AttributeValue) (int, error) {
	v, ok := item[attrSemaphoreSlots].(*types.AttributeValueMemberN)
	if ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v.Value)); err == nil && n >= 1 {
			return n, nil
		}
	}
	pk, sk := s.metaKey()
	return 0, &Error{Code: CodeInvalidItem, PartitionKey: pk, SortKey: sk,
		Message: fmt.Sprintf("the semaphore's metadata item has no positive whole number in %q", attrSemaphoreSlots)}
}

// createMeta writes the metadata item if there is none. When another
// client wrote it first, it checks that client's number against ours.
func (s *Semaphore) createMeta(ctx context.Context) error {
	c := s.c
	pk, sk := s.metaKey()
	item := c.codec.key(pk, sk)
	item[attrSemaphoreSlots] = &types.AttributeValueMemberN{Value: strconv.Itoa(s.slots)}
	_, err := c.ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(c.opts.TableName),
		Item:                                item,
		ConditionExpression:                 aws.String(condNew),
		ExpressionAttributeNames:            map[string]string{namePK: c.opts.PartitionKeyName},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, c.throttleWatch("PutItem")...)
	var ccf *types.ConditionalCheckFailedException
	if err == nil || !errors.As(err, &ccf) {
		return err
	}
	existing := ccf.Item
	if existing == nil {
		// dynalite does not return the item that failed the condition.
		out, err := c.ddb.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      aws.String(c.opts.TableName),
			Key:            c.codec.key(pk, sk),
			ConsistentRead: aws.Bool(true),
		}, c.throttleWatch("GetItem")...)
		if err != nil {
			return err
		}
		if len(out.Item) == 0 {
			// Deleted again in between (an operator changing N): the
			// next attempt writes it.
			return nil
		}
		existing = out.Item
	}
	n, err := s.parseMeta(existing)
	if err != nil {
		return err
	}
	if n != s.slots {
		return s.mismatch(n)
	}
	return nil
}

func (s *Semaphore) mismatch(stored int) *Error {
	pk, sk := s.metaKey()
	return &Error{Code: CodeSemaphoreMismatch, PartitionKey: pk, SortKey: sk,
		Message: fmt.Sprintf("semaphore %q has %d slots, not the %d asked for (delete its metadata item to change the number once no slot is held)",
			s.name, stored, s.slots)}
}

// Holders returns the slots held now, as their lock items say, in slot
// order, read as Acquire reads them (strongly consistent). Like GetLock,
// it tells who holds a slot, not that the holder is alive. It does not
// check the metadata item's number, and does not write it.
func (s *Semaphore) Holders(ctx context.Context) ([]*LockInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	view, err := s.read(ctx)
	if err != nil {
		var lerr *Error
		if errors.As(err, &lerr) {
			return nil, lerr
		}
		pk, sk := s.metaKey()
		return nil, s.c.tableError(err, "reading the semaphore", pk, sk)
	}
	var held []*LockInfo
	for _, info := range view.slots {
		if info != nil && !info.Released {
			held = append(held, info)
		}
	}
	return held, nil
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
		return sa.fail(CodeLockHeld, fmt.Sprintf("all %d slots are held", sa.s.slots), nil)
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
