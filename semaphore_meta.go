package ddblock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// A semaphore's metadata item: the number of slots in force, the
// version of the last resize and the span of slots that may still be
// held; and reading the metadata with the slots in one Query.

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
