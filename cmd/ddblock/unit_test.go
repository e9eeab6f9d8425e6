package main

// Pure logic, tested without a server: timing rules, argument parsing,
// attribute rendering.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ddblock/ddblock"
)

func TestRunTiming(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	tests := []struct {
		name                          string
		lease, heartbeat, safe, grace time.Duration
		graceSet                      bool
		want                          timing
		err                           string
	}{
		{name: "library defaults", lease: 30 * s,
			want: timing{lease: 30 * s, heartbeat: 5 * s, safe: 20 * s, grace: 5 * s}},
		{name: "short lease", lease: s,
			want: timing{lease: s, heartbeat: s / 6, safe: s * 2 / 3, grace: (s - s*2/3) / 2}},
		{name: "explicit heartbeat", lease: s, heartbeat: 150 * ms,
			want: timing{lease: s, heartbeat: 150 * ms, safe: s * 2 / 3, grace: (s - s*2/3) / 2}},
		{name: "explicit everything", lease: 10 * s, heartbeat: s, safe: 5 * s, grace: 0, graceSet: true,
			want: timing{lease: 10 * s, heartbeat: s, safe: 5 * s, grace: 0}},
		{name: "grace up to the margin", lease: 3 * s, grace: s, graceSet: true,
			want: timing{lease: 3 * s, heartbeat: s / 2, safe: 2 * s, grace: s}},
		{name: "zero lease", lease: 0, err: "--lease must be positive"},
		{name: "negative heartbeat", lease: s, heartbeat: -ms, err: "--heartbeat must be positive"},
		{name: "negative safe", lease: s, safe: -ms, err: "--safe must be positive"},
		{name: "safe at the lease", lease: s, safe: s, err: "--safe 1s must be shorter than --lease 1s"},
		{name: "one heartbeat per safe period", lease: s, heartbeat: 400 * ms, err: "at least two heartbeats"},
		{name: "grace past the lease", lease: 3 * s, grace: 1100 * ms, graceSet: true, err: "--grace 1.1s is longer than the 1s"},
		{name: "negative grace", lease: 3 * s, grace: -s, graceSet: true, err: "--grace must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runTiming(tt.lease, tt.heartbeat, tt.safe, tt.grace, tt.graceSet)
			if tt.err != "" {
				var e *exitError
				if !errors.As(err, &e) || e.code != exitUsage || !strings.Contains(e.msg, tt.err) {
					t.Fatalf("want a usage error containing %q, got %v", tt.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRunTimingIsTheLibrarys: a run and a library client given only a
// lease derive the same heartbeat period and safe period.
func TestRunTimingIsTheLibrarys(t *testing.T) {
	for _, lease := range []time.Duration{time.Second, 7 * time.Second, 30 * time.Second, 2 * time.Hour} {
		got, err := runTiming(lease, 0, 0, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ddblock.New(dynamodb.New(dynamodb.Options{Region: "us-east-1"}), ddblock.WithLeaseDuration(lease))
		if err != nil {
			t.Fatal(err)
		}
		o := c.Options()
		_ = c.Close(t.Context(), false)
		if got.heartbeat != o.HeartbeatPeriod || got.safe != o.SafePeriod {
			t.Errorf("lease %v: run derives heartbeat %v, safe %v; the library %v, %v", lease, got.heartbeat, got.safe, o.HeartbeatPeriod, o.SafePeriod)
		}
	}
}

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		allowRest bool
		pos, rest []string
		sortKey   string
		err       string
	}{
		{name: "flag after the key", args: []string{"k", "--sort-key", "s"}, pos: []string{"k"}, sortKey: "s"},
		{name: "flag before the key", args: []string{"-sort-key=s", "k"}, pos: []string{"k"}, sortKey: "s"},
		{name: "command after --", args: []string{"k", "--sort-key", "s", "--", "ls", "-l"}, allowRest: true,
			pos: []string{"k"}, rest: []string{"ls", "-l"}, sortKey: "s"},
		{name: "command without --", args: []string{"k", "ls", "-l", "--sort-key", "x"}, allowRest: true,
			pos: []string{"k"}, rest: []string{"ls", "-l", "--sort-key", "x"}},
		{name: "key after --", args: []string{"--", "-odd-key"}, pos: []string{"-odd-key"}},
		{name: "key and command after --, each", args: []string{"--", "-k", "--", "cmd", "--x"}, allowRest: true,
			pos: []string{"-k"}, rest: []string{"cmd", "--x"}},
		{name: "key forgotten before --", args: []string{"--", "sh", "-c", "true"}, allowRest: true, err: "missing KEY before --"},
		{name: "nothing but --", args: []string{"--"}, allowRest: true, err: "missing KEY"},
		{name: "missing key", args: []string{"--sort-key", "s"}, err: "missing KEY"},
		{name: "missing key after --", args: []string{"--"}, err: "missing KEY"},
		{name: "unexpected argument", args: []string{"k", "x"}, err: `unexpected argument "x"`},
		{name: "unknown flag", args: []string{"k", "--nope"}, err: "flag provided but not defined: -nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &environ{stdout: &bytes.Buffer{}, getenv: func(string) string { return "" }}
			f := newFlags(env, "get", "get KEY", "")
			sortKey := f.String("sort-key", "-", "")
			pos, rest, err := f.parse(tt.args, 1, tt.allowRest, "KEY")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("want an error containing %q, got %v", tt.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.pos, pos); diff != "" {
				t.Errorf("positional (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.rest, rest, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("rest (-want +got):\n%s", diff)
			}
			if want := tt.sortKey; want != "" && *sortKey != want {
				t.Errorf("--sort-key = %q, want %q", *sortKey, want)
			}
		})
	}
}

func TestPlainAttributes(t *testing.T) {
	v := &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
		"s":    &types.AttributeValueMemberS{Value: "x"},
		"n":    &types.AttributeValueMemberN{Value: "12345678901234567890.5"},
		"bad":  &types.AttributeValueMemberN{Value: "NaN"},
		"b":    &types.AttributeValueMemberB{Value: []byte{1, 2}},
		"t":    &types.AttributeValueMemberBOOL{Value: true},
		"null": &types.AttributeValueMemberNULL{Value: true},
		"ss":   &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		"ns":   &types.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
		"l":    &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "y"}}},
	}}
	want := `{"b":"AQI=","bad":"NaN","l":["y"],"n":12345678901234567890.5,"ns":[1,2.5],"null":null,"s":"x","ss":["a","b"],"t":true}`
	got, err := json.Marshal(plain(v))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := formatAttrs(map[string]types.AttributeValue{"b": &types.AttributeValueMemberN{Value: "3"}, "a": &types.AttributeValueMemberS{Value: "x y"}}); got != `a="x y" b=3` {
		t.Errorf("formatAttrs = %s", got)
	}
	if got := cell("tab\there"); got != `"tab\there"` {
		t.Errorf("cell = %s", got)
	}
}

// blockedWriter blocks every Write until released, as a pipe nobody
// reads does.
type blockedWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *blockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// The queued writer never blocks its callers: behind a stuck stderr it
// keeps what fits, drops and counts the rest, and says so once stderr
// takes output again.
func TestQueuedWriter(t *testing.T) {
	w := &blockedWriter{release: make(chan struct{})}
	q := newQueuedWriter(w, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			fmt.Fprintf(q, "record %02d\n", i) // 10 bytes each
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked behind a stuck writer")
	}
	close(w.release)
	q.Close(10 * time.Second)
	got := w.String()
	// The writer goroutine took a first batch (one record, or up to a
	// queueful if it ran late) and blocked writing it; ten more records
	// fit in the queue behind it; the rest were dropped.
	kept := strings.Count(got, "record ")
	if kept < 10 || kept > 20 {
		t.Errorf("kept %d records, want between the 10 that fit in the queue and 20:\n%s", kept, got)
	}
	// The drops are noted once the writer takes output again: in one
	// note, or in two when the writer goroutine emptied the queue (taking
	// a batch it then blocked on) in the middle of the burst.
	dropped := 0
	for _, m := range regexp.MustCompile(`ddblock: dropped (\d+) writes of its own output`).FindAllStringSubmatch(got, -1) {
		n, _ := strconv.Atoi(m[1])
		dropped += n
	}
	if dropped != 50-kept {
		t.Errorf("notes of %d dropped writes; want %d:\n%s", dropped, 50-kept, got)
	}
	if !strings.HasPrefix(got, "record 00\n") {
		t.Errorf("the oldest records must come first:\n%s", got)
	}
	if n, err := q.Write([]byte("late\n")); n != 5 || err != nil {
		t.Errorf("Write after Close = %d, %v", n, err)
	}
}

func TestHolderJudgements(t *testing.T) {
	now := time.Date(2025, 6, 1, 3, 0, 0, 0, time.UTC)
	lease := 30 * time.Second
	info := func(rvn, owner string, stamp time.Time) *ddblock.LockInfo {
		return &ddblock.LockInfo{PartitionKey: "k", SortKey: "-", OwnerName: owner, RecordVersionNumber: rvn,
			LeaseDuration: lease, HeartbeatTime: stamp}
	}
	tests := []struct {
		name string
		got  holderJSON
		want holderJSON
	}{
		{"no stamp", holderByStamp(info("a", "o", time.Time{}), now),
			holderJSON{holderUnknown, "", "no heartbeat stamp; ls --watch tells"}},
		{"fresh stamp", holderByStamp(info("a", "o", now.Add(-1500*time.Millisecond)), now),
			holderJSON{holderLive, evidenceStamp, "heartbeat stamped 1.5s ago, lease 30s"}},
		{"stamp a lease old", holderByStamp(info("a", "o", now.Add(-lease)), now),
			holderJSON{holderLive, evidenceStamp, "heartbeat stamped 30s ago, lease 30s"}},
		{"stale stamp", holderByStamp(info("a", "o", now.Add(-lease-time.Second)), now),
			holderJSON{holderPresumedDead, evidenceStamp, "heartbeat stamped 31s ago, more than its lease of 30s"}},
		{"stamp from a clock ahead", holderByStamp(info("a", "o", now.Add(40*time.Millisecond)), now),
			holderJSON{holderLive, evidenceStamp, "heartbeat stamped 40ms ahead of this host's clock"}},
		{"new during the watch", holderByWatch(nil, info("a", "o", time.Time{}), 5*time.Second),
			holderJSON{holderLive, evidenceWatch, "acquired during the 5s watch"}},
		{"other owner", holderByWatch(info("a", "o", time.Time{}), info("b", "p", time.Time{}), 5*time.Second),
			holderJSON{holderLive, evidenceWatch, "changed hands during the 5s watch"}},
		{"heartbeated", holderByWatch(info("a", "o", time.Time{}), info("b", "o", time.Time{}), 5*time.Second),
			holderJSON{holderLive, evidenceWatch, "heartbeated during the 5s watch"}},
		{"silent", holderByWatch(info("a", "o", time.Time{}), info("a", "o", time.Time{}), 5*time.Second),
			holderJSON{holderPresumedDead, evidenceWatch, "no heartbeat in 5s"}},
		{"silent a whole lease", holderByWatch(info("a", "o", time.Time{}), info("a", "o", time.Time{}), lease),
			holderJSON{holderPresumedDead, evidenceWatch, "no heartbeat in 30s, its whole lease: a waiter may take it over"}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, tt.got, tt.want)
		}
	}
}

// Every code an acquire can end with has its exit status: a wait that
// ran out on conflicting writes (a set of keys) is a lock not acquired
// within --wait, not an internal error (the checker found a run that
// exited 70 so).
func TestLibErrorStatuses(t *testing.T) {
	for code, want := range map[ddblock.Code]int{
		ddblock.CodeAcquireTimeout:          exitBusy,
		ddblock.CodeTransactionConflict:     exitBusy,
		ddblock.CodeTransactionsUnsupported: exitUnavailable,
		ddblock.CodeUnknown:                 exitUnavailable,
		ddblock.CodeLockInDanger:            exitUnavailable,
		ddblock.CodeInvalidArgument:         exitUsage,
		ddblock.CodeInvalidItem:             exitDataErr,
		ddblock.CodeAccessDenied:            exitNoPerm,
	} {
		err := libError(&ddblock.Error{Code: code, Message: "m"}, "t")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != want {
			t.Errorf("libError(%s) = %v; want exit %d", code, err, want)
		}
	}
}
