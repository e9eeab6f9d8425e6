package ddblock_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// BenchmarkProtectedWrite compares three ways for a lock holder to write
// one item of its own data, each reporting the write capacity units the
// server says it consumed (wcu/op):
//
//   - guarded: Lock.GuardedWrite, the write in one transaction with the
//     lock's ConditionCheck (DynamoDB bills a transactional write twice,
//     and the check as a read);
//   - conditional-put: a PutItem conditioned on the item's own version,
//     the optimistic write most applications already make;
//   - fenced: a PutItem conditioned on the fencing token stored in the
//     item being no larger than the lock's (Lock.FencingToken).
//
// dynalite has no transactions: there the guarded case says so and
// stops. See doc/benchmarks.md.
func BenchmarkProtectedWrite(b *testing.B) {
	ddb, table := benchTable(b)
	data := ddbtest.TableName(b) + "_data"
	ddbtest.CreateTable(b, ddb, data)
	c, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithLogger(quiet), ddblock.WithFencingTokens())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background(), true) })
	ctx := context.Background()
	lock, err := c.AcquireLock(ctx, "bench-protected")
	if err != nil {
		b.Fatal(err)
	}
	key := func(name string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: name},
			ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
		}
	}
	item := func(name string, attrs ...string) map[string]types.AttributeValue {
		m := key(name)
		m["payload"] = &types.AttributeValueMemberS{Value: "a report line of about sixty bytes, as a job might write"}
		for i := 0; i+1 < len(attrs); i += 2 {
			m[attrs[i]] = &types.AttributeValueMemberN{Value: attrs[i+1]}
		}
		return m
	}
	n := func(i int) string { return strconv.Itoa(i) }
	report := func(b *testing.B, wcu float64) {
		b.ReportMetric(wcu/float64(b.N), "wcu/op")
	}

	b.Run("guarded", func(b *testing.B) {
		if !ddbtest.Shared(b).HasTransactions() {
			b.Skipf("%s has no transactions: GuardedWrite answers TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(b).Name())
		}
		var wcu float64
		for i := 0; b.Loop(); i++ {
			out, err := lock.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{
				TransactItems:          []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String(data), Item: item("guarded", "v", n(i))}}},
				ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
			})
			if err != nil {
				b.Fatal(err)
			}
			if i == 0 {
				for _, cc := range out.ConsumedCapacity {
					b.Logf("consumed: table %s capacity %v read %v write %v", aws.ToString(cc.TableName), aws.ToFloat64(cc.CapacityUnits), aws.ToFloat64(cc.ReadCapacityUnits), aws.ToFloat64(cc.WriteCapacityUnits))
				}
			}
			for _, cc := range out.ConsumedCapacity {
				wcu += aws.ToFloat64(cc.CapacityUnits)
			}
		}
		report(b, wcu)
	})
	runs := 0
	b.Run("conditional-put", func(b *testing.B) {
		runs++ // each run of the sub-benchmark counts versions afresh on an item of its own
		name := "conditional-" + strconv.Itoa(runs)
		var wcu float64
		for i := 0; b.Loop(); i++ {
			out, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
				TableName:                 aws.String(data),
				Item:                      item(name, "v", n(i+1)),
				ConditionExpression:       aws.String("attribute_not_exists(#v) OR #v = :prev"),
				ExpressionAttributeNames:  map[string]string{"#v": "v"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":prev": &types.AttributeValueMemberN{Value: n(i)}},
				ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
			})
			if err != nil {
				b.Fatal(err)
			}
			if out.ConsumedCapacity != nil {
				wcu += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
			}
		}
		report(b, wcu)
	})
	b.Run("fenced", func(b *testing.B) {
		token := strconv.FormatInt(lock.FencingToken(), 10)
		var wcu float64
		for b.Loop() {
			out, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
				TableName:                 aws.String(data),
				Item:                      item("fenced", "fence", token),
				ConditionExpression:       aws.String("attribute_not_exists(#f) OR #f <= :token"),
				ExpressionAttributeNames:  map[string]string{"#f": "fence"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":token": &types.AttributeValueMemberN{Value: token}},
				ReturnConsumedCapacity:    types.ReturnConsumedCapacityTotal,
			})
			if err != nil {
				b.Fatal(err)
			}
			if out.ConsumedCapacity != nil {
				wcu += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
			}
		}
		report(b, wcu)
	})
}
