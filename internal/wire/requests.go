package wire

import (
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
