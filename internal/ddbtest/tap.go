package ddbtest

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// Call is one DynamoDB call as a [Tap] sees it.
type Call struct {
	// Op is the operation: "GetItem", "PutItem", "UpdateItem",
	// "DeleteItem", "Query" or "Scan".
	Op string
	// Item is the item's key (for PutItem, the item); nil for Query and
	// Scan.
	Item map[string]types.AttributeValue
	// In is the call's input, for what Op and Item do not say.
	In any
	// Data is the Before hook's, for its After.
	Data any
}

// Write says whether the call writes.
func (c *Call) Write() bool {
	return c.Op == "PutItem" || c.Op == "UpdateItem" || c.Op == "DeleteItem"
}

// Kind says what the call's item is, by its partition key: "line" (a
// line's counter), "ticket", "session", or "lock" (anything else, and
// calls on no item).
func (c *Call) Kind() string {
	pk, _ := c.Item[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS)
	switch {
	case pk == nil:
		return "lock"
	case strings.HasPrefix(pk.Value, wire.LineKeyPrefix):
		return "line"
	case strings.HasPrefix(pk.Value, wire.TicketKeyPrefix):
		return "ticket"
	case strings.HasPrefix(pk.Value, "ddblock_session#"):
		return "session"
	}
	return "lock"
}

// Tap is a lock client's DynamoDB with hooks around each call: Before
// runs first (an error ends the call with it, unsent), After once the
// call has ended, with its error. Tests count, pause or kill a client's
// calls with it.
type Tap struct {
	ddblock.DynamoDBAPI
	Before func(ctx context.Context, c *Call) error
	After  func(c *Call, err error)
}

func tapped[In, Out any](ctx context.Context, t *Tap, c *Call, in In, call func(context.Context, In, ...func(*dynamodb.Options)) (Out, error), o []func(*dynamodb.Options)) (Out, error) {
	if t.Before != nil {
		if err := t.Before(ctx, c); err != nil {
			var zero Out
			return zero, err
		}
	}
	out, err := call(ctx, in, o...)
	if t.After != nil {
		t.After(c, err)
	}
	return out, err
}

// GetItem is the API's, between the hooks.
func (t *Tap) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return tapped(ctx, t, &Call{Op: "GetItem", Item: in.Key, In: in}, in, t.DynamoDBAPI.GetItem, o)
}

// PutItem is the API's, between the hooks.
func (t *Tap) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return tapped(ctx, t, &Call{Op: "PutItem", Item: in.Item, In: in}, in, t.DynamoDBAPI.PutItem, o)
}

// UpdateItem is the API's, between the hooks.
func (t *Tap) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return tapped(ctx, t, &Call{Op: "UpdateItem", Item: in.Key, In: in}, in, t.DynamoDBAPI.UpdateItem, o)
}

// DeleteItem is the API's, between the hooks.
func (t *Tap) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return tapped(ctx, t, &Call{Op: "DeleteItem", Item: in.Key, In: in}, in, t.DynamoDBAPI.DeleteItem, o)
}

// Query is the API's, between the hooks.
func (t *Tap) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return tapped(ctx, t, &Call{Op: "Query", In: in}, in, t.DynamoDBAPI.Query, o)
}

// Scan is the API's, between the hooks.
func (t *Tap) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return tapped(ctx, t, &Call{Op: "Scan", In: in}, in, t.DynamoDBAPI.Scan, o)
}
