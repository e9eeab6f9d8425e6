package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ddblock/ddblock"
)

const createTableAbout = `
Creates the lock table as python_dynamodb_lock's helper does: a string
partition key and a string sort key, provisioned capacity 5/5 unless
--on-demand, then waits until the table is ACTIVE and enables TTL on the
TTL attribute, so that DynamoDB deletes abandoned lock items.

Some local servers (dynalite among them) cannot enable TTL: the table is
then created and usable, ddblock says so, and exits 0. A table that
exists already is an error (exit 73), unless --if-not-exists.`

const ensureTableAbout = `
Makes sure the lock table is there and fits, and is safe to run at every
deploy: creates the table if it is missing (on demand, unless capacities
are given), waits until it is ACTIVE, enables TTL where the server can, and
checks that an existing table has the keys ddblock is configured for,
saying what differs (exit 78) when it does not. A global table replicated
with eventual consistency (MREC) is refused (exit 78): two regions could
both grant one lock. --single-region-writes accepts it when every client
writes through one region.`

func cmdEnsureTable(ctx context.Context, env *environ, args []string) error {
	return tableCommand(ctx, env, args, true)
}

func cmdCreateTable(ctx context.Context, env *environ, args []string) error {
	return tableCommand(ctx, env, args, false)
}

// tableCommand is create-table, and with ensure, ensure-table: the same
// flags, but ensure-table defaults to on-demand billing and accepts an
// existing table with the right keys.
func tableCommand(ctx context.Context, env *environ, args []string, ensure bool) error {
	var (
		conn        connFlags
		onDemand    bool
		read, write int64
		poll        time.Duration
		ifNotExists bool
		oneRegion   bool
	)
	name, about := "create-table", createTableAbout
	if ensure {
		name, about = "ensure-table", ensureTableAbout
	}
	f := newFlags(env, name, name+" [flags]", about)
	conn.register(f)
	f.BoolVar(&onDemand, "on-demand", false, "PAY_PER_REQUEST billing instead of provisioned capacity\n(ensure-table's default unless a capacity is given)")
	f.Int64Var(&read, "read-capacity", 5, "provisioned read capacity units")
	f.Int64Var(&write, "write-capacity", 5, "provisioned write capacity units")
	f.DurationVar(&poll, "poll-interval", 2*time.Second, "how often to look whether the table is ACTIVE yet")
	f.BoolVar(&oneRegion, "single-region-writes", false, "accept a global table replicated with eventual consistency (MREC),\nrefused otherwise: every client of the table writes through one and the same region")
	if !ensure {
		f.BoolVar(&ifNotExists, "if-not-exists", false, "succeed when the table exists already with the same keys\n(then only TTL is enabled, if it is off): the same as ensure-table")
	}
	if _, _, err := f.parse(args, 0, false); err != nil {
		return err
	}
	if err := conn.check(); err != nil {
		return err
	}
	if ensure {
		ifNotExists = true
		onDemand = onDemand || !(f.isSet("read-capacity") || f.isSet("write-capacity"))
	}
	if onDemand && (f.isSet("read-capacity") || f.isSet("write-capacity")) {
		return usageError("--on-demand and --read-capacity/--write-capacity exclude each other")
	}
	ddb, err := conn.dynamo(ctx)
	if err != nil {
		return err
	}
	opts := []ddblock.TableOption{
		ddblock.WithNamesFromOptions(conn.tableNames()),
		ddblock.WithPollInterval(poll),
	}
	if oneRegion {
		opts = append(opts, ddblock.WithSingleRegionWrites())
	}
	billing := "on-demand"
	if onDemand {
		opts = append(opts, ddblock.WithOnDemand())
	} else {
		opts = append(opts, ddblock.WithProvisionedCapacity(read, write))
		billing = fmt.Sprintf("provisioned %d read / %d write", read, write)
	}
	what := fmt.Sprintf("table %q (%s; keys %s)", conn.table, billing, conn.keyNames())
	const noTTL = "the server cannot enable TTL, so expired lock items are not deleted automatically: the table is usable"
	if ifNotExists {
		// EnsureTable also checks that an existing table has our keys.
		report, err := ddblock.EnsureTable(ctx, ddb, opts...)
		switch {
		case err != nil:
			return libError(err, conn.table)
		case report.Created && report.TTLUnsupported:
			fmt.Fprintf(env.stdout, "created %s; %s\n", what, noTTL)
		case report.Created:
			fmt.Fprintf(env.stdout, "created %s with TTL on %s\n", what, conn.ttlName)
		default:
			fmt.Fprintf(env.stdout, "table %q exists already, with keys %s\n", conn.table, conn.keyNames())
		}
		return nil
	}
	err = ddblock.CreateTable(ctx, ddb, opts...)
	switch {
	case err == nil:
		fmt.Fprintf(env.stdout, "created %s with TTL on %s\n", what, conn.ttlName)
		return nil
	case errors.Is(err, ddblock.CodeTTLUnsupported):
		fmt.Fprintf(env.stdout, "created %s; %s\n", what, noTTL)
		return nil
	case isResourceInUse(err):
		return fail(exitCantCreate, "table %q exists already (--if-not-exists accepts a table with the same keys)", conn.table)
	default:
		return libError(err, conn.table)
	}
}
