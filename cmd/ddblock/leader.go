package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
)

const leaderAbout = `
Prints the current leader of the election NAME (the library's Election:
the lock NAME, whose item holds the leader's value): its value and its
owner, from a strongly consistent read. Exits 1 when nobody leads, and
when the lock NAME was taken without an Election (it has no leader
value): it says so.

With --watch it prints the leader at once and then a line for each
change of leader, value or term (a new leadership, even of the same
owner with the same value), or "none" when leadership ends, each stamped
with the time of the read that saw it (UTC, to the millisecond), from a
read every --every, until interrupted (exit 0). A change that comes and
goes between two reads is not seen. A failed read, or a lock NAME that is
not an election's, is said once on stderr, and again only once something
else was seen. Reads only.`

// leaderTime is how leader --watch stamps its lines: RFC 3339 in UTC, to
// the millisecond.
const leaderTime = "2006-01-02T15:04:05.000Z07:00"

// notElection is the message for a lock NAME held without an Election.
func notElection(name string) string {
	return fmt.Sprintf("%q is not an election: its lock was taken without an Election and has no leader value (see ddblock get %s)",
		name, cell(name))
}

func cmdLeader(ctx context.Context, env *environ, args []string) error {
	var (
		conn  connFlags
		watch bool
		every time.Duration
	)
	f := newFlags(env, "leader", "leader [flags] NAME", leaderAbout)
	conn.register(f)
	f.BoolVar(&watch, "watch", false, "print each change of leader until interrupted")
	f.DurationVar(&every, "every", time.Second, "with --watch, how often to read the leader")
	pos, _, err := f.parse(args, 1, false, "NAME")
	if err != nil {
		return err
	}
	if err := conn.check(); err != nil {
		return err
	}
	if every <= 0 {
		return usageError("--every must be positive, got %v", every)
	}
	if err := checkKeyValue("NAME", pos[0], maxPartitionKeyBytes); err != nil {
		return err
	}
	client, err := conn.client(ctx, logger(env.stderr))
	if err != nil {
		return err
	}
	defer closeClient(client)
	election, err := client.NewElection(pos[0])
	if err != nil {
		return libError(err, conn.table)
	}
	if !watch {
		info, err := election.Leader(ctx)
		if errors.Is(err, ddblock.CodeLockNotFound) {
			return fail(exitNotFound, "no leader of %q", pos[0])
		}
		if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
			return fail(exitNotFound, "no leader: %s", notElection(pos[0]))
		}
		if err != nil {
			return libError(err, conn.table)
		}
		fmt.Fprintf(env.stdout, "%s\t(owner %s)\n", cell(info.Value), cell(info.Owner))
		return nil
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	said := "" // the last failure said, until something else is seen
	for info, err := range election.Observe(ctx, every) {
		now := time.Now().UTC().Format(leaderTime)
		if err == nil {
			said = ""
		}
		switch {
		case errors.Is(err, ddblock.CodeAccessDenied):
			// Refused by AWS: no later read can do better.
			return libError(err, conn.table)
		case err != nil:
			msg := strings.TrimPrefix(err.Error(), "ddblock: ")
			if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
				msg = notElection(pos[0]) + "; watching on"
			}
			if msg != said {
				fmt.Fprintf(env.stderr, "ddblock leader: %s\n", oneLine(msg))
				said = msg
			}
		case info == nil:
			fmt.Fprintf(env.stdout, "%s\tnone\n", now)
		default:
			// The term tells a new leadership of the same owner and value.
			fmt.Fprintf(env.stdout, "%s\tterm %s\t%s\t(owner %s)\n", now, cell(info.Term), cell(info.Value), cell(info.Owner))
		}
	}
	return nil
}
