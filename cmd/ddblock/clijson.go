package main

// The AWS CLI's JSON for DynamoDB: what `ddblock run` hands its command
// as DDBLOCK_GUARD_CHECK, one element of the list that
// `aws dynamodb transact-write-items --transact-items` takes.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// cliConditionCheck is a ConditionCheck as the AWS CLI writes it.
type cliConditionCheck struct {
	TableName                           string                     `json:"TableName"`
	Key                                 map[string]json.RawMessage `json:"Key"`
	ConditionExpression                 string                     `json:"ConditionExpression"`
	ExpressionAttributeNames            map[string]string          `json:"ExpressionAttributeNames,omitempty"`
	ExpressionAttributeValues           map[string]json.RawMessage `json:"ExpressionAttributeValues,omitempty"`
	ReturnValuesOnConditionCheckFailure string                     `json:"ReturnValuesOnConditionCheckFailure,omitempty"`
}

// cliTransactItem is the AWS CLI's JSON for a transaction item that is a
// ConditionCheck (the only kind a guard is).
func cliTransactItem(item types.TransactWriteItem) (string, error) {
	cc := item.ConditionCheck
	if cc == nil || item.Put != nil || item.Update != nil || item.Delete != nil {
		return "", fmt.Errorf("the guard is not a ConditionCheck alone")
	}
	out := cliConditionCheck{
		ExpressionAttributeNames:            cc.ExpressionAttributeNames,
		ReturnValuesOnConditionCheckFailure: string(cc.ReturnValuesOnConditionCheckFailure),
	}
	if cc.TableName != nil {
		out.TableName = *cc.TableName
	}
	if cc.ConditionExpression != nil {
		out.ConditionExpression = *cc.ConditionExpression
	}
	var err error
	if out.Key, err = cliAttrMap(cc.Key); err != nil {
		return "", err
	}
	if len(cc.ExpressionAttributeValues) > 0 {
		if out.ExpressionAttributeValues, err = cliAttrMap(cc.ExpressionAttributeValues); err != nil {
			return "", err
		}
	}
	b, err := json.Marshal(map[string]cliConditionCheck{"ConditionCheck": out})
	return string(b), err
}

func cliAttrMap(m map[string]types.AttributeValue) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		b, err := cliAttr(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = b
	}
	return out, nil
}

// cliAttr is one attribute value: {"S": "..."}, {"N": "..."}, {"B":
// base64}, and so on.
func cliAttr(v types.AttributeValue) (json.RawMessage, error) {
	var tag string
	var val any
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		tag, val = "S", v.Value
	case *types.AttributeValueMemberN:
		tag, val = "N", v.Value
	case *types.AttributeValueMemberB:
		tag, val = "B", base64.StdEncoding.EncodeToString(v.Value)
	case *types.AttributeValueMemberBOOL:
		tag, val = "BOOL", v.Value
	case *types.AttributeValueMemberNULL:
		tag, val = "NULL", v.Value
	case *types.AttributeValueMemberSS:
		tag, val = "SS", v.Value
	case *types.AttributeValueMemberNS:
		tag, val = "NS", v.Value
	case *types.AttributeValueMemberBS:
		bs := make([]string, len(v.Value))
		for i, b := range v.Value {
			bs[i] = base64.StdEncoding.EncodeToString(b)
		}
		tag, val = "BS", bs
	case *types.AttributeValueMemberL:
		l := make([]json.RawMessage, len(v.Value))
		for i, e := range v.Value {
			b, err := cliAttr(e)
			if err != nil {
				return nil, err
			}
			l[i] = b
		}
		tag, val = "L", l
	case *types.AttributeValueMemberM:
		m, err := cliAttrMap(v.Value)
		if err != nil {
			return nil, err
		}
		tag, val = "M", m
	default:
		return nil, fmt.Errorf("an attribute value of type %T", v)
	}
	return json.Marshal(map[string]any{tag: val})
}
