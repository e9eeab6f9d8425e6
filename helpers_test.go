package ddblock_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// env is one test's table on the shared server.
type env struct {
	t     *testing.T
	ddb   *dynamodb.Client
	table string
	data  string           // a table for the data guarded writes change (guard_test.go)
	names []ddblock.Option // table and attribute names, for every client
}

// newEnv creates a table of the test's own with the given names.
func newEnv(t *testing.T, tableOpts ...ddblock.TableOption) *env {
	t.Helper()
	srv := ddbtest.Shared(t)
	e := &env{t: t, ddb: srv.Client(0), table: ddbtest.TableName(t)}
	to := ddblock.TableOptionsAppliedForTest(tableOpts...)
	names := ddblock.Options{
		TableName:        e.table,
		PartitionKeyName: or(to.PartitionKeyName, ddblock.DefaultPartitionKeyName),
		SortKeyName:      or(to.SortKeyName, ddblock.DefaultSortKeyName),
		TTLAttributeName: or(to.TTLAttributeName, ddblock.DefaultTTLAttributeName),
	}
	ddbtest.CreateTable(t, e.ddb, e.table, ddblock.WithNamesFromOptions(names))
	e.names = []ddblock.Option{
		ddblock.WithTableName(names.TableName),
		ddblock.WithPartitionKeyName(names.PartitionKeyName),
		ddblock.WithSortKeyName(names.SortKeyName),
		ddblock.WithTTLAttributeName(names.TTLAttributeName),
	}
	return e
}

// pkOnlyTable makes a table of the test's own keyed by the partition key
// alone, named "id", and returns its name.
func pkOnlyTable(t *testing.T, ddb ddblock.TableAPI) string {
	t.Helper()
	name := ddbtest.TableName(t)
	if _, err := ddblock.EnsureTable(context.Background(), ddb, ddblock.WithPollInterval(10*time.Millisecond), ddblock.TableOptionForTest(func(o *ddblock.TableOptions) {
		o.TableName, o.PartitionKeyName, o.PartitionKeyOnly = name, "id", true
	})); err != nil {
		t.Fatal(err)
	}
	return name
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// quiet is a logger that drops everything, for tests that provoke warnings.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// client returns a client on the env's table, closed when the test ends.
func (e *env) client(opts ...ddblock.Option) *ddblock.Client {
	e.t.Helper()
	return e.clientOn(e.ddb, opts...)
}

func (e *env) clientOn(ddb ddblock.DynamoDBAPI, opts ...ddblock.Option) *ddblock.Client {
	e.t.Helper()
	all := append(append([]ddblock.Option{ddblock.WithLogger(quiet)}, e.names...), opts...)
	c, err := ddblock.New(ddb, all...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx, false); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
	return c
}

// readsAfterFailedPut is what a put that fails its condition costs in
// GetItem calls: none where the server hands back the item that made it
// fail (DynamoDB, DynamoDB Local), one where it does not (dynalite).
func readsAfterFailedPut(t *testing.T) int {
	t.Helper()
	if ddbtest.Shared(t).ReturnsOldItem() {
		return 0
	}
	return 1
}

// ops is a count of calls by operation, as counting.snapshot gives it:
// operations called no time are left out.
func ops(kv ...any) map[string]int {
	m := map[string]int{}
	for i := 0; i+1 < len(kv); i += 2 {
		if n := kv[i+1].(int); n != 0 {
			m[kv[i].(string)] = n
		}
	}
	return m
}

// counting wraps a DynamoDB client and counts calls by operation.
type counting struct {
	ddblock.DynamoDBAPI
	mu    sync.Mutex
	calls map[string]int
}

func newCounting(ddb ddblock.DynamoDBAPI) *counting {
	return &counting{DynamoDBAPI: ddb, calls: map[string]int{}}
}

func (c *counting) count(op string) {
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
}

func (c *counting) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *counting) reset() {
	c.mu.Lock()
	clear(c.calls)
	c.mu.Unlock()
}

func (c *counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.count("GetItem")
	return c.DynamoDBAPI.GetItem(ctx, in, o...)
}

func (c *counting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.count("PutItem")
	return c.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (c *counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.count("UpdateItem")
	return c.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (c *counting) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.count("DeleteItem")
	return c.DynamoDBAPI.DeleteItem(ctx, in, o...)
}
