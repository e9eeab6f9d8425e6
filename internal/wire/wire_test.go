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
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
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

func TestReads(t *testing.T) {
	key := map[string]types.AttributeValue{"key": s("a"), "sort_key": s("b")}
	start := map[string]types.AttributeValue{"key": s("z"), "sort_key": s("-")}
	check(t, &dynamodb.GetItemInput{TableName: aws.String("locks"), Key: key, ConsistentRead: aws.Bool(true)},
		table.Get("a", "b"))
	check(t, &dynamodb.ScanInput{TableName: aws.String("locks"), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start},
		table.Scan(start))
	check(t, &dynamodb.ScanInput{
		TableName:                aws.String("locks"),
		ConsistentRead:           aws.Bool(true),
		FilterExpression:         aws.String("attribute_exists(#slots) AND attribute_not_exists(#rvn)"),
		ExpressionAttributeNames: map[string]string{"#slots": "ddblock_semaphore_slots", "#rvn": "record_version_number"},
		ExclusiveStartKey:        start,
	}, table.ScanSemaphores(start))
	check(t, &dynamodb.QueryInput{
		TableName:                 aws.String("locks"),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("#pk = :name"),
		ExpressionAttributeNames:  map[string]string{"#pk": "key"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":name": s("sem")},
		ExclusiveStartKey:         start,
	}, table.Query("sem", start))
}

// ListPartition sends what the SDK's expression builder makes of the
// same key condition, as the client did before it was written out.
func TestListPartitionIsTheBuilders(t *testing.T) {
	expr, err := expression.NewBuilder().
		WithKeyCondition(expression.Key("key").Equal(expression.Value("a"))).
		Build()
	if err != nil {
		t.Fatal(err)
	}
	start := map[string]types.AttributeValue{"key": s("a"), "sort_key": s("m")}
	check(t, &dynamodb.QueryInput{
		TableName:                 aws.String("locks"),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ExclusiveStartKey:         start,
	}, table.ListPartition("a", start))
}

func TestSemaphoreMeta(t *testing.T) {
	key := map[string]types.AttributeValue{"key": s("sem"), "sort_key": s("slots")}
	withKey := func(kv ...any) map[string]types.AttributeValue {
		m := map[string]types.AttributeValue{"key": s("sem"), "sort_key": s("slots")}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(types.AttributeValue)
		}
		return m
	}
	check(t, &dynamodb.PutItemInput{
		TableName:                           aws.String("locks"),
		Item:                                withKey("ddblock_semaphore_slots", n("3")),
		ConditionExpression:                 aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames:            map[string]string{"#pk": "key"},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, table.CreateSemaphoreMeta("sem", "slots", 3))

	// No item yet.
	check(t, &dynamodb.PutItemInput{
		TableName:                aws.String("locks"),
		Item:                     withKey("ddblock_semaphore_slots", n("4"), "ddblock_semaphore_resizes", n("1")),
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": "key"},
	}, table.ResizeSemaphore("sem", "slots", nil, SemaphoreMeta{Slots: 4, Resizes: 1}))
	// Never resized: a shrink that drains.
	check(t, &dynamodb.PutItemInput{
		TableName: aws.String("locks"),
		Item: withKey("ddblock_semaphore_slots", n("2"), "ddblock_semaphore_resizes", n("1"),
			"ddblock_semaphore_span", n("5")),
		ConditionExpression:       aws.String("#slots = :slots AND attribute_not_exists(#resizes)"),
		ExpressionAttributeNames:  map[string]string{"#slots": "ddblock_semaphore_slots", "#resizes": "ddblock_semaphore_resizes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":slots": n("5")},
	}, table.ResizeSemaphore("sem", "slots", &SemaphoreMeta{Slots: 5}, SemaphoreMeta{Slots: 2, Resizes: 1, Span: 5}))
	// Resized before.
	check(t, &dynamodb.PutItemInput{
		TableName:                 aws.String("locks"),
		Item:                      withKey("ddblock_semaphore_slots", n("6"), "ddblock_semaphore_resizes", n("3")),
		ConditionExpression:       aws.String("#slots = :slots AND #resizes = :resizes"),
		ExpressionAttributeNames:  map[string]string{"#slots": "ddblock_semaphore_slots", "#resizes": "ddblock_semaphore_resizes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":slots": n("2"), ":resizes": n("2")},
	}, table.ResizeSemaphore("sem", "slots", &SemaphoreMeta{Slots: 2, Resizes: 2}, SemaphoreMeta{Slots: 6, Resizes: 3}))

	check(t, &dynamodb.UpdateItemInput{
		TableName:                 aws.String("locks"),
		Key:                       key,
		UpdateExpression:          aws.String("REMOVE #span"),
		ConditionExpression:       aws.String("#resizes = :resizes"),
		ExpressionAttributeNames:  map[string]string{"#span": "ddblock_semaphore_span", "#resizes": "ddblock_semaphore_resizes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":resizes": n("3")},
	}, table.DropSemaphoreSpan("sem", "slots", 3))
}

func TestLine(t *testing.T) {
	key := map[string]types.AttributeValue{"key": s("ddblock_line#k"), "sort_key": s("-")}
	names := map[string]string{"#gen": "ddblock_line_gen", "#next": "ddblock_line_next", "#serving": "ddblock_line_serving"}
	check(t, &dynamodb.UpdateItemInput{
		TableName:        aws.String("locks"),
		Key:              key,
		UpdateExpression: aws.String("SET #next = if_not_exists(#next, :zero) + :one, #serving = if_not_exists(#serving, :one), #gen = if_not_exists(#gen, :gen), #ttl = if_not_exists(#ttl, :ttl)"),
		ExpressionAttributeNames: map[string]string{
			"#gen": "ddblock_line_gen", "#next": "ddblock_line_next", "#serving": "ddblock_line_serving", "#ttl": "expiry_time",
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero": n("0"), ":one": n("1"), ":gen": s("g1"), ":ttl": n("1700000000"),
		},
		ReturnValues: types.ReturnValueAllNew,
	}, table.LineTake("ddblock_line#k", "-", "g1", expiry))
	check(t, &dynamodb.UpdateItemInput{
		TableName:                aws.String("locks"),
		Key:                      key,
		UpdateExpression:         aws.String("SET #serving = :to, #ttl = :ttl"),
		ConditionExpression:      aws.String("#gen = :gen AND #serving = :from"),
		ExpressionAttributeNames: map[string]string{"#gen": "ddblock_line_gen", "#serving": "ddblock_line_serving", "#ttl": "expiry_time"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":gen": s("g1"), ":from": n("3"), ":to": n("5"), ":ttl": n("1700000000"),
		},
		ReturnValues: types.ReturnValueAllNew,
	}, table.LineAdvance("ddblock_line#k", "-", "g1", 3, 5, expiry))
	check(t, &dynamodb.DeleteItemInput{
		TableName:                aws.String("locks"),
		Key:                      key,
		ConditionExpression:      aws.String("#gen = :gen AND #serving = :serving AND #next = :next"),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":gen": s("g1"), ":serving": n("4"), ":next": n("3"),
		},
	}, table.LineClose("ddblock_line#k", "-", "g1", 4, 3))
	tkey := map[string]types.AttributeValue{"key": s("ddblock_wait#g1#3#k"), "sort_key": s("-")}
	check(t, &dynamodb.PutItemInput{
		TableName: aws.String("locks"),
		Item: map[string]types.AttributeValue{
			"key": s("ddblock_wait#g1#3#k"), "sort_key": s("-"),
			"ddblock_ticket_id": s("t1"), "ddblock_ticket_owner": s("me"), "ddblock_ticket_since_ms": n("1234"),
			"ddblock_ticket_grace_ms": n("1500"), "ddblock_ticket_session": s("ddblock_session#x"), "expiry_time": n("1700000000"),
		},
	}, table.PutTicket("ddblock_wait#g1#3#k", "-", Ticket{ID: "t1", Owner: "me", Session: "ddblock_session#x", Since: time.UnixMilli(1234), Grace: 1500 * time.Millisecond}, expiry))
	check(t, &dynamodb.PutItemInput{
		TableName: aws.String("locks"),
		Item: map[string]types.AttributeValue{
			"key": s("ddblock_wait#g1#3#k"), "sort_key": s("-"),
			"ddblock_ticket_id": s("t1"), "ddblock_ticket_owner": s("me"), "ddblock_ticket_since_ms": n("1234"),
			"ddblock_ticket_grace_ms": n("1500"), "ddblock_ticket_session": s("ddblock_session#x"),
			"ddblock_ticket_set_wait_ms": n("60000"), "expiry_time": n("1700000000"),
		},
	}, table.PutTicket("ddblock_wait#g1#3#k", "-", Ticket{ID: "t1", Owner: "me", Session: "ddblock_session#x", Since: time.UnixMilli(1234), Grace: 1500 * time.Millisecond, SetWait: time.Minute}, expiry))
	check(t, &dynamodb.DeleteItemInput{
		TableName:                 aws.String("locks"),
		Key:                       tkey,
		ConditionExpression:       aws.String("#id = :id"),
		ExpressionAttributeNames:  map[string]string{"#id": "ddblock_ticket_id"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": s("t1")},
	}, table.DeleteTicket("ddblock_wait#g1#3#k", "-", "t1"))
	check(t, &dynamodb.DeleteItemInput{TableName: aws.String("locks"), Key: tkey}, table.DeleteTicket("ddblock_wait#g1#3#k", "-", ""))
}

func TestTableRequests(t *testing.T) {
	check(t, &dynamodb.CreateTableInput{
		TableName: aws.String("locks"),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("key"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sort_key"), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("key"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sort_key"), AttributeType: types.ScalarAttributeTypeS},
		},
		BillingMode:           types.BillingModeProvisioned,
		ProvisionedThroughput: &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(5), WriteCapacityUnits: aws.Int64(7)},
	}, table.CreateTable(&Capacity{Read: 5, Write: 7}))
	pkOnly := Table{Name: "locks", PK: "id", TTL: "ttl"}
	check(t, &dynamodb.CreateTableInput{
		TableName:            aws.String("locks"),
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
	}, pkOnly.CreateTable(nil))
	check(t, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String("locks"),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("expiry_time"), Enabled: aws.Bool(true)},
	}, table.EnableTTL())
	check(t, &dynamodb.DescribeTableInput{TableName: aws.String("locks")}, table.DescribeTable())
	check(t, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String("locks")}, table.DescribeTTL())
}

func TestFailedItemAndReasons(t *testing.T) {
	item := map[string]types.AttributeValue{"key": s("a")}
	if got, ok := FailedItem(fmt.Errorf("put: %w", &types.ConditionalCheckFailedException{Item: item})); !ok || len(got) != 1 {
		t.Errorf("FailedItem = %v, %v; want the item, true", got, ok)
	}
	if got, ok := FailedItem(&types.ConditionalCheckFailedException{}); !ok || got != nil {
		t.Errorf("FailedItem without item = %v, %v; want nil, true", got, ok)
	}
	if _, ok := FailedItem(&types.ResourceNotFoundException{}); ok {
		t.Error("FailedItem took another error for a failed condition")
	}
	reasons := []types.CancellationReason{{Code: aws.String("ConditionalCheckFailed")}, {Code: aws.String("None")}}
	if got, ok := CancellationReasons(&types.TransactionCanceledException{CancellationReasons: reasons}); !ok || len(got) != 2 {
		t.Errorf("CancellationReasons = %v, %v; want both, true", got, ok)
	}
	if _, ok := CancellationReasons(&types.TransactionCanceledException{}); ok {
		t.Error("a cancellation without reasons gave reasons")
	}
}
