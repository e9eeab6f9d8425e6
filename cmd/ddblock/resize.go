package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
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
running resize again waits on.`

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
	switch {
	case errors.Is(err, ddblock.ErrLockNotFound):
		fmt.Fprintf(env.stdout, "semaphore %s is new: it gets %d slots\n", cell(name), n)
	case err != nil:
		return libError(err, conn.table)
	default:
		fmt.Fprintf(env.stdout, "semaphore %s: %d slots, now %d\n", cell(name), before.Slots, n)
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
		return libError(err, conn.table)
	}
	fmt.Fprintf(env.stdout, "semaphore %s has %d slots: no slot numbered %d or above is held, and at most %d holders work at once from now on\n",
		cell(name), n, n, n)
	return nil
}

// slotsAbove names the held slots of a semaphore numbered n or above.
func slotsAbove(info *ddblock.SemaphoreInfo, n int) []string {
	var out []string
	for _, h := range info.Holders {
		if i, ok := info.Slot(h.PartitionKey, h.SortKey); ok && i >= n {
			out = append(out, fmt.Sprintf("slot %d (owner %s)", i, cell(h.OwnerName)))
		}
	}
	return out
}
