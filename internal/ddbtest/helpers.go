package ddbtest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Eventually polls cond in real time until it holds, failing the test
// after limit. It is for goroutines, processes and network calls to
// settle, never for a lease to run out: leases run on a fake clock where
// a test can.
func Eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ItemReader is the GetItem of a DynamoDB client.
type ItemReader interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// RawItem reads the item at key exactly as stored, with a strongly
// consistent GetItem; nil when there is none.
func RawItem(t testing.TB, ddb ItemReader, table string, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	t.Helper()
	out, err := ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem(%v): %v", key, err)
	}
	if len(out.Item) == 0 {
		return nil
	}
	return out.Item
}
