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
		if !errors.Is(err, ddblock.ErrTTLUnsupported) {
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
			func(o *ddblock.TableOptions) { o.TableName = name })
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
	if !errors.Is(err, ddblock.ErrInvalidArgument) || !errors.As(err, &lerr) {
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
