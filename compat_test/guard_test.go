package compat_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// TestPythonTakeoverFailsGoGuard: a Go holder goes silent, the
// Python-behaviour peer takes the lock over after the lease, and the Go
// holder's guarded write, made afterwards as a paused process would,
// writes nothing and says LOCK_NOT_HELD. Python's put replaced the item
// without ddblock_tenure, which is what fails the guard.
func TestPythonTakeoverFailsGoGuard(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	const pk = "ledger-7"

	goc := newGoClient(t, ddb, n, goTiming...)
	held, err := goc.AcquireLock(ctx, pk)
	if err != nil {
		t.Fatalf("Go acquire: %v", err)
	}
	// The data the lock protects: an item in the lock table's
	// neighbourhood, a key no lock uses.
	data := map[string]types.AttributeValue{
		n.PK: &types.AttributeValueMemberS{Value: "data#ledger-7"},
		n.SK: &types.AttributeValueMemberS{Value: "-"},
	}
	write := func() error {
		_, err := held.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Update: &types.Update{
			TableName: aws.String(n.Table), Key: data,
			UpdateExpression:          aws.String("ADD #n :one"),
			ExpressionAttributeNames:  map[string]string{"#n": "n"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}}}})
		return err
	}
	if !ddbtest.Shared(t).HasTransactions() {
		if err := write(); !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
			t.Fatalf("GuardedWrite on a server without transactions: %v; want TRANSACTIONS_UNSUPPORTED", err)
		}
		return
	}
	if err := write(); err != nil {
		t.Fatalf("the Go holder's guarded write: %v", err)
	}
	if err := goc.Close(ctx, false); err != nil { // silent from now on, the lock kept
		t.Fatal(err)
	}
	py := newPyClient(ddb, pyTiming(n))
	t.Cleanup(func() { py.close(false) })
	pl, err := py.acquireLock(ctx, pk, pyAcquireOptions{RetryPeriod: 50 * time.Millisecond, RetryTimeout: 15 * time.Second})
	if err != nil {
		t.Fatalf("Python's takeover: %v", err)
	}
	if item := rawItem(t, ddb, n, pk, "-"); item["ddblock_tenure"] != nil {
		t.Fatalf("Python's item carries ddblock_tenure: %v", item)
	}
	err = write()
	if !errors.Is(err, ddblock.CodeLockNotHeld) {
		t.Fatalf("the old Go holder's guarded write after Python's takeover: %v; want LOCK_NOT_HELD", err)
	}
	if !errors.Is(held.Err(), ddblock.CodeLockStolen) {
		t.Errorf("the Go lock after the failed guard: %v; want LOCK_STOLEN", held.Err())
	}
	if got := rawItem(t, ddb, n, "data#ledger-7", "-")["n"]; attrN(got) != "1" {
		t.Errorf("the data's count is %v; want 1: only the write made while held", got)
	}
	if err := py.releaseLock(ctx, pl, false); err != nil {
		t.Fatal(err)
	}
}

func attrN(v types.AttributeValue) string {
	if n, ok := v.(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}
