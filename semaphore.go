package ddblock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

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

// fail is an error about the semaphore as a whole, keyed by its name.
func (s *Semaphore) fail(code Code, msg string, cause error) *Error {
	return &Error{Code: code, Message: fmt.Sprintf("semaphore %q: %s", s.name, msg), PartitionKey: s.name, Err: cause}
}
