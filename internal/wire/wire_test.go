package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/google/go-cmp/cmp"
)

// sdkTypes compares the SDK's structs field by field, their unexported
// markers included.
var sdkTypes = cmp.Exporter(func(reflect.Type) bool { return true })

var table = Table{Name: "locks", PK: "key", SK: "sort_key", TTL: "expiry_time"}

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

var (
	expiry = time.Unix(1700000000, 900_000_000)
	stamp  = time.UnixMilli(1699999990123)
)

func check(t *testing.T, want, got any) {
	t.Helper()
	if diff := cmp.Diff(want, got, sdkTypes); diff != "" {
		t.Errorf("request differs (-want +got):\n%s", diff)
	}
}

func TestKey(t *testing.T) {
	check(t, map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")}, table.Key("a", "b"))
	pkOnly := Table{Name: "locks", PK: "id", TTL: "ttl"}
	check(t, map[string]types.AttributeValue{"id": s("a")}, pkOnly.Key("a", "ignored"))
}

func TestHeartbeat(t *testing.T) {
	want := &dynamodb.UpdateItemInput{
		TableName:                aws.String("locks"),
		Key:                      map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")},
		UpdateExpression:         aws.String("SET #rvn = :new, #ttl = :ttl"),
		ConditionExpression:      aws.String("#rvn = :rvn"),
		ExpressionAttributeNames: map[string]string{"#rvn": "record_version_number", "#ttl": "expiry_time"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rvn": s("old"), ":new": s("new"), ":ttl": n("1700000000"),
		},
	}
	check(t, want, table.Heartbeat("a", "b", "old", "new", expiry, time.Time{}))

	want.UpdateExpression = aws.String("SET #rvn = :new, #ttl = :ttl, #hbt = :hbt")
	want.ExpressionAttributeNames["#hbt"] = "ddblock_heartbeat_ms"
	want.ExpressionAttributeValues[":hbt"] = n("1699999990123")
	check(t, want, table.Heartbeat("a", "b", "old", "new", expiry, stamp))
}

func TestDelete(t *testing.T) {
	check(t, &dynamodb.DeleteItemInput{
		TableName:                 aws.String("locks"),
		Key:                       map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")},
		ConditionExpression:       aws.String("#rvn = :rvn"),
		ExpressionAttributeNames:  map[string]string{"#rvn": "record_version_number"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":rvn": s("v1")},
	}, table.Delete("a", "b", "v1"))
}

func TestMarkReleased(t *testing.T) {
	check(t, &dynamodb.UpdateItemInput{
		TableName:           aws.String("locks"),
		Key:                 map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")},
		UpdateExpression:    aws.String("SET #rel = :rel, #ttl = :ttl"),
		ConditionExpression: aws.String("#rvn = :rvn"),
		ExpressionAttributeNames: map[string]string{
			"#rvn": "record_version_number", "#rel": "ddblock_released", "#ttl": "expiry_time",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":rvn": s("v1"), ":rel": &types.AttributeValueMemberBOOL{Value: true}, ":ttl": n("1700000000"),
		},
	}, table.MarkReleased("a", "b", "v1", expiry))
}

func TestPut(t *testing.T) {
	item := map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b"), "owner_name": s("me")}
	check(t, &dynamodb.PutItemInput{
		TableName:                           aws.String("locks"),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames:            map[string]string{"#pk": "key"},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, table.PutNew(item, true))
	check(t, &dynamodb.PutItemInput{
		TableName:                aws.String("locks"),
		Item:                     item,
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": "key"},
	}, table.PutNew(item, false))
	check(t, &dynamodb.PutItemInput{
		TableName:                           aws.String("locks"),
		Item:                                item,
		ConditionExpression:                 aws.String("#rvn = :rvn"),
		ExpressionAttributeNames:            map[string]string{"#rvn": "record_version_number"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":rvn": s("seen")},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, table.PutOver(item, "seen", true))
}

func TestGuard(t *testing.T) {
	check(t, &types.ConditionCheck{
		TableName:           aws.String("locks"),
		Key:                 map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")},
		ConditionExpression: aws.String("#own = :own AND #ten = :ten AND attribute_not_exists(#rel)"),
		ExpressionAttributeNames: map[string]string{
			"#own": "owner_name", "#ten": "ddblock_tenure", "#rel": "ddblock_released",
		},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":own": s("me"), ":ten": s("t1")},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, table.Guard("a", "b", "me", "t1"))
}

func TestProclaim(t *testing.T) {
	check(t, &dynamodb.UpdateItemInput{
		TableName:           aws.String("locks"),
		Key:                 map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")},
		UpdateExpression:    aws.String("SET #leader = :leader"),
		ConditionExpression: aws.String("#own = :own AND #ten = :ten AND attribute_not_exists(#rel)"),
		ExpressionAttributeNames: map[string]string{
			"#leader": "ddblock_leader", "#own": "owner_name", "#ten": "ddblock_tenure", "#rel": "ddblock_released",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":leader": s("v"), ":own": s("me"), ":ten": s("t1"),
		},
	}, table.Proclaim("a", "b", "me", "t1", "v"))
}

func TestIsLockAttribute(t *testing.T) {
	for _, name := range []string{AttrOwnerName, AttrLeaseDuration, AttrRVN, AttrFencingToken, AttrReleased,
		AttrHeartbeatTime, AttrSession, AttrSessionLease, AttrIsSession, AttrTenure} {
		if !IsLockAttribute(name) {
			t.Errorf("IsLockAttribute(%q) = false", name)
		}
	}
	for _, name := range []string{"key", "sort_key", "expiry_time", "ddblock_other", ""} {
		if IsLockAttribute(name) {
			t.Errorf("IsLockAttribute(%q) = true", name)
		}
	}
}

func apiErr(code string, fault smithy.ErrorFault) error {
	return &smithy.GenericAPIError{Code: code, Message: "m", Fault: fault}
}

func TestClassification(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	throttle := &types.ProvisionedThroughputExceededException{Message: aws.String("slow down")}
	// A 5xx as the SDK returns it: the SDK retries it by its status.
	serverError := &smithyhttp.ResponseError{
		Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 500}},
		Err:      &types.InternalServerError{Message: aws.String("oops")},
	}
	tests := []struct {
		name string
		err  error
		// Transient, Throttled, OutcomeUnknown, NeverSent, ConditionFailed,
		// TableNotFound, UnsupportedOperation, Invalid
		want [8]bool
	}{
		{"condition failed", &types.ConditionalCheckFailedException{}, [8]bool{false, false, false, false, true, false, false, false}},
		{"wrapped condition failed", fmt.Errorf("put: %w", &types.ConditionalCheckFailedException{}), [8]bool{false, false, false, false, true, false, false, false}},
		{"no table", &types.ResourceNotFoundException{}, [8]bool{false, false, false, false, false, true, false, false}},
		{"throttled", throttle, [8]bool{true, true, false, false, false, false, false, false}},
		{"server error", serverError, [8]bool{true, false, true, false, false, false, false, false}},
		{"server error without its status", &types.InternalServerError{}, [8]bool{false, false, true, false, false, false, false, false}},
		{"validation", apiErr("ValidationException", smithy.FaultClient), [8]bool{false, false, false, false, false, false, false, true}},
		{"unknown operation", apiErr("UnknownOperationException", smithy.FaultClient), [8]bool{false, false, false, false, false, false, true, false}},
		{"refused dial", dial, [8]bool{true, false, false, true, false, false, false, false}},
		{"no such host", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, [8]bool{false, false, false, true, false, false, false, false}},
		{"reset mid-reply", read, [8]bool{true, false, true, false, false, false, false, false}},
		{"deadline", context.DeadlineExceeded, [8]bool{true, false, true, false, false, false, false, false}},
	}
	for _, tt := range tests {
		_, invalid := Invalid(tt.err)
		got := [8]bool{Transient(tt.err), Throttled(tt.err), OutcomeUnknown(tt.err), NeverSent(tt.err),
			ConditionFailed(tt.err), TableNotFound(tt.err), UnsupportedOperation(tt.err), invalid}
		if got != tt.want {
			t.Errorf("%s: got %v, want %v (Transient, Throttled, OutcomeUnknown, NeverSent, ConditionFailed, TableNotFound, UnsupportedOperation, Invalid)",
				tt.name, got, tt.want)
		}
	}
	if Transient(nil) || Throttled(nil) || ConditionFailed(nil) || NeverSent(nil) {
		t.Error("a nil error classified as a failure")
	}
}
