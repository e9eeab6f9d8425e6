package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
)

const leaderAbout = `
Prints the current leader of an election (the library's Election: the
lock of that name, whose item holds the leader's value): its value and
its owner, from a strongly consistent read. Exits 1 when nobody leads.

With --watch it prints the leader at once and then a line for each
change of leader, value or term (a new leadership, even of the same
owner with the same value), or "none" when leadership ends, from a read
every --every, until interrupted (exit 0). A change that comes and goes
between two reads is not seen. Reads only.`

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
	if _, err := conn.lockKey(pos[0], ddblock.DefaultSortKey); err != nil {
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
		if errors.Is(err, ddblock.ErrLockNotFound) {
			return fail(exitNotFound, "no leader of %q", pos[0])
		}
		if err != nil {
			return libError(err, conn.table)
		}
		fmt.Fprintf(env.stdout, "%s\t(owner %s)\n", cell(info.Value), cell(info.Owner))
		return nil
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for info, err := range election.Observe(ctx, every) {
		now := time.Now().UTC().Format(time.RFC3339)
		switch {
		case err != nil:
			fmt.Fprintf(env.stderr, "ddblock leader: %v\n", err)
		case info == nil:
			fmt.Fprintf(env.stdout, "%s\tnone\n", now)
		default:
			// The term tells a new leadership of the same owner and value.
			fmt.Fprintf(env.stdout, "%s\tterm %s\t%s\t(owner %s)\n", now, cell(info.Term), cell(info.Value), cell(info.Owner))
		}
	}
	return nil
}
