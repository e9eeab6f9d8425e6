package mutexcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

const ms = int64(time.Millisecond)

// The settings of the hand-made waiters: retry 15 ms, heartbeat 100 ms,
// lease 600 ms.
var (
	retry15, hb100, lease600 = 15 * time.Millisecond, 100 * time.Millisecond, 600 * time.Millisecond
	bound15, _               = ProgressBound(retry15, hb100)
)

// held writes a tenure of holder on key, its put sent at from, released
// ok at until (or, with until < 0, never: no release on record).
func held(l *Log, holder, key string, from, until int64) {
	id := holder + "#1"
	l.Params(holder, holder, "p-"+holder, 0, lease600, retry15, hb100, "calls")
	l.Call(holder, "PutItem", key, "-", from, from+ms, "ok", "rvn-"+id)
	l.Acquired(id, key, from+ms, "rvn-"+id, 0, "")
	l.Step(id, from+2*ms)
	if until >= 0 {
		l.Ended(id, until-ms, "done")
		l.Released(id, until, "ok")
	}
}

// waited writes a failed wait of holder w on key from start to end;
// flags are w's params flags.
func waited(l *Log, w, key string, start, end int64, flags ...string) {
	l.Params(w, w, "p-"+w, 0, lease600, retry15, hb100, flags...)
	l.Attempting(w, key, start)
	l.Attempted(w, key, start, end, "ACQUIRE_TIMEOUT")
}

func progressOf(t *testing.T, write func(l *Log)) Report {
	t.Helper()
	r := Check(logOf(t, write))
	if len(r.Problems) > 0 {
		t.Fatalf("problems: %v", r.Problems)
	}
	return r
}

func TestProgressBoundTerms(t *testing.T) {
	b, terms := ProgressBound(retry15, hb100)
	if want := 2*retry15 + hb100 + 3*StallThreshold; b != want {
		t.Errorf("bound %v, want %v", b, want)
	}
	grace := FairGrace(retry15, hb100)
	if grace != max(3*retry15, 2*hb100)+time.Second {
		t.Errorf("grace %v", grace)
	}
	if g := FairGrace(retry15, time.Second); g != 3*time.Second {
		t.Errorf("grace with a 1 s heartbeat %v; want 3 s", g)
	}
	// ddblock's lineBound: 2 x grace + 3 x retry.
	fb, fterms := FairProgressBound(retry15, hb100, grace)
	if want := b + 2*grace + 3*retry15; fb != want {
		t.Errorf("fair bound %v, want %v", fb, want)
	}
	if !strings.Contains(terms, "retry period") || !strings.Contains(fterms, "grace") || !strings.Contains(fterms, "3 x retry") {
		t.Errorf("terms %q, %q", terms, fterms)
	}
}

// A wait on a free key: caught beyond the bound, not just inside it, and
// not while the key was occupied.
func TestProgressFreeKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		free int64 // how long the key stood free before the wait ended
		want int
	}{
		{"beyond the bound", int64(bound15) + ms, 1},
		{"just inside the bound", int64(bound15) - ms, 0},
		{"occupied throughout", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := progressOf(t, func(l *Log) {
				end := 3000 * ms
				held(l, "a", "k", 0, end-tc.free)
				if tc.free == 0 {
					held(l, "b", "k", end-10*ms, -1) // takes it at once
				}
				waited(l, "w", "k", 10*ms, end)
			})
			if got := len(r.ProgressViolations); got != tc.want {
				t.Fatalf("%d progress violations, want %d:\n%s", got, tc.want, r.Summary())
			}
			if tc.want == 1 {
				v := r.ProgressViolations[0]
				if v.Free != time.Duration(tc.free) || v.Holder != "w" || v.Bound != bound15 {
					t.Errorf("violation %s", v)
				}
				if !strings.Contains(v.String(), "tenure a#1") {
					t.Errorf("the report does not show the key's intervals around the wait:\n%s", v)
				}
			}
			p := r.Progress["other"]
			if p.Timeouts != 1 || p.LongestFree != time.Duration(tc.free) {
				t.Errorf("progress %+v", p)
			}
		})
	}
}

// A holder killed under its lock: its item stands for a lease after its
// death, for a waiter that watched it since; a waiter that came later
// watches it a lease from its own start.
func TestProgressDeadHolder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end int64
		want       int
	}{
		{"within the lease and the bound", 10 * ms, 1000*ms + int64(lease600+bound15) - ms, 0},
		{"beyond them", 10 * ms, 1000*ms + int64(lease600+bound15) + ms, 1},
		{"late waiter, within its own watch", 1500 * ms, 1500*ms + int64(lease600+bound15) - ms, 0},
		{"late waiter, beyond it", 1500 * ms, 1500*ms + int64(lease600+bound15) + ms, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := progressOf(t, func(l *Log) {
				held(l, "a", "k", 0, -1)
				l.Trouble("p-a", 1000*ms, 1000*ms, "kill", 0)
				waited(l, "w", "k", tc.start, tc.end)
			})
			if got := len(r.ProgressViolations); got != tc.want {
				t.Fatalf("%d progress violations, want %d:\n%s", got, tc.want, r.Summary())
			}
		})
	}
	// Without a record of its death, the item stands for ever.
	r := progressOf(t, func(l *Log) {
		held(l, "a", "k", 0, -1)
		waited(l, "w", "k", 10*ms, 5000*ms)
	})
	if len(r.ProgressViolations) != 0 {
		t.Errorf("a holder with no record of its end: %v", r.ProgressViolations)
	}
}

// A failed release stands from the release's return (plus the longest
// hold of a request by a fault) for a lease.
func TestProgressFailedRelease(t *testing.T) {
	r := progressOf(t, func(l *Log) {
		held(l, "a", "k", 0, -1)
		l.Ended("a#1", 100*ms, "done")
		l.Released("a#1", 200*ms, "UNKNOWN")
		l.Trouble("p-x", 0, 500*ms, "fault-latency", 300*time.Millisecond)
		waited(l, "w", "k", 10*ms, 200*ms+300*ms+int64(lease600+bound15)-ms)
	})
	if len(r.ProgressViolations) != 0 || r.MaxHeld != 300*time.Millisecond {
		t.Errorf("violations %v, max held %v", r.ProgressViolations, r.MaxHeld)
	}
}

// A best-effort release ("unknown") whose delete was seen to succeed
// frees the key then.
func TestProgressBestEffortReleaseSeen(t *testing.T) {
	r := progressOf(t, func(l *Log) {
		held(l, "a", "k", 0, -1)
		l.Ended("a#1", 100*ms, "done")
		l.Call("a", "UpdateItem", "k", "-", 101*ms, 103*ms, "ok", "") // a heartbeat
		l.Call("a", "DeleteItem", "k", "-", 102*ms, 110*ms, "ok", "release")
		l.Released("a#1", 111*ms, "unknown")
		waited(l, "w", "k", 10*ms, 2000*ms)
	})
	if len(r.ProgressViolations) != 1 || r.ProgressViolations[0].FreeFrom != 110*ms {
		t.Errorf("violations %v", r.ProgressViolations)
	}
	// A heartbeat after the tenure's end is no release: the item stands
	// a lease.
	r = progressOf(t, func(l *Log) {
		held(l, "a", "k", 0, -1)
		l.Ended("a#1", 100*ms, "done")
		l.Call("a", "DeleteItem", "k", "-", 101*ms, 110*ms, "err", "release")
		l.Call("a", "UpdateItem", "k", "-", 102*ms, 111*ms, "ok", "")
		l.Released("a#1", 112*ms, "unknown")
		waited(l, "w", "k", 10*ms, 112*ms+int64(lease600+bound15)-ms)
	})
	if len(r.ProgressViolations) != 0 {
		t.Errorf("a failed release: %v", r.ProgressViolations)
	}
}

// What the waiter could not see does not count: its calls in flight and
// after a failed one, and its process stalled.
func TestProgressBlindWaiter(t *testing.T) {
	slack := blindSlack(retry15, hb100)
	for _, tc := range []struct {
		name  string
		blind func(l *Log)
		want  int
	}{
		{"looking", func(l *Log) {}, 1},
		{"a call in flight", func(l *Log) { l.Call("w", "GetItem", "k", "-", 1000*ms, 1900*ms, "ok", "") }, 0},
		{"a failed call, and the slack after it", func(l *Log) {
			l.Call("w", "GetItem", "k", "-", 1000*ms, 1900*ms-slack, "err", "")
		}, 0},
		{"a call on another key", func(l *Log) { l.Call("w", "GetItem", "other", "-", 1000*ms, 1900*ms, "ok", "") }, 1},
		{"a stall of its process", func(l *Log) { l.Trouble("p-w", 1000*ms, 1900*ms, "stall", 0) }, 0},
		{"a stall of another process", func(l *Log) { l.Trouble("p-x", 1000*ms, 1900*ms, "stall", 0) }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := progressOf(t, func(l *Log) {
				held(l, "a", "k", 0, 1000*ms)
				held(l, "b", "k", 1900*ms, 3000*ms)
				waited(l, "w", "k", 10*ms, 2500*ms, "calls")
				tc.blind(l)
			})
			if got := len(r.ProgressViolations); got != tc.want {
				t.Fatalf("%d progress violations, want %d:\n%s", got, tc.want, r.Summary())
			}
		})
	}
}

// A put whose outcome is unknown may have left an item that stands a
// lease; an attempt cut short by a kill, one until its process's death
// and a lease.
func TestProgressUnaccountedWrites(t *testing.T) {
	end := 50*ms + int64(lease600+bound15) - ms
	r := progressOf(t, func(l *Log) {
		l.Params("x", "x", "p-x", 0, lease600, retry15, hb100, "calls")
		l.Call("x", "PutItem", "k", "-", 40*ms, 50*ms, "err", "rvn-lost")
		waited(l, "w", "k", 10*ms, end)
		l.Params("y", "y", "p-y", 0, lease600, retry15, hb100, "calls")
		l.Attempting("y", "k2", 20*ms)
		l.Trouble("p-y", 50*ms, 50*ms, "kill", 0)
		waited(l, "w2", "k2", 10*ms, end)
		waited(l, "w3", "k3", 10*ms, end) // nothing on k3
	})
	if len(r.ProgressViolations) != 1 || r.ProgressViolations[0].Holder != "w3" {
		t.Errorf("violations %v; want w3's alone", r.ProgressViolations)
	}
}

// A semaphore waiter waits on its group: free while fewer slots are
// occupied than its limit.
func TestProgressSemaphoreGroup(t *testing.T) {
	for _, occupied := range []int{1, 2} {
		r := progressOf(t, func(l *Log) {
			l.Limit("w", "s", 0, 2)
			for i := range occupied {
				held(l, string(rune('a'+i)), "s/slot-"+string(rune('0'+i)), 0, 3000*ms)
			}
			waited(l, "w", "s/slot-*", 10*ms, 2000*ms)
		})
		if want := 2 - occupied; len(r.ProgressViolations) != want {
			t.Errorf("%d of 2 slots occupied: %d violations, want %d", occupied, len(r.ProgressViolations), want)
		}
	}
	// A resize from 2 to 1 in flight counts the group full with one.
	r := progressOf(t, func(l *Log) {
		l.Limit("w", "s", 0, 2)
		held(l, "a", "s/slot-0", 0, 3000*ms)
		l.Resize("z", "s", 5*ms, 1, "begin")
		waited(l, "w", "s/slot-*", 10*ms, 2000*ms)
	})
	if len(r.ProgressViolations) != 0 {
		t.Errorf("during a shrink to 1 with one slot held: %v", r.ProgressViolations)
	}
}

// A fair waiter's violations are kept apart, against its longer bound.
func TestProgressFairWaiter(t *testing.T) {
	fairBound, _ := FairProgressBound(retry15, hb100, FairGrace(retry15, hb100))
	for _, tc := range []struct {
		free int64
		want int
	}{{int64(fairBound) - ms, 0}, {int64(fairBound) + ms, 1}} {
		r := progressOf(t, func(l *Log) {
			held(l, "a", "k", 0, 10000*ms-tc.free)
			waited(l, "w-fair", "k", 10*ms, 10000*ms, "fair")
		})
		if len(r.ProgressViolations) != 0 || len(r.FairProgressViolations) != tc.want {
			t.Errorf("free %v: violations %v, fair %v", time.Duration(tc.free), r.ProgressViolations, r.FairProgressViolations)
		}
		if p := r.Progress["fair"]; p.Attempts != 1 || p.Timeouts != 1 {
			t.Errorf("progress of the fair kind: %+v (%v)", p, r.Progress)
		}
	}
}

// A fair waiter's calls on its line's tickets (reading the front,
// writing and deleting its own) blind it as its calls on the key do; a
// ticket of another key's line does not.
func TestProgressFairWaiterBlindOnTickets(t *testing.T) {
	fairBound, _ := FairProgressBound(retry15, hb100, FairGrace(retry15, hb100))
	for _, tc := range []struct {
		ticket string
		want   int
	}{{"ddblock_wait#0123456789abcdef#7#k", 0}, {"ddblock_wait#0123456789abcdef#7#kk", 1}, {"ddblock_wait#0123456789abcdef#7#xk", 1}} {
		r := progressOf(t, func(l *Log) {
			held(l, "a", "k", 0, 10*ms)
			l.Params("w-fair", "w-fair", "p-w", 0, lease600, retry15, hb100, "fair", "calls")
			l.Attempting("w-fair", "k", 20*ms)
			// A read of a ticket that hung for two seconds.
			l.Call("w-fair", "GetItem", tc.ticket, "-", 1000*ms, 3000*ms, "ok", "")
			l.Attempted("w-fair", "k", 20*ms, 20*ms+int64(fairBound)+500*ms, "ACQUIRE_TIMEOUT")
		})
		if len(r.FairProgressViolations) != tc.want {
			t.Errorf("a call on %s in flight: fair violations %v, want %d", tc.ticket, r.FairProgressViolations, tc.want)
		}
	}
}

// The fair bound counts the longest grace of the run's fair waiters: a
// waiter that retries often may stand behind one that retries seldom.
func TestProgressFairBoundTakesLongestGrace(t *testing.T) {
	slow := 200 * time.Millisecond
	fairBound, _ := FairProgressBound(retry15, hb100, FairGrace(slow, hb100))
	r := progressOf(t, func(l *Log) {
		l.Params("slow-fair", "slow-fair", "p-s", 0, lease600, slow, hb100, "fair")
		held(l, "a", "k", 0, 10000*ms-int64(fairBound)+ms)
		waited(l, "w-fair", "k", 10*ms, 10000*ms, "fair")
	})
	if len(r.FairProgressViolations) != 0 {
		t.Errorf("free just under the bound with the slow waiter's grace: %v", r.FairProgressViolations)
	}
}

func TestProgressEventsRoundTrip(t *testing.T) {
	events := logOf(t, func(l *Log) {
		l.Params("h", "c", "p", 1, lease600, retry15, hb100, "fair", "calls")
		l.Attempting("h", "k", 2)
		l.Attempted("h", "k", 2, 3, "acquired")
		l.Call("c", "PutItem", "k", "-", 4, 5, "ok", "r1")
		l.Trouble("w0*", 6, 7, "fault-latency", 8)
	})
	p, q, a, c, x := events[0], events[1], events[2], events[3], events[4]
	if p.Kind != Params || p.Tenure != "h" || p.Client != "c" || p.Proc != "p" || p.Lease != lease600 || p.Retry != retry15 ||
		p.Heartbeat != hb100 || p.Note != "fair,calls" || p.T != 1 {
		t.Errorf("params %+v", p)
	}
	if q.Kind != Attempting || q.Key != "k" || q.T != 2 || a.Kind != Attempted || a.End != 3 || a.Note != "acquired" {
		t.Errorf("attempt %+v %+v", q, a)
	}
	if c.Kind != Call || c.Op != "PutItem" || c.Key != "k" || c.SortKey != "-" || c.T != 4 || c.End != 5 || c.Note != "ok" || c.Detail != "r1" {
		t.Errorf("call %+v", c)
	}
	if x.Kind != Trouble || x.Tenure != "w0*" || x.T != 6 || x.End != 7 || x.Note != "fault-latency" || x.Token != 8 {
		t.Errorf("trouble %+v", x)
	}
}

func TestProgressKind(t *testing.T) {
	for id, want := range map[string]string{
		"g0.1-plain-t2": "plain", "w0.1/c0-session+twin": "session", "g3.2-session-fast-fair": "session-fast-fair",
		"w1.3/c1-fencing": "fencing", "x": "other", "g1.1-fencing-t12": "fencing",
	} {
		if got := progressKind(id); got != want {
			t.Errorf("progressKind(%q) = %q, want %q", id, got, want)
		}
	}
}

// fakeAPI answers every call with err.
type fakeAPI struct{ err error }

func (f fakeAPI) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, f.err
}
func (f fakeAPI) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return &dynamodb.PutItemOutput{}, f.err
}
func (f fakeAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return &dynamodb.UpdateItemOutput{}, f.err
}
func (f fakeAPI) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return &dynamodb.DeleteItemOutput{}, f.err
}
func (f fakeAPI) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return &dynamodb.QueryOutput{}, f.err
}
func (f fakeAPI) Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	return &dynamodb.ScanOutput{}, f.err
}

// A Recorder logs each call with its item, outcome and, for a put, the
// version it writes; it passes the answer on unchanged.
func TestRecorderLogsCalls(t *testing.T) {
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	key := map[string]types.AttributeValue{"lock_key": s("k"), "sort_key": s("slot-1")}
	item := map[string]types.AttributeValue{"lock_key": s("k"), "sort_key": s("-"), "record_version_number": s("v1")}
	ctx := context.Background()
	events := logOf(t, func(l *Log) {
		for _, err := range []error{nil, &types.ConditionalCheckFailedException{}, errors.New("boom")} {
			r := &Recorder{API: fakeAPI{err}, Client: "c", Log: l}
			if _, got := r.PutItem(ctx, &dynamodb.PutItemInput{Item: item}); got != err {
				t.Errorf("PutItem returned %v, want %v", got, err)
			}
			if _, got := r.GetItem(ctx, &dynamodb.GetItemInput{Key: key}); got != err {
				t.Errorf("GetItem returned %v, want %v", got, err)
			}
			_, _ = r.Query(ctx, &dynamodb.QueryInput{})
		}
	})
	var got []string
	for _, ev := range events {
		if ev.Kind != Call || ev.Tenure != "c" || ev.End < ev.T {
			t.Fatalf("event %+v", ev)
		}
		got = append(got, strings.Join([]string{ev.Op, itemKey(ev.Key, ev.SortKey), ev.Note, ev.Detail}, " "))
	}
	want := []string{
		"PutItem k ok v1", "GetItem k/slot-1 ok ", "Query ? ok ",
		"PutItem k cond v1", "GetItem k/slot-1 cond ", "Query ? cond ",
		"PutItem k err v1", "GetItem k/slot-1 err ", "Query ? err ",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("calls logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A Recorder tells releases (a delete, an update marking the item
// released) from heartbeats.
func TestRecorderMarksReleases(t *testing.T) {
	key := map[string]types.AttributeValue{"lock_key": &types.AttributeValueMemberS{Value: "k"}}
	ctx := context.Background()
	events := logOf(t, func(l *Log) {
		r := &Recorder{API: fakeAPI{}, Client: "c", Log: l}
		_, _ = r.UpdateItem(ctx, &dynamodb.UpdateItemInput{Key: key, ExpressionAttributeValues: map[string]types.AttributeValue{
			":v": &types.AttributeValueMemberS{Value: "v2"}}})
		_, _ = r.UpdateItem(ctx, &dynamodb.UpdateItemInput{Key: key, ExpressionAttributeValues: map[string]types.AttributeValue{
			":r": &types.AttributeValueMemberBOOL{Value: true}}})
		_, _ = r.DeleteItem(ctx, &dynamodb.DeleteItemInput{Key: key})
	})
	var got []string
	for _, ev := range events {
		got = append(got, ev.Op+" "+ev.Detail)
	}
	if want := "UpdateItem |UpdateItem release|DeleteItem release"; strings.Join(got, "|") != want {
		t.Errorf("got %q, want %q", strings.Join(got, "|"), want)
	}
}

// An item stands no longer once a later tenure put its own, but only a
// tenure that began after the item's write surely landed: one whose
// occupancy began at its attempt's start (its calls not on record) may
// have acquired after a tenure that began later.
func TestProgressItemReplacedOnlyAfterItLanded(t *testing.T) {
	r := progressOf(t, func(l *Log) {
		l.Params("r", "r", "p-r", 0, lease600, retry15, hb100, "cli")
		l.Attempting("r", "k", 0)
		held(l, "b", "k", 100*ms, 200*ms) // b held it while r waited
		l.Acquired("r#1", "k", 500*ms, "-", 0, "")
		l.Step("r#1", 501*ms)
		l.Attempted("r", "k", 0, 500*ms, "acquired")
		l.Trouble("r#1", 600*ms, 600*ms, "exit", 0) // killed: no release
		waited(l, "w", "k", 700*ms, 1200*ms+int64(bound15)-ms)
	})
	if len(r.ProgressViolations) != 0 {
		t.Errorf("r's item, written after b's tenure, was taken as replaced by it: %v", r.ProgressViolations)
	}
}
