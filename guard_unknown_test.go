package ddblock_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/ddblock/ddblock"
)

// A refusal by DynamoDB that none of the other codes covers is UNKNOWN,
// as doc/guarded-writes.md's error table says: nothing was written, the
// cause is a *GuardedWriteError carrying the SDK's error, no cancellation
// reasons, and the lock is still held.
func TestGuardedWriteUnknown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lock := acquireN(t, e.client(), "k")[0]
	if !hasTransactions(t, lock, e) {
		return
	}
	malformed := e.incr("c")
	malformed.Update.UpdateExpression = aws.String("ADD #n :one :one") // not an expression
	missingTable := e.incr("c")
	missingTable.Update.TableName = aws.String(e.dataTable() + "_missing")
	for _, tc := range []struct {
		name     string
		action   types.TransactWriteItem
		wantCode string // the SDK's error code
	}{
		{"a malformed update expression", malformed, "ValidationException"},
		{"a table that does not exist", missingTable, "ResourceNotFoundException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lock.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{
				TransactItems: []types.TransactWriteItem{e.incr("c"), tc.action},
			})
			var gw *ddblock.GuardedWriteError
			if !errors.Is(err, ddblock.CodeUnknown) || !errors.As(err, &gw) {
				t.Fatalf("GuardedWrite = %v; want UNKNOWN with a *GuardedWriteError cause", err)
			}
			var api smithy.APIError
			if !errors.As(gw.Err, &api) || api.ErrorCode() != tc.wantCode {
				t.Errorf("GuardedWriteError.Err = %v; want the SDK's %s", gw.Err, tc.wantCode)
			}
			if gw.Reasons != nil || gw.GuardReason != nil || gw.Action != -1 || gw.RequestToken == "" {
				t.Errorf("GuardedWriteError = %+v; want no reasons, Action -1, the request token", gw)
			}
			if got := e.counter("c"); got != 0 {
				t.Errorf("counter = %d; want 0: nothing written", got)
			}
			if err := lock.Err(); err != nil {
				t.Errorf("lock.Err = %v; the lock is still held", err)
			}
		})
	}
}

// doc/guarded-writes.md's error table has a row for every code
// GuardedWrite returns.
func TestGuardedWriteErrorTableComplete(t *testing.T) {
	b, err := os.ReadFile("doc/guarded-writes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Errors\n")
	if start < 0 {
		t.Fatal("doc/guarded-writes.md has no section ## Errors")
	}
	section := doc[start+1:]
	if end := strings.Index(section[1:], "\n## "); end >= 0 {
		section = section[:end+1]
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	for _, code := range []ddblock.Code{
		ddblock.CodeLockNotHeld, ddblock.CodeWriteConditionFailed, ddblock.CodeTransactionConflict,
		ddblock.CodeOutcomeUnknown, ddblock.CodeTransactionsUnsupported, ddblock.CodeInvalidArgument,
		ddblock.CodeCanceled, ddblock.CodeAccessDenied, ddblock.CodeUnknown,
	} {
		if !rows[string(code)] {
			t.Errorf("doc/guarded-writes.md's error table has no row for %s", code)
		}
		delete(rows, string(code))
	}
	for code := range rows {
		t.Errorf("doc/guarded-writes.md's error table has a row for %s, which GuardedWrite does not return", code)
	}
}
