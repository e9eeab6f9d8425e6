package ddblock

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/wire"
)

// A line is where fair waiters of one key wait their turn
// ([WithFairWaiting]). It answers one question for an acquisition: may
// this waiter try to take the lock now? It never decides who holds the
// lock.
//
// A line is a ticket dispenser and a "now serving" sign, kept in one
// small item, and one ticket item per waiter:
//
//   - The counter item, at partition key "ddblock_line#" + the lock's
//     partition key and the lock's sort key (for a semaphore: the key of
//     its metadata item), holds the line's generation (a random string,
//     fresh each time the item is created), the last number handed out
//     (next) and the number whose turn it is (serving). DynamoDB applies
//     the updates of one item one after another, so numbers are handed
//     out in the order the waiters came, once each.
//   - A waiter's ticket item, at "ddblock_wait#" + generation + "#" +
//     number + "#" + the lock's partition key (and the lock's sort key),
//     says who waits: the waiter's id, owner name, arrival (shown only),
//     grace, and the partition key of its client's session item. Nothing
//     is ever edited by position: a waiter writes and deletes only its
//     own ticket, and the counter moves only by conditional writes on
//     the number read.
//
// Coming: one UpdateItem takes the next number (creating the line, with
// a fresh generation, if there is none). A waiter whose number is being
// served at once tries the lock at once and writes no ticket unless it
// has to wait; any other writes its ticket, after starting its client's
// session (session.go), which its ticket names. A retried take whose
// first reply was lost leaves a number nobody holds: it is skipped like
// a waiter that left (below).
//
// Waiting: the fair waiters of one key in one client form a room
// (lineRoom): only the one with the lowest number, the lead, reads the
// counter, once per retry period (headPolls times when it is next in
// line: the head hands the turn on as soon as it has the lock, often
// less than a period before its release); it wakes the others when their turn
// comes, when they were skipped, or when the line was reset. The others
// make no call and use no CPU while they wait: a handoff costs the same
// whatever the number of waiters behind. The waiter whose number is
// served (the head) tries the lock by the acquisition's own rules (a free
// lock is put; a held one is taken over only after standing unchanged for
// its lease on the head's own monotonic clock), headPolls times a period.
//
// Leaving: the head, after winning or giving up, gives the turn to the
// next number, conditioned on still being served; when nobody came
// after it, it deletes the counter instead, conditioned on nobody having
// come. It then skips the next tickets that are gone, and deletes the
// counter when all are. Any waiter that leaves deletes its own ticket
// (conditioned on its id); one that did not know itself served reads the
// counter once more, to hand on, or, the last with only gone tickets
// ahead, to delete the line. A delete that fails is tried again at the
// client's session heartbeats; until then the ticket counts as gone to
// this client.
//
// A turn not taken: the lead of every room behind the head inspects the
// front at each look at which the served number stood still since the
// previous one (when its own number is at most nearFront behind; further
// back, at the first such look and then once per half its grace). It
// reads the tickets from the served number up to its own (maxInspect at
// a time, the next window at once when one was dead throughout) and the
// session item each names, and skips, with one conditional write of
// "serving", every ticket at the front of the line that is:
//
//   - gone (absent: its waiter left or never wrote it) or unreadable
//     (another writer's garbage), or this client's own abandoned one;
//   - of a session that is gone, or whose version the client has seen
//     stand for the ticket's grace (observations.sessionStill): its
//     client is dead or paused, together with all its tickets. The grace
//     (fairGrace) is past its client's heartbeat pace. This judges turns
//     only: the session's item is deleted, and locks on it are taken over,
//     only once it stood for the session's lease;
//   - the head, when the pair (head, lock state) has stood on the
//     inspector's monotonic clock for the head's grace while the lock
//     was free, or for the lock's lease plus that grace while it was
//     held: a live head reads the lock four times a retry period, and
//     its grace is over three of them. Tickets right behind it of the
//     same session go with it.
//
// A set of keys that waits fairly (AcquireLocks, lockset.go) stands in
// the lines of its keys one after another, in lock-id order, and keeps
// the head of each earlier line (stillHead) while it waits in the next:
// every set climbs in the same order, so no two wait for each other. Its
// tickets carry its set wait (its retry timeout), which the inspectors
// add to the head's grace in the third rule: a live set at the head of
// a line may leave that lock free while it waits for its later keys. A
// dead set's tickets go by the second rule, as any waiter's.
//
// A waiter that finds its number skipped (the served number is past it)
// deletes its ticket and takes a new number, at the back. A counter that
// is not one ddblock could have written is deleted on the condition that
// it still is not, and a new line starts.
//
// The bound (lineBound): once the lock stands free, a live fair waiter
// whose every predecessor in line is dead, gone, cancelled, paused or
// garbled gets its turn within two graces and three retry periods: the
// watch of the head or of the dead sessions (a grace), for a lead far
// back half a grace before its first inspection and half a grace between
// two, and three periods of looks; however many are dead, and wherever
// they stand. Behind a live set's head the wait is longer by that set's
// own wait in its later lines, at most its set wait.
//
// Safety: mutual exclusion rests only on the lock item's conditional
// put, as for every acquire: the line decides who tries, never who
// holds. Two heads at once (a skipped head that wakes and tries, and the
// new head) are two waiters racing for one conditional put, which at
// most one wins; so are a head and a client that does not wait in line
// (ddblock without WithFairWaiting, TryAcquireLock, python_dynamodb_lock):
// those never read the line, and may take the lock ahead of it.
//
// Writes per wait: the take, the ticket, the handing on and the
// ticket's delete; rarely a skip, or a second take after being skipped.
// An uncontended acquire costs the take, the put and the counter's
// delete. Reads: the lead of each room reads the counter once per retry
// period; the inspecting leads read the front's tickets, sessions and
// lock; the head reads the lock headPolls times a period.
//
// The line goes away with its last waiter (the head's conditional
// delete of the counter). A line whose waiters all died stays until the
// next fair waiter of the key clears it, DynamoDB's TTL removes it
// (lineTTL after its creation or its last turn) or an operator clears it
// ([Client.ClearLine], ddblock release --force). New waiters never move
// its TTL.

const (
	// lineKeyPrefix starts every line counter's partition key,
	// ticketKeyPrefix every ticket's; lock keys and semaphore names may
	// start with neither.
	lineKeyPrefix   = wire.LineKeyPrefix
	ticketKeyPrefix = wire.TicketKeyPrefix
	// ticketKeyOverhead is the most a ticket's partition key adds to the
	// lock's: the prefix, a generation (16 hex digits), a number (up to
	// 19 digits) and two separators.
	ticketKeyOverhead = len(ticketKeyPrefix) + 16 + 19 + 2
	// lineTTL is how far ahead a line counter's TTL goes at its creation
	// and at each turn, and a ticket's at its writing.
	lineTTL = 24 * time.Hour
	// maxInspect is the most tickets one inspection of the front reads.
	maxInspect = 16
	// maxLineSpan is the most numbers a sane line has waiting between
	// its served number and its last: a counter beyond it (another
	// writer's garbage) is reset.
	maxLineSpan = 1 << 20
	// nearFront: a lead at most this many numbers behind the served one
	// inspects the front at every look at which it stood still.
	nearFront = 2
)

func isLineKey(pk string) bool {
	return strings.HasPrefix(pk, lineKeyPrefix) || strings.HasPrefix(pk, ticketKeyPrefix)
}

// isLineItem reports whether an item is part of a line (its counter or
// a ticket) rather than a lock, by its attributes or its key.
func (c *Client) isLineItem(item map[string]types.AttributeValue) bool {
	for _, a := range []string{wire.AttrLineGen, wire.AttrLineNext, wire.AttrLineServing, wire.AttrTicketID} {
		if _, ok := item[a]; ok {
			return true
		}
	}
	pk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
	return pk != nil && isLineKey(pk.Value)
}

// lineTicket is one fair waiter's place in a line, and lineInfo a line,
// as the ddblock command and the tests see them (internal/hooks).
type (
	lineTicket = hooks.Ticket
	lineInfo   = hooks.LineInfo
)

// lineState is what a read of a line's counter showed.
type lineState struct {
	gen           string
	serving, next int64
}

// decodeLineState reads a counter item: ok false when there is none;
// an error of CodeInvalidItem when it is not one ddblock could have
// written (garbled, or counters out of any sane range).
func (c *Client) decodeLineState(item map[string]types.AttributeValue) (st lineState, ok bool, err error) {
	if len(item) == 0 {
		return st, false, nil
	}
	gen, _ := item[wire.AttrLineGen].(*types.AttributeValueMemberS)
	num := func(a string) (int64, bool) {
		n, _ := item[a].(*types.AttributeValueMemberN)
		if n == nil {
			return 0, false
		}
		v, err := strconv.ParseInt(n.Value, 10, 64)
		return v, err == nil
	}
	serving, sok := num(wire.AttrLineServing)
	next, nok := num(wire.AttrLineNext)
	if gen == nil || gen.Value == "" || !sok || !nok || serving < 1 || serving > next+1 || next-serving >= maxLineSpan {
		return st, true, c.codec.invalid(item, wire.AttrLineServing, "not a line of fair waiters ddblock could have written")
	}
	return lineState{gen: gen.Value, serving: serving, next: next}, true, nil
}

// ticketKey is the ticket item's partition key for number n of
// generation gen of the line of lock key pk.
func ticketKey(gen string, n int64, pk string) string {
	return ticketKeyPrefix + gen + "#" + strconv.FormatInt(n, 10) + "#" + pk
}

// decodeTicket reads a ticket item; ok false when it is not one ddblock
// could have written.
func decodeTicket(item map[string]types.AttributeValue) (t lineTicket, session string, ok bool) {
	id, _ := item[wire.AttrTicketID].(*types.AttributeValueMemberS)
	if id == nil || id.Value == "" {
		return t, "", false
	}
	t.ID = id.Value
	if s, ok := item[wire.AttrTicketOwner].(*types.AttributeValueMemberS); ok {
		t.OwnerName = s.Value
	}
	if n, ok := item[wire.AttrTicketSince].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
			t.Since = time.UnixMilli(ms)
		}
	}
	grace, _ := item[wire.AttrTicketGrace].(*types.AttributeValueMemberN)
	if grace == nil {
		return t, "", false
	}
	ms, err := strconv.ParseInt(grace.Value, 10, 64)
	if err != nil || ms < 0 || ms > maxLease.Milliseconds() {
		return t, "", false
	}
	t.Grace = time.Duration(ms) * time.Millisecond
	// Every ticket names its client's session (written before it): one
	// without is not a waiter's.
	s, _ := item[wire.AttrTicketSession].(*types.AttributeValueMemberS)
	if s == nil || !isSessionKey(s.Value) {
		return t, "", false
	}
	return t, s.Value, true
}

// ticketSetWait reads a set's wait from a ticket item: zero for a
// single key's ticket, and for a value out of range (then the ticket is
// judged as a single key's, never as garbage).
func ticketSetWait(item map[string]types.AttributeValue) time.Duration {
	n, _ := item[wire.AttrTicketSetWait].(*types.AttributeValueMemberN)
	if n == nil {
		return 0
	}
	ms, err := strconv.ParseInt(n.Value, 10, 64)
	if err != nil || ms <= 0 || ms > maxSetWait.Milliseconds() {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// maxSetWait bounds a set's wait as its tickets carry it: a set that
// waits longer may be skipped at the head of an earlier line once this
// has passed, and then comes again at its back.
const maxSetWait = lineTTL

// lineKeyFor is the line counter's key for a lock's key.
func lineKeyFor(pk, sk string) (string, string) { return lineKeyPrefix + pk, sk }

// checkLineKey refuses a key whose tickets' keys would be too long.
func checkLineKey(pk string) error {
	if ticketKeyOverhead+len(pk) > maxPartitionKeyBytes {
		return invalidArg("PartitionKey", fmt.Sprintf("is %d bytes: with fair waiting its tickets' keys would be over DynamoDB's %d (a key of at most %d bytes can wait fairly)",
			len(pk), maxPartitionKeyBytes, maxPartitionKeyBytes-ticketKeyOverhead))
	}
	return nil
}

// lineBound is how long after the lock stands free a live fair waiter
// gets its turn when every waiter ahead of it is dead, gone or garbled
// (see the package comment above): grace is the longest grace among
// them and its own, period its retry period.
func lineBound(grace, period time.Duration) time.Duration {
	return 2*grace + 3*period
}

// lines holds a client's rooms of fair waiters, one per line.
type lines struct {
	mu    sync.Mutex
	rooms map[string]*lineRoom
	// active counts the fair waits under way: the session of a client
	// that does not use sessions for its locks ends when none is.
	active int
}

// lineRoom is where the fair waiters of one line in one client meet.
type lineRoom struct {
	key  string
	refs int
	// members are the waiters holding a number of generation gen, in
	// the order of their numbers: the first is the lead.
	members []*line
	gen     string
	// The lead's watch of the front: the served number last read, and
	// when it was first seen (monotonic, after the reply); when the
	// front was last inspected; the head's watch (pair, its first
	// sighting after the reply, the sending of the latest read that
	// showed it).
	serving      int64
	servingSince time.Duration
	looks        int // reads that showed serving
	inspected    time.Duration
	watched      string
	firstSeen    time.Duration
	lastSent     time.Duration
	// tickets caches the tickets read, by number (gen's).
	tickets map[int64]cachedTicket
	// abandoned are this client's tickets whose delete failed: gone to
	// this client, whatever the table says.
	abandoned map[string]bool
}

type cachedTicket struct {
	t       lineTicket
	session string
	ok      bool // readable
	// setWait: the ticket is a set's (AcquireLocks), which may keep its
	// place at the head this long while it waits in later lines.
	setWait time.Duration
}

// line is one fair waiter's place in the line of one key.
type line struct {
	c      *Client
	room   *lineRoom
	pk, sk string // the counter's key
	lockPK string // the lock's partition key (a semaphore's: its metadata item's)
	ticket lineTicket
	// setWait is written on the ticket of a set's waiter (lockset.go):
	// how long it may stand at the head while it waits in later lines.
	setWait time.Duration
	period  time.Duration
	// deadline is when the acquisition gives up (monotonic): a waiter
	// that sleeps until woken wakes then.
	deadline time.Duration
	wake     chan struct{}

	// Guarded by the client's lines.mu:
	entered bool // holds a number
	gen     string
	seq     int64
	skipped bool // the served number passed this one, or the line was reset
	// Only the waiter's own goroutine touches these:
	head     bool          // the last look showed this number served
	written  bool          // the ticket item was put
	lastLook time.Duration // when the last read of the counter that answered was sent
	next     int64         // the last number handed out, as last read
	serving  int64         // the number served, as last read
}

// fairGrace is a waiter's grace: how long the waiters behind it let it
// stand still before they skip it. A live head reads the lock four
// times a retry period, and its client's session lands a heartbeat once
// a heartbeat period: three retry periods and a second, or two
// heartbeat periods and a second if longer, are past any live waiter's
// pace.
func fairGrace(retryPeriod, heartbeatPeriod time.Duration) time.Duration {
	return max(3*retryPeriod, 2*heartbeatPeriod) + time.Second
}

func (c *Client) newLine(pk, sk string, retryPeriod time.Duration, deadline time.Duration) *line {
	lpk, lsk := lineKeyFor(pk, sk)
	l := &line{c: c, pk: lpk, sk: lsk, lockPK: pk, period: retryPeriod, deadline: deadline, wake: make(chan struct{}, 1), ticket: lineTicket{
		ID:        wire.NewRecordVersionNumber(),
		OwnerName: c.opts.OwnerName,
		Since:     c.clock.Now(),
		Grace:     fairGrace(retryPeriod, c.opts.HeartbeatPeriod),
	}}
	ls := c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	key := lpk + "\x00" + lsk
	room := ls.rooms[key]
	if room == nil {
		room = &lineRoom{key: key, tickets: make(map[int64]cachedTicket), abandoned: make(map[string]bool)}
		ls.rooms[key] = room
	}
	room.refs++
	ls.active++
	l.room = room
	return l
}

func (l *line) ticketPK(n int64) string { return ticketKey(l.gen, n, l.lockPK) }

func (l *line) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// polling reports whether the waiter looks headPolls times a period:
// the head, at the lock; the next in line, at the counter, so that it
// sees its turn come within a quarter period of the head's leaving (the
// head hands on as soon as it has the lock, and its hold is often
// shorter than a period).
func (l *line) polling() bool {
	return l != nil && (l.head || (l.entered && l.serving > 0 && l.seq == l.serving+1))
}

// lookEvery is how often the waiter reads the counter when it is its
// room's lead.
func (l *line) lookEvery() time.Duration {
	if !l.head && l.polling() {
		return l.period / headPolls
	}
	return l.period
}

// heldAtHead reports whether the waiter is served but has written no
// ticket: it tried at once, and must now wait.
func (l *line) heldAtHead() bool { return l != nil && l.head && !l.written }

// turn reports whether this waiter may try now: its number is served.
// It takes a number first, and comes again at the back when skipped.
// A waiter that is not its room's lead sleeps until woken (or until its
// deadline, its context or the client ends); the lead reads the counter
// once per retry period, and inspects the front when it stands still
// (look tells what the head waits for).
func (l *line) turn(ctx context.Context, look func(context.Context) (headLook, error)) (bool, error) {
	c := l.c
	for {
		ls := c.lines
		ls.mu.Lock()
		entered, skipped := l.entered, l.skipped
		lead := entered && len(l.room.members) > 0 && l.room.members[0] == l
		ls.mu.Unlock()
		switch {
		case !entered || skipped:
			if entered {
				l.forget(ctx)
			}
			if err := l.take(ctx); err != nil {
				if errors.Is(err, errLineGarbled) {
					return false, nil
				}
				return false, err
			}
			if l.head {
				return true, nil
			}
			if err := l.writeTicket(ctx); err != nil {
				return false, err
			}
			continue
		case !lead:
			if err := l.sleep(ctx); err != nil || c.isClosed() || c.clock.Monotonic() >= l.deadline {
				return false, err
			}
			continue
		}
		if l.head && !l.written {
			// Served at once, but what it waits for was held: it waits
			// at the head, where others must see its ticket.
			if err := l.writeTicket(ctx); err != nil {
				return false, err
			}
		}
		sent := c.clock.Monotonic()
		if sent-l.lastLook < l.lookEvery() {
			// Looked less than a period ago: the head tries headPolls
			// times a period on that look (only a skip takes its place,
			// after a grace); the others wait.
			return l.head, nil
		}
		st, ok, err := l.read(ctx)
		if err != nil {
			if CodeOf(err) != CodeInvalidItem {
				return false, err
			}
			l.resetGarbled(ctx)
			ok = false
		}
		reply := c.clock.Monotonic()
		l.lastLook = sent
		if !ok || st.gen != l.gen || st.serving > l.seq {
			// The line was closed or reset, or passed this number: come
			// again (and tell the room's others behind the same news).
			l.seen(st, ok)
			continue
		}
		l.next, l.serving = st.next, st.serving
		l.seen(st, ok)
		if st.serving == l.seq {
			l.head = true
			return true, nil
		}
		l.head = false
		if !l.dueInspection(sent, reply, st) {
			return false, nil
		}
		f, err := l.inspect(ctx, st, look)
		if err != nil {
			return false, err
		}
		if f == l.seq {
			l.head = true
			return true, nil
		}
		return false, nil
	}
}

// stillHead reports whether this waiter, which was served, still is:
// it reads the counter at most once a retry period, as a head does. One
// that was skipped, or whose line was reset, learns it here and is
// marked so (turn then takes it a new number); it never sleeps. A set's
// waiter (lockset.go) keeps the head of its earlier lines by it.
func (l *line) stillHead(ctx context.Context) (bool, error) {
	c := l.c
	ls := c.lines
	ls.mu.Lock()
	entered, skipped := l.entered, l.skipped
	ls.mu.Unlock()
	if !entered || skipped || !l.head {
		return false, nil
	}
	sent := c.clock.Monotonic()
	if sent-l.lastLook < l.period {
		return true, nil
	}
	st, ok, err := l.read(ctx)
	if err != nil {
		if CodeOf(err) != CodeInvalidItem {
			return false, err
		}
		l.resetGarbled(ctx)
		ok = false
	}
	l.lastLook = sent
	l.seen(st, ok)
	if !ok || st.gen != l.gen || st.serving != l.seq {
		l.head = false
		return false, nil
	}
	return true, nil
}

// sleep waits until this waiter is woken, its deadline passes, its
// context ends or the client closes.
func (l *line) sleep(ctx context.Context) error {
	c := l.c
	timer := c.clock.NewTimer(max(l.deadline-c.clock.Monotonic(), 0))
	defer timer.Stop()
	select {
	case <-l.wake:
	case <-timer.C():
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
	}
	return nil
}

// read reads the line's counter, strongly consistent.
func (l *line) read(ctx context.Context) (lineState, bool, error) {
	out, err := l.c.ddb.GetItem(ctx, l.c.wire().Get(l.pk, l.sk), l.c.callOpts("GetItem")...)
	if err != nil {
		return lineState{}, false, err
	}
	return l.c.decodeLineState(out.Item)
}

// resetGarbled deletes a counter item that is not a line ddblock could
// have written, on the condition that it still is not; the next take
// creates a line afresh.
//
// It reports false when the delete failed otherwise than on its
// condition (then what was refused was not garbage, such as a table of
// other keys).
func (l *line) resetGarbled(ctx context.Context) bool {
	c := l.c
	_, err := c.ddb.DeleteItem(ctx, c.wire().LineDeleteGarbled(l.pk, l.sk), c.callOpts("DeleteItem")...)
	if err != nil && !wire.ConditionFailed(err) {
		c.log.Warn("ddblock: could not delete an unreadable line of fair waiters", "line", l.pk, "err", err)
		return false
	}
	if err == nil {
		c.log.Warn("ddblock: deleted an unreadable line of fair waiters (not written by ddblock); its waiters come again", "line", l.pk)
	}
	return true
}

// seen records in the room what a read of the counter showed, and wakes
// the room's waiters it concerns: those passed by the served number, or
// all of them when the line is not the one they hold numbers of.
func (l *line) seen(st lineState, ok bool) {
	ls := l.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	r := l.room
	if !ok || st.gen != r.gen {
		for _, m := range r.members {
			m.skipped = true
			m.poke()
		}
		r.members = nil
		r.gen, r.serving, r.looks = "", 0, 0
		clear(r.tickets)
		return
	}
	for len(r.members) > 0 && r.members[0].seq < st.serving {
		m := r.members[0]
		m.skipped = true
		m.poke()
		r.members = r.members[1:]
	}
	if st.serving != r.serving {
		r.serving, r.servingSince, r.looks = st.serving, l.c.clock.Monotonic(), 0
		r.watched = ""
		for n := range r.tickets {
			if n < st.serving {
				delete(r.tickets, n)
			}
		}
	}
	r.looks++
	if len(r.members) > 0 && r.members[0] != l {
		r.members[0].poke() // a new lead
	}
}

// dueInspection says whether the lead inspects the front at this look:
// once the served number has stood still for a retry period, then near
// the front once a period, further back once per half its grace.
func (l *line) dueInspection(sent, reply time.Duration, st lineState) bool {
	ls := l.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	r := l.room
	if r.looks < 2 || sent-r.servingSince < l.period {
		// A head served a moment ago may not have written its ticket:
		// it tries the lock first.
		return false
	}
	if r.inspected > r.servingSince {
		every := l.period
		if l.seq-st.serving > nearFront {
			every = l.ticket.Grace / 2
		}
		if reply-r.inspected < every {
			return false
		}
	}
	r.inspected = reply
	return true
}

// take takes a number: the line's next.
func (l *line) take(ctx context.Context) error {
	c := l.c
	sent := c.clock.Monotonic()
	gen := hex.EncodeToString(wire.NewUUID4()[:8])
	in := c.wire().LineTake(l.pk, l.sk, gen, c.clock.Now().Add(lineTTL))
	// Another writer's garbage at the counter's key (attributes of the
	// wrong types, which the update refuses, or counters out of range):
	// clear it, and take a number of a fresh line. Garbage written again
	// and again (a writer at it still) costs this attempt its number,
	// never the acquire: the next attempt comes a period later.
	var st lineState
	for tries := 0; ; tries++ {
		if tries == 3 {
			return errLineGarbled
		}
		out, err := c.ddb.UpdateItem(ctx, in, c.callOpts("UpdateItem")...)
		if _, invalid := wire.Invalid(err); invalid && l.resetGarbled(ctx) {
			continue
		}
		if err != nil {
			return err
		}
		if st, _, err = c.decodeLineState(out.Attributes); err == nil {
			break
		}
		l.resetGarbled(ctx)
		l.resetInsane(ctx, out.Attributes)
	}
	ls := c.lines
	ls.mu.Lock()
	r := l.room
	if r.gen != st.gen {
		for _, m := range r.members {
			m.skipped = true
			m.poke()
		}
		r.members, r.gen, r.serving, r.looks = nil, st.gen, 0, 0
		clear(r.tickets)
	}
	l.entered, l.skipped, l.gen, l.seq = true, false, st.gen, st.next
	i, _ := slices.BinarySearchFunc(r.members, l.seq, func(m *line, n int64) int { return cmp.Compare(m.seq, n) })
	r.members = slices.Insert(r.members, i, l)
	ls.mu.Unlock()
	l.lastLook, l.next, l.serving, l.head, l.written = sent, st.next, st.serving, st.serving == st.next, false
	return nil
}

// resetInsane deletes a counter whose numbers are out of any sane range
// (another writer's garbage), on the condition that it still is, however
// many numbers were taken since; the next take creates a line afresh.
func (l *line) resetInsane(ctx context.Context, item map[string]types.AttributeValue) {
	c := l.c
	gen, _ := item[wire.AttrLineGen].(*types.AttributeValueMemberS)
	serving, _ := item[wire.AttrLineServing].(*types.AttributeValueMemberN)
	next, _ := item[wire.AttrLineNext].(*types.AttributeValueMemberN)
	if gen == nil || serving == nil || next == nil {
		return // not of sane types: LineDeleteGarbled's
	}
	s, err1 := strconv.ParseInt(serving.Value, 10, 64)
	n, err2 := strconv.ParseInt(next.Value, 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	var in *dynamodb.DeleteItemInput
	switch {
	case s < 1:
		in = c.wire().LineDeleteInsane(l.pk, l.sk, gen.Value, s, 0, 0)
	case n-s >= maxLineSpan:
		in = c.wire().LineDeleteInsane(l.pk, l.sk, gen.Value, s, s+maxLineSpan, 0)
	case n < s-1:
		in = c.wire().LineDeleteInsane(l.pk, l.sk, gen.Value, s, 0, s-1)
	default:
		return
	}
	if _, err := c.ddb.DeleteItem(ctx, in, c.callOpts("DeleteItem")...); err == nil {
		c.log.Warn("ddblock: deleted a line of fair waiters whose numbers were out of range (not written by ddblock); its waiters come again", "line", l.pk)
	}
}

// errLineGarbled: the line's counter stayed unreadable through resets.
var errLineGarbled = errors.New("ddblock: the line of fair waiters stays unreadable")

// writeTicket writes this waiter's ticket, naming its client's session.
func (l *line) writeTicket(ctx context.Context) error {
	c := l.c
	s, err := c.liveSession(ctx)
	if err != nil {
		return err
	}
	t := wire.Ticket{ID: l.ticket.ID, Owner: l.ticket.OwnerName, Session: s.pk, Since: l.ticket.Since, Grace: l.ticket.Grace, SetWait: l.setWait}
	if _, err := c.ddb.PutItem(ctx, c.wire().PutTicket(l.ticketPK(l.seq), l.sk, t, c.clock.Now().Add(lineTTL)), c.callOpts("PutItem")...); err != nil {
		if wire.OutcomeUnknown(err) {
			l.written = true // it may be there: leave deletes it
		}
		return err
	}
	l.written = true
	return nil
}

// forget gives up this waiter's number, skipped or not: its ticket is
// deleted, and it leaves the room's members.
func (l *line) forget(ctx context.Context) {
	if l.written {
		l.deleteTicket(ctx, l.ticketPK(l.seq))
	}
	ls := l.c.lines
	ls.mu.Lock()
	r := l.room
	if i := slices.Index(r.members, l); i >= 0 {
		r.members = slices.Delete(r.members, i, i+1)
		if i == 0 && len(r.members) > 0 {
			r.members[0].poke()
		}
	}
	l.entered, l.skipped = false, false
	ls.mu.Unlock()
	l.head, l.written = false, false
}

// deleteTicket deletes this waiter's ticket at key pk; a delete that
// fails leaves it abandoned: gone to this client, deleted again at its
// session's heartbeats.
func (l *line) deleteTicket(ctx context.Context, pk string) {
	c := l.c
	var err error
	for tries := 0; tries < 3; tries++ {
		_, err = c.ddb.DeleteItem(ctx, c.wire().DeleteTicket(pk, l.sk, l.ticket.ID), c.callOpts("DeleteItem")...)
		if err == nil || wire.ConditionFailed(err) || ctx.Err() != nil {
			break
		}
	}
	if err == nil || wire.ConditionFailed(err) {
		return
	}
	ls := c.lines
	ls.mu.Lock()
	l.room.abandoned[pk] = true
	ls.mu.Unlock()
	c.abandonTicket(pk, l.sk, l.ticket.ID)
}

// inspect looks at the front of the line, from the served number up to
// this waiter's, and skips every ticket there that is gone, garbled,
// abandoned, of a dead session, or a head that let its turn pass. It
// returns the number served after it. A window of maxInspect tickets
// that was dead throughout is followed by the next at once: a hundred
// cancelled waiters cost reads, not graces.
func (l *line) inspect(ctx context.Context, st lineState, look func(context.Context) (headLook, error)) (int64, error) {
	for {
		to, whole, err := l.inspectWindow(ctx, st, look)
		if err != nil || to == st.serving || !whole || to >= l.seq {
			return to, err
		}
		st.serving = to
	}
}

// inspectWindow inspects up to maxInspect tickets from the served
// number; whole reports that it skipped all it looked at.
func (l *line) inspectWindow(ctx context.Context, st lineState, look func(context.Context) (headLook, error)) (to int64, whole bool, err error) {
	c := l.c
	ls := c.lines
	end := min(l.seq, st.serving+maxInspect)
	type front struct {
		n       int64
		t       cachedTicket
		present bool
	}
	fronts := make([]front, 0, end-st.serving)
	for n := st.serving; n < end; n++ {
		ls.mu.Lock()
		ct, cached := l.room.tickets[n]
		ls.mu.Unlock()
		pk := ticketKey(st.gen, n, l.lockPK)
		if !cached || n == st.serving {
			// The head's ticket is read at each inspection (its waiter
			// may have left); the others' once, as they never change.
			out, err := c.ddb.GetItem(ctx, c.wire().Get(pk, l.sk), c.callOpts("GetItem")...)
			if err != nil {
				return st.serving, false, err
			}
			if len(out.Item) == 0 {
				fronts = append(fronts, front{n: n})
				continue
			}
			t, sess, ok := decodeTicket(out.Item)
			ct = cachedTicket{t: t, session: sess, ok: ok, setWait: ticketSetWait(out.Item)}
			ls.mu.Lock()
			l.room.tickets[n] = ct
			ls.mu.Unlock()
		}
		fronts = append(fronts, front{n: n, t: ct, present: true})
	}
	// Watch the sessions named, every one: a dead client's tickets then
	// go together, wherever they stand. For the line, a session is dead
	// once its version stood for the ticket's grace, which is past its
	// client's heartbeat pace (fairGrace); its item is deleted only once
	// it stood for the session's lease, as for a takeover.
	type sessionLook struct {
		absent bool
		lease  time.Duration
	}
	sessions := make(map[string]sessionLook)
	for _, f := range fronts {
		s := f.t.session
		if !f.present || !f.t.ok || s == "" {
			continue
		}
		if _, done := sessions[s]; done {
			continue
		}
		item, sent, _, err := c.readSession(ctx, s)
		if err != nil {
			return st.serving, false, err
		}
		reply := c.clock.Monotonic()
		if item == nil {
			// A ticket is written after its session item, and a session
			// key is never used again: the session ended.
			c.observations.seeSession(s, absentSession, sent, reply)
			sessions[s] = sessionLook{absent: true}
			continue
		}
		c.observations.seeSession(s, item.RecordVersionNumber, sent, reply)
		sessions[s] = sessionLook{lease: item.LeaseDuration}
	}
	deadSession := func(t cachedTicket) bool {
		sl, ok := sessions[t.session]
		return ok && (sl.absent || c.observations.sessionStill(t.session) >= min(t.t.Grace, sl.lease))
	}
	// The prefix that is dead.
	to = st.serving
	graceSession := ""
	for i, f := range fronts {
		ls.mu.Lock()
		abandoned := l.room.abandoned[ticketKey(st.gen, f.n, l.lockPK)]
		ls.mu.Unlock()
		dead := !f.present || !f.t.ok || abandoned || deadSession(f.t) ||
			(graceSession != "" && f.t.session == graceSession)
		if !dead && i == 0 {
			passed, err := l.headPassed(ctx, st, f.t, look)
			if err != nil {
				return st.serving, false, err
			}
			if passed {
				dead, graceSession = true, f.t.session
			}
		}
		if !dead {
			break
		}
		to = f.n + 1
	}
	if to == st.serving {
		return st.serving, false, nil
	}
	out, err := c.ddb.UpdateItem(ctx, c.wire().LineAdvance(l.pk, l.sk, st.gen, st.serving, to, c.clock.Now().Add(lineTTL)), c.callOpts("UpdateItem")...)
	if wire.ConditionFailed(err) {
		return st.serving, false, nil // someone moved the line meanwhile
	}
	if err != nil {
		return st.serving, false, err
	}
	c.log.Info("ddblock: skipped fair waiters that let their turn pass or left", "line", l.pk, "from", st.serving, "to", to)
	if nst, ok, derr := c.decodeLineState(out.Attributes); derr == nil && ok {
		l.seen(nst, ok)
	}
	for s, sl := range sessions {
		if !sl.absent && c.observations.sessionDead(s, sl.lease) {
			// Nothing else deletes a dead client's session item that
			// no lock names.
			c.deleteDeadSession(s)
		}
	}
	for _, f := range fronts {
		if f.n >= to {
			break
		}
		if f.present {
			id := ""
			if f.t.ok {
				id = f.t.t.ID
			}
			if _, err := c.ddb.DeleteItem(ctx, c.wire().DeleteTicket(ticketKey(st.gen, f.n, l.lockPK), l.sk, id), c.callOpts("DeleteItem")...); err != nil && !wire.ConditionFailed(err) {
				c.log.Warn("ddblock: could not delete a skipped fair waiter's ticket; it goes with its TTL", "line", l.pk, "err", err)
			}
		}
	}
	return to, to == end, nil
}

// headPassed times the head: true once the pair (head, what it waits
// for) has stood, on this client's monotonic clock, for the head's grace
// while free, or for the lease plus the grace while held; a set's head
// (its session alive, or it would have been skipped as dead) has its
// set wait more: it may be waiting in the lines of its later keys.
func (l *line) headPassed(ctx context.Context, st lineState, ct cachedTicket, look func(context.Context) (headLook, error)) (bool, error) {
	head := ct.t
	c := l.c
	sent := c.clock.Monotonic()
	hl, err := look(ctx)
	if err != nil {
		return false, err
	}
	now := c.clock.Monotonic()
	pair := st.gen + " " + strconv.FormatInt(st.serving, 10) + " " + head.ID + " " + hl.state
	ls := c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	r := l.room
	if pair != r.watched {
		r.watched, r.firstSeen, r.lastSent = pair, now, sent
		return false, nil
	}
	r.lastSent = max(r.lastSent, sent)
	limit := head.Grace + ct.setWait
	if !hl.free {
		limit += hl.lease
	}
	return r.lastSent-r.firstSeen >= limit, nil
}

// leave ends this waiter's wait, won or not, best effort, on a context
// of its own (the caller's may have ended): a head hands the turn on,
// and every waiter deletes its ticket.
func (l *line) leave() {
	if l == nil {
		return
	}
	c := l.c
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	ls := c.lines
	ls.mu.Lock()
	entered := l.entered && !l.skipped
	ls.mu.Unlock()
	head := entered && l.head
	if head {
		// The turn goes on at once; the ticket's delete and the skip of
		// gone tickets behind come after, off the path from winning to
		// returning the lock.
		written, pk := l.written, l.ticketPK(l.seq)
		l.written = false
		st, more := l.handOn(ctx)
		if written || more {
			c.goBackground(func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), c.opts.HeartbeatTimeout)
				defer cancel()
				if written {
					l.deleteTicket(ctx, pk)
				}
				if more {
					l.skipGone(ctx, st)
				}
			})
		}
	}
	if l.entered {
		l.forget(ctx)
	}
	if entered && !head {
		l.leaveUnserved(ctx)
	}
	ls.mu.Lock()
	l.room.refs--
	if l.room.refs == 0 {
		delete(ls.rooms, l.room.key)
	}
	ls.active--
	ls.mu.Unlock()
}

// leaveUnserved ends the wait of a waiter that did not know itself
// served: it reads the line once more, and hands the turn on should it
// have been served meanwhile, or deletes the line should it have been
// the last, with nothing but gone tickets ahead of it (waiters that
// left, cancelled together): a line goes away with its last waiter.
func (l *line) leaveUnserved(ctx context.Context) {
	st, ok, err := l.read(ctx)
	if err != nil || !ok || st.gen != l.gen || st.serving > l.seq {
		return
	}
	l.next = st.next
	if st.serving == l.seq {
		if st, ok := l.handOn(ctx); ok {
			l.skipGone(ctx, st)
		}
		return
	}
	if st.next != l.seq || l.seq-st.serving > maxInspect {
		return // others came after it, or too many to look at: they judge
	}
	c := l.c
	for n := st.serving; n < l.seq; n++ {
		if l.isMember(n) {
			return
		}
		got, err := c.ddb.GetItem(ctx, c.wire().Get(ticketKey(l.gen, n, l.lockPK), l.sk), c.callOpts("GetItem")...)
		if err != nil || len(got.Item) > 0 {
			return
		}
	}
	l.close(ctx, st.serving, st.next)
}

// handOn gives the turn to the next number, or deletes the line when
// nobody came after this waiter. Then the caller skips the next tickets
// that are gone (waiters that left, numbers never used), and deletes
// the line when all are (skipGone), so that a line goes away with its
// last waiter; ok false when there is nothing to skip.
func (l *line) handOn(ctx context.Context) (lineState, bool) {
	serving, next := l.seq, l.next
	if next <= serving && l.close(ctx, serving, next) {
		return lineState{}, false
	}
	return l.advance(ctx, serving, serving+1)
}

// skipGone skips the gone tickets from the number served (st, as the
// hand-on left it), and deletes the line when all are.
func (l *line) skipGone(ctx context.Context, st lineState) {
	c := l.c
	ok := true
	var serving, next int64
	for range 4 {
		serving, next = st.serving, st.next
		if serving > next {
			if l.close(ctx, serving, next) {
				return
			}
			var err error
			if st, ok, err = l.read(ctx); err != nil || !ok || st.gen != l.gen {
				return
			}
			continue
		}
		// The first ticket there from the served number. A ticket not
		// yet written is only a waiter that came a moment ago: served
		// now, it writes it before it waits.
		n := serving
		for ; n <= next && n < serving+maxInspect; n++ {
			if l.isMember(n) {
				break
			}
			got, err := c.ddb.GetItem(ctx, c.wire().Get(ticketKey(l.gen, n, l.lockPK), l.sk), c.callOpts("GetItem")...)
			if err != nil {
				return
			}
			if len(got.Item) > 0 {
				break
			}
		}
		switch {
		case n == serving:
			return // there: served
		case n > next:
			// All gone: the line goes, unless someone came meanwhile.
			if l.close(ctx, serving, next) {
				return
			}
			var err error
			if st, ok, err = l.read(ctx); err != nil || !ok || st.gen != l.gen {
				return
			}
		default:
			if st, ok = l.advance(ctx, serving, n); !ok || n < serving+maxInspect {
				return
			}
		}
	}
}

// advance gives the turn from number from to number to, conditioned on
// from being served; ok false when it was not (the line moved) or the
// write failed.
func (l *line) advance(ctx context.Context, from, to int64) (lineState, bool) {
	c := l.c
	out, err := c.ddb.UpdateItem(ctx, c.wire().LineAdvance(l.pk, l.sk, l.gen, from, to, c.clock.Now().Add(lineTTL)), c.callOpts("UpdateItem")...)
	if err != nil {
		if !wire.ConditionFailed(err) {
			c.log.Warn("ddblock: could not hand a line's turn on; those behind skip this waiter after its grace", "line", l.pk, "err", err)
		}
		return lineState{}, false
	}
	st, ok, err := c.decodeLineState(out.Attributes)
	return st, err == nil && ok
}

// close deletes the line, conditioned on its being as read: nobody came.
func (l *line) close(ctx context.Context, serving, next int64) bool {
	c := l.c
	_, err := c.ddb.DeleteItem(ctx, c.wire().LineClose(l.pk, l.sk, l.gen, serving, next), c.callOpts("DeleteItem")...)
	if err != nil && !wire.ConditionFailed(err) {
		c.log.Warn("ddblock: could not delete a line of fair waiters; it goes with its TTL or the next waiter", "line", l.pk, "err", err)
	}
	return err == nil
}

func (l *line) isMember(n int64) bool {
	ls := l.c.lines
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, m := range l.room.members {
		if m.seq == n && m.gen == l.gen {
			return true
		}
	}
	return false
}

// goBackground runs work on a goroutine of the client's, which Close
// waits for (as it waits for the heartbeater); on the caller's own once
// the client is closing.
func (c *Client) goBackground(work func()) {
	c.mu.Lock()
	ok := !c.closed
	if ok {
		// The heartbeater has not returned: it returns only after
		// Close, which sets closed first, has cancelled it.
		c.loops.join()
	}
	c.mu.Unlock()
	if !ok {
		work()
		return
	}
	go func() {
		defer c.loops.finish()
		work()
	}()
}

// abandonTicket keeps a ticket whose delete failed, to delete again at
// the session's next heartbeats.
func (c *Client) abandonTicket(pk, sk, id string) {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	if len(c.abandoned) < maxAbandonedTickets {
		c.abandoned = append(c.abandoned, abandonedTicket{pk, sk, id})
	}
}

// maxAbandonedTickets bounds the tickets kept to delete again; beyond
// it they go with their TTL (or are skipped by those behind).
const maxAbandonedTickets = 1024

type abandonedTicket struct{ pk, sk, id string }

// retryAbandonedTickets deletes again the tickets whose delete failed;
// called after a session heartbeat lands.
func (c *Client) retryAbandonedTickets(ctx context.Context) {
	c.lines.mu.Lock()
	todo := c.abandoned
	c.abandoned = nil
	c.lines.mu.Unlock()
	var again []abandonedTicket
	for _, t := range todo {
		_, err := c.ddb.DeleteItem(ctx, c.wire().DeleteTicket(t.pk, t.sk, t.id), c.callOpts("DeleteItem")...)
		if err != nil && !wire.ConditionFailed(err) {
			again = append(again, t)
		}
	}
	if len(again) > 0 {
		c.lines.mu.Lock()
		c.abandoned = append(c.abandoned, again...)
		c.lines.mu.Unlock()
	}
}

// fairIdle reports whether no fair wait is under way and no ticket waits
// to be deleted: a session kept for fair waiting alone may end.
func (c *Client) fairIdle() bool {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	return c.lines.active == 0 && len(c.abandoned) == 0
}

// lockLook is what the inspector sees of a lock: its version number, and
// for a lock on a session the session item's, read through the
// acquisition (whose record of the lock it also brings up to date).
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

// headLook is what an inspector saw of what the head waits for.
type headLook struct {
	state string        // the lock's version numbers ("-": free)
	free  bool          // something could be taken at once
	lease time.Duration // how long a held state may stand before a takeover
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

// semaphoreLook is what an inspector sees of a semaphore: every slot's
// state; free when one slot is.
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

// maxShownTickets is how many numbers, from the one served, readLine
// reads tickets of.
const maxShownTickets = 100

// readLine reads the line of fair waiters of the lock on (partitionKey,
// sortKey) (an empty sortKey means the default): its tickets in order
// (those of the first 100 numbers from the one served), none when nobody
// waits in line. For a semaphore's line, pass the key of its metadata
// item. A line that is
// not one ddblock could have written is an error of CodeInvalidItem.
func (c *Client) readLine(ctx context.Context, partitionKey, sortKey string) (*lineInfo, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	sortKey = c.defaultSortKey(sortKey)
	if err := c.checkItemKey(partitionKey, sortKey); err != nil {
		return nil, err
	}
	info := &lineInfo{PartitionKey: partitionKey, SortKey: sortKey}
	pk, sk := lineKeyFor(partitionKey, sortKey)
	out, err := c.ddb.GetItem(ctx, c.wire().Get(pk, sk), c.callOpts("GetItem")...)
	if err != nil {
		return nil, c.tableError(err, "reading the line of fair waiters", partitionKey, sortKey)
	}
	st, ok, err := c.decodeLineState(out.Item)
	if err != nil || !ok {
		return info, err
	}
	// The first numbers only: a long run of numbers whose waiters left
	// (a crowd cancelled) costs no more reads than a full page.
	for n := st.serving; n <= st.next && n < st.serving+maxShownTickets; n++ {
		got, err := c.ddb.GetItem(ctx, c.wire().Get(ticketKey(st.gen, n, partitionKey), sk), c.callOpts("GetItem")...)
		if err != nil {
			return nil, c.tableError(err, "reading the line of fair waiters", partitionKey, sortKey)
		}
		if t, _, ok := decodeTicket(got.Item); ok {
			info.Tickets = append(info.Tickets, t)
		}
	}
	return info, nil
}

// readLine reads the line of the semaphore's fair waiters (see
// Client.readLine).
func (s *Semaphore) readLine(ctx context.Context) (*lineInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	pk, sk := s.metaKey()
	return s.c.readLine(ctx, pk, sk)
}

// ClearLine deletes the line of fair waiters of the lock on
// (partitionKey, sortKey) (for a semaphore, the key of its metadata
// item): its counter and every ticket of it, readable or not. Live
// waiters see their line gone and come again into a new one, in the
// order they come back; nobody's lock is touched. It is for an operator
// clearing a line that holds waiters up, and returns how many tickets it
// deleted.
func (c *Client) ClearLine(ctx context.Context, partitionKey, sortKey string) (int, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	if err := checkContext(ctx); err != nil {
		return 0, err
	}
	sortKey = c.defaultSortKey(sortKey)
	if err := c.checkItemKey(partitionKey, sortKey); err != nil {
		return 0, err
	}
	pk, sk := lineKeyFor(partitionKey, sortKey)
	deleted := 0
	// Every ticket of the line, by a scan: numbers a garbled counter no
	// longer tells, and tickets below its served number, go too.
	for item, err := range c.scanItems(ctx) {
		if err != nil {
			return deleted, c.tableError(err, "clearing the line of fair waiters", partitionKey, sortKey)
		}
		tpk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
		if tpk == nil {
			continue
		}
		lock, _, _, ok := parseTicketKey(tpk.Value)
		if !ok || lock != partitionKey || (c.opts.SortKeyName != "" && !c.opts.PartitionKeyOnly && itemSortKey(item, c.opts.SortKeyName) != sortKey) {
			continue
		}
		if _, err := c.ddb.DeleteItem(ctx, c.wire().DeleteTicket(tpk.Value, sortKey, ""), c.callOpts("DeleteItem")...); err != nil {
			return deleted, c.tableError(err, "clearing the line of fair waiters", partitionKey, sortKey)
		}
		deleted++
	}
	if _, err := c.ddb.DeleteItem(ctx, c.wire().DeleteTicket(pk, sk, ""), c.callOpts("DeleteItem")...); err != nil {
		return deleted, c.tableError(err, "clearing the line of fair waiters", partitionKey, sortKey)
	}
	return deleted, nil
}

func itemSortKey(item map[string]types.AttributeValue, name string) string {
	s, _ := item[name].(*types.AttributeValueMemberS)
	if s == nil {
		return ""
	}
	return s.Value
}

// parseTicketKey splits a ticket's partition key into the lock's
// partition key, the generation and the number.
func parseTicketKey(pk string) (lock, gen string, n int64, ok bool) {
	rest, found := strings.CutPrefix(pk, ticketKeyPrefix)
	if !found {
		return "", "", 0, false
	}
	gen, rest, found = strings.Cut(rest, "#")
	if !found {
		return "", "", 0, false
	}
	num, lock, found := strings.Cut(rest, "#")
	if !found {
		return "", "", 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return lock, gen, n, err == nil
}

// scanItems reads the whole table, strongly consistent, page by page.
func (c *Client) scanItems(ctx context.Context) iter.Seq2[map[string]types.AttributeValue, error] {
	return func(yield func(map[string]types.AttributeValue, error) bool) {
		var start map[string]types.AttributeValue
		for {
			out, err := c.ddb.Scan(ctx, c.wire().Scan(start), c.callOpts("Scan")...)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, item := range out.Items {
				if !yield(item, nil) {
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

// listLines returns the line of fair waiters of every key that has one,
// with a strongly consistent Scan of the table (lines are not listed by
// [Client.ListLocks]): a lock's, a free lock's and a semaphore's alike.
// A line whose counter is not one ddblock could have written comes as an
// error of CodeInvalidItem, and the listing goes on.
func (c *Client) listLines(ctx context.Context) iter.Seq2[*lineInfo, error] {
	return func(yield func(*lineInfo, error) bool) {
		if err := c.usable(); err != nil {
			yield(nil, err)
			return
		}
		if err := checkContext(ctx); err != nil {
			yield(nil, err)
			return
		}
		type lineKey struct{ pk, sk string }
		type numbered struct {
			n int64
			t lineTicket
		}
		counters := make(map[lineKey]lineState)
		var order []lineKey
		var garbled []error
		tickets := make(map[lineKey]map[string][]numbered) // by generation
		for item, err := range c.scanItems(ctx) {
			if err != nil {
				yield(nil, c.tableError(err, "listing lines", "", ""))
				return
			}
			pk, _ := item[c.opts.PartitionKeyName].(*types.AttributeValueMemberS)
			if pk == nil {
				continue
			}
			var sk string
			if c.opts.SortKeyName != "" && !c.opts.PartitionKeyOnly {
				sk = itemSortKey(item, c.opts.SortKeyName)
			}
			if lock, ok := strings.CutPrefix(pk.Value, lineKeyPrefix); ok {
				st, _, err := c.decodeLineState(item)
				if err != nil {
					garbled = append(garbled, err)
					continue
				}
				k := lineKey{lock, sk}
				counters[k] = st
				order = append(order, k)
				continue
			}
			if lock, gen, n, ok := parseTicketKey(pk.Value); ok {
				if t, _, ok := decodeTicket(item); ok {
					k := lineKey{lock, sk}
					if tickets[k] == nil {
						tickets[k] = make(map[string][]numbered)
					}
					tickets[k][gen] = append(tickets[k][gen], numbered{n, t})
				}
			}
		}
		for _, err := range garbled {
			if !yield(nil, err) {
				return
			}
		}
		for _, k := range order {
			st := counters[k]
			info := &lineInfo{PartitionKey: k.pk, SortKey: k.sk}
			ts := tickets[k][st.gen]
			slices.SortFunc(ts, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
			for _, t := range ts {
				if t.n >= st.serving && t.n <= st.next {
					info.Tickets = append(info.Tickets, t.t)
				}
			}
			if !yield(info, nil) {
				return
			}
		}
	}
}
