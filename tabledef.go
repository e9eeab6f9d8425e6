package ddblock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// TableAPI is the part of *dynamodb.Client that the table helpers use.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// TableOptions describe a lock table. The defaults are Python's
// create_dynamodb_table's.
type TableOptions struct {
	// TableName, PartitionKeyName, SortKeyName and TTLAttributeName
	// default as in [Options].
	TableName, PartitionKeyName, SortKeyName, TTLAttributeName string
	// ReadCapacity and WriteCapacity are the provisioned throughput.
	// Default 5 and 5.
	ReadCapacity, WriteCapacity int64
	// OnDemand selects PAY_PER_REQUEST billing instead of provisioned
	// capacity.
	OnDemand bool
	// PollInterval is how often the table's status is read while waiting
	// for it to become ACTIVE. Default 2 s, as Python.
	PollInterval time.Duration
}

// TableOption changes one setting of [TableOptions].
type TableOption func(*TableOptions)

// WithTableNames sets the table's name and its key and TTL attribute
// names from a client's options, so the table matches the client.
func WithTableNames(o Options) TableOption {
	return func(t *TableOptions) {
		t.TableName, t.PartitionKeyName, t.SortKeyName, t.TTLAttributeName =
			o.TableName, o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName
	}
}

// WithProvisionedCapacity sets [TableOptions.ReadCapacity] and
// [TableOptions.WriteCapacity].
func WithProvisionedCapacity(read, write int64) TableOption {
	return func(t *TableOptions) { t.ReadCapacity, t.WriteCapacity, t.OnDemand = read, write, false }
}

// WithOnDemand sets [TableOptions.OnDemand].
func WithOnDemand() TableOption { return func(t *TableOptions) { t.OnDemand = true } }

// WithPollInterval sets [TableOptions.PollInterval].
func WithPollInterval(d time.Duration) TableOption {
	return func(t *TableOptions) { t.PollInterval = d }
}

func defaultTableOptions() TableOptions {
	return TableOptions{
		TableName:        DefaultTableName,
		PartitionKeyName: DefaultPartitionKeyName,
		SortKeyName:      DefaultSortKeyName,
		TTLAttributeName: DefaultTTLAttributeName,
		ReadCapacity:     5,
		WriteCapacity:    5,
		PollInterval:     2 * time.Second,
	}
}

func (t *TableOptions) check() error {
	var errs []error
	o := defaultOptions()
	o.TableName, o.PartitionKeyName, o.SortKeyName, o.TTLAttributeName =
		t.TableName, t.PartitionKeyName, t.SortKeyName, t.TTLAttributeName
	errs = append(errs, o.problems()...)
	if !t.OnDemand && (t.ReadCapacity <= 0 || t.WriteCapacity <= 0) {
		errs = append(errs, invalidArg("Capacity", fmt.Sprintf("read and write capacity must be positive, got %d/%d", t.ReadCapacity, t.WriteCapacity)))
	}
	if t.PollInterval <= 0 {
		errs = append(errs, invalidArg("PollInterval", fmt.Sprintf("must be positive, got %v", t.PollInterval)))
	}
	return errors.Join(errs...)
}

// CreateTable creates a lock table, as Python's create_dynamodb_table
// does: a string partition key and a string sort key, provisioned 5/5 by
// default, then waits until the table is ACTIVE (honouring ctx) and
// enables TTL on the TTL attribute.
//
// On a server without UpdateTimeToLive (some emulators, dynalite among
// them) the table is still created and usable; CreateTable then returns
// an error of CodeTTLUnsupported, which callers may treat as success:
//
//	if err := ddblock.CreateTable(ctx, ddb); err != nil && !errors.Is(err, ddblock.ErrTTLUnsupported) { … }
func CreateTable(ctx context.Context, api TableAPI, opts ...TableOption) error {
	t := defaultTableOptions()
	for _, opt := range opts {
		if opt != nil {
			opt(&t)
		}
	}
	if err := t.check(); err != nil {
		return err
	}
	if api == nil {
		return invalidArg("TableAPI", "must not be nil")
	}
	in := &dynamodb.CreateTableInput{
		TableName: aws.String(t.TableName),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(t.PartitionKeyName), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(t.SortKeyName), KeyType: types.KeyTypeRange},
		},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(t.PartitionKeyName), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(t.SortKeyName), AttributeType: types.ScalarAttributeTypeS},
		},
	}
	if t.OnDemand {
		in.BillingMode = types.BillingModePayPerRequest
	} else {
		in.BillingMode = types.BillingModeProvisioned
		in.ProvisionedThroughput = &types.ProvisionedThroughput{
			ReadCapacityUnits:  aws.Int64(t.ReadCapacity),
			WriteCapacityUnits: aws.Int64(t.WriteCapacity),
		}
	}
	if _, err := api.CreateTable(ctx, in); err != nil {
		return &Error{Code: CodeUnknown, Message: "creating table " + t.TableName, Err: err}
	}
	if err := waitActive(ctx, api, t); err != nil {
		return err
	}
	return enableTTL(ctx, api, t)
}

// enableTTL turns on TTL and waits for the table to be ACTIVE again.
func enableTTL(ctx context.Context, api TableAPI, t TableOptions) error {
	_, err := api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(t.TableName),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(t.TTLAttributeName),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		if isUnsupportedOperation(err) {
			return &Error{Code: CodeTTLUnsupported, Message: "the server cannot enable TTL on table " + t.TableName +
				"; the table is usable, but expired lock items will not be deleted by the server", Err: err}
		}
		return &Error{Code: CodeUnknown, Message: "enabling TTL on table " + t.TableName, Err: err}
	}
	return waitActive(ctx, api, t)
}

func waitActive(ctx context.Context, api TableAPI, t TableOptions) error {
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.TableName)})
		switch {
		case err != nil && !isTableNotFound(err):
			if ctx.Err() != nil {
				return &Error{Code: CodeCanceled, Message: "waiting for table " + t.TableName, Err: context.Cause(ctx)}
			}
			return &Error{Code: CodeUnknown, Message: "describing table " + t.TableName, Err: err}
		case err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusActive:
			return nil
		}
		timer := time.NewTimer(t.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return &Error{Code: CodeCanceled, Message: "waiting for table " + t.TableName + " to become ACTIVE", Err: context.Cause(ctx)}
		case <-timer.C:
		}
	}
}

// isUnsupportedOperation recognises a server that does not implement an
// operation at all (dynalite answers UnknownOperationException).
func isUnsupportedOperation(err error) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "UnknownOperationException", "NotImplemented":
		return true
	}
	return false
}
