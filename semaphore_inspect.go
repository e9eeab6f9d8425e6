package ddblock

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Inspecting semaphores from outside: who holds the slots, and the
// semaphores in a table.

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

// slot returns the index of the slot whose lock item has the key
// (partitionKey, sortKey), and whether it is a slot of this semaphore,
// whatever the index (a slot held from before a resize included). The
// ddblock command reaches it through internal/hooks; the API's one slot
// mapper is [Semaphore.SlotOf].
func (i *SemaphoreInfo) slot(partitionKey, sortKey string) (int, bool) {
	if i == nil {
		return 0, false
	}
	s := &Semaphore{name: i.Name, c: &Client{opts: Options{PartitionKeyOnly: i.pkOnly}}}
	return s.slotOfKey(partitionKey, sortKey)
}

// semaphoreNameOf returns the name of the semaphore whose metadata item
// would have the key (partitionKey, sortKey) on this client's table, and
// whether the key is one of a metadata item at all. It looks at the key
// alone: [Client.GetSemaphore] reads the item. The ddblock command
// reaches it through internal/hooks.
func (c *Client) semaphoreNameOf(partitionKey, sortKey string) (string, bool) {
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
				name, ok := c.semaphoreNameOf(pk.Value, sk)
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
