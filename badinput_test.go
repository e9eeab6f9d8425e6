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

	"github.com/ddblock/ddblock"
)

// A table whose keys are not the client's gives TABLE_MISMATCH, whether
// the names or the types differ. (On a table without a sort key, a put
// that carries a sort key attribute is accepted by DynamoDB, so only the
// reads and deletes that name the key report the mismatch.)
func TestTableWithOtherKeys(t *testing.T) {
	for _, tc := range []struct {
		name       string
		acquireToo bool
		create     func(*dynamodb.CreateTableInput)
	}{
		{"other key names", true, func(in *dynamodb.CreateTableInput) {
			in.KeySchema[0].AttributeName = aws.String("id")
			in.AttributeDefinitions[0].AttributeName = aws.String("id")
		}},
		{"numeric sort key", true, func(in *dynamodb.CreateTableInput) {
			in.AttributeDefinitions[1].AttributeType = types.ScalarAttributeTypeN
		}},
		{"no sort key", false, func(in *dynamodb.CreateTableInput) {
			in.KeySchema = in.KeySchema[:1]
			in.AttributeDefinitions = in.AttributeDefinitions[:1]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			table := e.table + "_other"
			in := &dynamodb.CreateTableInput{
				TableName:   aws.String(table),
				BillingMode: types.BillingModePayPerRequest,
				KeySchema: []types.KeySchemaElement{
					{AttributeName: aws.String("lock_key"), KeyType: types.KeyTypeHash},
					{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
				},
				AttributeDefinitions: []types.AttributeDefinition{
					{AttributeName: aws.String("lock_key"), AttributeType: types.ScalarAttributeTypeS},
					{AttributeName: aws.String("sort_key"), AttributeType: types.ScalarAttributeTypeS},
				},
			}
			tc.create(in)
			if _, err := e.ddb.CreateTable(context.Background(), in); err != nil {
				t.Fatal(err)
			}
			waiter := dynamodb.NewTableExistsWaiter(e.ddb, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
			if err := waiter.Wait(context.Background(), &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			c := e.client(ddblock.WithTableName(table))
			check := func(what string, err error) {
				t.Helper()
				var lerr *ddblock.Error
				if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeTableMismatch || !strings.Contains(lerr.Message, "lock_key") {
					t.Fatalf("%s: err = %v; want TABLE_MISMATCH naming the client's keys", what, err)
				}
			}
			if tc.acquireToo {
				_, err := c.AcquireLock(context.Background(), "k")
				check("AcquireLock", err)
			}
			_, err := c.GetLock(context.Background(), "k", "-")
			check("GetLock", err)
		})
	}
}

// An item at the lock's key that is not a lock item is reported, and
// left alone.
func TestForeignItemLeftAlone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(e.table),
		Item: map[string]types.AttributeValue{
			"lock_key":       &types.AttributeValueMemberS{Value: "k"},
			"sort_key":       &types.AttributeValueMemberS{Value: "-"},
			"lease_duration": &types.AttributeValueMemberS{Value: "thirty seconds"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := e.client()
	_, err = c.AcquireLock(ctx, "k")
	if !errors.Is(err, ddblock.CodeInvalidItem) {
		t.Fatalf("err = %v; want INVALID_ITEM", err)
	}
	if _, err := c.GetLock(ctx, "k", "-"); !errors.Is(err, ddblock.CodeInvalidItem) {
		t.Fatalf("GetLock: %v", err)
	}
	out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(e.table), Key: map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: "k"}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
	}})
	if err != nil || len(out.Item) != 3 {
		t.Fatalf("the foreign item changed: %v %v", out.Item, err)
	}
}

func TestOversizedAttributesRefusedByServer(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	_, err := c.AcquireLock(context.Background(), "k", ddblock.WithAdditionalAttributes(map[string]types.AttributeValue{
		"blob": &types.AttributeValueMemberB{Value: make([]byte, 500<<10)},
	}))
	if !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Fatalf("a 500 KB item: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.GetLock(context.Background(), "k", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Fatalf("something was written: %v", err)
	}
}

func TestNilOptionsAndCallbacksAreHarmless(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	lock, err := c.AcquireLock(context.Background(), "k", nil, ddblock.WithCallback(nil))
	if err != nil {
		t.Fatal(err)
	}
	setRVN(t, e, "k", "-", lock.RecordVersionNumber(), "thief") // a stolen lock with no callback
	if err := lock.Release(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// Wall-clock steps never shorten a lease: a waiter times it on the
// monotonic clock alone.
func TestWallClockJumpDoesNotShortenLease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client()
	if _, err := holder.AcquireLock(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	_ = holder.Close(ctx, false) // abandoned: 30 s lease

	clk := fakeClock()
	puts := &putClock{DynamoDBAPI: e.ddb, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk))
	start := clk.Monotonic()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		_, err = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
	}()
	waitFor(t, "the waiter to sleep", func() bool { return clk.Timers() >= 2 })
	clk.JumpWall(2 * time.Hour) // NTP step, or a host far ahead
	for i := 0; i < 29; i++ {
		clk.Advance(time.Second)
		waitFor(t, "the waiter to sleep", func() bool {
			select {
			case <-done:
				return true
			default:
				return clk.Timers() >= 2
			}
		})
		select {
		case <-done:
			t.Fatalf("took over after %v of monotonic time (err %v); the lease is 30s", clk.Monotonic()-start, err)
		default:
		}
	}
	clk.JumpWall(-5 * time.Hour)
	stepUntil(t, clk, 2, done, time.Minute)
	took := puts.lastPut() - start
	if err != nil || took < 30*time.Second || took > 31*time.Second {
		t.Fatalf("took over after %v (err %v); want 30s to 31s of monotonic time", took, err)
	}
}

// A holder's danger is timed on the monotonic clock too.
func TestWallClockJumpDoesNotEndangerHolder(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk))
	lock, err := c.AcquireLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	clk.JumpWall(time.Hour)
	clk.JumpWall(-3 * time.Hour)
	if err := lock.Err(); err != nil {
		t.Fatalf("a wall-clock step put the lock in danger: %v", err)
	}
}

// A key DynamoDB would refuse (empty, over its length, not UTF-8) is
// refused as INVALID_ARGUMENT before any call by GetLock, ForceRelease
// and ListLocksByPartitionKey, as AcquireLock refuses it: the table is
// not at fault, so never TABLE_MISMATCH.
func TestBadKeysRefusedBeforeAnyCall(t *testing.T) {
	e := newEnv(t)
	calls := newCounting(e.ddb)
	c := e.clientOn(calls)
	ctx := context.Background()
	long := strings.Repeat("k", 3000)
	cases := []struct {
		name, pk, sk, setting string
	}{
		{"empty partition key", "", "", "PartitionKey"},
		{"long partition key", long, "", "PartitionKey"},
		{"partition key not UTF-8", "\xff", "", "PartitionKey"},
		{"long sort key", "k", long, "SortKey"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls.reset()
			check := func(call string, err error) {
				t.Helper()
				var de *ddblock.Error
				if !errors.Is(err, ddblock.CodeInvalidArgument) || !errors.As(err, &de) || de.Setting != tc.setting {
					t.Errorf("%s: %v; want INVALID_ARGUMENT naming %s", call, err, tc.setting)
				}
			}
			checkName := func(call string, err error) {
				t.Helper()
				if !errors.Is(err, ddblock.CodeInvalidArgument) {
					t.Errorf("%s: %v; want INVALID_ARGUMENT", call, err)
				}
			}
			_, err := c.GetLock(ctx, tc.pk, tc.sk)
			check("GetLock", err)
			check("ForceRelease", c.ForceRelease(ctx, tc.pk, tc.sk, "v"))
			_, err = c.AcquireLock(ctx, tc.pk, ddblock.WithSortKeyValue(tc.sk))
			check("AcquireLock", err)
			_, err = c.TryAcquireLock(ctx, tc.pk, ddblock.WithSortKeyValue(tc.sk))
			check("TryAcquireLock", err)
			check("WithLock", c.WithLock(ctx, tc.pk, func(context.Context, *ddblock.Lock) error { return nil }, ddblock.WithSortKeyValue(tc.sk)))
			_, err = c.Line(ctx, tc.pk, tc.sk)
			check("Line", err)
			_, err = c.ClearLine(ctx, tc.pk, tc.sk)
			check("ClearLine", err)
			if tc.setting == "PartitionKey" {
				for _, err := range c.ListLocksByPartitionKey(ctx, tc.pk) {
					check("ListLocksByPartitionKey", err)
				}
				// A semaphore's or an election's name is its partition
				// key (a semaphore's slots and metadata add to it).
				_, err = c.GetSemaphore(ctx, tc.pk)
				checkName("GetSemaphore", err)
				_, err = c.NewSemaphore(tc.pk, 2)
				checkName("NewSemaphore", err)
				_, err = c.NewElection(tc.pk)
				checkName("NewElection", err)
			}
			if got := calls.snapshot(); len(got) != 0 {
				t.Errorf("calls made: %v; want none", got)
			}
		})
	}
}
