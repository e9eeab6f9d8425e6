package ddblock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// BenchmarkAcquireSet compares taking k free keys at once (AcquireLocks,
// one transaction) with k AcquireLock calls one after the other, and
// releasing them: the time of one acquire-and-release of all k keys (and
// of its acquire alone, acquire-ms), the
// DynamoDB calls, and the capacity units the server reports consumed
// (ReturnConsumedCapacity), reads and writes apart. DynamoDB Local
// reports the units real DynamoDB would charge; dynalite has no
// transactions, and runs only the one-by-one half.
//
//	DDBLOCK_TEST_SERVER=dynamodb-local go test -run '^$' -bench AcquireSet -benchtime 20x -count 3 .
func BenchmarkAcquireSet(b *testing.B) {
	for _, k := range []int{1, 10, 100} {
		for _, how := range []string{"set", "one-by-one"} {
			b.Run(fmt.Sprintf("k=%d/%s", k, how), func(b *testing.B) {
				if how == "set" && k > 1 && !ddbtest.Shared(b).HasTransactions() {
					b.Skip("no transactions on this server")
				}
				ddb, table := benchTable(b)
				units := &capacityTap{DynamoDBAPI: ddb}
				c := benchClient(b, units, table)
				ctx := context.Background()
				keys := make([]string, k)
				for i := range keys {
					keys[i] = fmt.Sprintf("set-%d", i)
				}
				units.reset()
				var acquiring time.Duration // of the loop's time, in the acquires
				b.ResetTimer()
				for b.Loop() {
					start := time.Now()
					if how == "set" {
						set, err := c.AcquireLocks(ctx, keys)
						if err != nil {
							b.Fatal(err)
						}
						acquiring += time.Since(start)
						if err := set.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
							b.Fatal(err)
						}
						continue
					}
					locks := make([]*ddblock.Lock, 0, k)
					for _, key := range keys {
						l, err := c.AcquireLock(ctx, key)
						if err != nil {
							b.Fatal(err)
						}
						locks = append(locks, l)
					}
					acquiring += time.Since(start)
					for _, l := range locks {
						if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.StopTimer()
				calls, rcu, wcu := units.totals()
				n := float64(b.N)
				b.ReportMetric(float64(acquiring.Microseconds())/1000/n, "acquire-ms/op")
				b.ReportMetric(float64(calls)/n, "calls/op")
				b.ReportMetric(rcu/n, "RCU/op")
				b.ReportMetric(wcu/n, "WCU/op")
			})
		}
	}
}

// capacityTap asks for the consumed capacity of every call it forwards
// and adds it up.
type capacityTap struct {
	ddblock.DynamoDBAPI
	mu       sync.Mutex
	calls    int
	rcu, wcu float64
}

func (t *capacityTap) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls, t.rcu, t.wcu = 0, 0, 0
}

func (t *capacityTap) totals() (int, float64, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls, t.rcu, t.wcu
}

func (t *capacityTap) add(read bool, cc ...types.ConsumedCapacity) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	for _, c := range cc {
		units := 0.0
		if c.CapacityUnits != nil {
			units = *c.CapacityUnits
		}
		switch {
		case c.ReadCapacityUnits != nil || c.WriteCapacityUnits != nil:
			if c.ReadCapacityUnits != nil {
				t.rcu += *c.ReadCapacityUnits
			}
			if c.WriteCapacityUnits != nil {
				t.wcu += *c.WriteCapacityUnits
			}
		case read:
			t.rcu += units
		default:
			t.wcu += units
		}
	}
}

func consumed(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

func (t *capacityTap) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := t.DynamoDBAPI.GetItem(ctx, in, o...)
	if err == nil {
		t.add(true, consumed(out.ConsumedCapacity)...)
	}
	return out, err
}

func (t *capacityTap) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := t.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		t.add(false, consumed(out.ConsumedCapacity)...)
	}
	return out, err
}

func (t *capacityTap) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := t.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err == nil {
		t.add(false, consumed(out.ConsumedCapacity)...)
	}
	return out, err
}

func (t *capacityTap) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := t.DynamoDBAPI.DeleteItem(ctx, in, o...)
	if err == nil {
		t.add(false, consumed(out.ConsumedCapacity)...)
	}
	return out, err
}

func (t *capacityTap) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	tw := t.DynamoDBAPI.(interface {
		TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	})
	in.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
	out, err := tw.TransactWriteItems(ctx, in, o...)
	if err == nil {
		t.add(false, out.ConsumedCapacity...)
	}
	return out, err
}
