package main

import (
	"context"
	"fmt"

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

--force is required: without it nothing is read or removed.`

func cmdRelease(ctx context.Context, env *environ, args []string) error {
	var (
		conn    connFlags
		sortKey string
		force   bool
		rvn     string
	)
	f := newFlags(env, "release", "release --force [flags] KEY", releaseAbout)
	conn.register(f)
	conn.sortKeyVar(&sortKey)
	f.BoolVar(&force, "force", false, "really remove the lock, whoever holds it")
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
	if !force {
		return usageError("refusing to remove lock %s without --force (it is removed whoever holds it; see ddblock get %s)", lockName(key, sortKey), key)
	}
	client, err := conn.client(ctx, logger(env.stderr))
	if err != nil {
		return err
	}
	defer closeClient(client)

	info, err := client.GetLock(ctx, key, sortKey)
	if err != nil {
		return libError(err, conn.table)
	}
	fmt.Fprintf(env.stdout, "lock %s is held by %s (lease %v, record version number %s)\n",
		lockName(key, sortKey), info.OwnerName, info.LeaseDuration, info.RecordVersionNumber)
	if rvn == "" {
		rvn = info.RecordVersionNumber
	} else if rvn != info.RecordVersionNumber {
		return fail(exitBusy, "not removed: its record version number is %s, not %s: it was heartbeated or changed hands", info.RecordVersionNumber, rvn)
	}
	err = client.ForceRelease(ctx, key, sortKey, rvn)
	switch ddblock.CodeOf(err) {
	case "":
		fmt.Fprintf(env.stdout, "removed lock %s\n", lockName(key, sortKey))
		return nil
	case ddblock.CodeLockStolen:
		return fail(exitBusy, "not removed: the lock was heartbeated or changed hands since it was read (its holder may be alive; see ddblock get %s)", key)
	default:
		return libError(err, conn.table)
	}
}
