package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/wire"
)

const resizeAbout = `
Changes the number of slots of the semaphore NAME (the KEY of
'ddblock run --slots', the library's Semaphore) to N, for every client:
runs and Semaphores asking for another number follow the new one from
then on.

Growing takes effect at once. Shrinking writes the new number at once
(from then on no new holder takes a slot numbered N or above) and then
waits for the holders of those slots to release them: they are not
stopped, and keep their slots until their commands end. A holder presumed
dead (its slot unchanged for its lease) has its slot removed, as a waiter
would take it over. Once no slot numbered N or above is held, resize exits
0: from then on at most N hold slots at once.

Should --wait pass (or SIGINT or SIGTERM come) first, it exits 75 and
names the holders still above N; the new number stays in force, and
running resize again waits on.

A metadata item that holds no valid number of slots (another client wrote
it) is shown as stored and rewritten with N, if it is still as read (exit
75 otherwise), and the resize goes on as above. A lock item at its key, or
a slot that ddblock cannot read, is left alone (exit 65): the message
names the release --force that removes it.`

func cmdResize(ctx context.Context, env *environ, args []string) error {
	var (
		conn  connFlags
		wait  time.Duration
		every time.Duration
	)
	f := newFlags(env, "resize", "resize [flags] NAME N", resizeAbout)
	conn.register(f)
	f.DurationVar(&wait, "wait", 0, "how long to wait for the holders above N to release (default 0: until interrupted)")
	f.DurationVar(&every, "every", time.Second, "how often to read the slots while waiting")
	pos, _, err := f.parse(args, 2, false, "NAME", "N")
	if err != nil {
		return err
	}
	if err := conn.check(); err != nil {
		return err
	}
	name := pos[0]
	if err := checkKeyValue("NAME", name, maxPartitionKeyBytes); err != nil {
		return err
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 1 || n > ddblock.MaxSemaphoreSlots {
		return usageError("N must be a whole number from 1 to %d, got %q", ddblock.MaxSemaphoreSlots, pos[1])
	}
	if err := nonNegative("wait", wait); err != nil {
		return err
	}
	if every <= 0 {
		return usageError("--every must be positive, got %v", every)
	}
	client, err := conn.client(ctx, logger(env.stderr), ddblock.WithHeartbeatPeriod(every))
	if err != nil {
		return err
	}
	defer closeClient(client)
	sem, err := client.NewSemaphore(name, n)
	if err != nil {
		return libError(err, conn.table)
	}
	before, err := client.GetSemaphore(ctx, name)
	repaired := false
	if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
		if repaired, err = repairSemaphore(ctx, env, client, &conn, name, n, err); err != nil {
			return err
		}
		// Read again, to name the holders above n that resize waits for.
		before, err = client.GetSemaphore(ctx, name)
	}
	switch {
	case errors.Is(err, ddblock.CodeLockNotFound):
		fmt.Fprintf(env.stdout, "semaphore %s is new: it gets %d slots\n", cell(name), n)
	case err != nil:
		return resizeError(client, &conn, name, err)
	default:
		if !repaired {
			fmt.Fprintf(env.stdout, "semaphore %s: %d slots, now %d\n", cell(name), before.Slots, n)
		}
		if above := slotsAbove(before, n); len(above) > 0 {
			fmt.Fprintf(env.stdout, "waiting for the holders above the new number to release their slots (they are not stopped): %s\n",
				strings.Join(above, ", "))
		}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	err = sem.Resize(ctx, n)
	if ddblock.CodeOf(err) == ddblock.CodeLockHeld {
		return fail(exitBusy, "%v", trimmed{err})
	}
	if err != nil {
		return resizeError(client, &conn, name, err)
	}
	fmt.Fprintf(env.stdout, "semaphore %s has %d slots: no slot numbered %d or above is held, and at most %d holders work at once from now on\n",
		cell(name), n, n, n)
	return nil
}

// slotsAbove names the held slots of a semaphore numbered n or above.
func slotsAbove(info *ddblock.SemaphoreInfo, n int) []string {
	var out []string
	for _, h := range info.Holders {
		if i, ok := hooks.SemaphoreSlot(info, h.PartitionKey, h.SortKey); ok && i >= n {
			out = append(out, fmt.Sprintf("slot %d (owner %s)", i, cell(h.OwnerName)))
		}
	}
	return out
}

// resizeError is resize's exit for a failed read or write: a slot item
// that ddblock cannot read (one whose holder cannot be told) says how to
// remove it.
func resizeError(client *ddblock.Client, conn *connFlags, name string, err error) error {
	if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
		pk, sk := metadataKey(conn, name)
		return unreadableError(client, conn, "semaphore "+cell(name)+" cannot be resized", err, pk, sk)
	}
	return libError(err, conn.table)
}

// metadataKey is the key of semaphore name's metadata item.
func metadataKey(conn *connFlags, name string) (pk, sk string) {
	if conn.pkOnly {
		return name + "#slots", ""
	}
	return name, "slots"
}

// repairSemaphore rewrites the metadata item of semaphore name, which
// holds no valid number of slots (err, of CodeInvalidItem, says what is
// wrong), with n slots, on the condition that it is still as read. The
// count of resizes goes on from the one read (1 when there is none), so
// that clients asking for another number follow the operator's, as after
// any resize. Which slots may be held, the garbled item no longer says: on
// a table with a sort key, Resize finds every slot item whatever its
// index; without one, where it reads slots 0 to the span one by one, the
// span is set to every slot a semaphore can have, and Resize narrows it
// once it has seen them. An error about another item (a slot) is
// resize's exit for it. repaired is false when the item was gone when
// read again: Resize writes a new one.
func repairSemaphore(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, name string, n int, err error) (repaired bool, _ error) {
	pk, sk := metadataKey(conn, name)
	ipk, isk, problem := invalidItem(err, pk, sk)
	if ipk != pk || isk != sk {
		return false, resizeError(client, conn, name, err)
	}
	item, err := conn.rawItem(ctx, pk, sk)
	if err != nil {
		return false, err
	}
	if len(item) == 0 {
		return false, nil
	}
	if _, isLock := item[wire.AttrRVN]; isLock {
		return false, fail(exitDataErr, "semaphore %s cannot be resized: the key of its metadata item, %s, holds a lock item (%s), "+
			"not a semaphore's metadata: see it with: ddblock get %s; remove it with: ddblock release --force %s",
			cell(name), lockName(pk, sk), problem, keyArgs(conn, pk, sk), keyArgs(conn, pk, sk))
	}
	head := fmt.Sprintf("semaphore %s: %s; rewriting it with %d slots", cell(name), problem, n)
	if err := writeUnreadable(env.stdout, conn, head, pk, sk, item); err != nil {
		return false, err
	}
	next := wire.SemaphoreMeta{Slots: n, Resizes: 1}
	if v, ok := item[wire.AttrSemaphoreResizes].(*types.AttributeValueMemberN); ok {
		// A count that r+1 would overflow is as garbled as none.
		if r, err := strconv.Atoi(strings.TrimSpace(v.Value)); err == nil && r >= 0 && r < math.MaxInt32 {
			next.Resizes = r + 1
		}
	}
	if conn.pkOnly && n < ddblock.MaxSemaphoreSlots {
		next.Span = ddblock.MaxSemaphoreSlots
	}
	t := conn.wireTable()
	in := t.ResizeSemaphore(pk, sk, nil, next)
	c := asReadCondition(t, item)
	in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = aws.String(c.expr), c.names, c.values
	if _, err := conn.sdk.PutItem(ctx, in); err != nil {
		return false, asReadError(err, "rewritten", pk, sk, conn)
	}
	return true, nil
}
