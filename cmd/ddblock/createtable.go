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
then created and usable, ddblock says so, and exits 0.`

func cmdCreateTable(ctx context.Context, env *environ, args []string) error {
	var (
		conn        connFlags
		onDemand    bool
		read, write int64
		poll        time.Duration
		ifNotExists bool
	)
	f := newFlags(env, "create-table", "create-table [flags]", createTableAbout)
	conn.register(f)
	f.BoolVar(&onDemand, "on-demand", false, "PAY_PER_REQUEST billing instead of provisioned capacity")
	f.Int64Var(&read, "read-capacity", 5, "provisioned read capacity units")
	f.Int64Var(&write, "write-capacity", 5, "provisioned write capacity units")
	f.DurationVar(&poll, "poll-interval", 2*time.Second, "how often to look whether the table is ACTIVE yet")
	f.BoolVar(&ifNotExists, "if-not-exists", false, "succeed when the table exists already with the same keys\n(then only TTL is enabled, if it is off)")
	if _, _, err := f.parse(args, 0, false); err != nil {
		return err
	}
	if onDemand && (f.isSet("read-capacity") || f.isSet("write-capacity")) {
		return usageError("--on-demand and --read-capacity/--write-capacity exclude each other")
	}
	ddb, err := conn.dynamo(ctx)
	if err != nil {
		return err
	}
	opts := []ddblock.TableOption{
		ddblock.WithTableNames(ddblock.Options{
			TableName:        conn.table,
			PartitionKeyName: conn.pkName,
			SortKeyName:      conn.skName,
			TTLAttributeName: conn.ttlName,
		}),
		ddblock.WithPollInterval(poll),
	}
	billing := "on-demand"
	if onDemand {
		opts = append(opts, ddblock.WithOnDemand())
	} else {
		opts = append(opts, ddblock.WithProvisionedCapacity(read, write))
		billing = fmt.Sprintf("provisioned %d read / %d write", read, write)
	}
	what := fmt.Sprintf("table %q (%s; keys %s, %s)", conn.table, billing, conn.pkName, conn.skName)
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
			fmt.Fprintf(env.stdout, "table %q exists already, with keys %s, %s\n", conn.table, conn.pkName, conn.skName)
		}
		return nil
	}
	err = ddblock.CreateTable(ctx, ddb, opts...)
	switch {
	case err == nil:
		fmt.Fprintf(env.stdout, "created %s with TTL on %s\n", what, conn.ttlName)
		return nil
	case errors.Is(err, ddblock.ErrTTLUnsupported):
		fmt.Fprintf(env.stdout, "created %s; %s\n", what, noTTL)
		return nil
	case isResourceInUse(err):
		return fail(exitUnavailable, "table %q exists already (--if-not-exists accepts a table with the same keys)", conn.table)
	default:
		return libError(err, conn.table)
	}
}
