package wire

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Capacity is a provisioned table's read and write capacity units; nil
// for a table billed on demand.
type Capacity struct {
	Read, Write int64
}

// CreateTable creates the lock table t: string keys t.PK and t.SK (none
// when t.SK is empty), billed on demand when capacity is nil.
func (t Table) CreateTable(capacity *Capacity) *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName: aws.String(t.Name),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(t.PK), KeyType: types.KeyTypeHash},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(t.PK), AttributeType: types.ScalarAttributeTypeS},
		},
	}
	if t.SK != "" {
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(t.SK), KeyType: types.KeyTypeRange})
		in.AttributeDefinitions = append(in.AttributeDefinitions,
			types.AttributeDefinition{AttributeName: aws.String(t.SK), AttributeType: types.ScalarAttributeTypeS})
	}
	if capacity == nil {
		in.BillingMode = types.BillingModePayPerRequest
	} else {
		in.BillingMode = types.BillingModeProvisioned
		in.ProvisionedThroughput = &types.ProvisionedThroughput{
			ReadCapacityUnits:  aws.Int64(capacity.Read),
			WriteCapacityUnits: aws.Int64(capacity.Write),
		}
	}
	return in
}

// EnableTTL turns TTL on for table t, on t.TTL.
func (t Table) EnableTTL() *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(t.Name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(t.TTL),
			Enabled:       aws.Bool(true),
		},
	}
}

// DescribeTable asks for table t's description.
func (t Table) DescribeTable() *dynamodb.DescribeTableInput {
	return &dynamodb.DescribeTableInput{TableName: aws.String(t.Name)}
}

// DescribeTTL asks for table t's TTL setting.
func (t Table) DescribeTTL() *dynamodb.DescribeTimeToLiveInput {
	return &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(t.Name)}
}
