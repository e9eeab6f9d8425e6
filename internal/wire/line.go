package wire

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The requests of a line of fair waiters: a counter item that hands out
// numbers and says whose turn it is, and one ticket item per waiter.

var lineNames = map[string]string{"#gen": AttrLineGen, "#next": AttrLineNext, "#serving": AttrLineServing}

// namesOf is the part of lineNames that an expression uses.
func namesOf(keys ...string) map[string]string {
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = lineNames[k]
	}
	return out
}

func n64(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func withTTL(names map[string]string, ttl string) map[string]string {
	out := make(map[string]string, len(names)+1)
	for k, v := range names {
		out[k] = v
	}
	out[NameTTL] = ttl
	return out
}

// LineTake hands out the next number of the line at (pk, sk), creating
// the line (generation gen, its first number's turn, TTL at expiry) when
// there is none. An existing line keeps its generation and TTL. The reply
// holds the line as it is after.
func (t Table) LineTake(pk, sk, gen string, expiry time.Time) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(t.Name),
		Key:       t.Key(pk, sk),
		UpdateExpression: aws.String("SET #next = if_not_exists(#next, :zero) + :one, #serving = if_not_exists(#serving, :one), " +
			"#gen = if_not_exists(#gen, :gen), " + NameTTL + " = if_not_exists(" + NameTTL + ", " + ValueTTL + ")"),
		ExpressionAttributeNames: withTTL(lineNames, t.TTL),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero":  n64(0),
			":one":   n64(1),
			":gen":   str(gen),
			ValueTTL: &types.AttributeValueMemberN{Value: Epoch(expiry)},
		},
		ReturnValues: types.ReturnValueAllNew,
	}
}

// LineAdvance gives the turn of the line at (pk, sk) to number to, on
// the condition that it is generation gen's and number from's turn, and
// moves the line's TTL to expiry. The reply holds the line as it is after.
func (t Table) LineAdvance(pk, sk, gen string, from, to int64, expiry time.Time) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                aws.String(t.Name),
		Key:                      t.Key(pk, sk),
		UpdateExpression:         aws.String("SET #serving = :to, " + NameTTL + " = " + ValueTTL),
		ConditionExpression:      aws.String("#gen = :gen AND #serving = :from"),
		ExpressionAttributeNames: withTTL(namesOf("#gen", "#serving"), t.TTL),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":gen":   str(gen),
			":from":  n64(from),
			":to":    n64(to),
			ValueTTL: &types.AttributeValueMemberN{Value: Epoch(expiry)},
		},
		ReturnValues: types.ReturnValueAllNew,
	}
}

// LineClose deletes the line at (pk, sk) on the condition that it is
// still as read: generation gen, number serving's turn, next the last
// number handed out (nobody came since).
func (t Table) LineClose(pk, sk, gen string, serving, next int64) *dynamodb.DeleteItemInput {
	return &dynamodb.DeleteItemInput{
		TableName:                aws.String(t.Name),
		Key:                      t.Key(pk, sk),
		ConditionExpression:      aws.String("#gen = :gen AND #serving = :serving AND #next = :next"),
		ExpressionAttributeNames: lineNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":gen":     str(gen),
			":serving": n64(serving),
			":next":    n64(next),
		},
	}
}

// LineDeleteGarbled deletes the item at (pk, sk) on the condition that
// it is not a line ddblock could read: its generation is not a string,
// or a counter not a number.
func (t Table) LineDeleteGarbled(pk, sk string) *dynamodb.DeleteItemInput {
	return &dynamodb.DeleteItemInput{
		TableName: aws.String(t.Name),
		Key:       t.Key(pk, sk),
		ConditionExpression: aws.String("attribute_exists(#gen) AND NOT attribute_type(#gen, :S) OR " +
			"attribute_exists(#next) AND NOT attribute_type(#next, :N) OR " +
			"attribute_exists(#serving) AND NOT attribute_type(#serving, :N) OR " +
			"NOT attribute_exists(#gen) OR NOT attribute_exists(#next) OR NOT attribute_exists(#serving)"),
		ExpressionAttributeNames: lineNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":S": str("S"),
			":N": str("N"),
		},
	}
}

// LineDeleteInsane deletes the line at (pk, sk) on the condition that
// it is still generation gen serving number serving, with its last
// number handed out at least far or below behind (0: not checked): a
// counter out of any sane range, whatever numbers were taken since.
func (t Table) LineDeleteInsane(pk, sk, gen string, serving, far, behind int64) *dynamodb.DeleteItemInput {
	cond := "#gen = :gen AND #serving = :serving"
	names := namesOf("#gen", "#serving")
	values := map[string]types.AttributeValue{":gen": str(gen), ":serving": n64(serving)}
	var or []string
	if far != 0 {
		or = append(or, "#next >= :far")
		values[":far"] = n64(far)
	}
	if behind != 0 {
		or = append(or, "#next < :behind")
		values[":behind"] = n64(behind)
	}
	if len(or) > 0 {
		cond += " AND (" + strings.Join(or, " OR ") + ")"
		names["#next"] = AttrLineNext
	}
	return &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.Name),
		Key:                       t.Key(pk, sk),
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}
}

// Ticket is one waiter's ticket item.
type Ticket struct {
	ID, Owner, Session string
	Since              time.Time
	Grace              time.Duration
	// SetWait, for a set of keys that waits fairly, is how long the set
	// may keep its place at the head of this line while it waits in the
	// lines of its later keys; zero (not written) for a single key.
	SetWait time.Duration
}

// PutTicket writes a waiter's ticket item at (pk, sk), its TTL at
// expiry. The key is the waiter's own (its line's generation and its
// number): whatever is there is not another waiter's.
func (t Table) PutTicket(pk, sk string, tk Ticket, expiry time.Time) *dynamodb.PutItemInput {
	item := t.Key(pk, sk)
	item[AttrTicketID] = str(tk.ID)
	item[AttrTicketOwner] = str(tk.Owner)
	item[AttrTicketSince] = n64(tk.Since.UnixMilli())
	item[AttrTicketGrace] = n64(tk.Grace.Milliseconds())
	if tk.Session != "" {
		item[AttrTicketSession] = str(tk.Session)
	}
	if tk.SetWait > 0 {
		item[AttrTicketSetWait] = n64(tk.SetWait.Milliseconds())
	}
	item[t.TTL] = &types.AttributeValueMemberN{Value: Epoch(expiry)}
	return &dynamodb.PutItemInput{TableName: aws.String(t.Name), Item: item}
}

// DeleteTicket deletes the ticket item at (pk, sk) on the condition that
// it is waiter id's; with an empty id, whatever is there.
func (t Table) DeleteTicket(pk, sk, id string) *dynamodb.DeleteItemInput {
	in := &dynamodb.DeleteItemInput{TableName: aws.String(t.Name), Key: t.Key(pk, sk)}
	if id != "" {
		in.ConditionExpression = aws.String("#id = :id")
		in.ExpressionAttributeNames = map[string]string{"#id": AttrTicketID}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":id": str(id)}
	}
	return in
}
