package ddblock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// CreateTable makes Python's table (5/5 provisioned) and turns TTL on
// where the server has TTL, checking it; where the server has none, it
// says TTL_UNSUPPORTED and the table is usable all the same.
func TestCreateTableTTL(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	name := ddbtest.TableName(t)
	err := ddblock.CreateTable(ctx, ddb, ddblock.WithNamesFromOptions(ddblock.Options{
		TableName: name, PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time",
	}), ddblock.WithPollInterval(10*time.Millisecond))
	if srv.HasTTL() {
		if err != nil {
			t.Fatalf("CreateTable on %s, which has TTL: %v", srv.Name(), err)
		}
		if status, attr := ttlOf(t, ddb, name); status != types.TimeToLiveStatusEnabled || attr != "expiry_time" {
			t.Errorf("TTL is %s on %q; want ENABLED on expiry_time", status, attr)
		}
	} else {
		if !errors.Is(err, ddblock.CodeTTLUnsupported) {
			t.Fatalf("err = %v; want TTL_UNSUPPORTED from %s, which has no UpdateTimeToLive", err, srv.Name())
		}
		// dynalite answers DescribeTimeToLive, with TTL off.
		if status, attr := ttlOf(t, ddb, name); status != types.TimeToLiveStatusDisabled {
			t.Errorf("TTL is %s on %q on %s, which has no UpdateTimeToLive; want DISABLED", status, attr, srv.Name())
		}
	}
	out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	tbl := out.Table
	if tbl.TableStatus != types.TableStatusActive || *tbl.ProvisionedThroughput.ReadCapacityUnits != 5 ||
		*tbl.ProvisionedThroughput.WriteCapacityUnits != 5 {
		t.Errorf("table: status %s, throughput %+v; want ACTIVE and Python's 5/5", tbl.TableStatus, tbl.ProvisionedThroughput)
	}
	// And the table is usable.
	c, err := ddblock.New(ddb, ddblock.WithTableName(name), ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx, true)
	if _, err := c.AcquireLock(ctx, "k"); err != nil {
		t.Fatalf("acquire on the new table: %v", err)
	}
}

// ttlOf is the table's TTL status and attribute, as DescribeTimeToLive
// says.
func ttlOf(t *testing.T, ddb *dynamodb.Client, table string) (types.TimeToLiveStatus, string) {
	t.Helper()
	out, err := ddb.DescribeTimeToLive(context.Background(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatalf("DescribeTimeToLive(%s): %v", table, err)
	}
	d := out.TimeToLiveDescription
	if d == nil {
		return types.TimeToLiveStatusDisabled, ""
	}
	return d.TimeToLiveStatus, aws.ToString(d.AttributeName)
}

// EnsureTable checks an existing table's TTL: off is turned on and
// reported; on another attribute is reported as a mismatch and left
// alone. A server without TTL is reported as such, not as an error.
func TestEnsureTableTTL(t *testing.T) {
	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	ctx := context.Background()
	// bare creates a lock table without TTL, as a team may have made it
	// by hand, with TTL then set on attribute attr ("" leaves it off).
	bare := func(t *testing.T, attr string) string {
		t.Helper()
		name := ddbtest.TableName(t)
		_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName: aws.String(name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String("lock_key"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
			},
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String("lock_key"), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String("sort_key"), AttributeType: types.ScalarAttributeTypeS},
			},
			BillingMode: types.BillingModePayPerRequest,
		})
		if err != nil {
			t.Fatal(err)
		}
		if attr != "" {
			_, err := ddb.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(name),
				TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attr), Enabled: aws.Bool(true)}})
			if err != nil {
				t.Fatalf("enabling TTL on %s: %v", attr, err)
			}
		}
		return name
	}
	ensure := func(name string) (ddblock.TableReport, error) {
		return ddblock.EnsureTable(ctx, ddb, ddblock.WithPollInterval(10*time.Millisecond),
			ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.TableName = name }))
	}

	if !srv.HasTTL() {
		// dynalite: no TTL to find or turn on, and a table is fine as it is.
		name := bare(t, "")
		report, err := ensure(name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ddblock.TableReport{TTLUnsupported: true}, report); diff != "" {
			t.Errorf("report on %s (-want +got):\n%s", srv.Name(), diff)
		}
		return
	}

	t.Run("off", func(t *testing.T) {
		name := bare(t, "")
		report, err := ensure(name)
		if err != nil {
			t.Fatal(err)
		}
		want := ddblock.TableReport{TTLEnabled: true, TTLWasOff: true, TTLAttribute: "expiry_time"}
		if diff := cmp.Diff(want, report); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if status, attr := ttlOf(t, ddb, name); status != types.TimeToLiveStatusEnabled || attr != "expiry_time" {
			t.Errorf("TTL is %s on %q; want ENABLED on expiry_time", status, attr)
		}
		again, err := ensure(name)
		want.TTLWasOff = false
		if diff := cmp.Diff(want, again); err != nil || diff != "" {
			t.Errorf("second call: %v (-want +got):\n%s", err, diff)
		}
	})
	t.Run("on another attribute", func(t *testing.T) {
		name := bare(t, "purge_at")
		report, err := ensure(name)
		var lerr *ddblock.Error
		if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeTableMismatch ||
			!strings.Contains(lerr.Message, `has TTL on "purge_at", not on "expiry_time"`) {
			t.Fatalf("err = %v; want TABLE_MISMATCH naming both attributes", err)
		}
		if diff := cmp.Diff(ddblock.TableReport{TTLAttribute: "purge_at"}, report); diff != "" {
			t.Errorf("report (-want +got):\n%s", diff)
		}
		if status, attr := ttlOf(t, ddb, name); status != types.TimeToLiveStatusEnabled || attr != "purge_at" {
			t.Errorf("TTL is %s on %q; want it left ENABLED on purge_at", status, attr)
		}
	})
}

func TestCreateTableErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	err := ddblock.CreateTable(ctx, e.ddb, ddblock.WithNamesFromOptions(ddblock.Options{
		TableName: e.table, PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time",
	}))
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Errorf("creating an existing table: %v; want the AWS ResourceInUseException reachable", err)
	}
	err = ddblock.CreateTable(ctx, e.ddb, ddblock.WithProvisionedCapacity(0, 5), ddblock.WithPollInterval(0),
		ddblock.WithNamesFromOptions(ddblock.Options{TableName: "x", PartitionKeyName: "a", SortKeyName: "a", TTLAttributeName: "t"}))
	var lerr *ddblock.Error
	if !errors.Is(err, ddblock.CodeInvalidArgument) || !errors.As(err, &lerr) {
		t.Fatalf("bad table options: %v", err)
	}
	for _, want := range []string{"TableName", "SortKeyName", "Capacity", "PollInterval"} {
		if !containsSetting(err, want) {
			t.Errorf("no error names %s: %v", want, err)
		}
	}
}

func containsSetting(err error, setting string) bool {
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return false
	}
	for _, e := range joined.Unwrap() {
		var lerr *ddblock.Error
		if errors.As(e, &lerr) && lerr.Setting == setting {
			return true
		}
	}
	return false
}

// stubTable is a TableAPI whose DescribeTable describes an ACTIVE lock
// table with ddblock's default names and the given replication, and whose
// DescribeTimeToLive says TTL is on expiry_time. It records every call
// but DescribeTable, and refuses every change: the global-table checks
// are pure logic, since neither local server has global tables.
type stubTable struct {
	desc  types.TableDescription
	calls []string
}

func newStubTable(change func(*types.TableDescription)) *stubTable {
	s := &stubTable{desc: types.TableDescription{
		TableName:   aws.String("locks"),
		TableStatus: types.TableStatusActive,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("lock_key"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("lock_key"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sort_key"), AttributeType: types.ScalarAttributeTypeS},
		},
	}}
	if change != nil {
		change(&s.desc)
	}
	return s
}

var errStubChange = errors.New("stubTable: no changes")

func (s *stubTable) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	d := s.desc
	return &dynamodb.DescribeTableOutput{Table: &d}, nil
}

func (s *stubTable) CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	s.calls = append(s.calls, "CreateTable")
	return nil, errStubChange
}

func (s *stubTable) UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	s.calls = append(s.calls, "UpdateTimeToLive")
	return nil, errStubChange
}

func (s *stubTable) DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	s.calls = append(s.calls, "DescribeTimeToLive")
	return &dynamodb.DescribeTimeToLiveOutput{TimeToLiveDescription: &types.TimeToLiveDescription{
		AttributeName: aws.String("expiry_time"), TimeToLiveStatus: types.TimeToLiveStatusEnabled,
	}}, nil
}

func replicas(regions ...string) []types.ReplicaDescription {
	var out []types.ReplicaDescription
	for _, r := range regions {
		out = append(out, types.ReplicaDescription{RegionName: aws.String(r), ReplicaStatus: types.ReplicaStatusActive})
	}
	return out
}

// A global table replicated with eventual consistency (MREC) is refused
// by EnsureTable and Client.CheckTable, with TABLE_UNSAFE, unless the
// options say every client writes through one region; one with strong
// consistency (MRSC) is accepted, its missing TTL reported, not tried, and
// its missing transactions reported.
func TestTableGlobalReplication(t *testing.T) {
	ctx := context.Background()
	// The client is never used to call DynamoDB: only its names are.
	c, err := ddblock.New(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), ddblock.WithTableName("locks"),
		ddblock.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx, false)
	ttlOn := ddblock.TableReport{TTLEnabled: true, TTLAttribute: "expiry_time"}
	mrec := replicas("us-east-1", "eu-west-1")
	cases := []struct {
		name       string
		table      func(*types.TableDescription)
		singleOK   bool         // WithSingleRegionWrites
		wantCode   ddblock.Code // "" for no error
		wantInMsg  []string
		wantReport ddblock.TableReport
		wantCalls  []string
	}{
		{
			name:       "one region",
			wantReport: ttlOn,
			wantCalls:  []string{"DescribeTimeToLive"},
		},
		{
			name: "MREC",
			table: func(d *types.TableDescription) {
				d.Replicas, d.MultiRegionConsistency = mrec, types.MultiRegionConsistencyEventual
			},
			wantCode:  ddblock.CodeTableUnsafe,
			wantInMsg: []string{"table locks is a global table with multi-Region eventual consistency", "us-east-1, eu-west-1", "WithSingleRegionWrites"},
			wantReport: ddblock.TableReport{Replicas: []string{"us-east-1", "eu-west-1"},
				MultiRegionConsistency: types.MultiRegionConsistencyEventual},
		},
		{
			name:      "MREC by default",
			table:     func(d *types.TableDescription) { d.Replicas = mrec },
			wantCode:  ddblock.CodeTableUnsafe,
			wantInMsg: []string{"consistency EVENTUAL"},
			wantReport: ddblock.TableReport{Replicas: []string{"us-east-1", "eu-west-1"},
				MultiRegionConsistency: types.MultiRegionConsistencyEventual},
		},
		{
			name:       "legacy global table",
			table:      func(d *types.TableDescription) { d.GlobalTableVersion = aws.String("2017.11.29") },
			wantCode:   ddblock.CodeTableUnsafe,
			wantInMsg:  []string{"global tables version 2017.11.29"},
			wantReport: ddblock.TableReport{MultiRegionConsistency: types.MultiRegionConsistencyEventual},
		},
		{
			name:       "replicas removed",
			table:      func(d *types.TableDescription) { d.GlobalTableVersion = aws.String("2019.11.21") },
			wantReport: ttlOn,
			wantCalls:  []string{"DescribeTimeToLive"},
		},
		{
			name:     "MREC, single-region writes",
			table:    func(d *types.TableDescription) { d.Replicas = mrec },
			singleOK: true,
			wantReport: ddblock.TableReport{TTLEnabled: true, TTLAttribute: "expiry_time",
				Replicas: []string{"us-east-1", "eu-west-1"}, MultiRegionConsistency: types.MultiRegionConsistencyEventual},
			wantCalls: []string{"DescribeTimeToLive"},
		},
		{
			name: "MRSC",
			table: func(d *types.TableDescription) {
				d.Replicas, d.MultiRegionConsistency = replicas("us-east-1", "us-east-2"), types.MultiRegionConsistencyStrong
			},
			wantReport: ddblock.TableReport{TTLUnsupported: true, TransactionsUnsupported: true,
				Replicas: []string{"us-east-1", "us-east-2"}, MultiRegionConsistency: types.MultiRegionConsistencyStrong},
		},
		{
			name: "MREC with other keys",
			table: func(d *types.TableDescription) {
				d.Replicas = mrec
				d.KeySchema = d.KeySchema[:1]
			},
			wantCode:  ddblock.CodeTableMismatch,
			wantInMsg: []string{"has no sort key"},
		},
	}
	for _, tc := range cases {
		for _, how := range []string{"EnsureTable", "CheckTable"} {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				stub := newStubTable(tc.table)
				var opts []ddblock.TableOption
				if tc.singleOK {
					opts = append(opts, ddblock.WithSingleRegionWrites())
				}
				var report ddblock.TableReport
				var err error
				if how == "EnsureTable" {
					opts = append(opts, ddblock.WithPollInterval(time.Millisecond),
						ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.TableName = "locks" }))
					report, err = ddblock.EnsureTable(ctx, stub, opts...)
				} else {
					report, err = c.CheckTable(ctx, stub, opts...)
				}
				if got := ddblock.CodeOf(err); got != tc.wantCode {
					t.Fatalf("err = %v; want code %q", err, tc.wantCode)
				}
				if tc.wantCode == ddblock.CodeTableUnsafe && !errors.Is(err, ddblock.CodeTableUnsafe) {
					t.Errorf("errors.Is(%v, CodeTableUnsafe) = false", err)
				}
				for _, want := range tc.wantInMsg {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("err = %v; want it to say %q", err, want)
					}
				}
				if diff := cmp.Diff(tc.wantReport, report); diff != "" {
					t.Errorf("report (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantCalls, stub.calls); diff != "" {
					t.Errorf("calls besides DescribeTable (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// Client.CheckTable on the real server: the client's table as
// ddbtest.CreateTable made it passes, with TTL as the server has it; a
// missing table, other keys and a nil API are refused with their codes;
// nothing is changed.
func TestCheckTable(t *testing.T) {
	e := newEnv(t)
	srv := ddbtest.Shared(t)
	ctx := context.Background()
	report, err := e.client().CheckTable(ctx, e.ddb)
	if err != nil {
		t.Fatal(err)
	}
	want := ddblock.TableReport{} // dynalite: DescribeTimeToLive says DISABLED
	if srv.HasTTL() {
		want = ddblock.TableReport{TTLEnabled: true, TTLAttribute: ddblock.DefaultTTLAttributeName}
	}
	if diff := cmp.Diff(want, report); diff != "" {
		t.Errorf("report on %s (-want +got):\n%s", srv.Name(), diff)
	}

	missing := e.client(ddblock.WithTableName(ddbtest.TableName(t)))
	if _, err := missing.CheckTable(ctx, e.ddb); !errors.Is(err, ddblock.CodeTableNotFound) {
		t.Errorf("missing table: %v; want TABLE_NOT_FOUND", err)
	}
	otherKeys := e.client(ddblock.WithSortKeyName("range_key"))
	if _, err := otherKeys.CheckTable(ctx, e.ddb); !errors.Is(err, ddblock.CodeTableMismatch) ||
		!strings.Contains(err.Error(), `sort key is "sort_key", want "range_key"`) {
		t.Errorf("other sort key: %v; want TABLE_MISMATCH naming both", err)
	}
	if _, err := e.client().CheckTable(ctx, nil); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Errorf("nil API: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := e.client().CheckTable(ctx, (*dynamodb.Client)(nil)); !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Errorf("nil *dynamodb.Client: %v; want INVALID_ARGUMENT", err)
	}
}
