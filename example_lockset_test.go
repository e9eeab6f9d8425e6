package ddblock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// Move stock between two warehouses under both their locks, taken at
// once: all or none, in one transaction, so that two movers going in
// opposite directions never deadlock. The move itself is a write guarded
// by both locks.
func ExampleClient_AcquireLocks() {
	ctx := context.Background()
	ddb, lockTable, stock := exampleTransactionalDynamoDB()
	client, err := ddblock.New(ddb, ddblock.WithTableName(lockTable))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx, true)

	set, err := client.AcquireLocks(ctx, []string{"warehouse-1", "warehouse-2"})
	if err != nil {
		log.Fatal(err) // nothing is held
	}
	defer set.Release(ctx)
	for _, l := range set.Locks() {
		fmt.Println(l.PartitionKey(), l.Status())
	}

	// Work under the whole set stops when any of its locks is lost.
	work, cancel := set.Context(ctx)
	defer cancel()
	move := func(id, delta string) types.TransactWriteItem {
		return types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(stock),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression:          aws.String("ADD units :d"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":d": &types.AttributeValueMemberN{Value: delta}},
		}}
	}
	_, err = set.GuardedWrite(work, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{move("warehouse-1", "-5"), move("warehouse-2", "5")},
	})
	fmt.Println("moved:", err == nil)
	// Output:
	// warehouse-1 LOCKED
	// warehouse-2 LOCKED
	// moved: true
}
