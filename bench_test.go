package ddblock_test

// Benchmarks of single calls against the local server that TestMain
// starts. They measure; they assert nothing about speed. Figures and the
// commands that produced them are in doc/benchmarks.md; scale (many locks
// held by one client) is measured by internal/cmd/ddblock-load instead.
//
//	go test -run '^$' -bench . -benchtime 2s -count 5 .

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/testserver"
	wirepkg "github.com/ddblock/ddblock/internal/wire"
)

// benchTable creates a lock table of the default shape for one benchmark
// and returns an SDK client for the shared server.
func benchTable(tb testing.TB) (*dynamodb.Client, string) {
	tb.Helper()
	srv := ddbtest.Shared(tb)
	ddb := srv.Client(0)
	table := ddbtest.TableName(tb)
	ddbtest.CreateTable(tb, ddb, table)
	if _, isBench := tb.(*testing.B); isBench {
		benchWarmUp(tb, ddb, table)
	}
	return ddb, table
}

// benchClient returns a lock client on table, closed when the benchmark
// ends.
func benchClient(tb testing.TB, ddb ddblock.DynamoDBAPI, table string) *ddblock.Client {
	tb.Helper()
	c, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithLogger(quiet))
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx, true); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return c
}

var benchWarm sync.Once

// benchWarmUp loads the server for a few seconds before the first
// benchmark: a fresh Node process runs dynalite slower until its JIT has
// compiled the hot paths, which would otherwise penalise whichever
// benchmark happens to run first. A fresh JVM (DynamoDB Local) takes
// longer to compile its hot paths than Node.
func benchWarmUp(tb testing.TB, ddb *dynamodb.Client, table string) {
	benchWarm.Do(func() {
		ctx := context.Background()
		hb := newBenchItem(tb, ddb, table, "warm-up")
		warm := 3 * time.Second
		if ddbtest.Shared(tb).Kind == testserver.DynamoDBLocal {
			warm = 10 * time.Second
		}
		for end := time.Now().Add(warm); time.Now().Before(end); {
			if err := hb.beat(ctx, handWritten); err != nil {
				tb.Fatal(err)
			}
		}
	})
}

// benchItem is a lock item whose version number the benchmark rewrites,
// as a heartbeat does.
type benchItem struct {
	ddb   *dynamodb.Client
	table string
	pk    string
	rvn   string
	n     int
}

func newBenchItem(tb testing.TB, ddb *dynamodb.Client, table, pk string) *benchItem {
	tb.Helper()
	it := &benchItem{ddb: ddb, table: table, pk: pk, rvn: "rvn-0"}
	_, err := ddb.PutItem(context.Background(), &dynamodb.PutItemInput{
		TableName: aws.String(table),
		Item: map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: pk},
			ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: ddblock.DefaultSortKey},
			"owner_name":                    &types.AttributeValueMemberS{Value: "bench"},
			"lease_duration":                &types.AttributeValueMemberN{Value: "30"},
			"record_version_number":         &types.AttributeValueMemberS{Value: it.rvn},
			ddblock.DefaultTTLAttributeName: &types.AttributeValueMemberN{Value: benchExpiry()},
		},
	})
	if err != nil {
		tb.Fatalf("PutItem: %v", err)
	}
	return it
}

func benchExpiry() string { return strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10) }

// heartbeatForm builds the UpdateItem of one heartbeat that moves the
// item's version number from old to next.
type heartbeatForm func(table, pk, old, next string) (*dynamodb.UpdateItemInput, error)

// beat sends one heartbeat of the given form. The benchmarks stop on an
// error, so a write that does not land cannot pass for a fast one.
func (it *benchItem) beat(ctx context.Context, form heartbeatForm) error {
	it.n++
	next := "rvn-" + strconv.Itoa(it.n)
	in, err := form(it.table, it.pk, it.rvn, next)
	if err != nil {
		return fmt.Errorf("building the heartbeat: %w", err)
	}
	if _, err := it.ddb.UpdateItem(ctx, in); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	it.rvn = next
	return nil
}

func benchKey(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: pk},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: ddblock.DefaultSortKey},
	}
}

// handWritten is exactly the request ddblock's heartbeat sends, as
// internal/wire builds it for the client: the condition and the update
// written out, with fixed placeholders.
func handWritten(table, pk, old, next string) (*dynamodb.UpdateItemInput, error) {
	return benchWire(table).Heartbeat(pk, ddblock.DefaultSortKey, old, next, time.Now().Add(time.Hour), time.Time{}), nil
}

// benchWire is a table under the default attribute names.
func benchWire(name string) wirepkg.Table {
	return wirepkg.Table{Name: name, PK: ddblock.DefaultPartitionKeyName, SK: ddblock.DefaultSortKeyName, TTL: ddblock.DefaultTTLAttributeName}
}

// built is the same heartbeat made by the SDK's expression builder, once
// per call as the values change with every heartbeat.
func built(table, pk, old, next string) (*dynamodb.UpdateItemInput, error) {
	update := expression.Set(expression.Name("record_version_number"), expression.Value(next)).
		Set(expression.Name(ddblock.DefaultTTLAttributeName), expression.Value(time.Now().Add(time.Hour).Unix()))
	cond := expression.Name("record_version_number").Equal(expression.Value(old))
	return fromBuilder(table, pk, update, cond)
}

// pythonHandWritten is Python's heartbeat condition, three clauses
// (attribute_exists on both keys, and the version number), written out.
func pythonHandWritten(table, pk, old, next string) (*dynamodb.UpdateItemInput, error) {
	in, _ := handWritten(table, pk, old, next)
	in.ConditionExpression = aws.String("attribute_exists(#pk) AND attribute_exists(#sk) AND #rvn = :rvn")
	in.ExpressionAttributeNames["#pk"] = ddblock.DefaultPartitionKeyName
	in.ExpressionAttributeNames["#sk"] = ddblock.DefaultSortKeyName
	return in, nil
}

// pythonBuilt is Python's three-clause condition from the builder, which
// parenthesises every operand: what a port building its expressions with
// the builder would send.
func pythonBuilt(table, pk, old, next string) (*dynamodb.UpdateItemInput, error) {
	update := expression.Set(expression.Name("record_version_number"), expression.Value(next)).
		Set(expression.Name(ddblock.DefaultTTLAttributeName), expression.Value(time.Now().Add(time.Hour).Unix()))
	cond := expression.AttributeExists(expression.Name(ddblock.DefaultPartitionKeyName)).
		And(expression.AttributeExists(expression.Name(ddblock.DefaultSortKeyName)),
			expression.Name("record_version_number").Equal(expression.Value(old)))
	return fromBuilder(table, pk, update, cond)
}

func fromBuilder(table, pk string, update expression.UpdateBuilder, cond expression.ConditionBuilder) (*dynamodb.UpdateItemInput, error) {
	expr, err := expression.NewBuilder().WithUpdate(update).WithCondition(cond).Build()
	if err != nil {
		return nil, err
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(table),
		Key:                       benchKey(pk),
		UpdateExpression:          expr.Update(),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}, nil
}

// unconditional is the same update with no condition at all: the floor
// that shows what the condition itself costs the server.
func unconditional(table, pk, old, next string) (*dynamodb.UpdateItemInput, error) {
	in, _ := handWritten(table, pk, old, next)
	in.ConditionExpression = nil
	delete(in.ExpressionAttributeValues, ":rvn")
	return in, nil
}

var heartbeatForms = []struct {
	name string
	form heartbeatForm
}{
	{"library", handWritten},
	{"builder", built},
	{"python3clause/handwritten", pythonHandWritten},
	{"python3clause/builder", pythonBuilt},
	{"unconditional", unconditional},
}

// BenchmarkHeartbeat is one heartbeat UpdateItem, back to back, in the
// library's hand-written form and in the forms it was chosen over.
func BenchmarkHeartbeat(b *testing.B) {
	ddb, table := benchTable(b)
	ctx := context.Background()
	for _, f := range heartbeatForms {
		b.Run(f.name, func(b *testing.B) {
			it := newBenchItem(b, ddb, table, "hb-"+f.name)
			b.ReportAllocs()
			for b.Loop() {
				if err := it.beat(ctx, f.form); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeartbeatParallel is the library's heartbeat from many
// goroutines at once, each on an item of its own, as the scheduler sends
// them: its ns/op is the server's time per write at that concurrency.
func BenchmarkHeartbeatParallel(b *testing.B) {
	ddb, table := benchTable(b)
	var next sync.Mutex
	id := 0
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		id++
		it := newBenchItem(b, ddb, table, "par-"+strconv.Itoa(id))
		next.Unlock()
		ctx := context.Background()
		for pb.Next() {
			if err := it.beat(ctx, handWritten); err != nil {
				b.Error(err) // not Fatal: this is not the benchmark's goroutine
				return
			}
		}
	})
}

// BenchmarkBuildHeartbeat is the client-side cost of making the request
// alone, without sending it.
func BenchmarkBuildHeartbeat(b *testing.B) {
	for _, f := range heartbeatForms {
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.form("table", "pk", "old", "new"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAcquireRelease is an uncontended AcquireLock followed by
// Release: one conditional PutItem and one conditional DeleteItem.
func BenchmarkAcquireRelease(b *testing.B) {
	ddb, table := benchTable(b)
	c := benchClient(b, ddb, table)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.AcquireLock(ctx, "acquire-release")
		if err != nil {
			b.Fatalf("AcquireLock: %v", err)
		}
		if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			b.Fatalf("Release: %v", err)
		}
	}
}

// BenchmarkGetLock is one strongly consistent read of a held lock.
func BenchmarkGetLock(b *testing.B) {
	ddb, table := benchTable(b)
	c := benchClient(b, ddb, table)
	ctx := context.Background()
	if _, err := c.AcquireLock(ctx, "get"); err != nil {
		b.Fatalf("AcquireLock: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.GetLock(ctx, "get", ""); err != nil {
			b.Fatalf("GetLock: %v", err)
		}
	}
}

// TestBenchHeartbeatForms checks what the heartbeat benchmark compares:
// each form really is a conditional write that succeeds on the current
// version number and fails on a stale one, and the builder's forms are
// the parenthesised ones.
func TestBenchHeartbeatForms(t *testing.T) {
	ddb, table := benchTable(t)
	ctx := context.Background()
	for _, f := range heartbeatForms {
		t.Run(f.name, func(t *testing.T) {
			it := newBenchItem(t, ddb, table, "check-"+f.name)
			if err := it.beat(ctx, f.form); err != nil {
				t.Fatal(err)
			}
			in, err := f.form(table, it.pk, "stale", "other")
			if err != nil {
				t.Fatal(err)
			}
			_, err = ddb.UpdateItem(ctx, in)
			var ccf *types.ConditionalCheckFailedException
			if conditional := in.ConditionExpression != nil; conditional != errors.As(err, &ccf) {
				t.Errorf("stale write: err %v, want a failed condition exactly when the form has one", err)
			}
		})
	}
	in, err := pythonBuilt(table, "pk", "old", "new")
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(in.ConditionExpression); got == "" || got[0] != '(' {
		t.Errorf("the builder's three-clause condition is %q, expected it parenthesised", got)
	}
	t.Logf("builder, three clauses: update %q, condition %q", aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression))
	if in, err = built(table, "pk", "old", "new"); err != nil {
		t.Fatal(err)
	}
	t.Logf("builder, one clause: update %q, condition %q", aws.ToString(in.UpdateExpression), aws.ToString(in.ConditionExpression))
}
