package compat_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// What python_dynamodb_lock sees of ddblock's session leases
// (Options.SessionLease, session.go).
//
// A lock attached to a session is written once with lease_duration =
// 31536000 (a year) and never heartbeated; its holder heartbeats one
// session item instead, which Python knows nothing about. Python times a
// lock by the lease in its item alone (pyLeaseRunOut), so to Python
// every session lock is a lock with a year's lease: it never takes a
// live one over (safe), and it does not take a dead one over either,
// where a ddblock client does after the session's lease. That is why
// sessions are for keys only ddblock clients contend on: on a key a
// Python service also takes, a crashed session holder blocks the Python
// service for a year (or until DynamoDB's TTL removes the item, a year
// on), where a per-lock holder blocks it for one lease.
//
// The peer's clock is the real one, so these tests let it wait a few
// real seconds (more than the session's lease and the peer's own), and
// ask its rule about the longer waits they do not live through.

// The session client's timing: heartbeat period < safe period < lease,
// with room for a busy server between heartbeats.
var sessionTiming = []ddblock.Option{
	ddblock.WithHeartbeatPeriod(200 * time.Millisecond),
	ddblock.WithSafePeriod(time.Second),
	ddblock.WithLeaseDuration(2 * time.Second),
}

const (
	// sessionLease is the session client's LeaseDuration above: its
	// session item's lease, which its lock items name.
	sessionLease = 2 * time.Second
	// yearLease is what a session lock's lease_duration states.
	yearLease = 31536000 * time.Second
	// pyWait bounds the peer's acquire_lock on a session's key: longer
	// than the session's lease and than the peer's own (500 ms).
	pyWait = 3 * time.Second
)

func newSessionClient(t *testing.T, ddb ddblock.DynamoDBAPI, n names, owner string, opts ...ddblock.Option) *ddblock.Client {
	t.Helper()
	return newGoClient(t, ddb, n, append(append([]ddblock.Option{ddblock.WithSessionLease(), ddblock.WithOwnerName(owner)}, sessionTiming...), opts...)...)
}

// pyTimesOut runs the peer's acquire_lock on (pk, "-") for pyWait,
// retrying every 100 ms, and fails the test unless it gives up with
// ACQUIRE_TIMEOUT. It returns how long the peer waited.
func pyTimesOut(t *testing.T, py *pyClient, pk string) time.Duration {
	t.Helper()
	start := time.Now()
	l, err := py.acquireLock(context.Background(), pk, pyAcquireOptions{RetryPeriod: 100 * time.Millisecond, RetryTimeout: pyWait})
	waited := time.Since(start)
	var pe *pyLockError
	if !errors.As(err, &pe) || pe.Code != pyAcquireTimeout {
		if l != nil {
			t.Fatalf("Python acquired %q after %v (its item: %+v); it must wait", pk, waited, l.base)
		}
		t.Fatalf("Python acquire_lock(%q): %v; want ACQUIRE_TIMEOUT", pk, err)
	}
	// The peer gives up only once its next retry would pass the timeout,
	// so its last read came at least one retry period short of it.
	if min := pyWait - 100*time.Millisecond; waited < min {
		t.Fatalf("Python gave up after %v, before its last retry at %v", waited, min)
	}
	return waited
}

// sessionLockItem is the item of a lock attached to a session, as stored.
func sessionLockItem(n names, l *ddblock.Lock, extra map[string]types.AttributeValue) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		n.PK:                    &types.AttributeValueMemberS{Value: l.PartitionKey()},
		n.SK:                    &types.AttributeValueMemberS{Value: l.SortKey()},
		colOwnerName:            &types.AttributeValueMemberS{Value: l.OwnerName()},
		colLeaseDuration:        &types.AttributeValueMemberN{Value: "31536000"},
		colRVN:                  &types.AttributeValueMemberS{Value: l.RecordVersionNumber()},
		n.TTL:                   &types.AttributeValueMemberN{Value: strconv.FormatInt(l.ExpiryTime().Unix(), 10)},
		"ddblock_session":       &types.AttributeValueMemberS{Value: l.SessionKey()},
		"ddblock_session_lease": &types.AttributeValueMemberN{Value: "2"},
		"ddblock_tenure":        &types.AttributeValueMemberS{Value: l.Tenure()},
	}
	for k, v := range extra {
		item[k] = v
	}
	return item
}

func attrS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// pyWaitsAYear asks the peer's own rule what it decides on the item it
// read after waits it cannot be made to live through: its default
// retry timeout (lease + heartbeat period, 35 s), the session's lease,
// an hour, a day short of a year: wait; a second past a year: take over.
func pyWaitsAYear(t *testing.T, seen *pyBaseLock) {
	t.Helper()
	d := pyDefaults(names{}) // its timing only
	for _, wait := range []time.Duration{sessionLease + time.Nanosecond, d.LeaseDuration + d.HeartbeatPeriod, time.Hour, yearLease - 24*time.Hour, yearLease} {
		if pyLeaseRunOut(wait, seen) {
			t.Errorf("after %v with the version unchanged, Python would take the session lock over; it reads a lease of %vs", wait, seen.LeaseDuration)
		}
	}
	if !pyLeaseRunOut(yearLease+time.Second, seen) {
		t.Errorf("Python would never take over the item with lease %vs", seen.LeaseDuration)
	}
}

// 1. A live session holder's lock: Python reads a year's lease, with the
// session attributes as additional attributes of its own, and waits,
// past the session's lease and its own, without ever writing.
func TestPythonWaitsOnLiveSessionLock(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()
	const pk = "nightly-settlement"

	goc := newSessionClient(t, ddb, n, "go-session")
	job := map[string]types.AttributeValue{"job": &types.AttributeValueMemberS{Value: "settle"}}
	l, err := goc.AcquireLock(ctx, pk, ddblock.WithAdditionalAttributes(job))
	if err != nil {
		t.Fatalf("Go session acquire: %v", err)
	}
	if until := time.Until(l.ExpiryTime()); until < yearLease-24*time.Hour {
		t.Errorf("the session lock's TTL is %v ahead; want a year, so that TTL never removes a lock Python still waits on", until)
	}
	want := sessionLockItem(n, l, job)
	if diff := cmp.Diff(want, rawItem(t, ddb, n, pk, "-"), attrOpts); diff != "" {
		t.Fatalf("the session lock's item (-want +got):\n%s", diff)
	}

	tap := &writeLog{DynamoDBAPI: ddb}
	py := newPyClient(tap, pyTiming(n))
	t.Cleanup(func() { py.close(false) })
	seen, err := py.getLockFromDynamoDB(ctx, pk, "-")
	if err != nil || seen == nil {
		t.Fatalf("Python reads the session lock: %+v, %v", seen, err)
	}
	wantSeen := &pyBaseLock{
		PartitionKey:        pk,
		SortKey:             "-",
		OwnerName:           "go-session",
		LeaseDuration:       31536000,
		RecordVersionNumber: l.RecordVersionNumber(),
		ExpiryTime:          l.ExpiryTime().Unix(),
		AdditionalAttributes: map[string]types.AttributeValue{
			"job":                   job["job"],
			"ddblock_session":       &types.AttributeValueMemberS{Value: l.SessionKey()},
			"ddblock_session_lease": &types.AttributeValueMemberN{Value: "2"},
			"ddblock_tenure":        &types.AttributeValueMemberS{Value: l.Tenure()},
		},
		UniqueIdentifier: "nightly-settlement|-",
	}
	if diff := cmp.Diff(wantSeen, seen, attrOpts); diff != "" {
		t.Errorf("what Python reads of the session lock (-want +got):\n%s", diff)
	}

	sessionRVN := attrS(rawItem(t, ddb, n, l.SessionKey(), "-"), colRVN)
	waited := pyTimesOut(t, py, pk)
	if waited <= sessionLease || waited <= pyTiming(n).LeaseDuration {
		t.Errorf("Python waited %v; the test means it to outwait the session's lease %v and its own", waited, sessionLease)
	}
	if diff := cmp.Diff(want, rawItem(t, ddb, n, pk, "-"), attrOpts); diff != "" {
		t.Errorf("the session lock's item changed while Python waited (-want +got):\n%s", diff)
	}
	if got := attrS(rawItem(t, ddb, n, l.SessionKey(), "-"), colRVN); got == sessionRVN || got == "" {
		t.Errorf("the session item's version went from %q to %q while Python waited; want it heartbeated", sessionRVN, got)
	}
	if st, err := l.Status(), l.Err(); st != ddblock.StatusLocked || err != nil {
		t.Errorf("the Go lock after Python's wait: %v, %v; want LOCKED", st, err)
	}
	if w := tap.writes(); len(w) != 0 {
		t.Errorf("Python wrote while waiting: %v", w)
	}
	pyWaitsAYear(t, seen)

	// Release is one delete; Python then takes the key at once.
	if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("Go release: %v", err)
	}
	pl, err := py.acquireLock(ctx, pk, pyAcquireOptions{RetryTimeout: time.Second})
	if err != nil {
		t.Fatalf("Python acquire after the Go release: %v", err)
	}
	if err := py.releaseLock(ctx, pl, false); err != nil {
		t.Fatalf("Python release: %v", err)
	}
}

// deadSessionLock takes pk with a session client on a fake clock that
// never moves: its session item is never heartbeated, as if its process
// died right after the acquire. With gone, the session item is then
// deleted, as DynamoDB's TTL does once its expiry (an ExpiryPeriod after
// the last heartbeat) has passed.
func deadSessionLock(t *testing.T, ddb *dynamodb.Client, n names, pk string, lease time.Duration, gone bool) *ddblock.Lock {
	t.Helper()
	c := newGoClient(t, ddb, n, hooks.Option[ddblock.Option](clock.NewFake(time.Now().UTC().Truncate(time.Second))),
		ddblock.WithSessionLease(), ddblock.WithOwnerName("dead-session"),
		ddblock.WithLeaseDuration(lease), ddblock.WithSafePeriod(lease*4/5), ddblock.WithHeartbeatPeriod(lease/5))
	l, err := c.AcquireLock(context.Background(), pk)
	if err != nil {
		t.Fatalf("dead holder's acquire: %v", err)
	}
	if gone {
		if _, err := ddb.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &n.Table, Key: pyKey(n, l.SessionKey(), "-")}); err != nil {
			t.Fatalf("deleting the session item: %v", err)
		}
	}
	return l
}

// 2. A dead session holder's lock: Python waits a year on it, since it
// reads the lock's year-long lease and knows nothing of the session,
// while a ddblock client (one without sessions here) takes it over once
// the session (or its absence) has stood unchanged for the session's
// lease. On a key Python services also take, a crashed session holder
// would so block them for a year: sessions are for tables (or keys) on
// which only ddblock clients contend.
func TestPythonWaitsAYearOnDeadSessionLock(t *testing.T) {
	ddb := server(t)
	for _, gone := range []bool{true, false} {
		t.Run(fmt.Sprint("session item gone=", gone), func(t *testing.T) {
			n := defaultNames(t)
			createTable(t, ddb, n)
			ctx := context.Background()
			const pk, lease = "reindex", 10 * time.Second
			dead := deadSessionLock(t, ddb, n, pk, lease, gone)
			item := rawItem(t, ddb, n, pk, "-")

			py := newPyClient(ddb, pyTiming(n))
			t.Cleanup(func() { py.close(false) })
			seen, err := py.getLockFromDynamoDB(ctx, pk, "-")
			if err != nil || seen == nil {
				t.Fatalf("Python reads the dead session's lock: %+v, %v", seen, err)
			}
			if seen.LeaseDuration != 31536000 || seen.OwnerName != "dead-session" {
				t.Errorf("Python reads lease %vs, owner %q; want 31536000 and dead-session", seen.LeaseDuration, seen.OwnerName)
			}
			pyTimesOut(t, py, pk)
			if diff := cmp.Diff(item, rawItem(t, ddb, n, pk, "-"), attrOpts); diff != "" {
				t.Fatalf("the dead session's lock changed while Python waited (-want +got):\n%s", diff)
			}
			pyWaitsAYear(t, seen)

			// A ddblock waiter, retrying every lease/5 on a fake clock,
			// takes it over at its 5th retry: a lease after it first saw
			// the lock with its session gone (or silent).
			w := startWaiter(t, newStepClock(), &tapDDB{DynamoDBAPI: ddb}, n, pk, "-", lease/5, time.Hour)
			stillDead := func() {
				t.Helper()
				if got := attrS(rawItem(t, ddb, n, pk, "-"), colRVN); got != dead.RecordVersionNumber() {
					t.Fatalf("at %v the dead session's lock was replaced (version %q)", w.elapsed(), got)
				}
			}
			if took := w.stepUntilAcquired(stillDead, 20); took != 5 {
				t.Errorf("the ddblock waiter took over at retry %d (%v); want 5, one session lease (%v)", took, w.elapsed(), lease)
			}
			prev := w.got.lock.TakenOverFrom()
			if prev == nil || prev.Session == nil || prev.Session.PartitionKey != dead.SessionKey() || prev.Session.LeaseDuration != lease || prev.LeaseDuration != yearLease {
				t.Errorf("TakenOverFrom = %+v; want the dead session's lock (session %s, lease %v)", prev, dead.SessionKey(), lease)
			}
			after := rawItem(t, ddb, n, pk, "-")
			if attrS(after, colOwnerName) != "go-waiter" || after["ddblock_session"] != nil {
				t.Errorf("after the takeover the item is %v; want go-waiter's own, naming no session", after)
			}
		})
	}
}

// writeLog passes every call to the server and records the writes, as
// "Op key".
type writeLog struct {
	ddblock.DynamoDBAPI
	mu  sync.Mutex
	log []string
}

func (w *writeLog) record(op string, key map[string]types.AttributeValue) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pk := ""
	for _, name := range []string{ddblock.DefaultPartitionKeyName} {
		if v, ok := key[name].(*types.AttributeValueMemberS); ok {
			pk = v.Value
		}
	}
	w.log = append(w.log, op+" "+pk)
}

func (w *writeLog) writes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

func (w *writeLog) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	w.record("PutItem", in.Item)
	return w.DynamoDBAPI.PutItem(ctx, in, o...)
}

func (w *writeLog) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.record("UpdateItem", in.Key)
	return w.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

func (w *writeLog) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w.record("DeleteItem", in.Key)
	return w.DynamoDBAPI.DeleteItem(ctx, in, o...)
}

// 3. A Python holder of a per-lock lock and a ddblock session client
// share a table: each waits on the other's lock; Python's heartbeats and
// release write only the item it holds, never the session's lock or
// session item; each release hands the key to the other side.
func TestPythonAndSessionClientCoexist(t *testing.T) {
	ddb := server(t)
	n := defaultNames(t)
	createTable(t, ddb, n)
	ctx := context.Background()

	tap := &writeLog{DynamoDBAPI: ddb}
	py := newPyClient(tap, pyTiming(n))
	t.Cleanup(func() { py.close(false) })
	pl, err := py.acquireLock(ctx, "py-key", pyAcquireOptions{})
	if err != nil {
		t.Fatalf("Python acquire: %v", err)
	}
	goc := newSessionClient(t, ddb, n, "go-session")
	gl, err := goc.AcquireLock(ctx, "go-key")
	if err != nil {
		t.Fatalf("Go session acquire: %v", err)
	}
	goItem := rawItem(t, ddb, n, "go-key", "-")
	sessionRVN := attrS(rawItem(t, ddb, n, gl.SessionKey(), "-"), colRVN)

	if _, err := goc.TryAcquireLock(ctx, "py-key"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Errorf("Go session client's TryAcquireLock on Python's lock: %v; want LOCK_HELD", err)
	}
	// Each waits on the other's lock at the same time, well past both
	// leases (Python's 500 ms, the session's 2 s); Python heartbeats its
	// lock every 50 ms meanwhile, the Go client its session every 200 ms.
	goErr := make(chan error, 1)
	go func() {
		_, err := goc.AcquireLock(ctx, "py-key", ddblock.WithRetryPeriod(100*time.Millisecond), ddblock.WithRetryTimeout(pyWait))
		goErr <- err
	}()
	pyTimesOut(t, py, "go-key")
	if err := <-goErr; !errors.Is(err, ddblock.CodeAcquireTimeout) {
		t.Errorf("Go session client's AcquireLock on Python's heartbeated lock: %v; want ACQUIRE_TIMEOUT", err)
	}

	var beats int
	for _, w := range tap.writes() {
		switch w {
		case "PutItem py-key":
		case "UpdateItem py-key":
			beats++
		default:
			t.Errorf("Python wrote %q; it holds only py-key", w)
		}
	}
	if beats == 0 {
		t.Error("Python never heartbeated its lock while both waited")
	}
	if diff := cmp.Diff(goItem, rawItem(t, ddb, n, "go-key", "-"), attrOpts); diff != "" {
		t.Errorf("the session lock's item changed (-want +got):\n%s", diff)
	}
	if got := attrS(rawItem(t, ddb, n, gl.SessionKey(), "-"), colRVN); got == sessionRVN || got == "" {
		t.Errorf("the session item's version went from %q to %q; want it heartbeated", sessionRVN, got)
	}
	if pl.Status() != pyLocked || gl.Status() != ddblock.StatusLocked {
		t.Fatalf("after waiting on each other: Python's lock %s, Go's %v; want both held", pl.Status(), gl.Status())
	}

	// Handed the session lock's item (an application's mistake), Python's
	// release_lock refuses it without a write: it does not hold it.
	seen, err := py.getLockFromDynamoDB(ctx, "go-key", "-")
	if err != nil || seen == nil {
		t.Fatalf("Python reads go-key: %+v, %v", seen, err)
	}
	before := len(tap.writes())
	var pe *pyLockError
	if err := py.releaseLock(ctx, &pyLock{client: py, status: pyLocked, base: *seen}, false); !errors.As(err, &pe) || pe.Code != pyLockNotOwned {
		t.Errorf("Python release_lock of the session lock: %v; want LOCK_NOT_OWNED", err)
	}
	if w := tap.writes()[before:]; len(w) != 0 {
		t.Errorf("Python's refused release wrote %v", w)
	}

	// Each release hands the key to the other side.
	if err := py.releaseLock(ctx, pl, false); err != nil {
		t.Fatalf("Python release: %v", err)
	}
	taken, err := goc.AcquireLock(ctx, "py-key", ddblock.WithRetryTimeout(time.Second))
	if err != nil {
		t.Fatalf("Go session client on the released Python key: %v", err)
	}
	if taken.SessionKey() != gl.SessionKey() {
		t.Errorf("the second lock is on session %q, the first on %q; want one session", taken.SessionKey(), gl.SessionKey())
	}
	if err := gl.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
		t.Fatalf("Go release: %v", err)
	}
	pl2, err := py.acquireLock(ctx, "go-key", pyAcquireOptions{RetryTimeout: time.Second})
	if err != nil {
		t.Fatalf("Python on the released session key: %v", err)
	}
	for _, l := range []func() error{
		func() error { return py.releaseLock(ctx, pl2, false) },
		func() error { return taken.Release(ctx, ddblock.WithBestEffort(false)) },
	} {
		if err := l(); err != nil {
			t.Errorf("release: %v", err)
		}
	}
}

// 4. Asked for a session item's key, Python finds a lock-shaped item with
// the session's lease: while the session is heartbeated it waits, as on
// any live lock. A dead session's item it takes over after that lease,
// like any abandoned lock; ddblock then counts the session as gone (the
// item lost its session mark), and a waiter on the session's lock takes
// it over a session lease later, as if the session item had expired.
func TestPythonOnASessionItemKey(t *testing.T) {
	ddb := server(t)
	t.Run("live", func(t *testing.T) {
		n := defaultNames(t)
		createTable(t, ddb, n)
		ctx := context.Background()
		goc := newSessionClient(t, ddb, n, "go-session")
		l, err := goc.AcquireLock(ctx, "k")
		if err != nil {
			t.Fatalf("Go session acquire: %v", err)
		}
		key := l.SessionKey()
		py := newPyClient(ddb, pyTiming(n))
		t.Cleanup(func() { py.close(false) })
		seen, err := py.getLockFromDynamoDB(ctx, key, "-")
		if err != nil || seen == nil {
			t.Fatalf("Python reads the session item: %+v, %v", seen, err)
		}
		wantAttrs := map[string]types.AttributeValue{"ddblock_is_session": &types.AttributeValueMemberBOOL{Value: true}}
		if seen.OwnerName != "go-session" || seen.LeaseDuration != sessionLease.Seconds() {
			t.Errorf("Python reads owner %q, lease %vs; want go-session, %v", seen.OwnerName, seen.LeaseDuration, sessionLease.Seconds())
		}
		if diff := cmp.Diff(wantAttrs, seen.AdditionalAttributes, attrOpts); diff != "" {
			t.Errorf("Python's additional attributes of a session item (-want +got):\n%s", diff)
		}
		pyTimesOut(t, py, key)
		after := rawItem(t, ddb, n, key, "-")
		if attrS(after, colOwnerName) != "go-session" || after["ddblock_is_session"] == nil || attrS(after, colRVN) == seen.RecordVersionNumber {
			t.Errorf("the session item after Python's wait: %v; want go-session's, heartbeated since", after)
		}
		if l.Status() != ddblock.StatusLocked || l.Err() != nil {
			t.Errorf("the session's lock after Python's wait: %v, %v; want LOCKED", l.Status(), l.Err())
		}
	})
	t.Run("dead", func(t *testing.T) {
		n := defaultNames(t)
		createTable(t, ddb, n)
		ctx := context.Background()
		const lease = time.Second
		dead := deadSessionLock(t, ddb, n, "k", lease, false)
		key := dead.SessionKey()
		py := newPyClient(ddb, pyTiming(n))
		t.Cleanup(func() { py.close(false) })
		pl, err := py.acquireLock(ctx, key, pyAcquireOptions{RetryPeriod: 100 * time.Millisecond, RetryTimeout: 5 * lease})
		if err != nil {
			t.Fatalf("Python on the dead session's item: %v; want it taken over after its lease", err)
		}
		item := rawItem(t, ddb, n, key, "-")
		if attrS(item, colOwnerName) != py.owner || item["ddblock_is_session"] != nil {
			t.Fatalf("after Python's takeover the session key holds %v; want Python's lock, without the session mark", item)
		}
		// Python holds and heartbeats the session's key; to ddblock that
		// is no session at all.
		w := startWaiter(t, newStepClock(), &tapDDB{DynamoDBAPI: ddb}, n, "k", "-", lease/5, time.Hour)
		stillDead := func() {
			t.Helper()
			if got := attrS(rawItem(t, ddb, n, "k", "-"), colRVN); got != dead.RecordVersionNumber() {
				t.Fatalf("at %v the dead session's lock was replaced (version %q)", w.elapsed(), got)
			}
		}
		if took := w.stepUntilAcquired(stillDead, 20); took != 5 {
			t.Errorf("the ddblock waiter took over at retry %d (%v); want 5, one session lease (%v)", took, w.elapsed(), lease)
		}
		if pl.Status() != pyLocked {
			t.Errorf("Python's lock on the session key: %s; want LOCKED, untouched by the takeover of the session's lock", pl.Status())
		}
		if err := py.releaseLock(ctx, pl, false); err != nil {
			t.Errorf("Python release: %v", err)
		}
	})
}
