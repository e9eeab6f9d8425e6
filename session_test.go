package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// rawItem reads an item as stored, or nil.
func rawItem(t *testing.T, e *env, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	return ddbtest.RawItem(t, e.ddb, e.table, itemKey(pk, sk))
}

func itemKey(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"lock_key": &types.AttributeValueMemberS{Value: pk},
		"sort_key": &types.AttributeValueMemberS{Value: sk},
	}
}

func strAttr(item map[string]types.AttributeValue, name string) string {
	switch v := item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprint(v.Value)
	}
	return ""
}

// sessionRVN reads the session item's version number ("" when gone).
func sessionRVN(t *testing.T, e *env, key string) string {
	t.Helper()
	return strAttr(rawItem(t, e, key, "-"), "record_version_number")
}

// A client with sessions writes each lock once and heartbeats one item,
// once a period, whatever the number of locks; release is one delete.
func TestSessionOneWritePerPeriod(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	calls := newCounting(e.ddb)
	c := e.clientOn(calls, ddblock.WithClock(clk), ddblock.WithSessionLease())
	ctx := context.Background()
	const n = 40
	var locks []*ddblock.Lock
	for i := range n {
		l, err := c.AcquireLock(ctx, fmt.Sprint("k", i))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	// One session item, created once, then one put per lock.
	if diff := cmp.Diff(ops("PutItem", n+1), calls.snapshot()); diff != "" {
		t.Errorf("calls to take %d free locks (-want +got):\n%s", n, diff)
	}
	key := locks[0].SessionKey()
	if !strings.HasPrefix(key, "ddblock_session#") {
		t.Fatalf("SessionKey = %q", key)
	}
	item := rawItem(t, e, "k0", "-")
	if got := strAttr(item, "ddblock_session"); got != key {
		t.Errorf("lock item names session %q; want %q", got, key)
	}
	if got := strAttr(item, "lease_duration"); got != "31536000" {
		t.Errorf("lock item's lease_duration = %s; want a year (31536000), to keep clients that do not know sessions away", got)
	}
	if got := strAttr(item, "ddblock_session_lease"); got != "30" {
		t.Errorf("lock item's session lease = %s; want 30", got)
	}
	firstSession := sessionRVN(t, e, key)
	if s := rawItem(t, e, key, "-"); strAttr(s, "ddblock_is_session") != "true" || strAttr(s, "owner_name") != c.Options().OwnerName {
		t.Errorf("session item = %v", s)
	}

	calls.reset()
	start := clk.Monotonic()
	drive(t, clk, c, start+10*5*time.Second+time.Millisecond)
	got := calls.snapshot()
	if got["UpdateItem"] < 10 || got["UpdateItem"] > 11 || len(got) != 1 {
		t.Errorf("calls in 10 periods with %d locks = %v; want 10 or 11 UpdateItem and nothing else", n, got)
	}
	if sessionRVN(t, e, key) == firstSession {
		t.Error("the session item was not heartbeated")
	}
	for _, l := range locks {
		if cur := strAttr(rawItem(t, e, l.PartitionKey(), "-"), "record_version_number"); cur != l.RecordVersionNumber() {
			t.Fatalf("lock %s was rewritten: %s, was %s", l.PartitionKey(), cur, l.RecordVersionNumber())
		}
		if l.Status() != ddblock.StatusLocked {
			t.Fatalf("lock %s: %s", l.PartitionKey(), l.Status())
		}
	}
	if lh := locks[0].LastHeartbeat(); lh <= start {
		t.Errorf("LastHeartbeat %v does not follow the session's heartbeats (start %v)", lh, start)
	}

	calls.reset()
	if err := locks[0].Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ops("DeleteItem", 1), calls.snapshot()); diff != "" {
		t.Errorf("calls to release (-want +got):\n%s", diff)
	}
	if rawItem(t, e, "k0", "-") != nil {
		t.Error("released lock item still there")
	}
}

// A client without sessions and one with them share a table: each
// waits on the other's lock.
func TestSessionAndPerLockClientsShareATable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	plain := e.client()
	sess := e.client(ddblock.WithSessionLease())
	if _, err := plain.AcquireLock(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.AcquireLock(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.TryAcquireLock(ctx, "a"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("session client on a per-lock lock: %v; want LOCK_HELD", err)
	}
	if _, err := plain.TryAcquireLock(ctx, "b"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("per-lock client on a session lock: %v; want LOCK_HELD", err)
	}
	if item := rawItem(t, e, "a", "-"); strAttr(item, "ddblock_session") != "" {
		t.Errorf("the per-lock client's item names a session: %v", item)
	}
}

// deadSessionHolder takes the given keys with a session client on a fake
// clock that the test never moves: its session is never heartbeated, as
// if its process had died after the acquire.
func deadSessionHolder(t *testing.T, e *env, lease time.Duration, keys ...string) (*ddblock.Client, []*ddblock.Lock) {
	t.Helper()
	c := e.client(ddblock.WithClock(fakeClock()), ddblock.WithSessionLease(), ddblock.WithOwnerName("dead"),
		ddblock.WithLeaseDuration(lease), ddblock.WithSafePeriod(lease*4/5), ddblock.WithHeartbeatPeriod(lease/5))
	return c, acquireN(t, c, keys...)
}

// A waiter takes a session's lock over once the session item has stood
// unchanged for the session's lease on its own clock, with reads only in
// between, whether it uses sessions itself or not.
func TestSessionTakeoverAfterSessionLease(t *testing.T) {
	for _, withSession := range []bool{false, true} {
		t.Run(fmt.Sprint("waiter_session=", withSession), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			_, held := deadSessionHolder(t, e, 10*time.Second, "k")
			clk := fakeClock()
			calls := newCounting(e.ddb)
			puts := &putClock{DynamoDBAPI: calls, clk: clk}
			opts := []ddblock.Option{ddblock.WithClock(clk), ddblock.WithOwnerName("waiter")}
			if withSession {
				opts = append(opts, ddblock.WithSessionLease())
			}
			waiter := e.clientOn(puts, opts...)
			sleepers := 2 // the monitor and the acquire's retry timer
			if withSession {
				// Start the waiter's own session first: its heartbeats
				// are one more timer, and do not count below.
				l := acquireN(t, waiter, "other")[0]
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				sleepers = 3
				calls.reset()
			}
			const retry = 700 * time.Millisecond
			start := clk.Monotonic()
			lock, _, err := acquireStepping(t, clk, sleepers, time.Minute, func() (*ddblock.Lock, error) {
				return waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
			})
			if err != nil {
				t.Fatalf("AcquireLock: %v", err)
			}
			took := puts.lastPut() - start
			if took < 10*time.Second || took > 10*time.Second+2*retry {
				t.Errorf("took over after %v of fake time; want within [10s, 10s+%v]", took, 2*retry)
			}
			tf := lock.TakenOverFrom()
			if tf == nil || tf.OwnerName != "dead" || tf.Session == nil || tf.Session.PartitionKey != held[0].SessionKey() {
				t.Errorf("TakenOverFrom = %+v; want the dead session's lock", tf)
			}
			c := calls.snapshot()
			heartbeats := 0
			if withSession {
				heartbeats = int(waiter.Stats().HeartbeatsSent + waiter.Stats().HeartbeatsFailed)
			}
			if c["PutItem"] != 2 || c["UpdateItem"] != heartbeats || c["DeleteItem"] != 1 || c["GetItem"] < 2*13 {
				t.Errorf("calls = %v; want 2 PutItem, one DeleteItem (the dead session's item), no other write but %d session heartbeats, and two reads (lock, session) per retry", c, heartbeats)
			}
			if item := rawItem(t, e, held[0].SessionKey(), "-"); item != nil {
				t.Errorf("the dead session's item is still there: %v", item)
			}
		})
	}
}

// A waiter never takes over a lock whose session keeps being
// heartbeated, however long the lock item itself stands unchanged.
func TestSessionNoTakeoverWhileSessionHeartbeats(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, held := deadSessionHolder(t, e, 10*time.Second, "k")
	key := held[0].SessionKey()
	clk := fakeClock()
	waiter := e.client(ddblock.WithClock(clk))
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		_, werr = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(60*time.Second))
	}()
	// Every 8 fake seconds the session's version number changes (the
	// holder's heartbeat, done out of band so its timing is the test's).
	rvn := sessionRVN(t, e, key)
	for i := range 7 {
		for range 8 {
			waitFor(t, "the waiter to sleep", func() bool { return clk.Timers() >= 2 })
			clk.Advance(time.Second)
		}
		next := fmt.Sprint("session-hb-", i)
		setRVN(t, e, key, "-", rvn, next)
		rvn = next
	}
	stepUntil(t, clk, 2, done, 2*time.Minute)
	if !errors.Is(werr, ddblock.CodeAcquireTimeout) {
		t.Fatalf("waiter: %v; want ACQUIRE_TIMEOUT, never a takeover of a live session's lock", werr)
	}
	if got := strAttr(rawItem(t, e, "k", "-"), "owner_name"); got != "dead" {
		t.Errorf("lock now owned by %q", got)
	}
}

// A lock released and taken again under the same session while the waiter
// watches does not start the wait again: the waiter watches the session,
// whose holder counts the lock written again safe only as long as the
// session (lock.go). The takeover's put is conditioned on the new
// version number.
func TestSessionLockTakenAgainKeepsTheSessionsWait(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, held := deadSessionHolder(t, e, 10*time.Second, "k")
	clk := fakeClock()
	puts := &putClock{DynamoDBAPI: e.ddb, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk))
	start := clk.Monotonic()
	done := make(chan struct{})
	var werr error
	var lock *ddblock.Lock
	go func() {
		defer close(done)
		lock, werr = waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
	}()
	for range 6 {
		waitFor(t, "the waiter to sleep", func() bool { return clk.Timers() >= 2 })
		clk.Advance(time.Second)
	}
	// The lock is given back and taken again under the same, silent,
	// session between two of the waiter's reads: its version number
	// changes, its session's does not.
	setRVN(t, e, "k", "-", held[0].RecordVersionNumber(), "taken-again")
	stepUntil(t, clk, 2, done, time.Minute)
	if werr != nil {
		t.Fatal(werr)
	}
	if took := puts.lastPut() - start; took < 10*time.Second || took > 11*time.Second {
		t.Errorf("took over %v after the wait began; want within a retry period of the session's 10 s lease", took)
	}
	if from := lock.TakenOverFrom(); from == nil || from.RecordVersionNumber != "taken-again" {
		t.Errorf("TakenOverFrom = %+v; want the lock as written again", from)
	}
}

// A session in danger puts every lock on it in danger at once; the next
// heartbeat that lands within a lease of the last brings them all back.
func TestSessionDangerAndRecovery(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk), ddblock.WithSessionLease())
	var ev [3]events
	var locks []*ddblock.Lock
	for i := range ev {
		l, err := c.AcquireLock(context.Background(), fmt.Sprint("k", i), ddblock.WithCallback(ev[i].callback))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	ctxs := make([]context.Context, len(locks))
	for i, l := range locks {
		var cancel context.CancelFunc
		ctxs[i], cancel = l.Context(context.Background())
		defer cancel()
	}
	waitFor(t, "the client to settle", func() bool { return clk.Timers() >= 2 })
	clk.Advance(21 * time.Second) // a pause past the 20 s safe period, under the 30 s lease
	for i, l := range locks {
		if !errors.Is(l.Err(), ddblock.CodeLockInDanger) {
			t.Fatalf("lock %d right after the pause: %v; want LOCK_IN_DANGER", i, l.Err())
		}
		if !errors.Is(context.Cause(ctxs[i]), ddblock.CodeLockInDanger) {
			t.Errorf("lock %d's context: %v", i, context.Cause(ctxs[i]))
		}
	}
	for i, l := range locks {
		waitFor(t, "recovery", func() bool { return l.Status() == ddblock.StatusLocked })
		waitFor(t, "the callbacks", func() bool { return len(ev[i].list()) == 2 })
		if diff := cmp.Diff([]ddblock.Code{ddblock.CodeLockInDanger, ddblock.CodeLockRecovered}, ev[i].list()); diff != "" {
			t.Errorf("lock %d callbacks (-want +got):\n%s", i, diff)
		}
	}
	if s := c.Stats(); s.InDanger != 3 || s.Recovered != 3 || s.HeldLocks != 3 {
		t.Errorf("stats: %+v", s)
	}
}

// A session heartbeat that lands a whole lease after the last one may
// come after a waiter took its locks over: they are all lost, the session
// item is deleted, and the next lock goes on a new session.
func TestSessionLostAfterAWholeLease(t *testing.T) {
	e := newEnv(t)
	clk := fakeClock()
	c := e.client(ddblock.WithClock(clk), ddblock.WithSessionLease())
	var ev events
	locks := []*ddblock.Lock{}
	for i := range 3 {
		l, err := c.AcquireLock(context.Background(), fmt.Sprint("k", i), ddblock.WithCallback(ev.callback))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	old := locks[0].SessionKey()
	waitFor(t, "the client to settle", func() bool { return clk.Timers() >= 2 })
	clk.Advance(31 * time.Second) // paused past the 30 s lease
	for _, l := range locks {
		waitFor(t, "the loss", func() bool { return l.Status() == ddblock.StatusInvalid })
		if !errors.Is(l.Err(), ddblock.CodeLockStolen) {
			t.Errorf("Err = %v; want LOCK_STOLEN", l.Err())
		}
	}
	waitFor(t, "the session item's deletion", func() bool { return rawItem(t, e, old, "-") == nil })
	if s := c.Stats(); s.HeldLocks != 0 || s.Stolen != 3 || s.Recovered != 0 {
		t.Errorf("stats: %+v", s)
	}
	l, err := c.AcquireLock(context.Background(), "new")
	if err != nil {
		t.Fatal(err)
	}
	if l.SessionKey() == old || l.SessionKey() == "" {
		t.Errorf("new lock on session %q; want a new one (old %q)", l.SessionKey(), old)
	}
}

// A session item removed or overwritten by someone else ends the session
// at its next heartbeat: every lock on it is lost before its safe period
// has passed, and waiters, who see no session, take them over after a
// lease.
func TestSessionItemRemovedOrOverwritten(t *testing.T) {
	for _, how := range []string{"removed", "overwritten"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			clk := fakeClock()
			c := e.client(ddblock.WithClock(clk), ddblock.WithSessionLease())
			var ev events
			lock, err := c.AcquireLock(context.Background(), "k", ddblock.WithCallback(ev.callback))
			if err != nil {
				t.Fatal(err)
			}
			key := lock.SessionKey()
			switch how {
			case "removed":
				if _, err := e.ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String(e.table), Key: itemKey(key, "-")}); err != nil {
					t.Fatal(err)
				}
			case "overwritten": // as python_dynamodb_lock's put would
				if _, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
					"lock_key": &types.AttributeValueMemberS{Value: key}, "sort_key": &types.AttributeValueMemberS{Value: "-"},
					"owner_name": &types.AttributeValueMemberS{Value: "python"}, "lease_duration": &types.AttributeValueMemberN{Value: "30"},
					"record_version_number": &types.AttributeValueMemberS{Value: "py"}, "expiry_time": &types.AttributeValueMemberN{Value: fmt.Sprint(time.Now().Add(time.Hour).Unix())},
				}}); err != nil {
					t.Fatal(err)
				}
			}
			drive(t, clk, c, clk.Monotonic()+6*time.Second)
			waitFor(t, "the callback", func() bool { return len(ev.list()) > 0 })
			if diff := cmp.Diff([]ddblock.Code{ddblock.CodeLockStolen}, ev.list()); diff != "" {
				t.Errorf("callbacks (-want +got):\n%s", diff)
			}
			if lock.Status() != ddblock.StatusInvalid || !strings.Contains(lock.Err().Error(), how) {
				t.Errorf("status %s, err %v", lock.Status(), lock.Err())
			}
			if how == "overwritten" && strAttr(rawItem(t, e, key, "-"), "owner_name") != "python" {
				t.Error("the other writer's item was changed")
			}
			// A waiter sees no session (an item without the mark stands
			// for none) and takes the lock over after the lease.
			wclk := fakeClock()
			waiter := e.client(ddblock.WithClock(wclk))
			info, err := waiter.GetLock(context.Background(), "k", "")
			if err != nil || info.Session == nil || info.Session.Item != nil {
				t.Fatalf("GetLock = %+v, %v; want a lock whose session is gone", info, err)
			}
			_, took, werr := acquireStepping(t, wclk, 2, time.Minute, func() (*ddblock.Lock, error) {
				return waiter.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
			})
			if werr != nil {
				t.Fatal(werr)
			}
			if took < 30*time.Second {
				t.Errorf("took over after %v; want the session's whole 30 s lease", took)
			}
		})
	}
}

// Close(true) releases the locks and deletes the session item; Close
// without releasing leaves both, the session unheartbeated.
func TestSessionClose(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := e.client(ddblock.WithSessionLease())
	locks := acquireN(t, c, "a", "b")
	key := locks[0].SessionKey()
	if err := c.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", key} {
		if rawItem(t, e, k, "-") != nil {
			t.Errorf("%s still there after Close(true)", k)
		}
	}

	k := e.client(ddblock.WithSessionLease())
	kept := acquireN(t, k, "c")
	if err := k.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	if rawItem(t, e, "c", "-") == nil || rawItem(t, e, kept[0].SessionKey(), "-") == nil {
		t.Error("Close(false) removed the lock or its session")
	}
	// The kept lock can still be released, and a later Close(true) ends
	// the session.
	if err := kept[0].Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatal(err)
	}
	if err := k.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if rawItem(t, e, kept[0].SessionKey(), "-") != nil {
		t.Error("the session item is still there after the last lock's release and Close(true)")
	}
}

// GetLock and ListLocks show a lock's session and whether its item is
// there; ForceRelease refuses a lock whose session item is there, and
// works once the session item was forced out.
func TestSessionInspectAndForceRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clk := fakeClock()
	holder := e.client(ddblock.WithClock(clk), ddblock.WithSessionLease())
	var ev events
	lock, err := holder.AcquireLock(ctx, "k", ddblock.WithCallback(ev.callback))
	if err != nil {
		t.Fatal(err)
	}
	key := lock.SessionKey()
	op := e.client()
	info, err := op.GetLock(ctx, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	if info.Session == nil || info.Session.PartitionKey != key || info.Session.LeaseDuration != 30*time.Second ||
		info.Session.Item == nil || !info.Session.Item.IsSession || info.Session.Item.OwnerName != holder.Options().OwnerName {
		t.Fatalf("GetLock's session = %+v", info.Session)
	}
	var sawLock, sawSession bool
	for li, err := range op.ListLocks(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case li.PartitionKey == "k":
			sawLock = li.Session != nil && li.Session.Item != nil && li.Session.Item.RecordVersionNumber == sessionRVN(t, e, key)
		case li.PartitionKey == key:
			sawSession = li.IsSession
		}
	}
	if !sawLock || !sawSession {
		t.Errorf("ListLocks: lock with its session %v, session item %v", sawLock, sawSession)
	}

	err = op.ForceRelease(ctx, "k", "", info.RecordVersionNumber)
	if !errors.Is(err, ddblock.CodeLockHeld) || !strings.Contains(err.Error(), key) {
		t.Fatalf("ForceRelease of a live session's lock = %v; want LOCK_HELD naming the session", err)
	}
	if rawItem(t, e, "k", "-") == nil {
		t.Fatal("the refused ForceRelease removed the lock")
	}
	// Force the session out: its holder learns at its next heartbeat.
	if err := op.ForceRelease(ctx, key, "", info.Session.Item.RecordVersionNumber); err != nil {
		t.Fatal(err)
	}
	drive(t, clk, holder, clk.Monotonic()+6*time.Second)
	waitFor(t, "the holder to learn", func() bool { return lock.Status() == ddblock.StatusInvalid })
	if err := op.ForceRelease(ctx, "k", "", info.RecordVersionNumber); err != nil {
		t.Fatalf("ForceRelease once the session is gone: %v", err)
	}
	if _, err := op.GetLock(ctx, "k", ""); !errors.Is(err, ddblock.CodeLockNotFound) {
		t.Errorf("GetLock after the forced release: %v", err)
	}
}

// Fencing tokens count acquisitions of a key across session and per-lock
// holders alike.
func TestSessionFencingTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sess := e.client(ddblock.WithSessionLease(), ddblock.WithFencingTokens())
	plain := e.client(ddblock.WithFencingTokens())
	var last int64
	for i := range 4 {
		c := sess
		if i%2 == 1 {
			c = plain
		}
		l, err := c.AcquireLock(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if l.FencingToken() <= last {
			t.Fatalf("acquisition %d: token %d after %d", i, l.FencingToken(), last)
		}
		last = l.FencingToken()
		if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
			t.Fatal(err)
		}
	}
}

// Fast takeover: the stamp lives on the session item. A lock whose
// session's stamp (and its own) is older than the lease and the skew is
// taken over without watching it for a lease.
func TestSessionFastTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	holder := e.client(ddblock.WithClock(fakeClock()), ddblock.WithSessionLease(), ddblock.WithMaxClockSkew(time.Second))
	held := acquireN(t, holder, "k")
	if s := rawItem(t, e, held[0].SessionKey(), "-"); strAttr(s, "ddblock_heartbeat_ms") == "" {
		t.Fatalf("the session item carries no stamp: %v", s)
	}
	clk := fakeClock()
	clk.Advance(40 * time.Second) // the waiter's wall clock is past stamp + lease + skew
	waiter := e.client(ddblock.WithClock(clk), ddblock.WithMaxClockSkew(time.Second))
	start := clk.Monotonic()
	lock, err := waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if clk.Monotonic() != start {
		t.Errorf("took %v of the waiter's clock; want none", clk.Monotonic()-start)
	}
	if lock.TakenOverFrom() == nil {
		t.Error("not a takeover")
	}
}

// TryAcquireLock remembers the pair it saw: a later call takes over once
// the session has stood unchanged for its lease since the first.
func TestSessionTryAcquireRemembers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	deadSessionHolder(t, e, 10*time.Second, "k")
	clk := fakeClock()
	calls := newCounting(e.ddb)
	waiter := e.clientOn(calls, ddblock.WithClock(clk))
	if _, err := waiter.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("first try: %v", err)
	}
	clk.Advance(5 * time.Second)
	if _, err := waiter.TryAcquireLock(ctx, "k"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("try within the lease: %v", err)
	}
	clk.Advance(6 * time.Second)
	calls.reset()
	if _, err := waiter.TryAcquireLock(ctx, "k"); err != nil {
		t.Fatalf("try after the lease: %v", err)
	}
	// The lock and its session read, the put, and the dead session's item
	// deleted.
	if diff := cmp.Diff(ops("GetItem", 2, "PutItem", 1, "DeleteItem", 1), calls.snapshot()); diff != "" {
		t.Errorf("calls of the try that took over (-want +got):\n%s", diff)
	}
}

// Session item keys are not lock keys.
func TestSessionKeysReserved(t *testing.T) {
	e := newEnv(t)
	_, err := e.client().AcquireLock(context.Background(), "ddblock_session#abc")
	var lerr *ddblock.Error
	if !errors.As(err, &lerr) || lerr.Code != ddblock.CodeInvalidArgument || lerr.Setting != "PartitionKey" {
		t.Errorf("AcquireLock on a session key: %v; want INVALID_ARGUMENT on PartitionKey", err)
	}
}

// A semaphore slot held on a session is watched with its session: a
// waiter takes it over once the dead holder's session stood unchanged
// for its lease, with a Query and a session read a retry, and one write.
func TestSessionSemaphoreSlotTakeover(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dead := e.client(ddblock.WithClock(fakeClock()), ddblock.WithSessionLease(), ddblock.WithOwnerName("dead"),
		ddblock.WithLeaseDuration(10*time.Second), ddblock.WithSafePeriod(8*time.Second), ddblock.WithHeartbeatPeriod(2*time.Second))
	held, err := semaphoreOf(t, dead, "one", 1).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held.SessionKey() == "" {
		t.Fatal("the slot is not on the holder's session")
	}
	clk := fakeClock()
	calls := queryCounting{newCounting(e.ddb)}
	puts := &putClock{DynamoDBAPI: calls, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"))
	s := semaphoreOf(t, waiter, "one", 1)
	const retry = 700 * time.Millisecond
	start := clk.Monotonic()
	lock, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
		return s.Acquire(ctx, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if took := puts.lastPut() - start; took < 10*time.Second || took > 10*time.Second+2*retry {
		t.Errorf("took over after %v of fake time; want within [10s, 10s+%v]", took, 2*retry)
	}
	if from := lock.TakenOverFrom(); from == nil || from.Session == nil || from.Session.PartitionKey != held.SessionKey() {
		t.Errorf("TakenOverFrom = %+v; want the dead session's slot", from)
	}
	c := calls.snapshot()
	if c["PutItem"] != 1 || c["Query"] < int(10*time.Second/retry) || c["GetItem"] != c["Query"]+1 {
		t.Errorf("calls = %v; want one put, a Query and a session read per retry, and the read that confirms the slot", c)
	}
}

// A dead session's locks come back together: once a waiter has watched
// the session stand for its lease (taking its first lock), every other
// lock of the session is taken over at once, sequentially or
// concurrently, without reading the session again, and the dead
// session's item is deleted once.
func TestDeadSessionLocksComeBackTogether(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"}
	_, held := deadSessionHolder(t, e, 10*time.Second, keys...)
	sessKey := held[0].SessionKey()
	clk := fakeClock()
	calls := newCounting(e.ddb)
	puts := &putClock{DynamoDBAPI: calls, clk: clk}
	waiter := e.clientOn(puts, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"))
	const retry = 700 * time.Millisecond
	acquire := func(key string) (*ddblock.Lock, error) {
		return waiter.AcquireLock(ctx, key, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
	}
	start := clk.Monotonic()
	if _, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) { return acquire("k0") }); err != nil {
		t.Fatal(err)
	}
	if took := puts.lastPut() - start; took < 10*time.Second || took > 10*time.Second+2*retry {
		t.Errorf("first lock taken over after %v; want within [10s, 10s+%v]", took, 2*retry)
	}
	if item := rawItem(t, e, sessKey, "-"); item != nil {
		t.Errorf("the dead session's item is still there: %v", item)
	}

	// Sequentially (TryAcquireLock: one attempt each): at once, a put (or two) and at most one read of the
	// lock each, never of the session, and no more deletes.
	calls.reset()
	judged := clk.Monotonic()
	for _, k := range keys[1:5] {
		l, err := waiter.TryAcquireLock(ctx, k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if from := l.TakenOverFrom(); from == nil || from.OwnerName != "dead" {
			t.Errorf("%s: TakenOverFrom = %+v; want the dead session's lock", k, from)
		}
	}
	c := calls.snapshot()
	if c["PutItem"] != 2*4 || c["GetItem"] > 4 || c["DeleteItem"] != 0 || clk.Monotonic() != judged {
		t.Errorf("calls %v after %v of fake time; want two puts a lock, at most one lock read each, no delete, no wait", c, clk.Monotonic()-judged)
	}

	// Concurrently: the same.
	errs := make(chan error, len(keys[5:]))
	for _, k := range keys[5:] {
		go func() {
			_, err := waiter.TryAcquireLock(ctx, k)
			errs <- err
		}()
	}
	for range keys[5:] {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if clk.Monotonic() != judged {
		t.Errorf("concurrent takeovers took %v of fake time; want none", clk.Monotonic()-judged)
	}
	for _, k := range keys {
		if got := strAttr(rawItem(t, e, k, "-"), "owner_name"); got != "waiter" {
			t.Errorf("%s is owned by %q", k, got)
		}
	}
	if got := waiter.Stats().DeadSessionLocks; got != uint64(len(keys)-1) {
		t.Errorf("Stats().DeadSessionLocks = %d; want %d, every lock but the first", got, len(keys)-1)
	}
}

// Waiters on several locks of one session share the watch: acquires of
// different keys that start one after another, each first seeing the
// session at a different time, all take over once the session has stood
// for its lease since the first of them saw it.
func TestDeadSessionWatchIsShared(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keys := []string{"k0", "k1", "k2"}
	deadSessionHolder(t, e, 10*time.Second, keys...)
	clk := fakeClock()
	waiter := e.client(ddblock.WithClock(clk))
	const retry = time.Second
	done := make(chan error, len(keys))
	start := clk.Monotonic()
	for i, k := range keys {
		if i > 0 {
			// The next acquire starts 3 fake seconds after the last.
			for range 3 {
				waitFor(t, "the acquires to sleep", func() bool { return clk.Timers() >= 1+i })
				clk.Advance(time.Second)
			}
		}
		go func() {
			_, err := waiter.AcquireLock(ctx, k, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(time.Minute))
			done <- err
		}()
	}
	finished := 0
	for finished < len(keys) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished++
			continue
		case <-time.After(time.Millisecond):
		}
		// The monitor, each acquire still asleep, and once a lock is held
		// the heartbeater: step only when every acquire sleeps.
		need := 1 + len(keys) - finished
		if finished > 0 {
			need++
		}
		if clk.Timers() >= need && waiter.Stats().HeartbeatsInFlight == 0 {
			clk.AdvanceToNext()
		}
	}
	if took := clk.Monotonic() - start; took > 10*time.Second+retry {
		t.Errorf("all taken over after %v; want within a retry period of the session's lease since the first look", took)
	}
}

// failingUpdates fails every UpdateItem (heartbeats) while on.
type failingUpdates struct {
	ddblock.DynamoDBAPI
	on atomic.Bool
}

func (f *failingUpdates) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.on.Load() {
		return nil, &types.InternalServerError{Message: aws.String("test: heartbeats fail")}
	}
	return f.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// A client puts no lock on its own session while the session is past its
// safe period: waiters judge a session's locks by the session alone, so
// the lock would be in danger from the start. The attempt fails with
// LOCK_IN_DANGER (AcquireLock tries again at its next retry: it is
// retried as a transient failure), and once a heartbeat of the session
// lands the lock is taken.
func TestNoLockOnASessionInDanger(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clk := fakeClock()
	ddb := &failingUpdates{DynamoDBAPI: e.ddb}
	c := e.clientOn(ddb, ddblock.WithClock(clk), ddblock.WithSessionLease(), ddblock.WithLeaseDuration(30*time.Second),
		ddblock.WithSafePeriod(20*time.Second), ddblock.WithHeartbeatPeriod(5*time.Second))
	first := acquireN(t, c, "k0")[0]
	ddb.on.Store(true)
	waitFor(t, "the client to settle", func() bool { return clk.Timers() >= 2 })
	clk.Advance(21 * time.Second) // past the safe period, no heartbeat landing
	waitFor(t, "the first lock in danger", func() bool { return first.Status() == ddblock.StatusInDanger })
	if _, err := c.TryAcquireLock(ctx, "k1"); !errors.Is(err, ddblock.CodeLockInDanger) {
		t.Fatalf("TryAcquireLock on a session in danger: %v; want LOCK_IN_DANGER", err)
	}
	if _, err := c.AcquireLock(ctx, "k1", ddblock.WithRetryTimeout(0)); !errors.Is(err, ddblock.CodeLockInDanger) {
		t.Fatalf("AcquireLock's last attempt on a session in danger: %v; want LOCK_IN_DANGER", err)
	}
	if item := rawItem(t, e, "k1", "-"); item != nil {
		t.Fatalf("a lock item was written: %v", item)
	}
	ddb.on.Store(false)
	// The next heartbeat is due a period after the failed one: step the
	// clock to it (the heartbeater's and the monitor's timers), until one
	// lands and the session recovers.
	for step := 0; first.Status() != ddblock.StatusLocked; step++ {
		if step == 10 {
			t.Fatalf("not recovered after %d steps; stats %+v", step, c.Stats())
		}
		waitFor(t, "the client to settle", func() bool { return clk.Timers() >= 2 && c.Stats().HeartbeatsInFlight == 0 })
		if first.Status() == ddblock.StatusLocked {
			break
		}
		clk.AdvanceToNext()
	}
	lock, err := c.TryAcquireLock(ctx, "k1")
	if err != nil {
		t.Fatalf("once a heartbeat landed: %v", err)
	}
	if lock.Status() != ddblock.StatusLocked {
		t.Errorf("the new lock is %v; want LOCKED", lock.Status())
	}
}

// BenchmarkDeadSessionTakeover measures how long one client takes to take
// over all the locks of a dead session client (closed without releasing
// them, so that its session item stands still, as a killed process's
// does), one after another and all at once, against the session's lease.
// Figures are in doc/benchmarks.md:
//
//	go test -run '^$' -bench DeadSessionTakeover -benchtime 1x -count 3 .
func BenchmarkDeadSessionTakeover(b *testing.B) {
	const (
		locks = 1000
		lease = 3 * time.Second
	)
	for _, mode := range []string{"sequential", "concurrent"} {
		b.Run(fmt.Sprintf("%s/locks=%d/lease=%v", mode, locks, lease), func(b *testing.B) {
			ddb, table := benchTable(b)
			ctx := context.Background()
			for n := range b.N {
				b.StopTimer()
				keys := make([]string, locks)
				for i := range keys {
					keys[i] = fmt.Sprintf("job-%d-%d", n, i)
				}
				dead, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithLogger(quiet), ddblock.WithOwnerName("dead"),
					ddblock.WithSessionLease(), ddblock.WithLeaseDuration(lease), ddblock.WithSafePeriod(lease*2/3), ddblock.WithHeartbeatPeriod(lease/6))
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					if _, err := dead.AcquireLock(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				// Closed keeping its locks: its session is never
				// heartbeated again, and its item stays.
				if err := dead.Close(ctx, false); err != nil {
					b.Fatal(err)
				}
				waiter, err := ddblock.New(ddb, ddblock.WithTableName(table), ddblock.WithLogger(quiet), ddblock.WithOwnerName("waiter"),
					ddblock.WithLeaseDuration(lease), ddblock.WithSafePeriod(lease*2/3), ddblock.WithHeartbeatPeriod(lease/6))
				if err != nil {
					b.Fatal(err)
				}
				acquire := func(k string) error {
					_, err := waiter.AcquireLock(ctx, k, ddblock.WithRetryPeriod(lease/10), ddblock.WithRetryTimeout(10*lease))
					return err
				}
				b.StartTimer()
				start := time.Now()
				var first time.Duration
				switch mode {
				case "sequential":
					for i, k := range keys {
						if err := acquire(k); err != nil {
							b.Fatal(err)
						}
						if i == 0 {
							first = time.Since(start)
						}
					}
				case "concurrent":
					var wg sync.WaitGroup
					errs := make(chan error, locks)
					for _, k := range keys {
						wg.Go(func() { errs <- acquire(k) })
					}
					wg.Wait()
					close(errs)
					for err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				all := time.Since(start)
				b.StopTimer()
				if got := waiter.Stats().HeldLocks; got != locks {
					b.Fatalf("the waiter holds %d locks; want %d", got, locks)
				}
				b.ReportMetric(all.Seconds(), "s-all")
				b.ReportMetric((all-lease).Seconds()*1000/locks, "ms/lock-beyond-lease")
				if first > 0 {
					b.ReportMetric(first.Seconds(), "s-first")
				}
				cctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := waiter.Close(cctx, true); err != nil {
					b.Error(err)
				}
				cancel()
				b.StartTimer()
			}
		})
	}
}
