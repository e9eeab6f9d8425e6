package compat_test

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

// These tests read back, attribute by attribute, the items the Go client
// writes when it acquires and when it heartbeats, and hold them against
// the items Python writes (the fixtures): the same attribute names with
// the same DynamoDB types, values in Python's formats, and nothing more.
// ddblock adds one attribute of its own to every item it writes,
// ddblock_tenure (a string naming the acquisition, for guarded writes):
// doc/migrating-from-python.md says what a Python client does with it
// (keeps it through its heartbeats, reads it as an additional attribute,
// drops it when it overwrites the item), and goShape below lists it. Any
// other attribute added must be listed there too.

// goShape is the shape of the item ddblock writes where Python writes
// fixture: the same, plus ddblock_tenure.
func goShape(fixture map[string]types.AttributeValue) map[string]string {
	want := shape(fixture)
	want["ddblock_tenure"] = "S"
	return want
}

// goOwnerRE is the Go client's default owner name: os.Hostname()
// immediately followed by 32 hex digits — Python's format, with the host
// name where Python has the FQDN.
func goOwnerRE(t *testing.T) *regexp.Regexp {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return regexp.MustCompile(`^` + regexp.QuoteMeta(host) + `[0-9a-f]{32}$`)
}

// checkGoItem compares an item the Go client wrote with the Python
// fixture it mirrors, and the values with Python's formats.
func checkGoItem(t *testing.T, fixture, got map[string]types.AttributeValue, n names, before, after time.Time) {
	t.Helper()
	if diff := cmp.Diff(goShape(fixture), shape(got)); diff != "" {
		t.Errorf("attribute names and types (-Python's and ddblock_tenure +Go's):\n%s", diff)
	}
	if v, ok := got["owner_name"].(*types.AttributeValueMemberS); !ok || !goOwnerRE(t).MatchString(v.Value) {
		t.Errorf("owner_name = %v, want the host name followed by 32 hex digits", got["owner_name"])
	}
	if v, ok := got["record_version_number"].(*types.AttributeValueMemberS); !ok || !rvnRE.MatchString(v.Value) {
		t.Errorf("record_version_number = %v, want a dashed uuid4", got["record_version_number"])
	}
	if v, ok := got["lease_duration"].(*types.AttributeValueMemberN); !ok || v.Value != "30" {
		t.Errorf("lease_duration = %v, want N 30 (seconds, as Python writes the default)", got["lease_duration"])
	}
	v, ok := got[n.TTL].(*types.AttributeValueMemberN)
	if !ok || !epochSecondsRE.MatchString(v.Value) {
		t.Fatalf("%s = %v, want whole epoch seconds", n.TTL, got[n.TTL])
	}
	expiry, _ := strconv.ParseInt(v.Value, 10, 64)
	if lo, hi := before.Add(time.Hour).Unix(), after.Add(time.Hour).Unix(); expiry < lo || expiry > hi {
		t.Errorf("%s = %d, want now + 1h, between %d and %d", n.TTL, expiry, lo, hi)
	}
	// What the Python peer reads from it.
	if _, err := pyLockFromItem(n, got); err != nil {
		t.Errorf("a Python client cannot read the item: %v", err)
	}
}

// TestGoWritesPythonItems acquires with the Go client, as configured by
// default, and compares the stored item with Python's.
func TestGoWritesPythonItems(t *testing.T) {
	ddb := server(t)
	for _, tc := range []struct {
		fixture string
		names   func(*testing.T) names
		sortKey string
		attrs   map[string]types.AttributeValue
	}{
		{"python_default", defaultNames, "-", nil},
		{"python_all_types", defaultNames, "-", allTypesAttributes()},
		{"python_custom_names", customNames, "shard#7", nil},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			n := tc.names(t)
			createTable(t, ddb, n)
			c := newGoClient(t, ddb, n)
			before := time.Now()
			lock, err := c.AcquireLock(context.Background(), "go-written", ddblock.WithSortKeyValue(tc.sortKey), ddblock.WithAdditionalAttributes(tc.attrs))
			after := time.Now()
			if err != nil {
				t.Fatalf("AcquireLock: %v", err)
			}
			got := rawItem(t, ddb, n, "go-written", tc.sortKey)
			checkGoItem(t, loadFixture(t, tc.fixture), got, n, before, after)
			if r := got["record_version_number"].(*types.AttributeValueMemberS).Value; r != lock.RecordVersionNumber() {
				t.Errorf("stored version %s, lock's %s", r, lock.RecordVersionNumber())
			}
			if diff := cmp.Diff(&types.AttributeValueMemberS{Value: tc.sortKey}, got[n.SK], attrOpts); diff != "" {
				t.Errorf("sort key (-want +got):\n%s", diff)
			}
			for name, want := range tc.attrs {
				if diff := cmp.Diff(want, got[name], attrOpts); diff != "" {
					t.Errorf("additional attribute %s (-want +got):\n%s", name, diff)
				}
			}
		})
	}
}

// updateTap signals every finished UpdateItem: the heartbeat's call.
type updateTap struct {
	ddblock.DynamoDBAPI
	done chan error
}

func (u updateTap) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := u.DynamoDBAPI.UpdateItem(ctx, in, o...)
	select {
	case u.done <- err:
	default: // nobody is listening any more
	}
	return out, err
}

// TestGoHeartbeatKeepsPythonItem lets a Go-held lock heartbeat and
// compares the item again: a new version number, a new expiry, and every
// other attribute, additional ones included, as it was. The client keeps
// Python's default lease and safe period and heartbeats every 50 ms.
func TestGoHeartbeatKeepsPythonItem(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	tap := updateTap{DynamoDBAPI: ddb, done: make(chan error, 64)}
	c := newGoClient(t, tap, n, ddblock.WithHeartbeatPeriod(50*time.Millisecond), ddblock.WithLeaseDuration(ddblock.DefaultLeaseDuration))
	if _, err := c.AcquireLock(context.Background(), "go-heartbeat", ddblock.WithAdditionalAttributes(allTypesAttributes())); err != nil {
		t.Fatalf("AcquireLock: %v", err)
	}
	acquired := rawItem(t, ddb, n, "go-heartbeat", "-")
	before := time.Now()
	select {
	case err := <-tap.done:
		if err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat")
	}
	got := rawItem(t, ddb, n, "go-heartbeat", "-")
	checkGoItem(t, loadFixture(t, "python_all_types"), got, n, before, time.Now())

	if got["record_version_number"].(*types.AttributeValueMemberS).Value == acquired["record_version_number"].(*types.AttributeValueMemberS).Value {
		t.Error("the heartbeat did not change the record version number")
	}
	// Everything but the two attributes a heartbeat writes is unchanged.
	for _, m := range []map[string]types.AttributeValue{acquired, got} {
		delete(m, "record_version_number")
		delete(m, n.TTL)
	}
	if diff := cmp.Diff(acquired, got, attrOpts); diff != "" {
		t.Errorf("attributes a heartbeat must leave alone (-after acquire +after heartbeat):\n%s", diff)
	}
}
