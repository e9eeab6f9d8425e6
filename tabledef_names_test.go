package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// WithNamesFromOptions gives an empty name the default that Options and
// TableOptions document for it, as a client does, instead of refusing
// it: the table it describes is the one a client with the same options
// uses.
func TestWithNamesFromOptionsDefaults(t *testing.T) {
	got := ddblock.TableOptionsAppliedForTest(ddblock.WithNamesFromOptions(ddblock.Options{}))
	want := ddblock.TableOptions{
		TableName:        ddblock.DefaultTableName,
		PartitionKeyName: ddblock.DefaultPartitionKeyName,
		SortKeyName:      ddblock.DefaultSortKeyName,
		TTLAttributeName: ddblock.DefaultTTLAttributeName,
	}
	if got != want {
		t.Errorf("WithNamesFromOptions(Options{}): %+v; want the defaults %+v", got, want)
	}

	srv := ddbtest.Shared(t)
	ddb := srv.Client(0)
	for _, tc := range []struct {
		name    string
		opts    ddblock.Options // TableName is filled in
		client  []ddblock.Option
		wantKey []types.KeySchemaElement
	}{
		{
			name: "table name alone",
			wantKey: []types.KeySchemaElement{
				{AttributeName: aws.String("lock_key"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
			},
		},
		{
			name:   "partition key only",
			opts:   ddblock.Options{PartitionKeyOnly: true},
			client: []ddblock.Option{ddblock.WithPartitionKeyOnly()},
			wantKey: []types.KeySchemaElement{
				{AttributeName: aws.String("lock_key"), KeyType: types.KeyTypeHash},
			},
		},
		{
			name:   "partition key name alone",
			opts:   ddblock.Options{PartitionKeyName: "id"},
			client: []ddblock.Option{ddblock.WithPartitionKeyName("id")},
			wantKey: []types.KeySchemaElement{
				{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			name := ddbtest.TableName(t)
			opts := tc.opts
			opts.TableName = name
			err := ddblock.CreateTable(ctx, ddb, ddblock.WithNamesFromOptions(opts),
				ddblock.WithOnDemand(), ddblock.WithPollInterval(10*time.Millisecond))
			if srv.HasTTL() {
				if err != nil {
					t.Fatalf("CreateTable(WithNamesFromOptions(%s)) on %s: %v", namesOf(opts), srv.Name(), err)
				}
				if status, attr := ttlOf(t, ddb, name); status != types.TimeToLiveStatusEnabled || attr != ddblock.DefaultTTLAttributeName {
					t.Errorf("TTL is %s on %q; want ENABLED on the default %q", status, attr, ddblock.DefaultTTLAttributeName)
				}
			} else if !errors.Is(err, ddblock.CodeTTLUnsupported) {
				t.Fatalf("CreateTable(WithNamesFromOptions(%s)) on %s, which has no TTL: %v; want TTL_UNSUPPORTED", namesOf(opts), srv.Name(), err)
			}

			out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
			if err != nil {
				t.Fatal(err)
			}
			if !sameKeySchema(out.Table.KeySchema, tc.wantKey) {
				t.Errorf("key schema %s; want %s", keySchemaString(out.Table.KeySchema), keySchemaString(tc.wantKey))
			}

			// A client with the same options, the rest left to their
			// defaults, finds the table as it expects and locks in it.
			c, err := ddblock.New(ddb, append([]ddblock.Option{ddblock.WithTableName(name), ddblock.WithLogger(quiet)}, tc.client...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx, true)
			if _, err := c.CheckTable(ctx, ddb); err != nil && !errors.Is(err, ddblock.CodeTTLUnsupported) {
				t.Errorf("CheckTable for a client with the same options: %v", err)
			}
			if _, err := c.AcquireLock(ctx, "k"); err != nil {
				t.Errorf("acquire on the new table: %v", err)
			}
		})
	}
}

func sameKeySchema(a, b []types.KeySchemaElement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if aws.ToString(a[i].AttributeName) != aws.ToString(b[i].AttributeName) || a[i].KeyType != b[i].KeyType {
			return false
		}
	}
	return true
}

func keySchemaString(ks []types.KeySchemaElement) string {
	s := ""
	for _, k := range ks {
		s += aws.ToString(k.AttributeName) + " " + string(k.KeyType) + "; "
	}
	return s
}

// namesOf is the part of o that WithNamesFromOptions reads.
func namesOf(o ddblock.Options) string {
	return fmt.Sprintf("Options{TableName: %q, PartitionKeyName: %q, SortKeyName: %q, TTLAttributeName: %q, PartitionKeyOnly: %v}",
		o.TableName, o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName, o.PartitionKeyOnly)
}
