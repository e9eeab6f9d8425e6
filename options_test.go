package ddblock_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/timing"
)

// offlineDDB is a DynamoDB client that is never called: New sends nothing.
func offlineDDB() *dynamodb.Client { return dynamodb.New(dynamodb.Options{Region: "us-east-1"}) }

// resolved returns the settings New resolves from opts, or its error.
func resolved(t *testing.T, opts ...ddblock.Option) (ddblock.Options, error) {
	t.Helper()
	c, err := ddblock.New(offlineDDB(), opts...)
	if err != nil {
		if c != nil {
			t.Fatal("New returned a client with an error")
		}
		return ddblock.Options{}, err
	}
	defer c.Close(t.Context(), false)
	return c.Options(), nil
}

func TestDefaults(t *testing.T) {
	o, err := resolved(t)
	if err != nil {
		t.Fatal(err)
	}
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
		{"HeartbeatConcurrency", o.HeartbeatConcurrency, 64},
		{"HeartbeatTimeout", o.HeartbeatTimeout, 10 * time.Second},
		{"MaxObservations", o.MaxObservations, 10000},
		{"KeepReleasedItems", o.KeepReleasedItems, false},
		{"PartitionKeyOnly", o.PartitionKeyOnly, false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	// Python's owner name: the host name immediately followed by 32 hex digits.
	if n := len(o.OwnerName); n <= 32 || strings.Trim(o.OwnerName[n-32:], "0123456789abcdef") != "" {
		t.Errorf("OwnerName = %q", o.OwnerName)
	}
	// The default durations are the derivation rule applied to nothing,
	// and the exported constants say the same.
	want := timing.Durations{
		HeartbeatPeriod: ddblock.DefaultHeartbeatPeriod, SafePeriod: ddblock.DefaultSafePeriod,
		LeaseDuration: ddblock.DefaultLeaseDuration, ExpiryPeriod: ddblock.DefaultExpiryPeriod,
	}
	if got := deriveDefaults(timing.Durations{}); got != want {
		t.Errorf("the rule applied to nothing = %+v; want the defaults %+v", got, want)
	}
}

// durs is the four durations in the order HeartbeatPeriod, SafePeriod,
// LeaseDuration, ExpiryPeriod.
func durs(heartbeat, safe, lease, expiry time.Duration) timing.Durations {
	return timing.Durations{HeartbeatPeriod: heartbeat, SafePeriod: safe, LeaseDuration: lease, ExpiryPeriod: expiry}
}

// deriveDefaults is the library's derivation rule with its defaults.
func deriveDefaults(t timing.Durations) timing.Durations {
	d, _ := timing.Derive(t, ddblock.DefaultLeaseDuration, ddblock.DefaultExpiryPeriod)
	return d
}

func timingOf(o ddblock.Options) timing.Durations {
	return timing.Durations{HeartbeatPeriod: o.HeartbeatPeriod, SafePeriod: o.SafePeriod, LeaseDuration: o.LeaseDuration, ExpiryPeriod: o.ExpiryPeriod}
}

// TestTimingDerivation: the durations not set follow those set, by the
// rule of internal/timing, in New as in the rule itself.
func TestTimingDerivation(t *testing.T) {
	s, m, h := time.Second, time.Minute, time.Hour
	for _, tc := range []struct {
		name string
		opts []ddblock.Option
		want timing.Durations // HeartbeatPeriod, SafePeriod, LeaseDuration, ExpiryPeriod
	}{
		{"nothing set: Python's defaults", nil, durs(5*s, 20*s, 30*s, h)},
		{"lease alone", []ddblock.Option{ddblock.WithLeaseDuration(12 * s)}, durs(2*s, 8*s, 12*s, h)},
		{"the issue's lease", []ddblock.Option{ddblock.WithLeaseDuration(10 * s)}, durs(10*s/6, 10*s*2/3, 10*s, h)},
		{"long lease stretches the expiry", []ddblock.Option{ddblock.WithLeaseDuration(2 * h)}, durs(20*m, 80*m, 2*h, 4*h)},
		// A heartbeat or safe period Python would run with its 30 s lease
		// keeps that lease, as in Python; a longer one stretches it.
		{"heartbeat alone", []ddblock.Option{ddblock.WithHeartbeatPeriod(s)}, durs(s, 20*s, 30*s, h)},
		{"long heartbeat alone", []ddblock.Option{ddblock.WithHeartbeatPeriod(10 * s)}, durs(10*s, 40*s, 60*s, h)},
		{"safe period alone", []ddblock.Option{ddblock.WithSafePeriod(8 * s)}, durs(2*s, 8*s, 30*s, h)},
		{"long safe period alone", []ddblock.Option{ddblock.WithSafePeriod(40 * s)}, durs(10*s, 40*s, 60*s, h)},
		{"heartbeat and safe period", []ddblock.Option{ddblock.WithHeartbeatPeriod(s), ddblock.WithSafePeriod(8 * s)}, durs(s, 8*s, 30*s, h)},
		{"heartbeat and lease", []ddblock.Option{ddblock.WithHeartbeatPeriod(s), ddblock.WithLeaseDuration(12 * s)}, durs(s, 8*s, 12*s, h)},
		{"safe period and lease", []ddblock.Option{ddblock.WithSafePeriod(5 * s), ddblock.WithLeaseDuration(12 * s)}, durs(5*s/4, 5*s, 12*s, h)},
		{"expiry alone", []ddblock.Option{ddblock.WithExpiryPeriod(2 * m)}, durs(5*s, 20*s, 30*s, 2*m)},
		{"all set", []ddblock.Option{ddblock.WithHeartbeatPeriod(s), ddblock.WithSafePeriod(3 * s), ddblock.WithLeaseDuration(4 * s), ddblock.WithExpiryPeriod(5 * s)}, durs(s, 3*s, 4*s, 5*s)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := resolved(t, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := timingOf(o); got != tc.want {
				t.Errorf("New: %+v; want %+v", got, tc.want)
			}
			if o.HeartbeatTimeout != o.SafePeriod/2 {
				t.Errorf("HeartbeatTimeout = %v; want half the safe period %v", o.HeartbeatTimeout, o.SafePeriod/2)
			}
			// Derive gives the same from the durations the options set.
			set := ddblock.AppliedForTest(tc.opts...)
			if got := deriveDefaults(timingOf(set)); got != tc.want {
				t.Errorf("Derive: %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestTimingDeriveKeepsWhatIsGiven(t *testing.T) {
	s := time.Second
	for _, in := range []timing.Durations{
		{HeartbeatPeriod: -s},
		{HeartbeatPeriod: 7 * s, SafePeriod: s, LeaseDuration: 2 * s, ExpiryPeriod: s},
		{LeaseDuration: -s, SafePeriod: 8 * s},
		{HeartbeatPeriod: 1 << 62},
	} {
		got := deriveDefaults(in)
		for _, d := range []struct {
			name    string
			in, got time.Duration
		}{
			{"HeartbeatPeriod", in.HeartbeatPeriod, got.HeartbeatPeriod},
			{"SafePeriod", in.SafePeriod, got.SafePeriod},
			{"LeaseDuration", in.LeaseDuration, got.LeaseDuration},
			{"ExpiryPeriod", in.ExpiryPeriod, got.ExpiryPeriod},
		} {
			if d.in != 0 && d.got != d.in {
				t.Errorf("derive %+v: %s = %v; want it kept at %v", in, d.name, d.got, d.in)
			}
			if d.in == 0 && d.got <= 0 {
				t.Errorf("derive %+v: %s = %v; want a positive derived value", in, d.name, d.got)
			}
		}
	}
	// A negative lease derives nothing: the safe period given is the anchor.
	if got := deriveDefaults(timing.Durations{LeaseDuration: -s, SafePeriod: 8 * s}); got.HeartbeatPeriod != 2*s {
		t.Errorf("HeartbeatPeriod = %v; want 2s, from a 12s lease derived from the safe period", got.HeartbeatPeriod)
	}
}

// wantRefused checks that err is INVALID_ARGUMENT, that one of its errors
// names setting, and that its message contains each of msgs.
func wantRefused(t *testing.T, err error, setting string, msgs ...string) {
	t.Helper()
	if !errors.Is(err, ddblock.CodeInvalidArgument) {
		t.Fatalf("err = %v; want INVALID_ARGUMENT", err)
	}
	named := false
	for _, e := range unjoin(err) {
		var lerr *ddblock.Error
		if errors.As(e, &lerr) && lerr.Setting == setting {
			named = true
		}
	}
	if !named {
		t.Errorf("err = %v; want one naming %s", err, setting)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("err = %v; want it to say %q", err, m)
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestNewRefusesSettingsThatCannotWork(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		setting string
		opts    []ddblock.Option
	}{
		{"TableName", []ddblock.Option{ddblock.WithTableName("")}},
		{"TableName", []ddblock.Option{ddblock.WithTableName("no spaces allowed")}},
		{"PartitionKeyName", []ddblock.Option{ddblock.WithPartitionKeyName("")}},
		{"SortKeyName", []ddblock.Option{ddblock.WithSortKeyName("")}},
		{"TTLAttributeName", []ddblock.Option{ddblock.WithTTLAttributeName("")}},
		{"SortKeyName", []ddblock.Option{ddblock.WithSortKeyName("lock_key")}},
		{"TTLAttributeName", []ddblock.Option{ddblock.WithTTLAttributeName("sort_key")}},
		{"PartitionKeyName", []ddblock.Option{ddblock.WithPartitionKeyName("owner_name")}},
		{"HeartbeatPeriod", []ddblock.Option{ddblock.WithHeartbeatPeriod(0)}},
		{"HeartbeatPeriod", []ddblock.Option{ddblock.WithHeartbeatPeriod(-s)}},
		{"SafePeriod", []ddblock.Option{ddblock.WithSafePeriod(0)}},
		{"LeaseDuration", []ddblock.Option{ddblock.WithLeaseDuration(-1)}},
		{"LeaseDuration", []ddblock.Option{ddblock.WithLeaseDuration(400 * 24 * time.Hour)}},
		{"HeartbeatPeriod", []ddblock.Option{ddblock.WithHeartbeatPeriod(100 * 24 * time.Hour)}}, // a 600-day lease
		{"ExpiryPeriod", []ddblock.Option{ddblock.WithExpiryPeriod(0)}},
		{"ExpiryPeriod", []ddblock.Option{ddblock.WithExpiryPeriod(10 * s)}}, // below the default lease
		{"HeartbeatPeriod", []ddblock.Option{ddblock.WithHeartbeatPeriod(20 * s), ddblock.WithSafePeriod(20 * s)}},
		{"SafePeriod", []ddblock.Option{ddblock.WithSafePeriod(30 * s), ddblock.WithLeaseDuration(30 * s)}},
		{"HeartbeatTPS", []ddblock.Option{ddblock.WithHeartbeatTPS(0)}},
		{"HeartbeatTPS", []ddblock.Option{ddblock.WithHeartbeatTPS(-2)}},
		{"CallbackWorkers", []ddblock.Option{ddblock.WithCallbackWorkers(0)}},
		{"HeartbeatConcurrency", []ddblock.Option{ddblock.WithHeartbeatConcurrency(-1)}},
		{"HeartbeatConcurrency", []ddblock.Option{ddblock.WithHeartbeatConcurrency(0)}},
		{"HeartbeatTimeout", []ddblock.Option{ddblock.WithHeartbeatTimeout(-s)}},
		{"MaxClockSkew", []ddblock.Option{ddblock.WithMaxClockSkew(-s)}},
		{"MaxObservations", []ddblock.Option{ddblock.WithMaxObservations(0)}},
		{"KeepReleasedItems", []ddblock.Option{ddblock.WithFencingTokens(), ddblock.WithKeepReleasedItems(false)}},
		{"SortKeyName", []ddblock.Option{ddblock.WithPartitionKeyOnly(), ddblock.WithSortKeyName("sk")}},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			_, err := resolved(t, tc.opts...)
			wantRefused(t, err, tc.setting)
		})
	}
	for _, ddb := range []ddblock.DynamoDBAPI{nil, (*dynamodb.Client)(nil)} {
		if _, err := ddblock.New(ddb); !errors.Is(err, ddblock.CodeInvalidArgument) {
			t.Errorf("nil client: %v", err)
		}
	}
	// Every problem is reported at once.
	_, err := resolved(t, ddblock.WithTableName(""), ddblock.WithHeartbeatTPS(0))
	if s := err.Error(); !strings.Contains(s, "TableName") || !strings.Contains(s, "HeartbeatTPS") {
		t.Errorf("err = %v; want both settings named", err)
	}
}

// TestConflictsNameBothSettings: settings that contradict each other are
// refused with a message naming both, and saying which were set.
func TestConflictsNameBothSettings(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name    string
		opts    []ddblock.Option
		setting string
		msg     string
	}{
		{"safe period and lease set", []ddblock.Option{ddblock.WithSafePeriod(20 * s), ddblock.WithLeaseDuration(10 * s)},
			"SafePeriod", "SafePeriod 20s must be below LeaseDuration 10s (both set)"},
		{"heartbeat and safe period set", []ddblock.Option{ddblock.WithHeartbeatPeriod(9 * s), ddblock.WithSafePeriod(8 * s)},
			"HeartbeatPeriod", "HeartbeatPeriod 9s must be below SafePeriod 8s (both set)"},
		{"heartbeat against a derived safe period", []ddblock.Option{ddblock.WithHeartbeatPeriod(25 * s), ddblock.WithLeaseDuration(30 * s)},
			"HeartbeatPeriod", "HeartbeatPeriod 25s must be below SafePeriod 20s (SafePeriod not set: 2/3 of LeaseDuration)"},
		{"expiry and lease set", []ddblock.Option{ddblock.WithExpiryPeriod(10 * time.Minute), ddblock.WithLeaseDuration(time.Hour)},
			"LeaseDuration", "LeaseDuration 1h0m0s must be below ExpiryPeriod 10m0s (both set)"},
		{"expiry against the default lease", []ddblock.Option{ddblock.WithExpiryPeriod(10 * s)},
			"ExpiryPeriod", "LeaseDuration 30s must be below ExpiryPeriod 10s (LeaseDuration not set: the default)"},
		{"fencing tokens without kept items", []ddblock.Option{ddblock.WithFencingTokens(), ddblock.WithKeepReleasedItems(false)},
			"KeepReleasedItems", "KeepReleasedItems: false and FencingTokens exclude each other (both set)"},
		{"a sort key name on a partition-key-only table", []ddblock.Option{ddblock.WithPartitionKeyOnly(), ddblock.WithSortKeyName("sk")},
			"SortKeyName", `"sk" and PartitionKeyOnly exclude each other (both set)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, opts := range [][]ddblock.Option{tc.opts, {tc.opts[len(tc.opts)-1], tc.opts[0]}} {
				_, err := resolved(t, opts...)
				wantRefused(t, err, tc.setting, tc.msg)
			}
		})
	}
}

// TestOptionOrderDoesNotMatter applies every pair of options, each with
// representative values (conflicting ones too), in both orders, and
// expects the same outcome: the same resolved settings, or the same
// errors. Two options that set the same setting are left out: there the
// last one wins, by design.
func TestOptionOrderDoesNotMatter(t *testing.T) {
	s := time.Second
	otherLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	reps := []struct {
		setting string
		opt     ddblock.Option
	}{
		{"TableName", ddblock.WithTableName("other_table")},
		{"TableName", ddblock.WithTableName("")},
		{"PartitionKeyName", ddblock.WithPartitionKeyName("pk")},
		{"PartitionKeyName", ddblock.WithPartitionKeyName("sort_key")},
		{"SortKeyName", ddblock.WithSortKeyName("sk")},
		{"SortKeyName", ddblock.WithSortKeyName("")},
		{"SortKeyName", ddblock.WithSortKeyName("expiry_time")},
		{"TTLAttributeName", ddblock.WithTTLAttributeName("ttl")},
		{"TTLAttributeName", ddblock.WithTTLAttributeName("lock_key")},
		{"PartitionKeyOnly", ddblock.WithPartitionKeyOnly()},
		{"OwnerName", ddblock.WithOwnerName("other-owner")},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(2 * s)},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(25 * s)},
		{"HeartbeatPeriod", ddblock.WithHeartbeatPeriod(0)},
		{"SafePeriod", ddblock.WithSafePeriod(8 * s)},
		{"SafePeriod", ddblock.WithSafePeriod(40 * s)},
		{"LeaseDuration", ddblock.WithLeaseDuration(10 * s)},
		{"LeaseDuration", ddblock.WithLeaseDuration(2 * time.Hour)},
		{"ExpiryPeriod", ddblock.WithExpiryPeriod(5 * s)},
		{"ExpiryPeriod", ddblock.WithExpiryPeriod(3 * time.Hour)},
		{"HeartbeatTPS", ddblock.WithHeartbeatTPS(10)},
		{"HeartbeatTPS", ddblock.WithHeartbeatTPS(0)},
		{"HeartbeatConcurrency", ddblock.WithHeartbeatConcurrency(3)},
		{"HeartbeatTimeout", ddblock.WithHeartbeatTimeout(s)},
		{"CallbackWorkers", ddblock.WithCallbackWorkers(2)},
		{"FencingTokens", ddblock.WithFencingTokens()},
		{"KeepReleasedItems", ddblock.WithKeepReleasedItems(false)},
		{"KeepReleasedItems", ddblock.WithKeepReleasedItems(true)},
		{"MaxClockSkew", ddblock.WithMaxClockSkew(s)},
		{"SessionLease", ddblock.WithSessionLease()},
		{"MaxObservations", ddblock.WithMaxObservations(7)},
		{"Metrics", ddblock.WithMetrics(ddblock.NoMetrics{})},
		{"Logger", ddblock.WithLogger(otherLog)},
	}
	// Fixed owner name, logger and clock, so that two resolutions of the
	// same settings are equal.
	base := []ddblock.Option{
		ddblock.WithOwnerName("owner"),
		ddblock.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		ddblock.WithClock(clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))),
	}
	outcome := func(opts ...ddblock.Option) string {
		o, err := resolved(t, append(append([]ddblock.Option{}, base...), opts...)...)
		if err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%+v", o)
	}
	pairs, refused := 0, 0
	for i, a := range reps {
		for _, b := range reps[i+1:] {
			if a.setting == b.setting {
				continue
			}
			ab, ba := outcome(a.opt, b.opt), outcome(b.opt, a.opt)
			if ab != ba {
				t.Errorf("%s then %s:\n  %s\nthe other way round:\n  %s", a.setting, b.setting, ab, ba)
			}
			pairs++
			if strings.HasPrefix(ab, "error: ") {
				refused++
			}
		}
	}
	// The pairs cover both outcomes.
	if refused == 0 || refused == pairs {
		t.Errorf("%d of %d pairs refused; want some of each", refused, pairs)
	}
	t.Logf("%d pairs, %d refused", pairs, refused)
}
