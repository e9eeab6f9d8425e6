package ddblock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/timing"
	"github.com/ddblock/ddblock/internal/wire"
)

// TableAPI is the part of *dynamodb.Client that the table helpers use.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// tableOptions describe a lock table, as the TableOption values of
// [CreateTable], [EnsureTable] and [Client.CheckTable] write it. The
// defaults are Python's create_dynamodb_table's.
type tableOptions struct {
	TableName, PartitionKeyName, SortKeyName, TTLAttributeName string
	PartitionKeyOnly                                           bool
	ReadCapacity, WriteCapacity                                int64
	OnDemand                                                   bool
	PollInterval                                               time.Duration
	SingleRegionWrites                                         bool
}

// tableSettings are what the table options write: the tableOptions, and
// whether WithProvisionedCapacity was given, so that it and WithOnDemand
// conflict in either order rather than the last one winning, and
// EnsureTable's on-demand default yields to it.
type tableSettings struct {
	tableOptions
	capacitySet bool
}

// TableOption changes one setting of a table for [CreateTable],
// [EnsureTable] and [Client.CheckTable]; the With functions make them.
// With none, the table is Python's: the default names of [Options], a
// sort key, provisioned capacity 5/5 (on-demand for EnsureTable), its
// status read every 2 s while it becomes ACTIVE.
type TableOption func(*tableSettings)

// WithNamesFromOptions sets the table's name, its key and TTL attribute
// names and PartitionKeyOnly from a client's options, so that the table
// matches the client: CreateTable(ctx, ddb,
// WithNamesFromOptions(client.Options())). A name left empty takes its
// default, as in [Options]: WithNamesFromOptions(Options{TableName: "t"})
// is the table "t" with the default key and TTL attribute names (and no
// sort key with PartitionKeyOnly). (The client option that sets the
// table's name alone is [WithTableName].)
func WithNamesFromOptions(o Options) TableOption {
	return func(t *tableSettings) {
		t.TableName = nameOrDefault(o.TableName, DefaultTableName)
		t.PartitionKeyName = nameOrDefault(o.PartitionKeyName, DefaultPartitionKeyName)
		t.SortKeyName = o.SortKeyName
		if !o.PartitionKeyOnly {
			t.SortKeyName = nameOrDefault(o.SortKeyName, DefaultSortKeyName)
		}
		t.TTLAttributeName = nameOrDefault(o.TTLAttributeName, DefaultTTLAttributeName)
		t.PartitionKeyOnly = o.PartitionKeyOnly
	}
}

// nameOrDefault is name, or def when name is empty: an unset name of
// [Options].
func nameOrDefault(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// WithProvisionedCapacity sets the table's provisioned read and write
// capacity (default 5 and 5) and provisioned billing: given with
// [WithOnDemand], in either order, it is refused.
func WithProvisionedCapacity(read, write int64) TableOption {
	return func(t *tableSettings) { t.ReadCapacity, t.WriteCapacity, t.capacitySet = read, write, true }
}

// WithOnDemand selects PAY_PER_REQUEST billing instead of provisioned
// capacity; see [WithProvisionedCapacity].
func WithOnDemand() TableOption { return func(t *tableSettings) { t.OnDemand = true } }

// WithPollInterval sets how often the table's status is read while
// waiting for it to become ACTIVE. Default 2 s, as Python.
func WithPollInterval(d time.Duration) TableOption {
	return func(t *tableSettings) { t.PollInterval = d }
}

// WithSingleRegionWrites accepts a global table replicated with
// multi-Region eventual consistency (MREC), which [EnsureTable] and
// [Client.CheckTable] otherwise refuse with CodeTableUnsafe: in such a
// table, clients writing in two regions can both take the same lock.
// Give it only when every client of the table, of every service and
// language, takes and heartbeats its locks through one and the same
// region's replica (the others being read-only copies, or a failover
// made by hand once the old region's holders have stopped).
func WithSingleRegionWrites() TableOption {
	return func(t *tableSettings) { t.SingleRegionWrites = true }
}

// tableOptionsFor applies opts over the defaults, in any order to the
// same result: EnsureTable's (ensure) default to on-demand billing yields
// to a capacity given, and conflicts are left to check.
func tableOptionsFor(opts []TableOption, ensure bool) tableSettings {
	t := tableSettings{tableOptions: defaultTableOptions()}
	for _, opt := range opts {
		if opt != nil {
			opt(&t)
		}
	}
	if ensure && !t.capacitySet {
		t.OnDemand = true
	}
	return t
}

func defaultTableOptions() tableOptions {
	return tableOptions{
		TableName:        DefaultTableName,
		PartitionKeyName: DefaultPartitionKeyName,
		SortKeyName:      DefaultSortKeyName,
		TTLAttributeName: DefaultTTLAttributeName,
		ReadCapacity:     5,
		WriteCapacity:    5,
		PollInterval:     2 * time.Second,
	}
}

func (t *tableSettings) check() error {
	var errs []error
	o := defaultSettings()
	o.TableName, o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName, o.PartitionKeyOnly =
		t.TableName, t.PartitionKeyName, t.SortKeyName, t.TTLAttributeName, t.PartitionKeyOnly
	if t.PartitionKeyOnly {
		o.SortKeyName = ""
	}
	errs = append(errs, o.check(timing.Origins{})...)
	if t.OnDemand && t.capacitySet {
		errs = append(errs, invalidArg("OnDemand", fmt.Sprintf("on-demand billing and a provisioned capacity of %d/%d exclude each other (both set)", t.ReadCapacity, t.WriteCapacity)))
	}
	if !t.OnDemand && (t.ReadCapacity <= 0 || t.WriteCapacity <= 0) {
		errs = append(errs, invalidArg("Capacity", fmt.Sprintf("read and write capacity must be positive, got %d/%d", t.ReadCapacity, t.WriteCapacity)))
	}
	if t.PollInterval <= 0 {
		errs = append(errs, invalidArg("PollInterval", fmt.Sprintf("must be positive, got %v", t.PollInterval)))
	}
	return errors.Join(errs...)
}

// CreateTable creates a lock table, as Python's create_dynamodb_table
// does: a string partition key and a string sort key, provisioned 5/5 by
// default, then waits until the table is ACTIVE (honouring ctx), enables
// TTL on the TTL attribute, and checks with DescribeTimeToLive that it is
// on: without TTL, the items of locks whose holders died are never
// deleted.
//
// On a server without UpdateTimeToLive (some emulators, dynalite among
// them) the table is still created and usable; CreateTable then returns
// an error of CodeTTLUnsupported, which callers may treat as success:
//
//	if err := ddblock.CreateTable(ctx, ddb); err != nil && !errors.Is(err, ddblock.CodeTTLUnsupported) { … }
func CreateTable(ctx context.Context, api TableAPI, opts ...TableOption) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	ts := tableOptionsFor(opts, false)
	if err := ts.check(); err != nil {
		return err
	}
	t := ts.tableOptions
	if api == nil {
		return invalidArg("TableAPI", "must not be nil")
	}
	if _, err := api.CreateTable(ctx, t.createInput()); err != nil {
		return &Error{Code: callCode(err), Message: "creating table " + t.TableName, Err: err}
	}
	if _, err := waitActive(ctx, api, t); err != nil {
		return err
	}
	return enableTTL(ctx, api, t)
}

func (t tableOptions) createInput() *dynamodb.CreateTableInput {
	var capacity *wire.Capacity
	if !t.OnDemand {
		capacity = &wire.Capacity{Read: t.ReadCapacity, Write: t.WriteCapacity}
	}
	return t.wire().CreateTable(capacity)
}

// wire returns the table's names on the wire; no sort key for a table
// keyed by the partition key alone.
func (t tableOptions) wire() wire.Table {
	w := wire.Table{Name: t.TableName, PK: t.PartitionKeyName, SK: t.SortKeyName, TTL: t.TTLAttributeName}
	if t.PartitionKeyOnly {
		w.SK = ""
	}
	return w
}

// enableTTL turns on TTL, waits for the table to be ACTIVE again, and
// checks that TTL is on, on the TTL attribute.
func enableTTL(ctx context.Context, api TableAPI, t tableOptions) error {
	_, err := api.UpdateTimeToLive(ctx, t.wire().EnableTTL())
	if err != nil {
		if wire.UnsupportedOperation(err) {
			return &Error{Code: CodeTTLUnsupported, Message: "the server cannot enable TTL on table " + t.TableName +
				"; the table is usable, but expired lock items will not be deleted by the server", Err: err}
		}
		return &Error{Code: callCode(err), Message: "enabling TTL on table " + t.TableName, Err: err}
	}
	if _, err := waitActive(ctx, api, t); err != nil {
		return err
	}
	ttl, err := describeTTL(ctx, api, t)
	if err != nil {
		return err
	}
	if !ttl.on() || ttl.attribute != t.TTLAttributeName {
		return &Error{Code: CodeUnknown, Message: fmt.Sprintf("TTL of table %s was enabled on %q, but DescribeTimeToLive says %s on %q",
			t.TableName, t.TTLAttributeName, ttl.status, ttl.attribute)}
	}
	return nil
}

// ttlState is what DescribeTimeToLive says of a table.
type ttlState struct {
	status      types.TimeToLiveStatus // DISABLED when the server says nothing
	attribute   string
	unsupported bool // the server does not implement TTL
}

// on: enabled, or being enabled (DynamoDB takes a while; the setting is
// made and cannot be changed meanwhile).
func (s ttlState) on() bool {
	return s.status == types.TimeToLiveStatusEnabled || s.status == types.TimeToLiveStatusEnabling
}

func describeTTL(ctx context.Context, api TableAPI, t tableOptions) (ttlState, error) {
	out, err := api.DescribeTimeToLive(ctx, t.wire().DescribeTTL())
	switch {
	case err != nil && wire.UnsupportedOperation(err):
		return ttlState{unsupported: true}, nil
	case err != nil:
		return ttlState{}, &Error{Code: callCode(err), Message: "describing TTL of table " + t.TableName, Err: err}
	}
	s := ttlState{status: types.TimeToLiveStatusDisabled}
	if d := out.TimeToLiveDescription; d != nil {
		if d.TimeToLiveStatus != "" {
			s.status = d.TimeToLiveStatus
		}
		s.attribute = aws.ToString(d.AttributeName)
	}
	return s, nil
}

// waitActive waits for the table to be ACTIVE, and returns its
// description then.
func waitActive(ctx context.Context, api TableAPI, t tableOptions) (*types.TableDescription, error) {
	for {
		out, err := api.DescribeTable(ctx, t.wire().DescribeTable())
		switch {
		case err != nil && !wire.TableNotFound(err):
			if ctx.Err() != nil {
				return nil, &Error{Code: CodeCanceled, Message: "waiting for table " + t.TableName, Err: context.Cause(ctx)}
			}
			return nil, &Error{Code: callCode(err), Message: "describing table " + t.TableName, Err: err}
		case err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusActive:
			return out.Table, nil
		}
		timer := time.NewTimer(t.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, &Error{Code: CodeCanceled, Message: "waiting for table " + t.TableName + " to become ACTIVE", Err: context.Cause(ctx)}
		case <-timer.C:
		}
	}
}

// TableReport says what [EnsureTable] found and did.
type TableReport struct {
	// Created is true when the table did not exist and was created.
	Created bool
	// TTLEnabled is true when TTL is on, on the TTL attribute, as
	// DescribeTimeToLive says after EnsureTable.
	TTLEnabled bool
	// TTLWasOff is true when the table existed with TTL off, and
	// EnsureTable turned it on: until then, the items of locks whose
	// holders died were never deleted.
	TTLWasOff bool
	// TTLAttribute is the attribute the table's TTL is on, as found
	// ("" when TTL is off or unsupported). When it is not the TTL
	// attribute the options name, EnsureTable returns CodeTableMismatch.
	TTLAttribute string
	// TTLUnsupported is true when the table can have no TTL: the server
	// does not implement it (some emulators), or the table is a global
	// table with multi-Region strong consistency, which DynamoDB gives no
	// TTL. The table works, but DynamoDB will not delete abandoned lock
	// items.
	TTLUnsupported bool
	// Replicas lists the regions of a global table's replicas, as
	// DescribeTable lists them; empty for a table of one region.
	Replicas []string
	// MultiRegionConsistency is a global table's consistency mode:
	// EVENTUAL (MREC, the default, also when DescribeTable says none) or
	// STRONG (MRSC); empty for a table of one region.
	MultiRegionConsistency types.MultiRegionConsistency
	// TransactionsUnsupported is true for a global table with
	// multi-Region strong consistency, on which DynamoDB runs no
	// transactions: [Lock.GuardedWrite] cannot work there. Locks
	// themselves need no transactions.
	TransactionsUnsupported bool
}

// EnsureTable makes sure the lock table is there and fits: it describes
// the table, creates it if it is missing (on demand by default, unlike
// CreateTable), waits for ACTIVE, checks that an existing table's key
// schema and key types are the ones the options name, and checks its TTL
// with DescribeTimeToLive: TTL that is off is turned on (the report says
// so, [TableReport.TTLWasOff]); TTL on another attribute cannot be moved
// (DynamoDB takes up to an hour over a TTL change and refuses another one
// meanwhile, and the items of the other attribute's users would stop
// expiring) and is reported. A table that differs gives an error of
// CodeTableMismatch saying what differs, with the report of what was
// found. A server without TTL is reported ([TableReport.TTLUnsupported]),
// not an error.
//
// A global table replicated with multi-Region eventual consistency (MREC)
// is refused with CodeTableUnsafe, unless the options say that all
// clients write through one region ([tableOptions.SingleRegionWrites]).
// One with multi-Region strong consistency (MRSC) is accepted; DynamoDB
// gives such a table no TTL, which EnsureTable then reports
// ([TableReport.TTLUnsupported]) rather than trying to enable it, and no
// transactions, which it reports too
// ([TableReport.TransactionsUnsupported]: no guarded writes).
//
// It is idempotent: run it at every start.
func EnsureTable(ctx context.Context, api TableAPI, opts ...TableOption) (TableReport, error) {
	if err := checkContext(ctx); err != nil {
		return TableReport{}, err
	}
	ts := tableOptionsFor(opts, true)
	var report TableReport
	if err := ts.check(); err != nil {
		return report, err
	}
	t := ts.tableOptions
	if api == nil {
		return report, invalidArg("TableAPI", "must not be nil")
	}
	out, err := api.DescribeTable(ctx, t.wire().DescribeTable())
	existed := true
	switch {
	case wire.TableNotFound(err):
		existed = false
		if _, err := api.CreateTable(ctx, t.createInput()); err != nil {
			var inUse *types.ResourceInUseException
			if !errors.As(err, &inUse) { // created meanwhile by someone else: fine
				return report, &Error{Code: callCode(err), Message: "creating table " + t.TableName, Err: err}
			}
		} else {
			report.Created = true
		}
	case err != nil:
		return report, &Error{Code: callCode(err), Message: "describing table " + t.TableName, Err: err}
	default:
		if err := t.matches(out.Table); err != nil {
			return report, err
		}
		if err := t.checkReplication(out.Table, &report); err != nil {
			return report, err
		}
	}
	table, err := waitActive(ctx, api, t)
	if err != nil {
		return report, err
	}
	if !existed && !report.Created {
		// Someone else created it meanwhile: check what they made.
		if err := t.matches(table); err != nil {
			return report, err
		}
		if err := t.checkReplication(table, &report); err != nil {
			return report, err
		}
	}
	if report.MultiRegionConsistency == types.MultiRegionConsistencyStrong {
		report.TTLUnsupported = true
		return report, nil
	}
	ttl, err := describeTTL(ctx, api, t)
	if err != nil {
		return report, err
	}
	if ttl.on() {
		report.TTLAttribute = ttl.attribute
	}
	switch {
	case ttl.unsupported:
		report.TTLUnsupported = true
		return report, nil
	case ttl.on() && ttl.attribute == t.TTLAttributeName:
		report.TTLEnabled = true
		return report, nil
	case ttl.on():
		return report, t.ttlElsewhere(ttl.attribute)
	case ttl.status == types.TimeToLiveStatusDisabling:
		return report, &Error{Code: CodeTableMismatch, Message: fmt.Sprintf(
			"table %s: TTL is being disabled (on %q), and DynamoDB allows no change until that is done (up to an hour); run again then",
			t.TableName, ttl.attribute)}
	}
	switch err := enableTTL(ctx, api, t); {
	case errors.Is(err, CodeTTLUnsupported):
		// DescribeTimeToLive without UpdateTimeToLive: no TTL all the same.
		report.TTLUnsupported = true
	case err != nil:
		return report, err
	default:
		report.TTLEnabled, report.TTLWasOff, report.TTLAttribute = true, !report.Created, t.TTLAttributeName
	}
	return report, nil
}

// matches checks an existing table's keys against the options.
func (t tableOptions) matches(table *types.TableDescription) error {
	if table == nil {
		return &Error{Code: CodeUnknown, Message: "DescribeTable returned no table " + t.TableName}
	}
	keyTypes := map[string]types.ScalarAttributeType{}
	for _, d := range table.AttributeDefinitions {
		keyTypes[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	var hash, rng string
	for _, k := range table.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rng = aws.ToString(k.AttributeName)
		}
	}
	var diffs []string
	if hash != t.PartitionKeyName {
		diffs = append(diffs, fmt.Sprintf("partition key is %q, want %q", hash, t.PartitionKeyName))
	} else if ty := keyTypes[hash]; ty != types.ScalarAttributeTypeS {
		diffs = append(diffs, fmt.Sprintf("partition key %q is of type %s, want S", hash, ty))
	}
	switch {
	case t.PartitionKeyOnly && rng != "":
		diffs = append(diffs, fmt.Sprintf("has sort key %q, want none", rng))
	case !t.PartitionKeyOnly && rng == "":
		diffs = append(diffs, fmt.Sprintf("has no sort key, want %q (or use PartitionKeyOnly)", t.SortKeyName))
	case !t.PartitionKeyOnly && rng != t.SortKeyName:
		diffs = append(diffs, fmt.Sprintf("sort key is %q, want %q", rng, t.SortKeyName))
	case !t.PartitionKeyOnly && keyTypes[rng] != types.ScalarAttributeTypeS:
		diffs = append(diffs, fmt.Sprintf("sort key %q is of type %s, want S", rng, keyTypes[rng]))
	}
	if len(diffs) > 0 {
		return &Error{Code: CodeTableMismatch, Message: "table " + t.TableName + ": " + strings.Join(diffs, "; ")}
	}
	return nil
}

// ttlElsewhere is the error for a table whose TTL is on another attribute
// than the options name.
func (t tableOptions) ttlElsewhere(attribute string) error {
	return &Error{Code: CodeTableMismatch, Message: fmt.Sprintf(
		"table %s has TTL on %q, not on %q: lock items would never expire (DynamoDB allows one TTL attribute a table; "+
			"use the table's, or disable TTL and enable it on %q, which DynamoDB may refuse for up to an hour after a change)",
		t.TableName, attribute, t.TTLAttributeName, t.TTLAttributeName)}
}

// legacyGlobalTables is the version DescribeTable gives a table of the
// first global tables (2017), always replicated with eventual
// consistency, whose replicas it does not list.
const legacyGlobalTables = "2017.11.29"

// checkReplication refuses a global table replicated with eventual
// consistency (MREC), unless the options say that every client writes
// through one region, and notes in the report what replication the table
// has.
//
// In an MREC table each region's replica takes writes on its own, and
// copies them to the others afterwards (usually within a second), the
// last writer winning. A conditional write is checked against its own
// region's copy only: two clients writing through two regions can each
// find a lock free, or each take over the same stale lock, and both go
// on believing they hold it. In an MRSC table a write is acknowledged
// only once replicated, and conditions see every region's writes: the
// table behaves as one.
func (t tableOptions) checkReplication(table *types.TableDescription, report *TableReport) error {
	report.Replicas, report.TransactionsUnsupported = nil, false
	for _, r := range table.Replicas {
		report.Replicas = append(report.Replicas, aws.ToString(r.RegionName))
	}
	legacy := aws.ToString(table.GlobalTableVersion) == legacyGlobalTables
	if len(report.Replicas) == 0 && !legacy {
		report.MultiRegionConsistency = ""
		return nil
	}
	report.MultiRegionConsistency = table.MultiRegionConsistency
	if report.MultiRegionConsistency == "" {
		report.MultiRegionConsistency = types.MultiRegionConsistencyEventual
	}
	if report.MultiRegionConsistency == types.MultiRegionConsistencyStrong {
		report.TransactionsUnsupported = true
		return nil
	}
	if t.SingleRegionWrites {
		return nil
	}
	where := "replicas in " + strings.Join(report.Replicas, ", ")
	if len(report.Replicas) == 0 {
		where = "global tables version " + legacyGlobalTables
	}
	return &Error{Code: CodeTableUnsafe, Message: fmt.Sprintf(
		"table %s is a global table with multi-Region eventual consistency (%s; consistency %s): "+
			"clients writing through two regions can both take the same lock, each region's conditional writes "+
			"seeing only its own copy until replication catches up. Use a table in one region, or a global table "+
			"with multi-Region strong consistency (MultiRegionConsistency STRONG); or, if every client of the table "+
			"writes through one and the same region, say so with WithSingleRegionWrites",
		t.TableName, where, report.MultiRegionConsistency)}
}

// CheckTable checks, without changing anything, that the client's table
// can hold its locks: it is New's optional table check, to run once after
// [New], before the client's first lock. It describes the table with api
// (which may be the client's *dynamodb.Client) and reports what it finds
// as [EnsureTable] does: CodeTableNotFound when the table is missing;
// CodeTableMismatch when its keys are not the client's, or its TTL is on
// another attribute than [Options.TTLAttributeName]; CodeTableUnsafe for
// a global table with multi-Region eventual consistency, unless opts
// include [WithSingleRegionWrites]. TTL that is off is reported
// ([TableReport.TTLEnabled] false), not an error, and not turned on: use
// EnsureTable for that. The table and its names are the client's: of the
// table options, only SingleRegionWrites applies.
func (c *Client) CheckTable(ctx context.Context, api TableAPI, opts ...TableOption) (TableReport, error) {
	var report TableReport
	if err := checkContext(ctx); err != nil {
		return report, err
	}
	if api == nil || isNilTableAPI(api) {
		return report, invalidArg("TableAPI", "must not be nil")
	}
	t := tableOptionsFor(opts, false).tableOptions
	o := c.opts
	t.TableName, t.PartitionKeyName, t.SortKeyName, t.TTLAttributeName, t.PartitionKeyOnly =
		o.TableName, o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName, o.PartitionKeyOnly
	out, err := api.DescribeTable(ctx, t.wire().DescribeTable())
	switch {
	case wire.TableNotFound(err):
		return report, &Error{Code: CodeTableNotFound, Message: "table " + t.TableName +
			" does not exist (create it with EnsureTable or CreateTable)", Err: err}
	case err != nil:
		if ctx.Err() != nil {
			return report, &Error{Code: CodeCanceled, Message: "describing table " + t.TableName, Err: context.Cause(ctx)}
		}
		return report, &Error{Code: callCode(err), Message: "describing table " + t.TableName, Err: err}
	}
	if err := t.matches(out.Table); err != nil {
		return report, err
	}
	if err := t.checkReplication(out.Table, &report); err != nil {
		return report, err
	}
	if report.MultiRegionConsistency == types.MultiRegionConsistencyStrong {
		report.TTLUnsupported = true
		return report, nil
	}
	ttl, err := describeTTL(ctx, api, t)
	if err != nil {
		return report, err
	}
	switch {
	case ttl.unsupported:
		report.TTLUnsupported = true
	case ttl.on() && ttl.attribute != t.TTLAttributeName:
		report.TTLAttribute = ttl.attribute
		return report, t.ttlElsewhere(ttl.attribute)
	case ttl.on():
		report.TTLEnabled, report.TTLAttribute = true, ttl.attribute
	}
	return report, nil
}

// isNilTableAPI catches a nil *dynamodb.Client inside the interface.
func isNilTableAPI(api TableAPI) bool {
	c, ok := api.(*dynamodb.Client)
	return ok && c == nil
}
