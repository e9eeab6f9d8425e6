package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/wire"
)

const lsAbout = `
Lists the locks in the table: key, sort key, owner, whether the holder
looks alive, lease, record version number, TTL expiry and additional
attributes, as a table for people or, with --json, as a JSON array for
scripts.

A lock item says who took or heartbeated it last, not that its holder is
alive. The HOLDER column says what can be told, and how:

  live / presumed dead, by heartbeat stamp: holders with fast takeover
    (--max-clock-skew) stamp their wall clock at every heartbeat; a stamp
    younger than the lease is a live holder. Compares two hosts' clocks.
  live / presumed dead, by watch (--watch D): the table is read twice, D
    apart; a live holder's record version number changes with every
    heartbeat. Works for every holder (Python's too) when D is longer
    than its heartbeat period (5s by default, lease/6 for ddblock run);
    with D at least the lease, a presumed dead lock is one that a
    waiting client may take over now.
  unknown: no stamp, and no --watch.

A lock attached to a session (ddblock run --session, WithSessionLease) is
never rewritten: its holder heartbeats its session item instead. Its LEASE
is the session's, marked "(session)", and its HOLDER is judged by the
session item: by its stamp, by its version across a --watch, or presumed
dead when the session item is gone. Session items (keys
ddblock_session#...) are listed too, marked "(session item)": each is the
item of one client, whose HOLDER is that client (live, or presumed dead:
then waiters take all its locks over together), and whose ATTRIBUTES
column lists the locks that name it. With --json, such a lock has a
"session" object (key, lease_seconds, item_present,
record_version_number) and a session item has "session_item": true and
"session_locks" (its locks' keys; absent when none names it).

A semaphore (ddblock run --slots, the library's Semaphore) is listed as
one line after the locks, not as its slots' lock items: its name, its
number of slots, how many are held and by whom (a slot held from before
a resize to fewer slots is marked "above the limit"). With --json it is
an object with the key and sort key of its metadata item and a
"semaphore" object (name, slots, span while a shrink drains, resizes,
held, and holders: each slot's number, "above_limit" when so, and its
lock as locks are listed).

Fair waiters (ddblock run --fair, WithFairWaiting) wait in a line per key,
an item of its own (partition key ddblock_line#KEY) that is not listed as
a lock. Below the locks, ls shows each line where someone waits, a free
lock's and a semaphore's too: the key (for a semaphore, its name and sort
key "slots"), how many wait in it, who is first and since when, and the
LOCK: held by whom, free, or how many of a semaphore's slots are held. A
line that stands still while its lock is free is stuck behind waiters that
died: ddblock get ddblock_line#KEY shows it, ddblock release --force
ddblock_line#KEY clears it. With --json, a lock or semaphore with a line
has "waiting" (how many), and each line is an object of its own after the
locks and semaphores: "key" and "sort_key" of its counter item, and a
"line" object (key, sort_key, semaphore, free, waiting, first, and
waiters: id, owner, since, grace_seconds).`

func cmdLs(ctx context.Context, env *environ, args []string) error {
	var (
		conn   connFlags
		asJSON bool
		key    string
		watch  time.Duration
	)
	f := newFlags(env, "ls", "ls [flags]", lsAbout)
	conn.register(f)
	f.BoolVar(&asJSON, "json", false, "print a JSON array instead of a table")
	f.StringVar(&key, "key", "", "list only the locks with this partition key")
	f.DurationVar(&watch, "watch", 0, "read the table twice, this long apart, to tell live holders (whose record\nversion number changes) from presumably dead ones; pick more than the\nholders' heartbeat period (default 0: judge by heartbeat stamps alone)")
	if _, _, err := f.parse(args, 0, false); err != nil {
		return err
	}
	if err := conn.check(); err != nil {
		return err
	}
	if f.isSet("key") {
		if err := checkKeyValue("--key", key, maxPartitionKeyBytes); err != nil {
			return err
		}
	}
	if err := nonNegative("watch", watch); err != nil {
		return err
	}
	client, err := conn.client(ctx, logger(env.stderr))
	if err != nil {
		return err
	}
	defer closeClient(client)

	read := func() ([]*ddblock.LockInfo, error) {
		seq := client.ListLocks(ctx)
		if f.isSet("key") {
			seq = client.ListLocksByPartitionKey(ctx, key)
		}
		var locks []*ddblock.LockInfo
		for info, err := range seq {
			if errors.Is(err, ddblock.CodeInvalidItem) {
				// One foreign item must not hide the locks.
				fmt.Fprintf(env.stderr, "ddblock ls: skipped an item that is not a lock: %s\n", oneLine(err.Error()))
				continue
			}
			if err != nil {
				return nil, libError(err, conn.table)
			}
			locks = append(locks, info)
		}
		slices.SortFunc(locks, func(a, b *ddblock.LockInfo) int {
			return cmp.Or(cmp.Compare(a.PartitionKey, b.PartitionKey), cmp.Compare(a.SortKey, b.SortKey))
		})
		return locks, nil
	}
	locks, err := read()
	if err != nil {
		return err
	}
	holders := make([]holderJSON, len(locks))
	if watch > 0 {
		before := map[[2]string]*ddblock.LockInfo{}
		for _, l := range locks {
			before[[2]string{l.PartitionKey, l.SortKey}] = l
		}
		fmt.Fprintf(env.stderr, "ddblock ls: reading the table again in %v to see which holders heartbeat\n", watch)
		t := time.NewTimer(watch)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fail(exitSignalBase+2, "interrupted")
		}
		if locks, err = read(); err != nil {
			return err
		}
		holders = make([]holderJSON, len(locks))
		for i, l := range locks {
			holders[i] = holderByWatch(before[[2]string{l.PartitionKey, l.SortKey}], l, watch)
		}
	} else {
		now := time.Now()
		for i, l := range locks {
			holders[i] = holderByStamp(l, now)
		}
	}
	// The lines of fair waiters: a held lock's, a free lock's and a
	// semaphore's alike.
	var lines []*hooks.LineInfo
	for line, err := range hooks.ListLines(ctx, client) {
		if errors.Is(err, ddblock.CodeInvalidItem) {
			// One garbled line must not hide the others, nor the locks.
			fmt.Fprintf(env.stderr, "ddblock ls: skipped a line of fair waiters that is not valid: %s\n", oneLine(err.Error()))
			continue
		}
		if err != nil {
			return libError(err, conn.table)
		}
		if len(line.Tickets) == 0 {
			continue
		}
		if f.isSet("key") && line.PartitionKey != key {
			// With --key NAME, a semaphore NAME's line is listed too,
			// whose key on a partition-key-only table is NAME#slots.
			if name, ok := hooks.SemaphoreNameOf(client, line.PartitionKey, line.SortKey); !ok || name != key {
				continue
			}
		}
		lines = append(lines, line)
	}
	slices.SortFunc(lines, func(a, b *hooks.LineInfo) int {
		return cmp.Or(cmp.Compare(a.PartitionKey, b.PartitionKey), cmp.Compare(a.SortKey, b.SortKey))
	})
	waiting := map[[2]string]int{}
	for _, line := range lines {
		waiting[[2]string{line.PartitionKey, line.SortKey}] = len(line.Tickets)
	}
	// The locks of each session item listed.
	onSession := map[string][]lockKeyJSON{}
	for _, l := range locks {
		if l.Session != nil {
			onSession[l.Session.PartitionKey] = append(onSession[l.Session.PartitionKey], lockKeyJSON{l.PartitionKey, l.SortKey})
		}
	}
	only := ""
	if f.isSet("key") {
		only = key
	}
	allLocks := locks
	locks, holders, sems, err := groupSemaphores(ctx, client, &conn, only, locks, holders, env.stderr)
	if err != nil {
		return err
	}
	entries := lineEntries(client, lines, allLocks, sems)
	if asJSON {
		out := make([]any, 0, len(locks)+len(sems)+len(entries))
		for i, l := range locks {
			j := toJSON(l, holders[i])
			j.Waiting = waiting[[2]string{l.PartitionKey, l.SortKey}]
			if l.IsSession {
				j.SessionLocks = onSession[l.PartitionKey]
			}
			out = append(out, j)
		}
		for _, s := range sems {
			j := s.json(conn.pkOnly)
			j.Semaphore.Waiting = waiting[[2]string{j.Key, j.SortKey}]
			out = append(out, j)
		}
		for _, e := range entries {
			out = append(out, e.json())
		}
		return writeJSON(env.stdout, out)
	}
	if len(locks) == 0 && len(sems) == 0 {
		fmt.Fprintf(env.stdout, "no locks in table %q\n", conn.table)
		return writeLines(env.stdout, entries, conn.pkOnly)
	}
	if len(locks) == 0 {
		if err := printSemaphores(env.stdout, sems); err != nil {
			return err
		}
		return writeLines(env.stdout, entries, conn.pkOnly)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	if conn.pkOnly {
		fmt.Fprintln(tw, "KEY\tOWNER\tHOLDER\tLEASE\tRECORD VERSION NUMBER\tEXPIRES (TTL)\tATTRIBUTES")
	} else {
		fmt.Fprintln(tw, "KEY\tSORT KEY\tOWNER\tHOLDER\tLEASE\tRECORD VERSION NUMBER\tEXPIRES (TTL)\tATTRIBUTES")
	}
	for i, l := range locks {
		sk := cell(l.SortKey) + "\t"
		if conn.pkOnly {
			sk = ""
		}
		attrs := formatAttrs(l.AdditionalAttributes)
		if l.IsSession {
			attrs = sessionItemText(onSession[l.PartitionKey], conn.pkOnly)
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%s\t%s\t%s\t%s\t%s\n", cell(l.PartitionKey), sk, ownerText(l), holders[i].text(),
			leaseText(l), cell(l.RecordVersionNumber), formatExpiry(l.ExpiryTime), attrs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printSemaphores(env.stdout, sems); err != nil {
		return err
	}
	return writeLines(env.stdout, entries, conn.pkOnly)
}

const getAbout = `
Shows one lock: who holds it, whether the holder looks alive (by its
heartbeat stamp, when it writes one: see ddblock ls --help), its lease,
record version number (which 'ddblock release --rvn' takes), TTL expiry
and additional attributes. For a lock attached to a session, the lease is
the session's, the holder is judged by the session item (presumed dead
when it is gone), and the session's key and item follow. Exits 1 when
there is no such lock. Given a semaphore's metadata item (sort key
"slots", or KEY NAME#slots with --partition-key-only), it says so and
shows the semaphore: its number of slots and its held slots. When fair
waiters wait in the lock's line, a "waiting in line" line says how many.

An item at KEY that ddblock cannot read (another client wrote it: an
attribute missing or of the wrong type, a semaphore's metadata item with
no valid number of slots) is shown as it is stored, every attribute in
DynamoDB's JSON, with what is wrong and how to clear it; get then exits
65.

Given a line of fair waiters, KEY ddblock_line#LOCK (with LOCK's sort
key), it shows the line of LOCK: its waiters in order, the first next to
try, and whether LOCK is held (exit 1 when nobody waits in it). Given a
ticket, KEY ddblock_wait#..., it shows that waiter and where it stands in
its line.`

func cmdGet(ctx context.Context, env *environ, args []string) error {
	var (
		conn    connFlags
		asJSON  bool
		sortKey string
	)
	f := newFlags(env, "get", "get [flags] KEY", getAbout)
	conn.register(f)
	conn.sortKeyVar(&sortKey)
	f.BoolVar(&asJSON, "json", false, "print a JSON object")
	pos, _, err := f.parse(args, 1, false, "KEY")
	if err != nil {
		return err
	}
	if err := conn.check(); err != nil {
		return err
	}
	if sortKey, err = conn.lockKey(pos[0], sortKey); err != nil {
		return err
	}
	client, err := conn.client(ctx, logger(env.stderr))
	if err != nil {
		return err
	}
	defer closeClient(client)
	if lockPK, ok := strings.CutPrefix(pos[0], lineKeyPrefix); ok {
		return getLine(ctx, env, client, &conn, lockPK, sortKey, asJSON)
	}
	if _, _, _, ok := parseTicketKey(pos[0]); ok {
		return getTicket(ctx, env, client, &conn, pos[0], sortKey, asJSON)
	}
	info, err := client.GetLock(ctx, pos[0], sortKey)
	if name, ok := semaphoreMetaName(client, err, pos[0], sortKey); ok {
		// getSemaphore reads it again; a metadata item (or a slot) that
		// is not valid is described here instead.
		if _, serr := client.GetSemaphore(ctx, name); ddblock.CodeOf(serr) == ddblock.CodeInvalidItem {
			return getUnreadable(ctx, env, client, &conn, serr, pos[0], sortKey, asJSON)
		}
		return getSemaphore(ctx, env, client, &conn, name, asJSON)
	}
	if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
		return getUnreadable(ctx, env, client, &conn, err, pos[0], sortKey, asJSON)
	}
	if err != nil {
		return notFoundWithLine(ctx, client, &conn, err, pos[0], sortKey)
	}
	holder := holderByStamp(info, time.Now())
	waiting, nWaiting := "", 0
	if !info.IsSession {
		waiting, nWaiting = waitingText(ctx, client, &conn, info.PartitionKey, info.SortKey)
	}
	if asJSON {
		j := toJSON(info, holder)
		j.Waiting = nWaiting
		return writeJSON(env.stdout, j)
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\n", cell(info.PartitionKey))
	if !conn.pkOnly {
		fmt.Fprintf(tw, "sort key\t%s\n", cell(info.SortKey))
	}
	fmt.Fprintf(tw, "owner\t%s\n", ownerText(info))
	fmt.Fprintf(tw, "holder\t%s\n", holder.text())
	if info.IsSession {
		fmt.Fprintf(tw, "kind\tsession item of a client: its locks name it (ddblock ls lists them), and are all free once it stands still for its lease\n")
	}
	fmt.Fprintf(tw, "lease\t%s\n", leaseText(info))
	if s := info.Session; s != nil {
		fmt.Fprintf(tw, "session\t%s\n", cell(s.PartitionKey))
		if s.Item != nil {
			fmt.Fprintf(tw, "session item\tversion %s, owner %s\n", cell(s.Item.RecordVersionNumber), cell(s.Item.OwnerName))
		} else {
			fmt.Fprintf(tw, "session item\tgone: the lock is taken over once a waiter has seen it gone for %v\n", s.LeaseDuration)
		}
		fmt.Fprintf(tw, "lock item lease\t%v (for clients without sessions)\n", info.LeaseDuration)
	}
	fmt.Fprintf(tw, "record version number\t%s\n", cell(info.RecordVersionNumber))
	fmt.Fprintf(tw, "expires (TTL)\t%s\n", formatExpiry(info.ExpiryTime))
	if info.FencingToken > 0 {
		fmt.Fprintf(tw, "fencing token\t%d\n", info.FencingToken)
	}
	if !info.HeartbeatTime.IsZero() {
		fmt.Fprintf(tw, "last heartbeat\t%s (holder's clock)\n", info.HeartbeatTime.UTC().Format(time.RFC3339Nano))
	}
	for _, name := range slices.Sorted(maps.Keys(info.AdditionalAttributes)) {
		fmt.Fprintf(tw, "attribute %s\t%s\n", cell(name), attrText(info.AdditionalAttributes[name]))
	}
	if waiting != "" {
		fmt.Fprintf(tw, "waiting in line\t%s\n", waiting)
	}
	return tw.Flush()
}

// lockJSON is a lock as `ls --json` and `get --json` print it.
type lockJSON struct {
	Key                 string  `json:"key"`
	SortKey             string  `json:"sort_key"`
	Owner               string  `json:"owner"`
	LeaseSeconds        float64 `json:"lease_seconds"`
	RecordVersionNumber string  `json:"record_version_number"`
	// ExpiryTime is RFC 3339 in UTC; absent when the item has no TTL.
	ExpiryTime string `json:"expiry_time,omitempty"`
	// FencingToken is absent when the lock carries none.
	FencingToken int64 `json:"fencing_token,omitempty"`
	// HeartbeatTime is the holder's wall clock at its last write, RFC 3339
	// in UTC, absent unless the holder stamps it (fast takeover).
	HeartbeatTime string `json:"heartbeat_time,omitempty"`
	// Holder says whether the holder looks alive, and how that is known.
	Holder     holderJSON     `json:"holder"`
	Attributes map[string]any `json:"attributes"`
	// Session is the session the lock is attached to; absent for a lock
	// heartbeated on its own.
	Session *sessionJSON `json:"session,omitempty"`
	// SessionItem is true for a session item itself.
	SessionItem bool `json:"session_item,omitempty"`
	// SessionLocks are, for a session item listed by ls, the locks
	// listed with it that name it; absent when none does.
	SessionLocks []lockKeyJSON `json:"session_locks,omitempty"`
	// Waiting is how many fair waiters wait in the lock's line; absent
	// when none does.
	Waiting int `json:"waiting,omitempty"`
}

// lockKeyJSON names one lock.
type lockKeyJSON struct {
	Key     string `json:"key"`
	SortKey string `json:"sort_key"`
}

// sessionItemText is the ATTRIBUTES cell of a session item: what it is,
// and the locks that name it.
func sessionItemText(locks []lockKeyJSON, pkOnly bool) string {
	if len(locks) == 0 {
		return "session item of a client; no lock names it"
	}
	names := make([]string, len(locks))
	for i, l := range locks {
		names[i] = cell(l.Key)
		if !pkOnly {
			names[i] += "/" + cell(l.SortKey)
		}
	}
	return "session item of a client; its locks: " + strings.Join(names, ", ")
}

// sessionJSON is a lock's session as ls and get print it.
type sessionJSON struct {
	// Key is the session item's partition key.
	Key string `json:"key"`
	// LeaseSeconds is the session's lease: how long waiters watch the
	// lock and its session item unchanged before taking the lock over.
	LeaseSeconds float64 `json:"lease_seconds"`
	// ItemPresent is false when the session item is gone.
	ItemPresent bool `json:"item_present"`
	// RecordVersionNumber is the session item's; absent when it is gone.
	RecordVersionNumber string `json:"record_version_number,omitempty"`
}

// ownerText is the OWNER cell: a session item is marked as one.
func ownerText(l *ddblock.LockInfo) string {
	if l.IsSession {
		return cell(l.OwnerName) + " (session item)"
	}
	return cell(l.OwnerName)
}

// leaseText is the LEASE cell: a session's lock is held by its session's
// lease, not by the year written in the lock item for clients without
// sessions.
func leaseText(l *ddblock.LockInfo) string {
	if l.Session != nil {
		return l.Session.LeaseDuration.String() + " (session)"
	}
	return l.LeaseDuration.String()
}

func toJSON(l *ddblock.LockInfo, holder holderJSON) lockJSON {
	out := lockJSON{
		Holder:              holder,
		Key:                 l.PartitionKey,
		SortKey:             l.SortKey,
		Owner:               l.OwnerName,
		LeaseSeconds:        l.LeaseDuration.Seconds(),
		RecordVersionNumber: l.RecordVersionNumber,
		FencingToken:        l.FencingToken,
		Attributes:          map[string]any{},
		SessionItem:         l.IsSession,
	}
	if s := l.Session; s != nil {
		out.Session = &sessionJSON{Key: s.PartitionKey, LeaseSeconds: s.LeaseDuration.Seconds(), ItemPresent: s.Item != nil}
		if s.Item != nil {
			out.Session.RecordVersionNumber = s.Item.RecordVersionNumber
		}
	}
	if !l.HeartbeatTime.IsZero() {
		out.HeartbeatTime = l.HeartbeatTime.UTC().Format(time.RFC3339Nano)
	}
	if !l.ExpiryTime.IsZero() {
		out.ExpiryTime = l.ExpiryTime.UTC().Format(time.RFC3339)
	}
	for k, v := range l.AdditionalAttributes {
		out.Attributes[k] = plain(v)
	}
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// plain turns a DynamoDB attribute value into what encoding/json prints
// naturally: strings, numbers (exactly as stored), booleans, null,
// base64 for binary, arrays for lists and sets, objects for maps.
func plain(v types.AttributeValue) any {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return number(v.Value)
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case *types.AttributeValueMemberNULL:
		return nil
	case *types.AttributeValueMemberB:
		return v.Value
	case *types.AttributeValueMemberSS:
		return v.Value
	case *types.AttributeValueMemberNS:
		out := make([]any, len(v.Value))
		for i, n := range v.Value {
			out[i] = number(n)
		}
		return out
	case *types.AttributeValueMemberBS:
		return v.Value
	case *types.AttributeValueMemberL:
		out := make([]any, len(v.Value))
		for i, e := range v.Value {
			out[i] = plain(e)
		}
		return out
	case *types.AttributeValueMemberM:
		out := make(map[string]any, len(v.Value))
		for k, e := range v.Value {
			out[k] = plain(e)
		}
		return out
	default:
		return fmt.Sprintf("<%T>", v)
	}
}

// number keeps a DynamoDB number's digits exactly; one that JSON cannot
// hold as a number is printed as a string.
func number(s string) any {
	if json.Valid([]byte(s)) {
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return json.Number(s)
		}
	}
	return s
}

// attrText is one attribute value for people: its JSON form.
func attrText(v types.AttributeValue) string {
	b, err := json.Marshal(plain(v))
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	// encoding/json leaves DEL, the C1 and the bidirectional controls
	// as they are; termSafe writes those but DEL as JSON does (\u009b),
	// and DEL is written so here, to keep the value JSON.
	return termSafe(strings.ReplaceAll(string(b), "\x7f", `\u007f`))
}

func formatAttrs(attrs map[string]types.AttributeValue) string {
	if len(attrs) == 0 {
		return "-"
	}
	parts := make([]string, 0, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		parts = append(parts, cell(name)+"="+attrText(attrs[name]))
	}
	return strings.Join(parts, " ")
}

func formatExpiry(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// cell keeps a value on one line of a table, safe for a terminal: keys
// and owners may hold any UTF-8, tabs, newlines and escape sequences
// included (see termSafe). A value with a character termSafe escapes is
// shown quoted, in Go syntax, so that it cannot be mistaken for another.
func cell(s string) string {
	if s == "" {
		return `""`
	}
	if needsEscape(s) {
		return strconv.Quote(s)
	}
	return s
}

// Items ddblock cannot read. Another client, a script or a person may
// write anything at a lock's key: an owner_name that is a number, a
// semaphore's metadata item without a valid number of slots. Such an item
// is the table's data, not ddblock's failure: get shows it as stored,
// release --force removes it, resize rewrites a semaphore's metadata
// item, and every command that meets one exits exitDataErr saying which
// of these clears it.

// unreadableJSON is get --json's object for an item ddblock cannot read.
type unreadableJSON struct {
	Key     string `json:"key"`
	SortKey string `json:"sort_key"`
	// Unreadable is always true: it tells this object from a lock's, a
	// semaphore's or a line's.
	Unreadable bool `json:"unreadable"`
	// Problem is what is wrong with the item, as the library found it.
	Problem string `json:"problem"`
	// Item is every attribute as stored, in DynamoDB's JSON (the AWS
	// CLI's: {"S": "…"}, {"N": "…"}), which keeps the types that decide
	// whether ddblock can read it.
	Item map[string]json.RawMessage `json:"item"`
}

// invalidItem returns the key of the item that err (of CodeInvalidItem)
// is about, and what is wrong with it; the key is pk/sk when err names
// none.
func invalidItem(err error, pk, sk string) (ipk, isk, problem string) {
	var e *ddblock.Error
	if !errors.As(err, &e) {
		return pk, sk, err.Error()
	}
	if e.PartitionKey != "" {
		pk, sk = e.PartitionKey, e.SortKey
	}
	return pk, sk, e.Message
}

// clearHint says how to clear the item ddblock cannot read at pk/sk, item
// as read (nil when not read): a semaphore's metadata item is rewritten by
// resize, unless a lock item stands at its key; a line is cleared whole,
// ticket and counter; any other item is removed by release --force.
func clearHint(client *ddblock.Client, conn *connFlags, pk, sk string, item map[string]types.AttributeValue) string {
	_, isLock := item[wire.AttrRVN]
	if name, ok := hooks.SemaphoreNameOf(client, pk, sk); ok && !isLock {
		return "repair it with: ddblock resize " + cell(name) + " N"
	}
	if lockPK, ok := strings.CutPrefix(pk, lineKeyPrefix); ok {
		return "clear it with: ddblock release --force " + lineKeyArgs(conn, lockPK, sk)
	}
	if _, _, lockPK, ok := parseTicketKey(pk); ok {
		return "clear its line with: ddblock release --force " + lineKeyArgs(conn, lockPK, sk)
	}
	return "remove it with: ddblock release --force " + keyArgs(conn, pk, sk)
}

// unreadableError is the exit of a command that met, where it wanted a
// lock, a semaphore or a line, an item ddblock cannot read (err, of
// CodeInvalidItem): what the command could not do (subject), what is
// wrong with which item, and how to see and clear it.
func unreadableError(client *ddblock.Client, conn *connFlags, subject string, err error, pk, sk string) error {
	pk, sk, _ = invalidItem(err, pk, sk)
	return fail(exitDataErr, "%s: %v: an item ddblock cannot read, which no lease ends; see it with: ddblock get %s; %s",
		subject, trimmed{err}, keyArgs(conn, pk, sk), clearHint(client, conn, pk, sk, nil))
}

// unreadableText is the first line of what get and release show of an
// item ddblock cannot read: which item, and what is wrong with it.
func unreadableText(pk, sk, problem string) string {
	return fmt.Sprintf("%s is not an item ddblock can read: %s", lockName(pk, sk), problem)
}

// writeUnreadable shows an item ddblock cannot read, for people: head (a
// line saying what is wrong), its key, and every other attribute as
// stored, by name, in DynamoDB's JSON; names and values are made
// terminal-safe, head too.
func writeUnreadable(w io.Writer, conn *connFlags, head, pk, sk string, item map[string]types.AttributeValue) error {
	fmt.Fprintln(w, oneLine(head))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\n", cell(pk))
	if !conn.pkOnly {
		fmt.Fprintf(tw, "sort key\t%s\n", cell(sk))
	}
	for _, name := range slices.Sorted(maps.Keys(item)) {
		if name == conn.pkName || (name == conn.skName && !conn.pkOnly) {
			continue
		}
		fmt.Fprintf(tw, "attribute %s\t%s\n", cell(name), rawAttrText(item[name]))
	}
	return tw.Flush()
}

// rawAttrText is one attribute value as stored, for people: DynamoDB's
// JSON of it, made terminal-safe as attrText makes its values.
func rawAttrText(v types.AttributeValue) string {
	b, err := cliAttr(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return termSafe(strings.ReplaceAll(string(b), "\x7f", `\u007f`))
}

// getUnreadable is get on a key where ddblock found an item it cannot
// read (err; the item may be another one, such as a semaphore's slot when
// its metadata item was asked for): it shows that item as stored and
// exits exitDataErr.
func getUnreadable(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, err error, pk, sk string, asJSON bool) error {
	pk, sk, problem := invalidItem(err, pk, sk)
	item, rerr := conn.rawItem(ctx, pk, sk)
	if rerr != nil {
		return rerr
	}
	if len(item) == 0 {
		return fail(exitNotFound, "no item %s in table %q any more: it was removed as it was read", lockName(pk, sk), conn.table)
	}
	hint := clearHint(client, conn, pk, sk, item)
	if asJSON {
		raw, jerr := cliAttrMap(item)
		if jerr != nil {
			return jerr
		}
		if werr := writeJSON(env.stdout, unreadableJSON{Key: pk, SortKey: sk, Unreadable: true, Problem: problem, Item: raw}); werr != nil {
			return werr
		}
	} else {
		if werr := writeUnreadable(env.stdout, conn, unreadableText(pk, sk, problem), pk, sk, item); werr != nil {
			return werr
		}
		fmt.Fprintln(env.stdout, hint)
	}
	return fail(exitDataErr, "%s; %s", unreadableText(pk, sk, problem), hint)
}
