package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ddblock/ddblock"
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
	if name, ok := semaphoreMetaName(client, err, key, sortKey); ok {
		return refuseSemaphoreRelease(ctx, env, client, &conn, name)
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
		sessionKey := ""
		if info.Session != nil {
			sessionKey = info.Session.PartitionKey
		}
		return fail(exitBusy, "not removed: the lock is attached to session %s, whose item is there: its holder heartbeats "+
			"only that session item and would not learn of the lock's removal. To end the session, and with it every lock "+
			"its holder has on it, add --with-session (see ddblock get %s)", cell(sessionKey), key)
	default:
		return releaseError(err, key, conn.table)
	}
}

// releaseError is release's exit for a failed removal.
func releaseError(err error, key, table string) error {
	if ddblock.CodeOf(err) == ddblock.CodeLockStolen {
		return fail(exitBusy, "not removed: it was heartbeated or changed hands since it was read (its holder may be alive; see ddblock get %s)", key)
	}
	return libError(err, table)
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
			return fmt.Errorf("%s is no longer a session item", lockName(key, sortKey))
		}
		seen = info.RecordVersionNumber
	}
}
