package wire

import (
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Table is where a client keeps its locks: the table's name and the
// client's key and TTL attribute names. SK is empty for a table keyed by
// the partition key alone.
type Table struct {
	Name string
	PK   string
	SK   string
	TTL  string
}

// Key returns the item key of (pk, sk); sk is ignored when the table has
// no sort key.
func (t Table) Key(pk, sk string) map[string]types.AttributeValue {
	if t.SK == "" {
		return map[string]types.AttributeValue{t.PK: &types.AttributeValueMemberS{Value: pk}}
	}
	return map[string]types.AttributeValue{
		t.PK: &types.AttributeValueMemberS{Value: pk},
		t.SK: &types.AttributeValueMemberS{Value: sk},
	}
}

func str(s string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: s} }

// Heartbeat is Python's heartbeat: a conditional UpdateItem that moves
// the item at (pk, sk) from version oldRVN to newRVN and its TTL to
// expiry, leaving every other attribute alone. A non-zero stamp is also
// written as AttrHeartbeatTime.
func (t Table) Heartbeat(pk, sk, oldRVN, newRVN string, expiry, stamp time.Time) *dynamodb.UpdateItemInput {
	update := "SET " + NameRVN + " = " + ValueNew + ", " + NameTTL + " = " + ValueTTL
	names := map[string]string{NameRVN: AttrRVN, NameTTL: t.TTL}
	values := map[string]types.AttributeValue{
		ValueRVN: str(oldRVN),
		ValueNew: str(newRVN),
		ValueTTL: &types.AttributeValueMemberN{Value: Epoch(expiry)},
	}
	if !stamp.IsZero() {
		update += ", " + NameStamp + " = " + ValueStamp
		names[NameStamp] = AttrHeartbeatTime
		values[ValueStamp] = &types.AttributeValueMemberN{Value: EpochMillis(stamp)}
	}
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(CondOwned),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// Delete deletes the item at (pk, sk) on the condition that it still
// carries version rvn.
func (t Table) Delete(pk, sk, rvn string) *dynamodb.DeleteItemInput {
	return &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		ConditionExpression:       aws.String(CondOwned),
		ExpressionAttributeNames:  map[string]string{NameRVN: AttrRVN},
		ExpressionAttributeValues: map[string]types.AttributeValue{ValueRVN: str(rvn)},
	}
}

// MarkReleased marks the item at (pk, sk) released and moves its TTL to
// expiry, on the condition that it still carries version rvn: the give
// back of an item kept after its release.
func (t Table) MarkReleased(pk, sk, rvn string, expiry time.Time) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:           aws.String(t.Name),
		Key:                 t.Key(pk, sk),
		UpdateExpression:    aws.String("SET " + NameRel + " = " + ValueRel + ", " + NameTTL + " = " + ValueTTL),
		ConditionExpression: aws.String(CondOwned),
		ExpressionAttributeNames: map[string]string{
			NameRVN: AttrRVN, NameRel: AttrReleased, NameTTL: t.TTL,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			ValueRVN: str(rvn),
			ValueRel: &types.AttributeValueMemberBOOL{Value: true},
			ValueTTL: &types.AttributeValueMemberN{Value: Epoch(expiry)},
		},
	}
}

// PutNew writes item on the condition that no item is at its key.
// returnOld asks for the item that failed the condition.
func (t Table) PutNew(item map[string]types.AttributeValue, returnOld bool) *dynamodb.PutItemInput {
	in := &dynamodb.PutItemInput{
		TableName:                aws.String(t.Name),
		Item:                     item,
		ConditionExpression:      aws.String(CondNew),
		ExpressionAttributeNames: map[string]string{NamePK: t.PK},
	}
	if returnOld {
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return in
}

// PutOver writes item over the one at its key on the condition that it
// still carries version seenRVN. returnOld asks for the item that failed
// the condition.
func (t Table) PutOver(item map[string]types.AttributeValue, seenRVN string, returnOld bool) *dynamodb.PutItemInput {
	in := &dynamodb.PutItemInput{
		TableName:                 aws.String(t.Name),
		Item:                      item,
		ConditionExpression:       aws.String(CondOwned),
		ExpressionAttributeNames:  map[string]string{NameRVN: AttrRVN},
		ExpressionAttributeValues: map[string]types.AttributeValue{ValueRVN: str(seenRVN)},
	}
	if returnOld {
		in.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return in
}

// guardNames and guardValues are CondGuard's placeholders.
func guardNames() map[string]string {
	return map[string]string{"#own": AttrOwnerName, "#ten": AttrTenure, "#rel": AttrReleased}
}

func guardValues(owner, tenure string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":own": str(owner), ":ten": str(tenure)}
}

// Guard is the ConditionCheck that holds while the item at (pk, sk)
// names owner and tenure and was not kept after a release; it asks for
// the item when it fails.
func (t Table) Guard(pk, sk, owner, tenure string) *types.ConditionCheck {
	return &types.ConditionCheck{
		TableName:                           aws.String(t.Name),
		Key:                                 t.Key(pk, sk),
		ConditionExpression:                 aws.String(CondGuard),
		ExpressionAttributeNames:            guardNames(),
		ExpressionAttributeValues:           guardValues(owner, tenure),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// Proclaim writes an election's leader value into the lock item at
// (pk, sk), on the guard's condition.
func (t Table) Proclaim(pk, sk, owner, tenure, value string) *dynamodb.UpdateItemInput {
	names, values := guardNames(), guardValues(owner, tenure)
	names["#leader"] = AttrLeaderValue
	values[":leader"] = str(value)
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		UpdateExpression:          aws.String("SET #leader = :leader"),
		ConditionExpression:       aws.String(CondGuard),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// Get reads the item at (pk, sk), strongly consistent.
func (t Table) Get(pk, sk string) *dynamodb.GetItemInput {
	return &dynamodb.GetItemInput{
		TableName:      aws.String(t.Name),
		Key:            t.Key(pk, sk),
		ConsistentRead: aws.Bool(true),
	}
}

// Scan reads a page of the whole table from start, strongly consistent.
func (t Table) Scan(start map[string]types.AttributeValue) *dynamodb.ScanInput {
	return &dynamodb.ScanInput{
		TableName:         aws.String(t.Name),
		ConsistentRead:    aws.Bool(true),
		ExclusiveStartKey: start,
	}
}

// ScanSemaphores reads a page of the table's semaphore metadata items
// from start, strongly consistent.
func (t Table) ScanSemaphores(start map[string]types.AttributeValue) *dynamodb.ScanInput {
	return &dynamodb.ScanInput{
		TableName:                aws.String(t.Name),
		ConsistentRead:           aws.Bool(true),
		FilterExpression:         aws.String("attribute_exists(#slots) AND attribute_not_exists(#rvn)"),
		ExpressionAttributeNames: map[string]string{"#slots": AttrSemaphoreSlots, "#rvn": AttrRVN},
		ExclusiveStartKey:        start,
	}
}

// Query reads a page of the items under partition key pk from start,
// strongly consistent.
func (t Table) Query(pk string, start map[string]types.AttributeValue) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(t.Name),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String(NamePK + " = :name"),
		ExpressionAttributeNames:  map[string]string{NamePK: t.PK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":name": str(pk)},
		ExclusiveStartKey:         start,
	}
}

// ListPartition is Query as Client.ListLocksByPartitionKey sends it, in
// the form of the SDK's expression builder ("#0 = :0"), written out.
func (t Table) ListPartition(pk string, start map[string]types.AttributeValue) *dynamodb.QueryInput {
	return &dynamodb.QueryInput{
		TableName:                 aws.String(t.Name),
		ConsistentRead:            aws.Bool(true),
		KeyConditionExpression:    aws.String("#0 = :0"),
		ExpressionAttributeNames:  map[string]string{"#0": t.PK},
		ExpressionAttributeValues: map[string]types.AttributeValue{":0": str(pk)},
		ExclusiveStartKey:         start,
	}
}

func num(n int) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.Itoa(n)}
}

// CreateSemaphoreMeta writes a semaphore's first metadata item at
// (pk, sk), holding slots, if there is none; it asks for the item there
// when there is one.
func (t Table) CreateSemaphoreMeta(pk, sk string, slots int) *dynamodb.PutItemInput {
	item := t.Key(pk, sk)
	item[AttrSemaphoreSlots] = num(slots)
	return t.PutNew(item, true)
}

// SemaphoreMeta is what a semaphore's metadata item holds.
type SemaphoreMeta struct {
	Slots   int
	Resizes int // 0: never resized
	Span    int // 0: none, no shrink draining
}

// ResizeSemaphore writes a semaphore's metadata item at (pk, sk) anew,
// on the condition that it still holds seen; a nil seen: that there is
// none.
func (t Table) ResizeSemaphore(pk, sk string, seen *SemaphoreMeta, next SemaphoreMeta) *dynamodb.PutItemInput {
	item := t.Key(pk, sk)
	in := &dynamodb.PutItemInput{TableName: aws.String(t.Name), Item: item}
	if seen != nil {
		if seen.Resizes == 0 {
			in.ConditionExpression = aws.String("#slots = :slots AND attribute_not_exists(#resizes)")
		} else {
			in.ConditionExpression = aws.String("#slots = :slots AND #resizes = :resizes")
		}
		in.ExpressionAttributeNames = map[string]string{"#slots": AttrSemaphoreSlots, "#resizes": AttrSemaphoreResizes}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":slots": num(seen.Slots)}
		if seen.Resizes > 0 {
			in.ExpressionAttributeValues[":resizes"] = num(seen.Resizes)
		}
	} else {
		in.ConditionExpression = aws.String(CondNew)
		in.ExpressionAttributeNames = map[string]string{NamePK: t.PK}
	}
	item[AttrSemaphoreSlots] = num(next.Slots)
	item[AttrSemaphoreResizes] = num(next.Resizes)
	if next.Span > 0 {
		item[AttrSemaphoreSpan] = num(next.Span)
	}
	return in
}

// DropSemaphoreSpan removes the span of a semaphore's metadata item at
// (pk, sk), on the condition that its resizes are still resizes.
func (t Table) DropSemaphoreSpan(pk, sk string, resizes int) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		UpdateExpression:          aws.String("REMOVE #span"),
		ConditionExpression:       aws.String("#resizes = :resizes"),
		ExpressionAttributeNames:  map[string]string{"#span": AttrSemaphoreSpan, "#resizes": AttrSemaphoreResizes},
		ExpressionAttributeValues: map[string]types.AttributeValue{":resizes": num(resizes)},
	}
}
