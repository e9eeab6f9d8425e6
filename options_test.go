package ddblock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
)

func TestDefaults(t *testing.T) {
	c, err := ddblock.New(dynamodb.New(dynamodb.Options{Region: "us-east-1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context(), false)
	o := c.Options()
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"TableName", o.TableName, "DynamoDBLockTable"},
		{"PartitionKeyName", o.PartitionKeyName, "lock_key"},
		{"SortKeyName", o.SortKeyName, "sort_key"},
		{"TTLAttributeName", o.TTLAttributeName, "expiry_time"},
		{"HeartbeatPeriod", o.HeartbeatPeriod, 5 * time.Second},
		{"SafePeriod", o.SafePeriod, 20 * time.Second},
		{"LeaseDuration", o.LeaseDuration, 30 * time.Second},
		{"ExpiryPeriod", o.ExpiryPeriod, time.Hour},
		{"HeartbeatTPS", o.HeartbeatTPS, -1},
		{"CallbackWorkers", o.CallbackWorkers, 5},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	// Python's owner name: the host name immediately followed by 32 hex digits.
	if n := len(o.OwnerName); n <= 32 || strings.Trim(o.OwnerName[n-32:], "0123456789abcdef") != "" {
		t.Errorf("OwnerName = %q", o.OwnerName)
	}
}

func TestNewRefusesSettingsThatCannotWork(t *testing.T) {
	ddb := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	for _, tc := range []struct {
		setting string
		opt     ddblock.Option
	}{
		{"TableName", ddblock.WithTableName("")},
		{"TableName", ddblock.WithTableName("no spaces allowed")},
		{"PartitionKeyName", ddblock.WithPartitionKeyName("")},
		{"SortKeyName", ddblock.WithSortKeyName("")},
		{"TTLAttributeName", ddblock.WithTTLAttributeName("")},
		{"SortKeyName", ddblock.WithSortKeyName("lock_key")},
		{"TTLAttributeName", ddblock.WithTTLAttributeName("sort_key")},
		{"PartitionKeyName", ddblock.WithPartitionKeyName("owner_name")},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(0)},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(-time.Second)},
		{"SafePeriod", ddblock.WithSafePeriod(0)},
		{"LeaseDuration", ddblock.WithLeaseDuration(-1)},
		{"ExpiryPeriod", ddblock.WithExpiryPeriod(0)},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(20 * time.Second)},
		{"SafePeriod", ddblock.WithSafePeriod(30 * time.Second)},
		{"HeartbeatTPS", ddblock.WithHeartbeatTPS(0)},
		{"HeartbeatTPS", ddblock.WithHeartbeatTPS(-2)},
		{"CallbackWorkers", ddblock.WithCallbackWorkers(0)},
		{"HeartbeatConcurrency", ddblock.WithHeartbeatConcurrency(-1)},
		{"HeartbeatTimeout", ddblock.WithHeartbeatTimeout(-time.Second)},
		{"MaxClockSkew", ddblock.WithMaxClockSkew(-time.Second)},
		{"MaxObservations", ddblock.WithMaxObservations(0)},
		{"KeepReleasedItems", func(o *ddblock.Options) { o.FencingTokens, o.KeepReleasedItems = true, false }},
		{"SortKeyName", func(o *ddblock.Options) { o.PartitionKeyOnly = true }},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			c, err := ddblock.New(ddb, tc.opt)
			if c != nil {
				t.Fatal("New returned a client with an error")
			}
			var lerr *ddblock.Error
			if !errors.Is(err, ddblock.ErrInvalidArgument) || !errors.As(err, &lerr) || lerr.Setting != tc.setting {
				t.Fatalf("err = %v; want INVALID_ARGUMENT naming %s", err, tc.setting)
			}
		})
	}
	var nilClient *dynamodb.Client
	for _, ddb := range []ddblock.DynamoDBAPI{nil, nilClient} {
		if _, err := ddblock.New(ddb); !errors.Is(err, ddblock.ErrInvalidArgument) {
			t.Errorf("nil client: %v", err)
		}
	}
	// Every problem is reported at once.
	_, err := ddblock.New(ddb, ddblock.WithTableName(""), ddblock.WithHeartbeatTPS(0))
	if s := err.Error(); !strings.Contains(s, "TableName") || !strings.Contains(s, "HeartbeatTPS") {
		t.Errorf("err = %v; want both settings named", err)
	}
}
