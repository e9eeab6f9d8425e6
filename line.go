package ddblock

import (
	"context"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// A line is where fair waiters of one key wait their turn
// ([WithFairWaiting]). It answers one question for an acquisition: may
// this waiter try to take the lock now? It never decides who holds the
// lock.
//
// The line of a lock is one item of the lock table, at partition key
// "ddblock_line#" + the lock's partition key and the lock's sort key
// (for a semaphore: the key of its metadata item). It holds the tickets
// in arrival order, each {id, owner, when it came (wall clock, shown
// only), grace}, and the set of their ids. Listings leave it out: it is
// not a lock.
//
//   - Coming: one UpdateItem appends the ticket, on the condition that
//     its id is not in the set already, so that a retry of an append
//     whose reply was lost does not append it twice (the retry fails its
//     condition, which says the ticket is in). DynamoDB applies the
//     appends of one item one after another: the line is in the order
//     the appends landed.
//   - Waiting: every retry period the waiter reads the line. Only the
//     first ticket (the head) goes on to try the lock, by the
//     acquisition's own rules (a free lock is put; a held one is read
//     and taken over only after standing unchanged for its lease on the
//     waiter's own monotonic clock). The head tries four times a period
//     (headPolls), reading the line at most once a period: every place
//     in line costs one handoff, from the holder's release to the head
//     seeing it, and with one look a period that is half a period on
//     average. The second in line also reads the lock once a period, to
//     time the head. The others read the line alone.
//   - Leaving: after winning, or giving up, the waiter removes its
//     ticket with one conditional write (DeleteItem when it is alone).
//   - A head that does not take its turn: the second in line remembers
//     when it first saw the same head before the same lock state (the
//     lock item's version number, or "free", and for a lock on a
//     session its session item's version). Once that pair has stood,
//     on the second's own monotonic clock, for the head's grace when
//     the lock is free, or for the lock's lease (the session's lease for
//     a lock on a session) plus that grace when it is held, the second
//     removes the head, conditioned on the head still being first. A
//     live head reads the lock at least once per retry period and the
//     grace is three of its retry periods and a second: it has taken a
//     free lock, or a dead holder's, before then. A killed, paused or
//     closed head so loses its place within that bound; a waiter that
//     finds its ticket gone comes again at the back.
//
// Safety: mutual exclusion rests only on the lock item's conditional
// put, as for every acquire: the line decides who tries, never who
// holds. Two heads at once (a removed head that wakes and tries, and
// the new head) are two waiters racing for one conditional put, which
// at most one wins; so are a head and a client that does not wait in
// line (ddblock without WithFairWaiting, python_dynamodb_lock): those
// never read the line, and may take the lock ahead of it.
//
// Liveness: a live head tries at least once per retry period; a dead
// one is removed after a bounded time; the head's removal needs a live
// second in line, and when the second is dead too it is removed in its
// turn by the next one. Writes per wait: the append, the removal of the
// waiter's own ticket, and, rarely, the removal of a head that did not
// take its turn or a second append after losing its place. Reads: one
// of the line per retry period each, and of the lock four a period for
// the head and one for the second.

const (
	// lineKeyPrefix starts every line item's partition key; lock keys
	// and semaphore names may not start with it.
	lineKeyPrefix = "ddblock_line#"
	// attrLine holds a line's tickets (L of M); attrLineIDs the set of
	// their ids (SS).
	attrLine    = wire.AttrLine
	attrLineIDs = wire.AttrLineIDs
	// A ticket's fields.
	ticketID    = wire.TicketID
	ticketOwner = wire.TicketOwner
	ticketSince = wire.TicketSince
	ticketGrace = wire.TicketGrace
	// maxLine is the most tickets a line takes: a waiter that finds it
	// full waits for a place without one, reading only.
	maxLine = 500
	// lineTTL is how far ahead a line item's TTL goes at each append: a
	// line whose waiters all died is deleted by DynamoDB after it.
	lineTTL = 24 * time.Hour
)

func isLineKey(pk string) bool { return strings.HasPrefix(pk, lineKeyPrefix) }

// isLineItem reports whether an item is a line rather than a lock.
func isLineItem(item map[string]types.AttributeValue) bool {
	if _, ok := item[attrLine]; ok {
		return true
	}
	_, ok := item[attrLineIDs]
	return ok
}

// Ticket is one fair waiter's place in a line, as [Client.ListLines]
// shows it.
type Ticket struct {
	// ID identifies the waiting call.
	ID string
	// OwnerName is the waiting client's owner name.
	OwnerName string
	// Since is when the waiter came, on its wall clock. It is shown
	// only: nothing is decided by it.
	Since time.Time
	// Grace is how long the waiter may leave a free lock untaken while
	// first in line before the next waiter removes it.
	Grace time.Duration
}

// LineInfo is the line of fair waiters of one lock or semaphore.
type LineInfo struct {
	// PartitionKey and SortKey are the lock's key (for a semaphore, the
	// key of its metadata item).
	PartitionKey string
	SortKey      string
	// Tickets are the waiters in their order: the first may try next.
	Tickets []Ticket
}

// line is one fair waiter's place in the line of one key.
type line struct {
	c      *Client
	pk, sk string // the line item's key
	ticket Ticket
	// entered: an append of the ticket was made. index is the place
	// last seen, -1 when not in the line (or not known); alone: the line
	// had this ticket only.
	entered bool
	index   int
	alone   bool
	// period is the waiter's retry period; readSent when its last read
	// of the line (or append) that answered was sent, monotonic.
	period   time.Duration
	readSent time.Duration
	// The second in line's watch of the head: the pair it saw, when it
	// first saw it (monotonic, after the reply), and the sending of the
	// latest read that showed it still.
	watched   string
	firstSeen time.Duration
	lastSent  time.Duration
}

// headLook is what the second in line saw of what the head waits for.
type headLook struct {
	state string        // the lock's version numbers ("-": free)
	free  bool          // something could be taken at once
	lease time.Duration // how long a held state may stand before a takeover
}

// lineKeyFor is the line item's key for a lock's key.
func lineKeyFor(pk, sk string) (string, string) { return lineKeyPrefix + pk, sk }

func (c *Client) newLine(pk, sk string, retryPeriod time.Duration) *line {
	lpk, lsk := lineKeyFor(pk, sk)
	return &line{c: c, pk: lpk, sk: lsk, index: -1, period: retryPeriod, ticket: Ticket{
		ID:        newRecordVersionNumber(),
		OwnerName: c.opts.OwnerName,
		Since:     c.clock.Now(),
		Grace:     3*retryPeriod + time.Second,
	}}
}

// checkLineKey refuses a key whose line key would be too long.
func checkLineKey(pk string) error {
	if len(lineKeyPrefix)+len(pk) > maxPartitionKeyBytes {
		return invalidArg("PartitionKey", fmt.Sprintf("is %d bytes: with fair waiting its line's key would be over DynamoDB's %d", len(pk), maxPartitionKeyBytes))
	}
	return nil
}

// turn reads the line and reports whether this waiter may try now: it
// is first in line. It comes into the line when not in it, and, second
// in line, removes a head that let its turn pass (look tells what the
// head waits for).
func (l *line) turn(ctx context.Context, look func(context.Context) (headLook, error)) (bool, error) {
	if !l.entered {
		// The first turn comes into the line at once: the append's
		// reply tells the place. Once tried, the ticket may be in, even
		// when the call failed: leave looks for it.
		l.entered = true
		sent := l.c.clock.Monotonic()
		n, err := l.enqueue(ctx)
		if err != nil {
			return false, err
		}
		l.readSent = sent
		l.index, l.alone = n-1, n == 1
		return l.index == 0, nil
	}
	sent := l.c.clock.Monotonic()
	if l.index == 0 && sent-l.readSent < l.period {
		// First in line, as read less than a period ago: only the next
		// waiter can take that place, and only after a grace of three
		// periods (see the head's removal above). The head tries
		// headPolls times a period and reads the line once.
		return true, nil
	}
	tickets, err := l.read(ctx)
	if err != nil {
		return false, err
	}
	l.readSent = sent
	l.index, l.alone = -1, len(tickets) == 1
	for i, t := range tickets {
		if t.ID == l.ticket.ID {
			l.index = i
		}
	}
	switch {
	case l.index == 0:
		return true, nil
	case l.index < 0 && len(tickets) >= maxLine:
		return false, nil // full: wait for a place
	case l.index < 0:
		// Removed (after letting a turn pass, or by the line's TTL):
		// come again, at the back.
		n, err := l.enqueue(ctx)
		if err != nil {
			return false, err
		}
		l.index, l.alone = n-1, n == 1
		return l.index == 0, nil
	case l.index > 1:
		l.watched = ""
		return false, nil
	}
	// Second in line: time the head.
	head := tickets[0]
	hl, err := look(ctx)
	if err != nil {
		return false, err
	}
	pair := head.ID + " " + hl.state
	now := l.c.clock.Monotonic()
	if pair != l.watched {
		l.watched, l.firstSeen, l.lastSent = pair, now, sent
		return false, nil
	}
	l.lastSent = max(l.lastSent, sent)
	limit := head.Grace
	if !hl.free {
		limit += hl.lease
	}
	if l.lastSent-l.firstSeen < limit {
		return false, nil
	}
	removed, err := l.remove(ctx, head.ID, 0, false)
	if err != nil || !removed {
		return false, err
	}
	l.c.log.Info("ddblock: removed a fair waiter that let its turn pass", "line", l.pk, "waiter", head.OwnerName)
	// Alone now if the line was the head and this waiter: then leaving
	// takes the item with it (should someone have come since, that
	// delete fails its condition and leave removes the ticket alone).
	l.watched, l.index, l.alone = "", 0, len(tickets) == 2
	return true, nil
}

// first reports whether the waiter was first in line when it last
// looked.
func (l *line) first() bool { return l != nil && l.entered && l.index == 0 }

// read reads the line's tickets, strongly consistent.
func (l *line) read(ctx context.Context) ([]Ticket, error) {
	out, err := l.c.ddb.GetItem(ctx, l.c.wire().Get(l.pk, l.sk), l.c.callOpts("GetItem")...)
	if err != nil {
		return nil, err
	}
	return decodeTickets(out.Item), nil
}

func decodeTickets(item map[string]types.AttributeValue) []Ticket {
	list, _ := item[attrLine].(*types.AttributeValueMemberL)
	if list == nil {
		return nil
	}
	tickets := make([]Ticket, 0, len(list.Value))
	for _, v := range list.Value {
		m, _ := v.(*types.AttributeValueMemberM)
		if m == nil {
			continue
		}
		var t Ticket
		if s, ok := m.Value[ticketID].(*types.AttributeValueMemberS); ok {
			t.ID = s.Value
		}
		if s, ok := m.Value[ticketOwner].(*types.AttributeValueMemberS); ok {
			t.OwnerName = s.Value
		}
		if n, ok := m.Value[ticketSince].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				t.Since = time.UnixMilli(ms)
			}
		}
		if n, ok := m.Value[ticketGrace].(*types.AttributeValueMemberN); ok {
			if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil && ms >= 0 {
				t.Grace = time.Duration(ms) * time.Millisecond
			}
		}
		tickets = append(tickets, t)
	}
	return tickets
}

// enqueue appends the ticket and returns the line's length after it;
// 0 when its condition failed: the ticket was in already (a retry of an
// append whose reply was lost), or the line is full. The next turn reads
// which.
func (l *line) enqueue(ctx context.Context) (int, error) {
	c := l.c
	t := wire.Ticket{ID: l.ticket.ID, Owner: l.ticket.OwnerName, Since: l.ticket.Since, Grace: l.ticket.Grace}
	in := c.wire().Enqueue(l.pk, l.sk, t, maxLine, c.clock.Now().Add(lineTTL))
	out, err := c.ddb.UpdateItem(ctx, in, c.callOpts("UpdateItem")...)
	if wire.ConditionFailed(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	tickets := decodeTickets(out.Attributes)
	for i, t := range tickets {
		if t.ID == l.ticket.ID {
			return i + 1, nil
		}
	}
	return len(tickets), nil
}

// remove takes ticket id out of the line at index i, on the condition
// that it is there; false when it was not (the line moved). A ticket
// alone in the line goes with the item.
func (l *line) remove(ctx context.Context, id string, i int, alone bool) (bool, error) {
	c := l.c
	var err error
	if i == 0 && alone {
		// Alone when last seen: the item goes. Should someone have come
		// since, this fails its condition and the ticket is removed from
		// the list below.
		_, err = c.ddb.DeleteItem(ctx, c.wire().DeleteLine(l.pk, l.sk, id), c.callOpts("DeleteItem")...)
		if err == nil {
			return true, nil
		}
		if !wire.ConditionFailed(err) {
			return false, err
		}
	}
	out, err := c.ddb.UpdateItem(ctx, c.wire().Dequeue(l.pk, l.sk, id, i), c.callOpts("UpdateItem")...)
	if wire.ConditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if list, ok := out.Attributes[attrLine].(*types.AttributeValueMemberL); ok && len(list.Value) == 0 {
		// This removal emptied the line (whoever made it thought others
		// were in it): the item goes too, unless someone came since.
		// Best effort: an empty line left behind goes with its TTL.
		if _, err := c.ddb.DeleteItem(ctx, c.wire().DeleteEmptyLine(l.pk, l.sk), c.callOpts("DeleteItem")...); err != nil && !wire.ConditionFailed(err) {
			c.log.Warn("ddblock: could not delete an empty fair waiters' line; it goes with its TTL", "line", l.pk, "err", err)
		}
	}
	return true, nil
}

// leave takes this waiter's ticket out of the line, best effort, on a
// context of its own: the caller's may have ended. It tries where the
// ticket was last seen, and reads the line again when that fails.
func (l *line) leave() {
	if l == nil || !l.entered {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.c.ctx), l.c.opts.HeartbeatTimeout)
	defer cancel()
	i := l.index
	for tries := 0; tries < 3; tries++ {
		if i >= 0 {
			removed, err := l.remove(ctx, l.ticket.ID, i, l.alone)
			if err != nil {
				break
			}
			if removed {
				return
			}
		}
		tickets, err := l.read(ctx)
		if err != nil {
			break
		}
		i, l.alone = -1, len(tickets) == 1
		for k, t := range tickets {
			if t.ID == l.ticket.ID {
				i = k
			}
		}
		if i < 0 {
			return // gone already: removed by another, or never in
		}
	}
	l.c.log.Warn("ddblock: could not leave a fair waiters' line; the next waiter removes the ticket once it has had its turn", "line", l.pk)
}

// lockLook is what the second in line sees of a lock: its version
// number, and for a lock on a session the session item's, read through
// the acquisition (whose record of the lock it also brings up to date).
func (a *acquisition) lockLook(ctx context.Context) (headLook, error) {
	info, err := a.c.readItem(ctx, a.pk, a.opts.SortKey)
	if err == nil {
		err = a.look(ctx, info)
	}
	if err != nil {
		return headLook{}, err
	}
	return lookOf(a.seen), nil
}

func lookOf(info *LockInfo) headLook {
	if info == nil || info.Released {
		return headLook{state: "-", free: true}
	}
	hl := headLook{state: info.RecordVersionNumber, lease: info.LeaseDuration}
	if s := info.Session; s != nil {
		hl.lease = s.LeaseDuration
		if s.Item != nil {
			hl.state += "/" + s.Item.RecordVersionNumber
		} else {
			hl.state += "/-"
		}
	}
	return hl
}

// semaphoreLook is what the second in line sees of a semaphore: every
// slot's state; free when one slot is.
func (sa *semaphoreAcquire) semaphoreLook(ctx context.Context) (headLook, error) {
	view, err := sa.s.read(ctx)
	if err != nil {
		return headLook{}, err
	}
	var b strings.Builder
	var hl headLook
	for i, info := range view.slots {
		a := sa.slotAcquisition(i)
		if err := a.look(ctx, info); err != nil {
			return headLook{}, err
		}
		sl := lookOf(a.seen)
		hl.free = hl.free || sl.free
		hl.lease = max(hl.lease, sl.lease)
		b.WriteString(sl.state)
		b.WriteByte(',')
	}
	hl.state = b.String()
	return hl, nil
}

// Line reads the line of fair waiters of the lock on (partitionKey,
// sortKey) (an empty sortKey means the default): its tickets in order,
// none when nobody waits in line. For a semaphore's line, pass the key
// of its metadata item.
func (c *Client) Line(ctx context.Context, partitionKey, sortKey string) (*LineInfo, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	sortKey = c.defaultSortKey(sortKey)
	l := &line{c: c}
	l.pk, l.sk = lineKeyFor(partitionKey, sortKey)
	tickets, err := l.read(ctx)
	if err != nil {
		return nil, c.tableError(err, "reading the line of fair waiters", partitionKey, sortKey)
	}
	return &LineInfo{PartitionKey: partitionKey, SortKey: sortKey, Tickets: tickets}, nil
}

// Line reads the line of the semaphore's fair waiters (see
// [Client.Line]).
func (s *Semaphore) Line(ctx context.Context) (*LineInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	pk, sk := s.metaKey()
	return s.c.Line(ctx, pk, sk)
}

// ListLines returns the line of fair waiters of every key that has one,
// with a strongly consistent Scan of the table (lines are not listed by
// [Client.ListLocks]).
func (c *Client) ListLines(ctx context.Context) iter.Seq2[*LineInfo, error] {
	return func(yield func(*LineInfo, error) bool) {
		if err := c.usable(); err != nil {
			yield(nil, err)
			return
		}
		if err := checkContext(ctx); err != nil {
			yield(nil, err)
			return
		}
		var start map[string]types.AttributeValue
		for {
			out, err := c.ddb.Scan(ctx, c.wire().Scan(start))
			if err != nil {
				yield(nil, c.tableError(err, "listing lines", "", ""))
				return
			}
			for _, item := range out.Items {
				if !isLineItem(item) {
					continue
				}
				pk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
				if pk == nil || !isLineKey(pk.Value) {
					continue
				}
				info := &LineInfo{PartitionKey: strings.TrimPrefix(pk.Value, lineKeyPrefix), Tickets: decodeTickets(item)}
				if c.opts.SortKeyName != "" && !c.opts.PartitionKeyOnly {
					if sk, ok := item[c.opts.SortKeyName].(*types.AttributeValueMemberS); ok {
						info.SortKey = sk.Value
					}
				}
				if !yield(info, nil) {
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
