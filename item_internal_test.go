package ddblock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestPyQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain-key_1.2~x": "plain-key_1.2~x",
		"a/b":             "a/b",
		"a b|c":           "a%20b%7Cc",
		"é":               "%C3%A9",
		"%":               "%25",
		"":                "",
	} {
		if got := pyQuote(in); got != want {
			t.Errorf("pyQuote(%q) = %q; want %q", in, got, want)
		}
	}
	if got := lockID("k", "-"); got != "k|-" {
		t.Errorf("lockID = %q", got)
	}
}

func TestLeaseEncoding(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		text string
	}{
		{30 * time.Second, "30"},
		{100 * time.Millisecond, "0.1"},
		{1500 * time.Millisecond, "1.5"},
		{time.Hour, "3600"},
	} {
		if got := formatLease(tc.d); got != tc.text {
			t.Errorf("formatLease(%v) = %q; want %q", tc.d, got, tc.text)
		}
		if got, ok := parseLease(tc.text); !ok || got != tc.d {
			t.Errorf("parseLease(%q) = %v, %v", tc.text, got, ok)
		}
	}
	// What Python writes for a 0.1 s lease: the float's binary expansion.
	if got, ok := parseLease("0.1000000000000000055511151231257827021181583404541015625"); !ok || got != 100*time.Millisecond {
		t.Errorf("Python's 0.1: %v, %v", got, ok)
	}
	for _, bad := range []string{"", "x", "-1", "NaN", "Infinity", "1e400", "31536001"} {
		if _, ok := parseLease(bad); ok {
			t.Errorf("parseLease(%q) accepted", bad)
		}
	}
	if got, ok := parseLease("3E+1"); !ok || got != 30*time.Second {
		t.Errorf("exponent form: %v %v", got, ok)
	}
}

func testItem() map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"lock_key":              &types.AttributeValueMemberS{Value: "k"},
		"sort_key":              &types.AttributeValueMemberS{Value: "-"},
		"owner_name":            &types.AttributeValueMemberS{Value: "host0123456789abcdef0123456789abcdef"},
		"lease_duration":        &types.AttributeValueMemberN{Value: "30"},
		"record_version_number": &types.AttributeValueMemberS{Value: "6f6c2d5e-3b1a-4c6e-9a2f-0d1e2f3a4b5c"},
		"expiry_time":           &types.AttributeValueMemberN{Value: "1767323045"},
		"app":                   &types.AttributeValueMemberBOOL{Value: true},
	}
}

var defaultCodec = itemCodec{pk: "lock_key", sk: "sort_key", ttl: "expiry_time"}

func TestDecodeRejectsBrokenItems(t *testing.T) {
	for _, tc := range []struct {
		attr string
		v    types.AttributeValue // nil: remove the attribute
	}{
		{"lock_key", nil},
		{"sort_key", &types.AttributeValueMemberN{Value: "1"}},
		{"owner_name", nil},
		{"record_version_number", &types.AttributeValueMemberB{Value: []byte("x")}},
		{"lease_duration", &types.AttributeValueMemberS{Value: "30"}},
		{"lease_duration", &types.AttributeValueMemberN{Value: "-5"}},
		{"lease_duration", &types.AttributeValueMemberN{Value: strings.Repeat("9", 400)}},
		{"expiry_time", &types.AttributeValueMemberS{Value: "soon"}},
		{"expiry_time", &types.AttributeValueMemberN{Value: "1e300"}},
	} {
		item := testItem()
		if tc.v == nil {
			delete(item, tc.attr)
		} else {
			item[tc.attr] = tc.v
		}
		_, err := defaultCodec.decode(item)
		var lerr *Error
		if !errors.As(err, &lerr) || lerr.Code != CodeInvalidItem || !strings.Contains(lerr.Message, tc.attr) {
			t.Errorf("%s=%v: err = %v; want INVALID_ITEM naming it", tc.attr, tc.v, err)
		}
	}
	// No TTL attribute is fine: it only serves DynamoDB's clean-up.
	item := testItem()
	delete(item, "expiry_time")
	if _, err := defaultCodec.decode(item); err != nil {
		t.Errorf("without TTL: %v", err)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	info, err := defaultCodec.decode(testItem())
	if err != nil {
		t.Fatal(err)
	}
	back, err := defaultCodec.decode(defaultCodec.encode(info))
	if err != nil {
		t.Fatal(err)
	}
	if back.OwnerName != info.OwnerName || back.LeaseDuration != 30*time.Second ||
		back.ExpiryTime.Unix() != 1767323045 || len(back.AdditionalAttributes) != 1 {
		t.Errorf("round trip: %+v", back)
	}
}

// FuzzDecodeItem feeds lock items with any attribute values and any of
// them missing or mistyped: decode must never panic, and must either
// return a typed INVALID_ITEM error or a lock that makes sense.
func FuzzDecodeItem(f *testing.F) {
	f.Add("k", "-", "owner", "30", "rvn", "1767323045", uint16(0))
	f.Add("k", "-", "owner", "0.1000000000000000055511151231257827021181583404541015625", "rvn", "1.5", uint16(0))
	f.Add("", "", "", "", "", "", uint16(0xffff))
	f.Add("k", "s", "o", "1e308", "r", "-1e308", uint16(0x5555))
	f.Add("k", "s", "o", "  7 ", "r", "NaN", uint16(0x0100))
	f.Fuzz(func(t *testing.T, pk, sk, owner, lease, rvn, expiry string, mask uint16) {
		values := []struct {
			name string
			s    string
			num  bool
		}{
			{"lock_key", pk, false}, {"sort_key", sk, false}, {"owner_name", owner, false},
			{"lease_duration", lease, true}, {"record_version_number", rvn, false}, {"expiry_time", expiry, true},
		}
		item := map[string]types.AttributeValue{}
		for i, v := range values {
			omit, flip := mask&(1<<(2*i)) != 0, mask&(1<<(2*i+1)) != 0
			if omit {
				continue
			}
			if v.num != flip {
				item[v.name] = &types.AttributeValueMemberN{Value: v.s}
			} else {
				item[v.name] = &types.AttributeValueMemberS{Value: v.s}
			}
		}
		if mask&(1<<12) != 0 {
			item["extra"] = &types.AttributeValueMemberL{}
		}
		info, err := defaultCodec.decode(item)
		if err != nil {
			var lerr *Error
			if !errors.As(err, &lerr) || lerr.Code != CodeInvalidItem {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if info.LeaseDuration < 0 || info.LeaseDuration > maxLease {
			t.Fatalf("lease %v accepted", info.LeaseDuration)
		}
		if info.PartitionKey != pk || info.RecordVersionNumber != rvn {
			t.Fatalf("decoded %+v", info)
		}
	})
}

// FuzzOptions tries any settings: New never panics; it refuses with typed
// errors naming settings, or returns a client whose settings hold
// together.
func FuzzOptions(f *testing.F) {
	f.Add(int64(5e9), int64(20e9), int64(30e9), int64(3600e9), -1, 5, 64, "T", "lock_key", "sort_key", "expiry_time")
	f.Add(int64(0), int64(-1), int64(1<<62), int64(1), 0, 0, 0, "", "", "", "")
	f.Add(int64(1), int64(2), int64(3), int64(4), 1000000, 1, 1, "a.b-c_d", "x", "x", "owner_name")
	f.Fuzz(func(t *testing.T, hb, safe, lease, expiry int64, tps, workers, conc int, table, pk, sk, ttl string) {
		c, err := New(fakeDDB{},
			WithHeartbeatPeriod(time.Duration(hb)), WithSafePeriod(time.Duration(safe)),
			WithLeaseDuration(time.Duration(lease)), WithExpiryPeriod(time.Duration(expiry)),
			WithHeartbeatTPS(tps), WithCallbackWorkers(workers%64), WithHeartbeatConcurrency(conc),
			WithTableName(table), WithPartitionKeyName(pk), WithSortKeyName(sk), WithTTLAttributeName(ttl))
		if err != nil {
			if !errors.Is(err, CodeInvalidArgument) {
				t.Fatalf("untyped error: %v", err)
			}
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var lerr *Error
				if !errors.As(e, &lerr) || lerr.Setting == "" {
					t.Fatalf("an error names no setting: %v", e)
				}
			}
			return
		}
		defer c.Close(t.Context(), false)
		o := c.Options()
		if !(o.HeartbeatPeriod > 0 && o.HeartbeatPeriod < o.SafePeriod && o.SafePeriod < o.LeaseDuration && o.LeaseDuration < o.ExpiryPeriod) ||
			o.PartitionKeyName == o.SortKeyName || o.TableName == "" || (o.HeartbeatTPS != -1 && o.HeartbeatTPS < 1) {
			t.Fatalf("accepted settings that cannot work: %+v", o)
		}
	})
}
