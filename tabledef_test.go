package ddblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

func TestCreateTableWithoutTTLSupport(t *testing.T) {
	srv := ddbtest.Shared(t)
	if srv.External {
		t.Skip("this test is about dynalite, which has no UpdateTimeToLive")
	}
	ddb := srv.Client(0)
	ctx := context.Background()
	name := ddbtest.TableName(t)
	err := ddblock.CreateTable(ctx, ddb, ddblock.WithTableNames(ddblock.Options{
		TableName: name, PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time",
	}), ddblock.WithPollInterval(10*time.Millisecond))
	if !errors.Is(err, ddblock.ErrTTLUnsupported) {
		t.Fatalf("err = %v; want TTL_UNSUPPORTED from a server without UpdateTimeToLive", err)
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

func TestCreateTableErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	err := ddblock.CreateTable(ctx, e.ddb, ddblock.WithTableNames(ddblock.Options{
		TableName: e.table, PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time",
	}))
	var inUse *types.ResourceInUseException
	if !errors.As(err, &inUse) {
		t.Errorf("creating an existing table: %v; want the AWS ResourceInUseException reachable", err)
	}
	err = ddblock.CreateTable(ctx, e.ddb, ddblock.WithProvisionedCapacity(0, 5), ddblock.WithPollInterval(0),
		ddblock.WithTableNames(ddblock.Options{TableName: "x", PartitionKeyName: "a", SortKeyName: "a", TTLAttributeName: "t"}))
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
