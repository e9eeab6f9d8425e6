// Package compat_test proves that ddblock and python_dynamodb_lock (0.9.x)
// can share one lock table: Go reads the items Python writes, writes items
// Python can read, times a Python holder's lease exactly as Python would,
// and never holds a lock at the same time as a Python client.
//
// Python cannot be installed where these tests run, so the Python side is
// played by pyClient (pyclient_test.go): Go code that makes exactly the
// DynamoDB calls python_dynamodb_lock makes, with the same expressions,
// encodings, defaults and timing rules. Everything runs against the real
// DynamoDB-compatible server that internal/ddbtest starts.
package compat_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// names are a lock table's name and attribute names, shared by the Go
// clients and the Python peers of one test.
type names struct {
	Table, PK, SK, TTL string
}

// defaultNames are python_dynamodb_lock's attribute names, on a table of
// the test's own.
func defaultNames(t *testing.T) names {
	return names{
		Table: ddbtest.TableName(t),
		PK:    ddblock.DefaultPartitionKeyName,
		SK:    ddblock.DefaultSortKeyName,
		TTL:   ddblock.DefaultTTLAttributeName,
	}
}

// customNames are the names a team may have chosen when it created its
// table by hand; both sides must be configured with them.
func customNames(t *testing.T) names {
	return names{Table: ddbtest.TableName(t), PK: "resource_id", SK: "shard", TTL: "purge_at"}
}

// goOptions configures a Go client for the table.
func (n names) goOptions() []ddblock.Option {
	return []ddblock.Option{
		ddblock.WithTableName(n.Table),
		ddblock.WithPartitionKeyName(n.PK),
		ddblock.WithSortKeyName(n.SK),
		ddblock.WithTTLAttributeName(n.TTL),
		ddblock.WithLogger(quiet),
	}
}

// quiet drops the library's log records: several tests provoke warnings
// on purpose (takeovers, abandoned locks).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// server returns an SDK client for the shared test server.
func server(t *testing.T) *dynamodb.Client {
	t.Helper()
	return ddbtest.Shared(t).Client(0)
}

// createTable creates the table with ddblock's helper, as a team moving
// to Go would; the server may lack UpdateTimeToLive (dynalite does).
func createTable(t *testing.T, ddb *dynamodb.Client, n names) {
	t.Helper()
	ddbtest.CreateTable(t, ddb, n.Table,
		ddblock.WithNamesFromOptions(ddblock.Options{TableName: n.Table, PartitionKeyName: n.PK, SortKeyName: n.SK, TTLAttributeName: n.TTL}))
}

// newGoClient returns a Go client on the table, closed when the test ends.
func newGoClient(t *testing.T, ddb ddblock.DynamoDBAPI, n names, opts ...ddblock.Option) *ddblock.Client {
	t.Helper()
	c, err := ddblock.New(ddb, append(n.goOptions(), opts...)...)
	if err != nil {
		t.Fatalf("ddblock.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx, false); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// rawItem reads an item exactly as stored, with a strongly consistent
// GetItem; nil when there is none.
func rawItem(t *testing.T, ddb *dynamodb.Client, n names, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	return ddbtest.RawItem(t, ddb, n.Table, map[string]types.AttributeValue{
		n.PK: &types.AttributeValueMemberS{Value: pk},
		n.SK: &types.AttributeValueMemberS{Value: sk},
	})
}

// putRaw stores an item as it is, unconditionally, as if another client
// had written it.
//
// All but its expiry: a fixture's expiry (Python's int(time.time() +
// expiry_period) when it was recorded) is long past, and a server with
// TTL deletes expired items (DynamoDB Local within a second or so,
// DynamoDB within days), which no live holder's item is. So a past expiry
// is replaced, in the item itself, by the one a live Python holder writes
// now: now plus an hour, in whole seconds. putRaw returns the expiry the
// item carries (the zero time when it has none).
func putRaw(t *testing.T, ddb *dynamodb.Client, n names, item map[string]types.AttributeValue) time.Time {
	t.Helper()
	var expiry time.Time
	if v, ok := item[n.TTL].(*types.AttributeValueMemberN); ok {
		secs, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			t.Fatalf("the fixture's %s is %q: %v", n.TTL, v.Value, err)
		}
		expiry = time.Unix(secs, 0)
		if expiry.Before(time.Now()) {
			expiry = time.Now().Add(time.Hour).Truncate(time.Second)
			item[n.TTL] = &types.AttributeValueMemberN{Value: strconv.FormatInt(expiry.Unix(), 10)}
		}
	}
	if _, err := ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &n.Table, Item: item}); err != nil {
		t.Fatalf("PutItem: %v", err)
	}
	return expiry
}

func ptr[T any](v T) *T { return &v }

// attrOpts compare AttributeValues: their unexported fields are the SDK's
// markers, and sets (SS, NS, BS) have no order in DynamoDB.
var attrOpts = cmp.Options{
	cmpopts.IgnoreUnexported(
		types.AttributeValueMemberS{}, types.AttributeValueMemberN{}, types.AttributeValueMemberB{},
		types.AttributeValueMemberBOOL{}, types.AttributeValueMemberNULL{}, types.AttributeValueMemberM{},
		types.AttributeValueMemberL{}, types.AttributeValueMemberSS{}, types.AttributeValueMemberNS{},
		types.AttributeValueMemberBS{},
	),
	cmpopts.SortSlices(func(a, b string) bool { return a < b }),
	cmpopts.SortSlices(func(a, b []byte) bool { return string(a) < string(b) }),
	cmpopts.EquateEmpty(),
}

// typeOf names an AttributeValue's DynamoDB type, as in DynamoDB's JSON.
func typeOf(v types.AttributeValue) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberM:
		return "M"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	default:
		return "?"
	}
}

// shape is an item's attribute names with their DynamoDB types: what must
// match between Python's items and ours.
func shape(item map[string]types.AttributeValue) map[string]string {
	out := make(map[string]string, len(item))
	for k, v := range item {
		out[k] = typeOf(v)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
