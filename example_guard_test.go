package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// exampleTransactionalDynamoDB stands in for `dynamodb.NewFromConfig(cfg)`
// where the examples need transactions (dynalite has none): a client of a
// DynamoDB Local, with a fresh lock table and a table for the data, named
// "accounts", whose names it returns.
func exampleTransactionalDynamoDB() (ddb *dynamodb.Client, lockTable, dataTable string) {
	srv, err := ddbtest.Transactional()
	if err != nil {
		log.Fatal(err)
	}
	ddb = srv.Client(0)
	exampleTables++
	suffix := fmt.Sprintf("%d_%d", exampleTables, time.Now().UnixNano())
	lockTable, dataTable = "ExampleLocks"+suffix, "ExampleAccounts"+suffix
	ctx := context.Background()
	if err := ddblock.CreateTable(ctx, ddb, ddblock.WithNamesFromOptions(ddblock.Options{TableName: lockTable,
		PartitionKeyName: "lock_key", SortKeyName: "sort_key", TTLAttributeName: "expiry_time"}),
		ddblock.WithOnDemand(), ddblock.WithPollInterval(10*time.Millisecond)); err != nil {
		log.Fatal(err)
	}
	if _, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(dataTable),
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
	}); err != nil {
		log.Fatal(err)
	}
	return ddb, lockTable, dataTable
}

// A guarded write: the holder's update of its own data commits only if,
// when DynamoDB commits it, the lock item still names this holder's
// tenure. A holder paused past its lease cannot overwrite the work of the
// one that took the lock over, whatever its clock says.
func ExampleLock_GuardedWrite() {
	ctx := context.Background()
	ddb, lockTable, accounts := exampleTransactionalDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(lockTable))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	lock, err := client.AcquireLock(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	deposit := func(amount int) error {
		_, err := lock.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: []types.TransactWriteItem{{Update: &types.Update{
				TableName:                 aws.String(accounts),
				Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "42"}},
				UpdateExpression:          aws.String("ADD balance :amount"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":amount": &types.AttributeValueMemberN{Value: fmt.Sprint(amount)}},
			}}},
		})
		return err
	}
	fmt.Println("while held:", deposit(100))

	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	err = deposit(100)
	fmt.Println("after the release:", errors.Is(err, ddblock.CodeLockNotHeld))

	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(accounts), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "42"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance:", out.Item["balance"].(*types.AttributeValueMemberN).Value)
	// Output:
	// while held: <nil>
	// after the release: true
	// balance: 100
}

// Guard lends the lock's condition to a transaction you build yourself,
// with any options the SDK offers. A cancelled transaction whose first
// reason is ConditionalCheckFailed was refused because the lock was no
// longer held.
func ExampleLock_Guard() {
	ctx := context.Background()
	ddb, lockTable, accounts := exampleTransactionalDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(lockTable))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	lock, err := client.AcquireLock(ctx, "account-7")
	if err != nil {
		log.Fatal(err)
	}
	guard, err := lock.Guard()
	if err != nil {
		log.Fatal(err)
	}
	write := func() error {
		_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: []types.TransactWriteItem{guard, {Put: &types.Put{
				TableName: aws.String(accounts),
				Item: map[string]types.AttributeValue{
					"id":     &types.AttributeValueMemberS{Value: "7"},
					"status": &types.AttributeValueMemberS{Value: "closed"},
				},
			}}},
			ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal,
		})
		return err
	}
	fmt.Println("while held:", write())

	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	var canceled *types.TransactionCanceledException
	if err := write(); errors.As(err, &canceled) {
		fmt.Println("after the release:", aws.ToString(canceled.CancellationReasons[0].Code))
	}
	// Output:
	// while held: <nil>
	// after the release: ConditionalCheckFailed
}
