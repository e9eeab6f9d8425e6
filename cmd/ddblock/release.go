package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/wire"
)

const releaseAbout = `
Removes a lock whoever holds it: an operator's way out of a stuck lock.

It reads the lock, shows who holds it, and deletes the item only if it
still carries the record version number just read (or the one given with
--rvn), so a lock that was heartbeated or changed hands in between is left
alone (exit 75). A holder that is in fact alive learns of the removal at
its next heartbeat (LOCK_STOLEN); a 'ddblock run' holder then stops its
command and exits 76.

A lock attached to a session (taken with 'ddblock run --session' or
WithSessionLease) is never rewritten by its holder, which heartbeats its
session item instead: removing the lock alone would go unnoticed by a
live holder. So while the session item is there, the lock is left alone
(exit 75), unless --with-session is given: the session item is removed
first, then the lock. The holder then loses every lock attached to that
session at its next heartbeat, not only this one.

A session item itself (KEY ddblock_session#..., as ls lists it) can be
removed the same way: every lock attached to it is then lost by its
holder at its next heartbeat, and taken over by waiters once they have
seen the session item gone for the session's lease.

A line of fair waiters (KEY ddblock_line#LOCK, with LOCK's sort key; see
ddblock ls) is cleared the same way: its counter and every waiter's
ticket are removed. Waiters that are alive come again into a new line, in
the order they come back; those that died are gone from it. A ticket
alone (KEY ddblock_wait#...) is not removed: release says which line to
clear instead (exit 64).

An item at KEY that ddblock cannot read (another client wrote it: an
attribute missing or of another type) is shown as stored, every attribute
in DynamoDB's JSON, and removed only if it is still as read (exit 75
otherwise), so that a holder that took the key in between keeps its lock.
A semaphore's metadata item is not removed even then: ddblock resize
rewrites one that holds no valid number of slots.

--force is required: without it nothing is read or removed.`

// sessionItemRetries bounds how often release re-reads a session item
// that was heartbeated between its read and its removal. The key of a
// session is never reused, so every version of it is the same session:
// the one the operator chose to end.
const sessionItemRetries = 5

func cmdRelease(ctx context.Context, env *environ, args []string) error {
	var (
		conn        connFlags
		sortKey     string
		force       bool
		withSession bool
		rvn         string
	)
	f := newFlags(env, "release", "release --force [flags] KEY", releaseAbout)
	conn.register(f)
	conn.sortKeyVar(&sortKey)
	f.BoolVar(&force, "force", false, "really remove the lock, whoever holds it")
	f.BoolVar(&withSession, "with-session", false, "for a lock attached to a session whose item is there: remove the session\nitem first (its holder loses every lock of that session), then the lock")
	f.StringVar(&rvn, "rvn", "", "remove the lock only if its record version number is this one\n(as shown by ddblock get or ls)")
	pos, _, err := f.parse(args, 1, false, "KEY")
	if err != nil {
		return err
	}
	key := pos[0]
	if err := conn.check(); err != nil {
		return err
	}
	if sortKey, err = conn.lockKey(key, sortKey); err != nil {
		return err
	}
	lockPK, isLine := strings.CutPrefix(key, lineKeyPrefix)
	_, _, ticketLock, isTicket := parseTicketKey(key)
	if isLine || isTicket {
		if rvn != "" || withSession {
			return usageError("--rvn and --with-session apply to a lock; %s is part of a line of fair waiters, not a lock", lockName(key, sortKey))
		}
	}
	if !force && isLine {
		return usageError("refusing to clear the line of fair waiters %s without --force (its waiters are removed from it, whoever they are; see ddblock get %s)",
			lockName(key, sortKey), keyArgs(&conn, key, sortKey))
	}
	if !force && !isTicket {
		return usageError("refusing to remove lock %s without --force (it is removed whoever holds it; see ddblock get %s)", lockName(key, sortKey), key)
	}
	client, err := conn.client(ctx, logger(env.stderr))
	if err != nil {
		return err
	}
	defer closeClient(client)
	if isTicket {
		return refuseTicketRelease(client, &conn, key, ticketLock, sortKey)
	}
	if isLine {
		return releaseLine(ctx, env, client, &conn, lockPK, sortKey)
	}

	info, err := client.GetLock(ctx, key, sortKey)
	if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
		// Not a lock item ddblock can read: a semaphore's metadata item,
		// or anything another client wrote.
		return releaseUnreadable(ctx, env, client, &conn, err, key, sortKey, rvn, withSession)
	}
	if err != nil {
		return notFoundWithLine(ctx, client, &conn, err, key, sortKey)
	}
	if info.IsSession {
		fmt.Fprintf(env.stdout, "%s is the session item of %s (lease %v, record version number %s)\n",
			lockName(key, sortKey), cell(info.OwnerName), info.LeaseDuration, cell(info.RecordVersionNumber))
		if err := removeSessionItem(ctx, client, key, sortKey, info.RecordVersionNumber, rvn); err != nil {
			return releaseError(err, key, conn.table)
		}
		fmt.Fprintf(env.stdout, "removed session item %s: its holder loses every lock attached to it at its next heartbeat\n", lockName(key, sortKey))
		return nil
	}
	fmt.Fprintf(env.stdout, "lock %s is held by %s (lease %s, record version number %s)\n",
		lockName(key, sortKey), cell(info.OwnerName), leaseText(info), cell(info.RecordVersionNumber))
	if s := info.Session; s != nil {
		state := "gone"
		if s.Item != nil {
			state = "there, record version number " + cell(s.Item.RecordVersionNumber)
		}
		fmt.Fprintf(env.stdout, "it is attached to session %s (session item %s)\n", cell(s.PartitionKey), state)
	}
	if rvn != "" && rvn != info.RecordVersionNumber {
		return fail(exitBusy, "not removed: its record version number is %s, not %s: it was heartbeated or changed hands", cell(info.RecordVersionNumber), cell(rvn))
	}
	sessionRemoved := false
	if withSession {
		switch s := info.Session; {
		case s == nil:
			fmt.Fprintf(env.stdout, "the lock is not attached to a session: --with-session has nothing more to remove\n")
		case s.Item == nil:
			fmt.Fprintf(env.stdout, "its session item is already gone\n")
		default:
			// The session item's sort key is the table's default one,
			// whatever the lock's.
			sk := ddblock.DefaultSortKey
			if conn.pkOnly {
				sk = ""
			}
			fmt.Fprintf(env.stdout, "removing session item %s of %s first: its holder loses every lock attached to it at its next heartbeat\n",
				lockName(s.PartitionKey, sk), cell(s.Item.OwnerName))
			err := removeSessionItem(ctx, client, s.PartitionKey, sk, s.Item.RecordVersionNumber, "")
			switch ddblock.CodeOf(err) {
			case "":
				fmt.Fprintf(env.stdout, "removed session item %s\n", lockName(s.PartitionKey, sk))
			case ddblock.CodeLockNotFound:
				// Its holder ended the session meanwhile.
				fmt.Fprintf(env.stdout, "session item %s was already gone\n", lockName(s.PartitionKey, sk))
			default:
				return releaseError(err, s.PartitionKey, conn.table)
			}
			sessionRemoved = true
		}
	}
	if info.RecordVersionNumber == "" {
		return releaseVersionless(ctx, env, &conn, info, sessionRemoved, key, sortKey)
	}
	err = client.ForceRelease(ctx, key, sortKey, info.RecordVersionNumber)
	switch {
	case err == nil:
		fmt.Fprintf(env.stdout, "removed lock %s\n", lockName(key, sortKey))
		return nil
	case sessionRemoved && ddblock.CodeOf(err) == ddblock.CodeLockNotFound:
		// Its holder released it as its session ended.
		fmt.Fprintf(env.stdout, "lock %s was already gone\n", lockName(key, sortKey))
		return nil
	case ddblock.CodeOf(err) == ddblock.CodeLockHeld:
		return sessionThereError(info, key)
	default:
		return releaseError(err, key, conn.table)
	}
}

// sessionThereError is release's refusal of a lock whose session item is
// there: its holder would not learn of the removal.
func sessionThereError(info *ddblock.LockInfo, key string) error {
	sessionKey := ""
	if info.Session != nil {
		sessionKey = info.Session.PartitionKey
	}
	return fail(exitBusy, "not removed: the lock is attached to session %s, whose item is there: its holder heartbeats "+
		"only that session item and would not learn of the lock's removal. To end the session, and with it every lock "+
		"its holder has on it, add --with-session (see ddblock get %s)", cell(sessionKey), key)
}

// releaseError is release's exit for a failed removal.
func releaseError(err error, key, table string) error {
	switch ddblock.CodeOf(err) {
	case ddblock.CodeLockStolen, ddblock.CodeInvalidItem:
		// INVALID_ITEM: what was read as a lock or a session item a moment
		// ago no longer is one: it changed too.
		return fail(exitBusy, "not removed: it was heartbeated or changed hands since it was read (its holder may be alive; see ddblock get %s)", key)
	}
	return libError(err, table)
}

// changedError is release's and resize's exit when the item they were
// about to remove or rewrite is no longer the one they read.
func changedError(doing, pk, sk string, conn *connFlags) error {
	return fail(exitBusy, "not %s: the item %s changed since it was read (see ddblock get %s)", doing, lockName(pk, sk), keyArgs(conn, pk, sk))
}

// releaseVersionless removes a lock item whose record version number is
// empty, which ForceRelease cannot name: as read, like an item ddblock
// cannot read. It checks the item again as stored, so that a lock taken
// since the first read (a new holder writes a version number) is left
// alone.
func releaseVersionless(ctx context.Context, env *environ, conn *connFlags, info *ddblock.LockInfo, sessionRemoved bool, key, sk string) error {
	if s := info.Session; s != nil && s.Item != nil && !sessionRemoved {
		return sessionThereError(info, key)
	}
	item, err := conn.rawItem(ctx, key, sk)
	if err != nil {
		return err
	}
	if v, ok := item[wire.AttrRVN].(*types.AttributeValueMemberS); !ok || v.Value != "" {
		if len(item) == 0 && sessionRemoved {
			// Its holder released it as its session ended.
			fmt.Fprintf(env.stdout, "lock %s was already gone\n", lockName(key, sk))
			return nil
		}
		return changedError("removed", key, sk, conn)
	}
	if err := deleteAsRead(ctx, conn, key, sk, item); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "removed lock %s\n", lockName(key, sk))
	return nil
}

// releaseUnreadable is release --force on an item that is not a lock
// item ddblock can read (err, of CodeInvalidItem). A semaphore's metadata
// item is refused as a valid one is, with the way to repair it when it is
// not valid; any other item is shown as stored and removed, on the
// condition that it is still exactly as read.
func releaseUnreadable(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, err error, key, sk, rvn string, withSession bool) error {
	item, rerr := conn.rawItem(ctx, key, sk)
	if rerr != nil {
		return rerr
	}
	if len(item) == 0 {
		return fail(exitNotFound, "no lock %s in table %q", lockName(key, sk), conn.table)
	}
	_, isLock := item[wire.AttrRVN]
	if name, ok := hooks.SemaphoreNameOf(client, key, sk); ok && !isLock {
		return refuseMetadataRelease(ctx, env, client, conn, name, key, sk, item)
	}
	_, _, problem := invalidItem(err, key, sk)
	if werr := writeUnreadable(env.stdout, conn, unreadableText(key, sk, problem), key, sk, item); werr != nil {
		return werr
	}
	if v, ok := item[wire.AttrRVN].(*types.AttributeValueMemberS); rvn != "" && (!ok || v.Value != rvn) {
		has := "none"
		if _, there := item[wire.AttrRVN]; there {
			has = rawAttrText(item[wire.AttrRVN])
		}
		return fail(exitBusy, "not removed: its record version number is %s, not %s", has, cell(rvn))
	}
	if withSession {
		fmt.Fprintf(env.stdout, "--with-session has nothing more to remove: the item cannot be read as a lock, nor its session\n")
	}
	if err := deleteAsRead(ctx, conn, key, sk, item); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "removed the item at %s\n", lockName(key, sk))
	return nil
}

// refuseMetadataRelease is release --force on a semaphore's metadata item
// (item, at key/sk), which is not a lock: a valid one is refused by
// refuseSemaphoreRelease; one that is not valid, or a semaphore whose slot
// ddblock cannot read, is refused here, saying what to do instead.
func refuseMetadataRelease(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, name, key, sk string, item map[string]types.AttributeValue) error {
	_, serr := client.GetSemaphore(ctx, name)
	if ddblock.CodeOf(serr) != ddblock.CodeInvalidItem {
		return refuseSemaphoreRelease(ctx, env, client, conn, name)
	}
	ipk, isk, problem := invalidItem(serr, key, sk)
	if ipk != key || isk != sk {
		// The metadata item is valid; a slot is not.
		return usageError("not removed: this is the metadata item of semaphore %s, not a lock: removing it frees no slot. "+
			"Its slot %s is not an item ddblock can read (%s): %s", cell(name), lockName(ipk, isk), problem,
			clearHint(client, conn, ipk, isk, nil))
	}
	if werr := writeUnreadable(env.stdout, conn, unreadableText(key, sk, problem), key, sk, item); werr != nil {
		return werr
	}
	return usageError("not removed: this is the metadata item of semaphore %s, not a lock, and it holds no valid number of "+
		"slots: removing it would free no slot; %s", cell(name), clearHint(client, conn, key, sk, item))
}

// maxConditionBytes bounds the condition of a write on an item as read:
// DynamoDB refuses an expression over 4 KB.
const maxConditionBytes = 4000

// watchedAttributes are the attributes that clients of ddblock and Python
// write at a lock's key (lock items, semaphores' metadata items, an
// election's leader value), and the table's TTL attribute: an item read
// without one of them that has it now is not the item read.
func watchedAttributes(ttl string) []string {
	names := []string{wire.AttrOwnerName, wire.AttrLeaseDuration, wire.AttrRVN, wire.AttrFencingToken, wire.AttrReleased,
		wire.AttrHeartbeatTime, wire.AttrSession, wire.AttrSessionLease, wire.AttrIsSession, wire.AttrTenure,
		wire.AttrLeaderValue, wire.AttrSemaphoreSlots, wire.AttrSemaphoreResizes, wire.AttrSemaphoreSpan}
	if ttl != "" && !slices.Contains(names, ttl) {
		names = append(names, ttl)
	}
	return names
}

// asRead is the condition of a write that must find the item at its key
// as it was read, so that release and resize never remove or overwrite an
// item that someone wrote in between (a new holder, say): the item is
// there, each watched attribute is equal to the value read or, if the
// item had none, still absent, and so is each other attribute (a list or
// a map by its type and size), as many as DynamoDB's limit on an
// expression's length allows (an item of a few hundred attributes has its
// last ones, by name, left out). Any writer of a lock item writes a new
// record version number, and of a semaphore's metadata item a new count of
// resizes, so the watched attributes alone tell such a write.
type asRead struct {
	expr   string
	names  map[string]string
	values map[string]types.AttributeValue
}

// asReadCondition returns the asRead condition of item, read from table t.
func asReadCondition(t wire.Table, item map[string]types.AttributeValue) asRead {
	c := asRead{names: map[string]string{"#k": t.PK}, values: map[string]types.AttributeValue{}}
	clauses := []string{"attribute_exists(#k)"}
	size := len(clauses[0])
	add := func(name string) bool {
		n := strconv.Itoa(len(c.names))
		clause := "attribute_not_exists(#a" + n + ")"
		values := map[string]types.AttributeValue{}
		switch v := item[name].(type) {
		case nil:
		case *types.AttributeValueMemberL, *types.AttributeValueMemberM:
			// dynalite cannot compare documents with "=" (DynamoDB
			// can): a list or a map is compared by type and number
			// of elements. No writer of a lock changes a document
			// alone: the record version number changes with it.
			kind, length := "L", 0
			if m, ok := v.(*types.AttributeValueMemberM); ok {
				kind, length = "M", len(m.Value)
			} else {
				length = len(v.(*types.AttributeValueMemberL).Value)
			}
			clause = "attribute_type(#a" + n + ", :t" + n + ") AND size(#a" + n + ") = :v" + n
			values[":t"+n] = &types.AttributeValueMemberS{Value: kind}
			values[":v"+n] = &types.AttributeValueMemberN{Value: strconv.Itoa(length)}
		default:
			clause = "#a" + n + " = :v" + n
			values[":v"+n] = v
		}
		if size+len(" AND ")+len(clause) > maxConditionBytes {
			return false
		}
		c.names["#a"+n] = name
		maps.Copy(c.values, values)
		clauses = append(clauses, clause)
		size += len(" AND ") + len(clause)
		return true
	}
	watched := watchedAttributes(t.TTL)
	for _, name := range watched {
		add(name)
	}
	for _, name := range slices.Sorted(maps.Keys(item)) {
		if name == t.PK || (name == t.SK && t.SK != "") || slices.Contains(watched, name) {
			continue
		}
		if !add(name) {
			break
		}
	}
	c.expr = strings.Join(clauses, " AND ")
	if len(c.values) == 0 {
		// DynamoDB refuses an empty map of values.
		c.values = nil
	}
	return c
}

// deleteAsRead deletes the item at pk/sk on the condition that it is still
// as read (item); an item changed since is left alone (exit 75).
func deleteAsRead(ctx context.Context, conn *connFlags, pk, sk string, item map[string]types.AttributeValue) error {
	t := conn.wireTable()
	c := asReadCondition(t, item)
	_, err := conn.sdk.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		ConditionExpression:       aws.String(c.expr),
		ExpressionAttributeNames:  c.names,
		ExpressionAttributeValues: c.values,
	})
	return asReadError(err, "removed", pk, sk, conn)
}

// asReadError is the exit of a write conditioned on an item as read.
func asReadError(err error, doing, pk, sk string, conn *connFlags) error {
	switch {
	case err == nil:
		return nil
	case wire.ConditionFailed(err):
		return changedError(doing, pk, sk, conn)
	case errors.Is(err, context.Canceled):
		return fail(exitSignalBase+2, "interrupted")
	case wire.AccessDenied(err):
		return fail(exitNoPerm, "writing %s: %v", lockName(pk, sk), err)
	case wire.TableNotFound(err):
		return fail(exitUnavailable, "table %q does not exist (create it with: ddblock create-table --table %s)", conn.table, conn.table)
	default:
		return fail(exitUnavailable, "writing %s: %v", lockName(pk, sk), err)
	}
}

// removeSessionItem removes the session item key/sortKey, read at version
// seen. With want, only that version; without, a session heartbeated in
// between is read again and removed at its new version, a few times: a
// session's key is never reused, so every version of the item is the
// same session, the one the operator chose to end.
func removeSessionItem(ctx context.Context, client *ddblock.Client, key, sortKey, seen, want string) error {
	if want != "" {
		return client.ForceRelease(ctx, key, sortKey, want)
	}
	for attempt := 1; ; attempt++ {
		err := client.ForceRelease(ctx, key, sortKey, seen)
		if ddblock.CodeOf(err) != ddblock.CodeLockStolen || attempt == sessionItemRetries {
			return err
		}
		info, err := client.GetLock(ctx, key, sortKey)
		if err != nil {
			return err
		}
		if !info.IsSession {
			// Another item at the key: changed since it was read.
			return &ddblock.Error{Code: ddblock.CodeLockStolen, Message: "no longer a session item", PartitionKey: key, SortKey: sortKey}
		}
		seen = info.RecordVersionNumber
	}
}
