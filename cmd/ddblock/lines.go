package main

// How get, ls and release show and clear the lines of fair waiters (run
// --fair, the library's WithFairWaiting). A line is not a lock: it is a
// counter item at partition key ddblock_line#KEY (with the lock's sort
// key; for a semaphore, its metadata item's), and one ticket item per
// waiter at ddblock_wait#GEN#NUMBER#KEY (the same sort key). The library
// shows a line's waiters in order (Client.Line, Client.ListLines) and
// clears it (Client.ClearLine); get also reads the counter and a ticket
// item as they are stored, to say which numbers a line serves and where a
// ticket stands, which the library does not show.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/wire"
)

const (
	// lineKeyPrefix starts a line counter's partition key, ticketKeyPrefix
	// a ticket's (line.go in the library); lock keys may start with
	// neither.
	lineKeyPrefix   = wire.LineKeyPrefix
	ticketKeyPrefix = wire.TicketKeyPrefix
)

// waiterJSON is one waiter in a line, as ls --json and get --json print
// it.
type waiterJSON struct {
	// ID identifies the waiting call.
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Since is when the waiter came, on its own wall clock, RFC 3339 in
	// UTC; absent when its ticket does not say.
	Since string `json:"since,omitempty"`
	// GraceSeconds is how long it may leave a free lock untaken while
	// first in line before those behind it skip it.
	GraceSeconds float64 `json:"grace_seconds"`
}

// lineJSON is a line as ls --json lists it and get --json prints it: key
// and sort_key are its counter item's, which get and release take.
type lineJSON struct {
	Key     string         `json:"key"`
	SortKey string         `json:"sort_key"`
	Line    lineDetailJSON `json:"line"`
}

type lineDetailJSON struct {
	// Key and SortKey are the lock's the line waits for (a semaphore's:
	// its metadata item's).
	Key     string `json:"key"`
	SortKey string `json:"sort_key"`
	// Semaphore is the semaphore's name, for a semaphore's line.
	Semaphore string `json:"semaphore,omitempty"`
	// Free says that the lock (for a semaphore: a slot) was free when
	// read: a line that stays so is stuck behind dead waiters.
	Free    bool         `json:"free"`
	Waiting int          `json:"waiting"`
	First   *waiterJSON  `json:"first,omitempty"`
	Waiters []waiterJSON `json:"waiters"`
}

func toWaiterJSON(t hooks.Ticket) waiterJSON {
	w := waiterJSON{ID: t.ID, Owner: t.OwnerName, GraceSeconds: t.Grace.Seconds()}
	if !t.Since.IsZero() {
		w.Since = t.Since.UTC().Format(time.RFC3339Nano)
	}
	return w
}

// lineEntry is a line with what ls and get say of the lock it waits for.
type lineEntry struct {
	info      *hooks.LineInfo
	semaphore string // the semaphore's name, for a semaphore's line
	free      bool
	lock      string // the LOCK cell: held by whom, or free
}

func (e *lineEntry) json() lineJSON {
	out := lineJSON{Key: lineKeyPrefix + e.info.PartitionKey, SortKey: e.info.SortKey, Line: lineDetailJSON{
		Key: e.info.PartitionKey, SortKey: e.info.SortKey, Semaphore: e.semaphore, Free: e.free,
		Waiting: len(e.info.Tickets), Waiters: []waiterJSON{}}}
	for _, t := range e.info.Tickets {
		out.Line.Waiters = append(out.Line.Waiters, toWaiterJSON(t))
	}
	if len(out.Line.Waiters) > 0 {
		first := out.Line.Waiters[0]
		out.Line.First = &first
	}
	return out
}

// lineEntries describes the lines listed by ls: the lock of each is held
// when it is among locks (read before groupSemaphores took out the
// slots), a semaphore's slot is free when fewer than its number are held.
func lineEntries(client *ddblock.Client, lines []*hooks.LineInfo, locks []*ddblock.LockInfo, sems []*semaphoreEntry) []*lineEntry {
	held := map[[2]string]*ddblock.LockInfo{}
	for _, l := range locks {
		held[[2]string{l.PartitionKey, l.SortKey}] = l
	}
	out := make([]*lineEntry, len(lines))
	for i, line := range lines {
		e := &lineEntry{info: line, free: true, lock: "free"}
		if name, ok := hooks.SemaphoreNameOf(client, line.PartitionKey, line.SortKey); ok {
			e.semaphore = name
			e.lock = "semaphore, no metadata item"
			for _, s := range sems {
				if s.info.Name == name {
					e.free = len(s.locks) < s.info.Slots
					e.lock = fmt.Sprintf("semaphore, %d of %d slots held", len(s.locks), s.info.Slots)
				}
			}
		} else if l := held[[2]string{line.PartitionKey, line.SortKey}]; l != nil {
			e.free = false
			e.lock = "held by " + ownerText(l)
		}
		out[i] = e
	}
	return out
}

// writeLines prints the lines of fair waiters, after a blank line; nothing
// when there are none.
func writeLines(w io.Writer, lines []*lineEntry, pkOnly bool) error {
	if len(lines) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if pkOnly {
		fmt.Fprintln(tw, "WAITING IN LINE FOR\tWAITING\tFIRST IN LINE\tSINCE\tLOCK")
	} else {
		fmt.Fprintln(tw, "WAITING IN LINE FOR\tSORT KEY\tWAITING\tFIRST IN LINE\tSINCE\tLOCK")
	}
	now := time.Now()
	for _, e := range lines {
		line := e.info
		sk := cell(line.SortKey) + "\t"
		if pkOnly {
			sk = ""
		}
		first := line.Tickets[0]
		fmt.Fprintf(tw, "%s\t%s%d\t%s\t%s\t%s\n", cell(line.PartitionKey), sk, len(line.Tickets), cell(first.OwnerName),
			agoText(first.Since, now), e.lock)
	}
	return tw.Flush()
}

// agoText says how long ago t was, "-" when unknown.
func agoText(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// lineKeyArgs is how get and release name the line counter of the lock
// (pk, sk).
func lineKeyArgs(conn *connFlags, pk, sk string) string {
	return keyArgs(conn, lineKeyPrefix+pk, sk)
}

// keyArgs is how get and release name the item (pk, sk): its key, after
// --sort-key when that is not the default.
func keyArgs(conn *connFlags, pk, sk string) string {
	if conn.pkOnly || sk == ddblock.DefaultSortKey {
		return cell(pk)
	}
	return "--sort-key " + cell(sk) + " " + cell(pk)
}

// lineOf names what a line waits for: a lock, or a semaphore.
func lineOf(client *ddblock.Client, pk, sk string) string {
	if name, ok := hooks.SemaphoreNameOf(client, pk, sk); ok {
		return "semaphore " + strconv.Quote(name)
	}
	return "lock " + lockName(pk, sk)
}

// parseTicketKey splits a ticket's partition key into the generation of
// its line, its number and the lock's partition key.
func parseTicketKey(pk string) (gen string, n int64, lock string, ok bool) {
	rest, found := strings.CutPrefix(pk, ticketKeyPrefix)
	if !found {
		return "", 0, "", false
	}
	gen, rest, found = strings.Cut(rest, "#")
	if !found || gen == "" {
		return "", 0, "", false
	}
	num, lock, found := strings.Cut(rest, "#")
	if !found || lock == "" {
		return "", 0, "", false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return gen, n, lock, err == nil
}

// wireTable is the table as internal/wire addresses it.
func (c *connFlags) wireTable() wire.Table {
	t := wire.Table{Name: c.table, PK: c.pkName, SK: c.skName, TTL: c.ttlName}
	if c.pkOnly {
		t.SK = ""
	}
	return t
}

// rawItem reads one item as it is stored, strongly consistent; nil when
// there is none. It needs a client made by c.client.
func (c *connFlags) rawItem(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error) {
	out, err := c.sdk.GetItem(ctx, c.wireTable().Get(pk, sk))
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, fail(exitSignalBase+2, "interrupted")
		}
		if wire.AccessDenied(err) {
			return nil, fail(exitNoPerm, "reading %s: %v", lockName(pk, sk), err)
		}
		return nil, fail(exitUnavailable, "reading %s: %v", lockName(pk, sk), err)
	}
	return out.Item, nil
}

// lineCounter is what a line's counter item says: its generation, the
// number served and the last handed out.
type lineCounter struct {
	gen           string
	serving, next int64
}

// decodeCounter reads a counter item's numbers; ok false when they are
// not there (Client.Line has judged the item already).
func decodeCounter(item map[string]types.AttributeValue) (c lineCounter, ok bool) {
	gen, _ := item[wire.AttrLineGen].(*types.AttributeValueMemberS)
	serving, sok := numAttr(item, wire.AttrLineServing)
	next, nok := numAttr(item, wire.AttrLineNext)
	if gen == nil || !sok || !nok {
		return c, false
	}
	return lineCounter{gen: gen.Value, serving: serving, next: next}, true
}

func numAttr(item map[string]types.AttributeValue, name string) (int64, bool) {
	n, _ := item[name].(*types.AttributeValueMemberN)
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	return v, err == nil
}

func strAttr(item map[string]types.AttributeValue, name string) string {
	s, _ := item[name].(*types.AttributeValueMemberS)
	if s == nil {
		return ""
	}
	return s.Value
}

// lineError is get's and release's exit for a failed read of a line: a
// counter that is not one ddblock could have written says how to clear
// it.
func lineError(err error, conn *connFlags, pk, sk string) error {
	if errors.Is(err, ddblock.CodeInvalidItem) {
		return fail(exitDataErr, "%v (clear it with: ddblock release --force %s)", trimmed{err}, lineKeyArgs(conn, pk, sk))
	}
	return libError(err, conn.table)
}

// getLine is get on a line's counter item (KEY ddblock_line#LOCK): the
// line of LOCK, its waiters in order, and the state of what they wait
// for. No line (no counter, no waiter): exit 1.
func getLine(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, lockPK, sk string, asJSON bool) error {
	if lockPK == "" {
		return fail(exitNotFound, "no line of fair waiters %s in table %q: it names no lock", lockName(lineKeyPrefix, sk), conn.table)
	}
	info, err := hooks.Line(ctx, client, lockPK, sk)
	if err != nil {
		return lineError(err, conn, lockPK, sk)
	}
	item, err := conn.rawItem(ctx, lineKeyPrefix+lockPK, sk)
	if err != nil {
		return err
	}
	if len(item) == 0 && len(info.Tickets) == 0 {
		return fail(exitNotFound, "no line of fair waiters for %s in table %q: nobody waits in line for it", lineOf(client, lockPK, sk), conn.table)
	}
	e := &lineEntry{info: info, free: true, lock: "free"}
	if name, ok := hooks.SemaphoreNameOf(client, lockPK, sk); ok {
		e.semaphore = name
		si, err := client.GetSemaphore(ctx, name)
		switch {
		case err == nil:
			e.free = len(si.Holders) < si.Slots
			e.lock = fmt.Sprintf("semaphore, %d of %d slots held", len(si.Holders), si.Slots)
		case errors.Is(err, ddblock.CodeLockNotFound):
			e.lock = "semaphore, no metadata item"
		default:
			e.lock = "unknown (" + oneLine(trimmed{err}.Error()) + ")"
		}
	} else {
		l, err := client.GetLock(ctx, lockPK, sk)
		switch {
		case err == nil:
			e.free = false
			e.lock = "held by " + ownerText(l)
		case errors.Is(err, ddblock.CodeLockNotFound):
		default:
			e.free = false
			e.lock = "unknown (" + oneLine(trimmed{err}.Error()) + ")"
		}
	}
	if asJSON {
		return writeJSON(env.stdout, e.json())
	}
	fmt.Fprintf(env.stdout, "this is the line of fair waiters of %s, not a lock: %d wait in it\n", lineOf(client, lockPK, sk), len(info.Tickets))
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lock\t%s\n", e.lock)
	fmt.Fprintf(tw, "waiting\t%d\n", len(info.Tickets))
	if c, ok := decodeCounter(item); ok {
		fmt.Fprintf(tw, "numbers\tserving %d, last handed out %d\n", c.serving, c.next)
	}
	now := time.Now()
	for i, t := range info.Tickets {
		first := ""
		if i == 0 {
			first = " (first: the next to try)"
		}
		fmt.Fprintf(tw, "waiter %d\t%s%s, came %s, grace %v, id %s\n", i+1, cell(t.OwnerName), first, agoText(t.Since, now), t.Grace, cell(t.ID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "clear the line (its live waiters come again into a new one) with: ddblock release --force %s\n", lineKeyArgs(conn, lockPK, sk))
	return nil
}

// ticketJSON is a ticket as get --json prints it: key and sort_key are
// the ticket item's.
type ticketJSON struct {
	Key     string           `json:"key"`
	SortKey string           `json:"sort_key"`
	Ticket  ticketDetailJSON `json:"ticket"`
}

type ticketDetailJSON struct {
	// LineKey is the partition key of the line's counter item (the sort
	// key is the ticket's); Key and SortKey are the lock's, Semaphore
	// the semaphore's name for a semaphore's line.
	LineKey   string `json:"line_key"`
	Key       string `json:"key"`
	SortKey   string `json:"sort_key"`
	Semaphore string `json:"semaphore,omitempty"`
	Number    int64  `json:"number"`
	// Place is the ticket's place among the waiters in line, 1 for the
	// first; absent when it is not in the line (InLine false): its turn
	// passed, or it is left from an earlier line.
	InLine bool `json:"in_line"`
	Place  int  `json:"place,omitempty"`
	waiterJSON
	// Session is the partition key of the waiter's client's session
	// item, and SessionPresent whether that item is there: when it is
	// gone, the waiter's client is gone and the line skips the ticket.
	Session        string `json:"session,omitempty"`
	SessionPresent bool   `json:"session_present"`
}

// getTicket is get on a ticket item (KEY ddblock_wait#GEN#NUMBER#LOCK):
// the waiter, and where it stands in the line of LOCK. No such ticket:
// exit 1.
func getTicket(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, key, sk string, asJSON bool) error {
	gen, n, lockPK, _ := parseTicketKey(key)
	// The line first: the library's read classifies a missing table.
	info, err := hooks.Line(ctx, client, lockPK, sk)
	if err != nil && !errors.Is(err, ddblock.CodeInvalidItem) {
		return libError(err, conn.table)
	}
	item, err := conn.rawItem(ctx, key, sk)
	if err != nil {
		return err
	}
	id := strAttr(item, wire.AttrTicketID)
	if id == "" {
		if len(item) == 0 {
			return fail(exitNotFound, "no ticket %s in table %q: its waiter left the line, or the line was cleared", lockName(key, sk), conn.table)
		}
		return fail(exitDataErr, "%s is not a ticket ddblock could have written (no %s)", lockName(key, sk), wire.AttrTicketID)
	}
	d := ticketDetailJSON{LineKey: lineKeyPrefix + lockPK, Key: lockPK, SortKey: sk, Number: n}
	if name, ok := hooks.SemaphoreNameOf(client, lockPK, sk); ok {
		d.Semaphore = name
	}
	d.waiterJSON = waiterJSON{ID: id, Owner: strAttr(item, wire.AttrTicketOwner)}
	if ms, ok := numAttr(item, wire.AttrTicketSince); ok {
		d.Since = time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
	}
	grace, graceOK := numAttr(item, wire.AttrTicketGrace)
	d.GraceSeconds = (time.Duration(grace) * time.Millisecond).Seconds()
	d.Session = strAttr(item, wire.AttrTicketSession)
	if d.Session != "" {
		ssk := ddblock.DefaultSortKey
		if conn.pkOnly {
			ssk = ""
		}
		s, err := client.GetLock(ctx, d.Session, ssk)
		d.SessionPresent = err == nil && s.IsSession
	}
	// Where it stands: in line when its line is the one whose counter
	// is there (same generation) and its number is not yet passed.
	counterItem, err := conn.rawItem(ctx, lineKeyPrefix+lockPK, sk)
	if err != nil {
		return err
	}
	c, counterOK := decodeCounter(counterItem)
	where := ""
	switch {
	case !graceOK:
		where = "not in the line: a ticket ddblock could not have written, which the line skips"
	case !counterOK:
		where = "not in the line: its line is gone (or garbled); the ticket is left over, for the table's TTL or for clearing the line"
	case c.gen != gen:
		where = "not in the line: it is left over from an earlier line of the same lock, for the table's TTL or for clearing the line"
	case n < c.serving:
		where = fmt.Sprintf("not in the line: its turn passed (serving %d): its waiter was skipped or left; it comes again at the back if it still waits", c.serving)
	case n > c.next:
		where = fmt.Sprintf("not in the line: number %d was never handed out (last %d)", n, c.next)
	default:
		d.InLine = true
		where = fmt.Sprintf("in line, number %d (serving %d)", n, c.serving)
		if info != nil {
			for i, t := range info.Tickets {
				if t.ID == id {
					d.Place = i + 1
					where = fmt.Sprintf("%d of %d in line (number %d, serving %d)", i+1, len(info.Tickets), n, c.serving)
					if i == 0 {
						where += ": first, the next to try"
					}
				}
			}
		}
	}
	if asJSON {
		return writeJSON(env.stdout, ticketJSON{Key: key, SortKey: sk, Ticket: d})
	}
	fmt.Fprintf(env.stdout, "this is a ticket in the line of fair waiters of %s: one waiter's place, not a lock\n", lineOf(client, lockPK, sk))
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "line\t%s (see: ddblock get %s)\n", lineOf(client, lockPK, sk), lineKeyArgs(conn, lockPK, sk))
	fmt.Fprintf(tw, "place\t%s\n", where)
	fmt.Fprintf(tw, "owner\t%s\n", cell(d.Owner))
	came := "-"
	if ms, ok := numAttr(item, wire.AttrTicketSince); ok {
		came = agoText(time.UnixMilli(ms), time.Now()) + " (its clock)"
	}
	fmt.Fprintf(tw, "came\t%s\n", came)
	fmt.Fprintf(tw, "grace\t%v\n", time.Duration(grace)*time.Millisecond)
	fmt.Fprintf(tw, "id\t%s\n", cell(id))
	switch {
	case d.Session == "":
		fmt.Fprintf(tw, "session\tnone named\n")
	case d.SessionPresent:
		fmt.Fprintf(tw, "session\t%s (item there)\n", cell(d.Session))
	default:
		fmt.Fprintf(tw, "session\t%s (item gone: the waiter's client is gone, and the line skips its tickets)\n", cell(d.Session))
	}
	return tw.Flush()
}

// releaseLine is release --force on a line's counter item (KEY
// ddblock_line#LOCK): it shows the line and clears it, counter and
// tickets, with Client.ClearLine. Live waiters come again into a new
// line. No line at all: exit 1.
func releaseLine(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, lockPK, sk string) error {
	if lockPK == "" {
		return fail(exitNotFound, "no line of fair waiters %s in table %q: it names no lock", lockName(lineKeyPrefix, sk), conn.table)
	}
	what := lineOf(client, lockPK, sk)
	info, err := hooks.Line(ctx, client, lockPK, sk)
	switch {
	case errors.Is(err, ddblock.CodeInvalidItem):
		// What clearing is for: a counter no waiter can use.
		fmt.Fprintf(env.stdout, "the line of fair waiters of %s is not one ddblock could have written: %s\n", what, oneLine(trimmed{err}.Error()))
	case err != nil:
		return libError(err, conn.table)
	case len(info.Tickets) == 0:
		fmt.Fprintf(env.stdout, "nobody waits in the line of fair waiters of %s\n", what)
	default:
		fmt.Fprintf(env.stdout, "%d wait in the line of fair waiters of %s; first %s\n", len(info.Tickets), what, cell(info.Tickets[0].OwnerName))
	}
	item, err := conn.rawItem(ctx, lineKeyPrefix+lockPK, sk)
	if err != nil {
		return err
	}
	n, err := client.ClearLine(ctx, lockPK, sk)
	if err != nil {
		return libError(err, conn.table)
	}
	removed := fmt.Sprintf("its counter and %s", plural(n, "ticket"))
	switch {
	case len(item) == 0 && n == 0:
		return fail(exitNotFound, "no line of fair waiters for %s in table %q", what, conn.table)
	case len(item) == 0:
		removed = plural(n, "ticket") + " left over (its counter was gone)"
	}
	fmt.Fprintf(env.stdout, "cleared the line of fair waiters of %s: removed %s; waiters that are alive come again into a new line\n", what, removed)
	return nil
}

// plural is n things, "1 ticket" or "2 tickets".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// refuseTicketRelease is release on a ticket item: a ticket is not
// removed alone. A live waiter whose ticket went would only come back at
// the back, and the line skips a dead one's by itself; an operator who
// wants the line unstuck clears it whole.
func refuseTicketRelease(client *ddblock.Client, conn *connFlags, key, lockPK, sk string) error {
	return usageError("not removed: %s is one waiter's ticket in the line of fair waiters of %s, not a lock; a ticket is not "+
		"removed alone (see ddblock get %s). To clear the whole line (waiters that are alive come again into a new one): "+
		"ddblock release --force %s", lockName(key, sk), lineOf(client, lockPK, sk), keyArgs(conn, key, sk), lineKeyArgs(conn, lockPK, sk))
}

// waitingText is the "waiting in line" value of get for a lock or a
// semaphore: how many wait in its line, and who is first; "" when nobody
// does.
func waitingText(ctx context.Context, client *ddblock.Client, conn *connFlags, pk, sk string) (string, int) {
	info, err := hooks.Line(ctx, client, pk, sk)
	switch {
	case errors.Is(err, ddblock.CodeInvalidItem):
		return "its line is not one ddblock could have written (see: ddblock get " + lineKeyArgs(conn, pk, sk) + ")", 0
	case err != nil:
		return "unknown (reading the line failed: " + oneLine(trimmed{err}.Error()) + ")", 0
	case len(info.Tickets) == 0:
		return "", 0
	}
	return fmt.Sprintf("%d (first %s; see: ddblock get %s)", len(info.Tickets), cell(info.Tickets[0].OwnerName), lineKeyArgs(conn, pk, sk)), len(info.Tickets)
}

// notFoundWithLine is get's and release's exit for a lock that is not
// there: when fair waiters wait in its line, that is said too, since a
// free lock with a line that does not move is a stuck line.
func notFoundWithLine(ctx context.Context, client *ddblock.Client, conn *connFlags, err error, pk, sk string) error {
	exit := libError(err, conn.table)
	if ddblock.CodeOf(err) != ddblock.CodeLockNotFound || strings.HasPrefix(pk, lineKeyPrefix) || strings.HasPrefix(pk, ticketKeyPrefix) {
		return exit
	}
	info, lerr := hooks.Line(ctx, client, pk, sk)
	if lerr != nil || len(info.Tickets) == 0 {
		return exit
	}
	var e *exitError
	if errors.As(exit, &e) {
		e.msg += fmt.Sprintf("; %d wait in its line, first %s (see: ddblock get %s)", len(info.Tickets), cell(info.Tickets[0].OwnerName), lineKeyArgs(conn, pk, sk))
	}
	return exit
}
