package compat_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

// The fixtures in testdata/ are lock items as python_dynamodb_lock 0.9
// writes them, in DynamoDB's JSON form; testdata/README.md describes each.

// Formats of the values Python writes (docs/python-protocol.md).
var (
	// owner_name: socket.getfqdn() immediately followed by uuid4().hex.
	pyOwnerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]*[0-9a-f]{32}$`)
	// record_version_number: str(uuid.uuid4()).
	rvnRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	// expiry: int(time.time() + expiry_period).
	epochSecondsRE = regexp.MustCompile(`^[1-9][0-9]{9}$`)
)

// loadFixture reads testdata/<name>.json.
func loadFixture(t *testing.T, name string) map[string]types.AttributeValue {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	item, err := decodeItemJSON(data)
	if err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	return item
}

// decodeItemJSON reads an item in DynamoDB's JSON form, as the DynamoDB
// API, the AWS CLI and the console show it:
// {"name": {"S": "..."}, "n": {"N": "1.5"}, "b": {"B": "<base64>"}, ...}.
func decodeItemJSON(data []byte) (map[string]types.AttributeValue, error) {
	var raw map[string]json.RawMessage
	if err := strictUnmarshal(data, &raw); err != nil {
		return nil, err
	}
	return decodeMap(raw)
}

func decodeMap(raw map[string]json.RawMessage) (map[string]types.AttributeValue, error) {
	out := make(map[string]types.AttributeValue, len(raw))
	for name, v := range raw {
		av, err := decodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = av
	}
	return out, nil
}

func decodeValue(data json.RawMessage) (types.AttributeValue, error) {
	var typed map[string]json.RawMessage
	if err := strictUnmarshal(data, &typed); err != nil {
		return nil, err
	}
	if len(typed) != 1 {
		return nil, fmt.Errorf("a value must have exactly one type, has %d", len(typed))
	}
	for typ, v := range typed {
		switch typ {
		case "S":
			var s string
			err := strictUnmarshal(v, &s)
			return &types.AttributeValueMemberS{Value: s}, err
		case "N":
			var s string
			if err := strictUnmarshal(v, &s); err != nil {
				return nil, err
			}
			if _, ok := parseDecimal(s); !ok {
				return nil, fmt.Errorf("N %q is not a number", s)
			}
			return &types.AttributeValueMemberN{Value: s}, nil
		case "B":
			var s string
			if err := strictUnmarshal(v, &s); err != nil {
				return nil, err
			}
			b, err := base64.StdEncoding.DecodeString(s)
			return &types.AttributeValueMemberB{Value: b}, err
		case "BOOL":
			var b bool
			err := strictUnmarshal(v, &b)
			return &types.AttributeValueMemberBOOL{Value: b}, err
		case "NULL":
			var b bool
			if err := strictUnmarshal(v, &b); err != nil || !b {
				return nil, fmt.Errorf("NULL must be true")
			}
			return &types.AttributeValueMemberNULL{Value: true}, nil
		case "M":
			var m map[string]json.RawMessage
			if err := strictUnmarshal(v, &m); err != nil {
				return nil, err
			}
			vals, err := decodeMap(m)
			return &types.AttributeValueMemberM{Value: vals}, err
		case "L":
			var l []json.RawMessage
			if err := strictUnmarshal(v, &l); err != nil {
				return nil, err
			}
			vals := make([]types.AttributeValue, len(l))
			for i, e := range l {
				av, err := decodeValue(e)
				if err != nil {
					return nil, fmt.Errorf("[%d]: %w", i, err)
				}
				vals[i] = av
			}
			return &types.AttributeValueMemberL{Value: vals}, nil
		case "SS", "NS", "BS":
			var l []string
			if err := strictUnmarshal(v, &l); err != nil {
				return nil, err
			}
			switch typ {
			case "SS":
				return &types.AttributeValueMemberSS{Value: l}, nil
			case "NS":
				for _, s := range l {
					if _, ok := parseDecimal(s); !ok {
						return nil, fmt.Errorf("NS member %q is not a number", s)
					}
				}
				return &types.AttributeValueMemberNS{Value: l}, nil
			default:
				bs := make([][]byte, len(l))
				for i, s := range l {
					b, err := base64.StdEncoding.DecodeString(s)
					if err != nil {
						return nil, err
					}
					bs[i] = b
				}
				return &types.AttributeValueMemberBS{Value: bs}, nil
			}
		default:
			return nil, fmt.Errorf("unknown DynamoDB type %q", typ)
		}
	}
	panic("unreachable")
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

var decimalRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

func parseDecimal(s string) (float64, bool) {
	if !decimalRE.MatchString(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// pythonFixtures are the fixture files with what each must read as.
// The expectations are written out by hand, not derived from the files,
// so that a fixture and its reading are checked against each other.
var pythonFixtures = []struct {
	file  string
	names func(*testing.T) names
	want  ddblock.LockInfo
	id    string // Python's unique_identifier
}{
	{
		file:  "python_default",
		names: defaultNames,
		want: ddblock.LockInfo{
			PartitionKey:        "orders/42",
			SortKey:             "-",
			OwnerName:           "ip-10-0-3-17.eu-west-1.compute.internalf756d6761122480daf13e192963cb478",
			LeaseDuration:       30 * time.Second,
			RecordVersionNumber: "64ffcf52-9d9d-4ff7-9d35-99e1d82273b3",
			ExpiryTime:          time.Unix(1732253417, 0),
		},
		id: "orders/42|-",
	},
	{
		file:  "python_fractional_exact",
		names: defaultNames,
		want: ddblock.LockInfo{
			PartitionKey:        "cache-warmup",
			SortKey:             "-",
			OwnerName:           "ip-10-0-3-17.eu-west-1.compute.internal3ffe412ebe5446919a596358adf17ec5",
			LeaseDuration:       500 * time.Millisecond,
			RecordVersionNumber: "1d9b3154-6530-4248-a1bb-7ec44b10b1e0",
			ExpiryTime:          time.Unix(1732253419, 0),
		},
		id: "cache-warmup|-",
	},
	{
		file:  "python_all_types",
		names: defaultNames,
		want: ddblock.LockInfo{
			PartitionKey:         "report 2024/Q1 – eu",
			SortKey:              "-",
			OwnerName:            "reporting-7.internal.example.orga252e9ba1d3e424388eec74a8ebadb79",
			LeaseDuration:        30 * time.Second,
			RecordVersionNumber:  "4855b1a8-6ee0-406f-9597-22911e913c84",
			ExpiryTime:           time.Unix(1732253420, 0),
			AdditionalAttributes: allTypesAttributes(),
		},
		id: "report%202024/Q1%20%E2%80%93%20eu|-",
	},
	{
		file:  "python_custom_names",
		names: customNames,
		want: ddblock.LockInfo{
			PartitionKey:        "invoice-batch",
			SortKey:             "shard#7",
			OwnerName:           "ip-10-0-3-17.eu-west-1.compute.internal7bf397f0b55a4040a6acb9c612a3673f",
			LeaseDuration:       30 * time.Second,
			RecordVersionNumber: "a33fefc0-9f11-4c23-b084-d7150b14a26b",
			ExpiryTime:          time.Unix(1732253421, 0),
		},
		id: "invoice-batch|shard%237",
	},
}

// allTypesAttributes are python_all_types.json's additional attributes:
// one of every DynamoDB type, nested ones included.
func allTypesAttributes() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"job_name":     &types.AttributeValueMemberS{Value: "quarterly-rollup"},
		"attempt":      &types.AttributeValueMemberN{Value: "3"},
		"progress":     &types.AttributeValueMemberN{Value: "0.75"},
		"checkpoint":   &types.AttributeValueMemberB{Value: []byte("\x00\x01\xfe\xffckpt")},
		"dry_run":      &types.AttributeValueMemberBOOL{Value: false},
		"cancelled_by": &types.AttributeValueMemberNULL{Value: true},
		"config": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"region":  &types.AttributeValueMemberS{Value: "eu-west-1"},
			"shards":  &types.AttributeValueMemberN{Value: "16"},
			"flags":   &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"fast": &types.AttributeValueMemberBOOL{Value: true}}},
			"nothing": &types.AttributeValueMemberNULL{Value: true},
		}},
		"steps": &types.AttributeValueMemberL{Value: []types.AttributeValue{
			&types.AttributeValueMemberS{Value: "extract"},
			&types.AttributeValueMemberN{Value: "2"},
			&types.AttributeValueMemberBOOL{Value: true},
			&types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "nested"}}},
			&types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "v"}}},
		}},
		"tags":       &types.AttributeValueMemberSS{Value: []string{"eu", "finance", "quarterly"}},
		"shard_ids":  &types.AttributeValueMemberNS{Value: []string{"1", "2.5", "-7"}},
		"signatures": &types.AttributeValueMemberBS{Value: [][]byte{[]byte("sig-a"), []byte("\x00sig-b")}},
	}
}

// TestFixturesFollowTheProtocol checks the fixture files themselves
// against docs/python-protocol.md, so that the tests below read what
// Python really writes.
func TestFixturesFollowTheProtocol(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	seenTypes := map[string]bool{}
	leases := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			item := loadFixture(t, name)
			n := names{PK: ddblock.DefaultPartitionKeyName, SK: ddblock.DefaultSortKeyName, TTL: ddblock.DefaultTTLAttributeName}
			if strings.Contains(name, "custom_names") {
				n = customNames(t)
			}
			want := map[string]string{n.PK: "S", n.SK: "S", "owner_name": "S", "lease_duration": "N", "record_version_number": "S", n.TTL: "N"}
			got := shape(item)
			for k := range got {
				if _, ok := want[k]; !ok {
					seenTypes[got[k]] = true
					collectTypes(item[k], seenTypes)
					delete(got, k) // an additional attribute
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("lock attributes and types (-protocol +fixture):\n%s", diff)
			}
			if s := item["owner_name"].(*types.AttributeValueMemberS).Value; !pyOwnerRE.MatchString(s) {
				t.Errorf("owner_name %q is not FQDN + uuid4 hex", s)
			}
			if s := item["record_version_number"].(*types.AttributeValueMemberS).Value; !rvnRE.MatchString(s) {
				t.Errorf("record_version_number %q is not a dashed uuid4", s)
			}
			if s := item[n.TTL].(*types.AttributeValueMemberN).Value; !epochSecondsRE.MatchString(s) {
				t.Errorf("%s %q is not whole epoch seconds", n.TTL, s)
			}
			lease := item["lease_duration"].(*types.AttributeValueMemberN).Value
			leases[lease] = true
			if f, _ := parseDecimal(lease); f <= 0 {
				t.Errorf("lease_duration %q is not a positive number of seconds", lease)
			}
			if n.PK == ddblock.DefaultPartitionKeyName && item[n.SK].(*types.AttributeValueMemberS).Value != "-" {
				t.Errorf("sort key is not Python's default %q", "-")
			}
		})
	}
	// The fixtures as a set cover what the issue lists.
	for _, lease := range []string{"30", "0.5", "0.1000000000000000055511151231257827021181583404541015625"} {
		if !leases[lease] {
			t.Errorf("no fixture has the lease %s", lease)
		}
	}
	for _, typ := range []string{"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"} {
		if !seenTypes[typ] {
			t.Errorf("no fixture has an additional attribute of type %s", typ)
		}
	}
}

func collectTypes(v types.AttributeValue, seen map[string]bool) {
	seen[typeOf(v)] = true
	switch v := v.(type) {
	case *types.AttributeValueMemberM:
		for _, e := range v.Value {
			collectTypes(e, seen)
		}
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			collectTypes(e, seen)
		}
	}
}

// TestGoReadsPythonFixtures stores each Python-written item in a table and
// reads it with Client.GetLock: owner, lease, version number, expiry and
// every additional attribute, of every type, come back as Python wrote
// them. ListLocks reads them too.
func TestGoReadsPythonFixtures(t *testing.T) {
	ddb := server(t)
	for _, fx := range pythonFixtures {
		t.Run(fx.file, func(t *testing.T) {
			n := fx.names(t)
			createTable(t, ddb, n)
			want := fx.want
			want.ExpiryTime = putRaw(t, ddb, n, loadFixture(t, fx.file))
			c := newGoClient(t, ddb, n)

			got, err := c.GetLock(context.Background(), fx.want.PartitionKey, fx.want.SortKey)
			if err != nil {
				t.Fatalf("GetLock: %v", err)
			}
			if diff := cmp.Diff(&want, got, attrOpts); diff != "" {
				t.Errorf("GetLock (-want +got):\n%s", diff)
			}
			if got.ID() != fx.id {
				t.Errorf("ID() = %q, want Python's unique_identifier %q", got.ID(), fx.id)
			}

			var listed []*ddblock.LockInfo
			for info, err := range c.ListLocks(context.Background()) {
				if err != nil {
					t.Fatalf("ListLocks: %v", err)
				}
				listed = append(listed, info)
			}
			if diff := cmp.Diff([]*ddblock.LockInfo{&want}, listed, attrOpts); diff != "" {
				t.Errorf("ListLocks (-want +got):\n%s", diff)
			}
		})
	}
}

// pythonLease01 is Decimal.from_float(0.1): the lease a Python client
// configured with timedelta(milliseconds=100) would put in its item.
const pythonLease01 = "0.1000000000000000055511151231257827021181583404541015625"

// TestFractionalLeaseFromPythonFloat measures what happens to Python's
// full binary expansion of a fractional lease, and reads it wherever it
// can be stored.
//
// DynamoDB numbers hold at most 38 significant digits, and the expansion
// of 0.1 has 55: the server refuses the item (and boto3 already refuses
// to send it, see TestPeerEncodesLeasesAsBoto3). The library's decoder
// must still read any such number, so it is checked twice: on the exact
// 55-digit string, served as a GetItem reply, and on the longest prefix a
// server stores, 38 digits, through a real table.
func TestFractionalLeaseFromPythonFloat(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	fixture := loadFixture(t, "python_fractional_binary")
	if got := fixture["lease_duration"].(*types.AttributeValueMemberN).Value; got != pythonLease01 {
		t.Fatalf("fixture lease = %s, want %s", got, pythonLease01)
	}
	want := &ddblock.LockInfo{
		PartitionKey:        "nightly-report",
		SortKey:             "-",
		OwnerName:           "worker-3.batch.corp.example375b7d33fc6c4d4985e8a82b49e448de",
		LeaseDuration:       100 * time.Millisecond,
		RecordVersionNumber: "76c88785-c238-49bd-bc0b-db05193d4cf3",
		ExpiryTime:          time.Unix(1732253418, 0),
	}
	ctx := context.Background()

	t.Run("server", func(t *testing.T) {
		// Every server refuses it, as DynamoDB does, in its own words:
		// dynalite (like DynamoDB) says "Attempting to store more than 38
		// significant digits in a Number", DynamoDB Local "DynamoDB only
		// supports precision up to 38 digits". The code is the contract.
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: &n.Table, Item: fixture})
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" || !strings.Contains(api.ErrorMessage(), "38") {
			t.Fatalf("PutItem of a 55-digit lease: %v; want a ValidationException for DynamoDB's 38-digit limit", err)
		}
		t.Logf("measured: the server refuses the 55-digit lease: %s: %s", api.ErrorCode(), api.ErrorMessage())
		if item := rawItem(t, ddb, n, want.PartitionKey, want.SortKey); item != nil {
			t.Errorf("the refused item was stored: %v", item)
		}
	})

	t.Run("exact expansion through GetLock", func(t *testing.T) {
		c := newGoClient(t, servedItem{DynamoDBAPI: ddb, item: fixture}, n)
		got, err := c.GetLock(ctx, want.PartitionKey, want.SortKey)
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		if diff := cmp.Diff(want, got, attrOpts); diff != "" {
			t.Errorf("GetLock (-want +got):\n%s", diff)
		}
	})

	t.Run("38 digits through a table", func(t *testing.T) {
		item := loadFixture(t, "python_fractional_binary")
		truncated := pythonLease01[:len("0.")+38]
		item["lease_duration"] = &types.AttributeValueMemberN{Value: truncated}
		want := *want
		want.ExpiryTime = putRaw(t, ddb, n, item)
		raw := rawItem(t, ddb, n, want.PartitionKey, want.SortKey)
		stored := raw["lease_duration"].(*types.AttributeValueMemberN).Value
		if stored != truncated {
			t.Errorf("stored lease = %s, want %s", stored, truncated)
		}
		got, err := newGoClient(t, ddb, n).GetLock(ctx, want.PartitionKey, want.SortKey)
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		if diff := cmp.Diff(&want, got, attrOpts); diff != "" {
			t.Errorf("GetLock (-want +got):\n%s", diff)
		}
		// A Python reader gets the same lease from it.
		if py, err := pyLockFromItem(n, raw); err != nil || py.LeaseDuration != 0.1 {
			t.Errorf("Python reads the stored lease as %+v, %v; want 0.1", py, err)
		}
	})
}

// servedItem answers GetItem with a fixed item, as a server without
// DynamoDB's 38-digit limit would; other calls reach the real server.
// Only the library's decoding of the reply is under test here.
type servedItem struct {
	ddblock.DynamoDBAPI
	item map[string]types.AttributeValue
}

func (s servedItem) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{Item: s.item}, nil
}

// TestGetLock is Python's BaseDynamoDBLock: GetLock returns a lock held
// by anyone, and a typed not-found error when there is none.
func TestGetLock(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	reader := newGoClient(t, ddb, n)

	t.Run("not found", func(t *testing.T) {
		info, err := reader.GetLock(ctx, "nobody-holds-this", "-")
		if !errors.Is(err, ddblock.CodeLockNotFound) {
			t.Fatalf("GetLock = %v, %v; want CodeLockNotFound", info, err)
		}
		var lerr *ddblock.Error
		if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeLockNotFound || lerr.PartitionKey != "nobody-holds-this" || lerr.SortKey != "-" {
			t.Errorf("error = %#v, want code LOCK_NOT_FOUND naming the key", lerr)
		}
		if info != nil {
			t.Errorf("info = %+v, want nil with the error", info)
		}
	})

	t.Run("held by Python", func(t *testing.T) {
		want := pythonFixtures[0].want
		want.ExpiryTime = putRaw(t, ddb, n, loadFixture(t, "python_default"))
		// An empty sort key means Python's default, "-".
		got, err := reader.GetLock(ctx, "orders/42", "")
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		if diff := cmp.Diff(&want, got, attrOpts); diff != "" {
			t.Errorf("GetLock (-want +got):\n%s", diff)
		}
	})

	t.Run("held by a Python peer", func(t *testing.T) {
		py := newPyClient(ddb, pyDefaults(n))
		defer py.close(false)
		attrs := map[string]types.AttributeValue{"job": &types.AttributeValueMemberS{Value: "py"}}
		l, err := py.acquireLock(ctx, "peer-held", pyAcquireOptions{AdditionalAttributes: attrs})
		if err != nil {
			t.Fatalf("Python acquire: %v", err)
		}
		got, err := reader.GetLock(ctx, "peer-held", "-")
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		want := &ddblock.LockInfo{
			PartitionKey: "peer-held", SortKey: "-", OwnerName: py.owner, LeaseDuration: 30 * time.Second,
			RecordVersionNumber: l.RecordVersionNumber(), ExpiryTime: got.ExpiryTime, AdditionalAttributes: attrs,
		}
		if diff := cmp.Diff(want, got, attrOpts); diff != "" {
			t.Errorf("GetLock (-want +got):\n%s", diff)
		}
		if err := py.releaseLock(ctx, l, false); err != nil {
			t.Fatalf("Python release: %v", err)
		}
		if _, err := reader.GetLock(ctx, "peer-held", "-"); !errors.Is(err, ddblock.CodeLockNotFound) {
			t.Errorf("GetLock after Python's release: %v, want CodeLockNotFound", err)
		}
	})

	t.Run("held by another Go client", func(t *testing.T) {
		holder := newGoClient(t, ddb, n, ddblock.WithOwnerName("go-holder"))
		lock, err := holder.AcquireLock(ctx, "go-held", ddblock.WithSortKeyValue("shard-1"))
		if err != nil {
			t.Fatalf("AcquireLock: %v", err)
		}
		got, err := reader.GetLock(ctx, "go-held", "shard-1")
		if err != nil {
			t.Fatalf("GetLock: %v", err)
		}
		want := lock.Info()
		if diff := cmp.Diff(&want, got, attrOpts, cmp.Comparer(func(a, b time.Time) bool { return a.Unix() == b.Unix() })); diff != "" {
			t.Errorf("GetLock (-holder's view +reader's):\n%s", diff)
		}
		if err := lock.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			t.Fatal(err)
		}
		if _, err := reader.GetLock(ctx, "go-held", "shard-1"); !errors.Is(err, ddblock.CodeLockNotFound) {
			t.Errorf("GetLock after release: %v, want CodeLockNotFound", err)
		}
	})
}

// TestPeerEncodesLeasesAsBoto3 pins the Python peer's lease encoding to
// what CPython and boto3 do: Decimal.from_float gives the float's exact
// expansion, and boto3's serializer (38-digit context, trapping Inexact
// and Rounded) refuses the ones longer than 38 digits. The expected
// strings were produced with CPython's decimal module.
func TestPeerEncodesLeasesAsBoto3(t *testing.T) {
	for _, tc := range []struct {
		seconds float64
		exact   string
		sent    string // "" when boto3 refuses it
	}{
		{30, "30", "30"},
		{2, "2", "2"},
		{0.5, "0.5", "0.5"},
		{0.25, "0.25", "0.25"},
		{0.375, "0.375", "0.375"},
		{1.5, "1.5", "1.5"},
		{0.1, pythonLease01, ""},
		{0.3, "0.299999999999999988897769753748434595763683319091796875", ""},
	} {
		if got := pyExactDecimal(tc.seconds); got != tc.exact {
			t.Errorf("Decimal.from_float(%v) = %s, want %s", tc.seconds, got, tc.exact)
		}
		sent, err := pyNumberFromFloat(tc.seconds)
		switch {
		case tc.sent == "" && !errors.Is(err, errInexact):
			t.Errorf("boto3 would refuse %v; the peer sent %q, %v", tc.seconds, sent, err)
		case tc.sent != "" && (err != nil || sent != tc.sent):
			t.Errorf("lease %v sent as %q, %v; want %q", tc.seconds, sent, err, tc.sent)
		}
	}
}
