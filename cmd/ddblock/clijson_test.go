package main

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Each attribute value type as the AWS CLI writes it.
func TestCLIAttr(t *testing.T) {
	for _, tc := range []struct {
		v    types.AttributeValue
		want string
	}{
		{&types.AttributeValueMemberS{Value: `a "b"`}, `{"S":"a \"b\""}`},
		{&types.AttributeValueMemberN{Value: "-1.5"}, `{"N":"-1.5"}`},
		{&types.AttributeValueMemberB{Value: []byte{0, 255}}, `{"B":"AP8="}`},
		{&types.AttributeValueMemberBOOL{Value: true}, `{"BOOL":true}`},
		{&types.AttributeValueMemberNULL{Value: true}, `{"NULL":true}`},
		{&types.AttributeValueMemberSS{Value: []string{"x", "y"}}, `{"SS":["x","y"]}`},
		{&types.AttributeValueMemberNS{Value: []string{"1"}}, `{"NS":["1"]}`},
		{&types.AttributeValueMemberBS{Value: [][]byte{{1}}}, `{"BS":["AQ=="]}`},
		{&types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: "2"}}}, `{"L":[{"N":"2"}]}`},
		{&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "v"}}}, `{"M":{"k":{"S":"v"}}}`},
	} {
		got, err := cliAttr(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("cliAttr(%T) = %s, %v; want %s", tc.v, got, err, tc.want)
		}
	}
	if _, err := cliAttr(nil); err == nil {
		t.Error("cliAttr(nil): want an error")
	}
}

// Only a ConditionCheck alone is a guard.
func TestCLITransactItem(t *testing.T) {
	cc := &types.ConditionCheck{
		TableName:                 aws.String("t"),
		Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
		ConditionExpression:       aws.String("#a = :a"),
		ExpressionAttributeNames:  map[string]string{"#a": "a"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberS{Value: "v"}},
	}
	got, err := cliTransactItem(types.TransactWriteItem{ConditionCheck: cc})
	want := `{"ConditionCheck":{"TableName":"t","Key":{"pk":{"S":"k"}},"ConditionExpression":"#a = :a",` +
		`"ExpressionAttributeNames":{"#a":"a"},"ExpressionAttributeValues":{":a":{"S":"v"}}}}`
	if err != nil || got != want {
		t.Errorf("cliTransactItem = %s, %v; want %s", got, err, want)
	}
	for _, item := range []types.TransactWriteItem{{}, {ConditionCheck: cc, Put: &types.Put{}}} {
		if _, err := cliTransactItem(item); err == nil {
			t.Errorf("cliTransactItem(%+v): want an error", item)
		}
	}
}
