package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// TransactWriteItems counts and forwards guarded writes.
func (c *counting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.count("TransactWriteItems")
	tw, ok := c.DynamoDBAPI.(interface {
		TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	})
	if !ok {
		return nil, errors.New("counting: the wrapped client has no TransactWriteItems")
	}
	return tw.TransactWriteItems(ctx, in, o...)
}

// hasTransactions reports whether the test server runs transactions. On
// one that does not (dynalite), a guarded write must say so, typed, and
// the caller's test has nothing more to check there: the DynamoDB Local
// pass runs it.
func hasTransactions(t *testing.T, lock *ddblock.Lock, e *env) bool {
	t.Helper()
	if ddbtest.Shared(t).HasTransactions() {
		return true
	}
	_, err := lock.GuardedWrite(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{e.incr("c")},
	})
	if !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
		t.Fatalf("GuardedWrite on %s, which has no transactions: %v; want TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), err)
	}
	if got := e.counter("c"); got != 0 {
		t.Fatalf("counter = %d after an unsupported guarded write", got)
	}
	return false
}

// dataTable is a table of the test's own for the data the locks guard.
func (e *env) dataTable() string {
	e.t.Helper()
	if e.data == "" {
		e.data = ddbtest.TableName(e.t) + "_data"
		ddbtest.CreateTable(e.t, e.ddb, e.data)
	}
	return e.data
}

func (e *env) dataKey(name string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: name},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
	}
}

// incr is the action that adds one to a counter item in the data table.
func (e *env) incr(name string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(e.dataTable()),
		Key:                       e.dataKey(name),
		UpdateExpression:          aws.String("ADD #n :one"),
		ExpressionAttributeNames:  map[string]string{"#n": "n"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
	}}
}

// counter reads a counter item: 0 when it does not exist.
func (e *env) counter(name string) int {
	e.t.Helper()
	out, err := e.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(e.dataTable()), Key: e.dataKey(name), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	n, ok := out.Item["n"].(*types.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func guardedIncr(ctx context.Context, e *env, lock *ddblock.Lock, name string) error {
	_, err := lock.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{e.incr(name)},
	})
	return err
}

// rawGuarded runs a guard taken earlier with an increment, as a user's
// own TransactWriteItems would, and returns the SDK's error.
func rawGuarded(e *env, guard types.TransactWriteItem, name string) error {
	_, err := e.ddb.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{guard, e.incr(name)},
	})
	return err
}

// guardFailed reports whether err is a cancelled transaction whose first
// action (the guard) failed its condition.
func guardFailed(err error) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce) && len(tce.CancellationReasons) > 0 &&
		aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed"
}

// Every kind of lock the library hands out guards a write: plain, with
// fencing tokens, with fast takeover, on a session, a semaphore's slot
// and an election's leadership.
func TestGuardedWriteEveryKindOfLock(t *testing.T) {
	kinds := []struct {
		name    string
		opts    []ddblock.Option
		acquire func(t *testing.T, c *ddblock.Client) *ddblock.Lock
	}{
		{name: "plain"},
		{name: "fencing", opts: []ddblock.Option{ddblock.WithFencingTokens()}},
		{name: "fast-takeover", opts: []ddblock.Option{ddblock.WithMaxClockSkew(time.Second)}},
		{name: "session", opts: []ddblock.Option{ddblock.WithSessionLease()}},
		{name: "semaphore-slot", acquire: func(t *testing.T, c *ddblock.Client) *ddblock.Lock {
			s, err := c.NewSemaphore("pool", 2)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{name: "leadership", acquire: func(t *testing.T, c *ddblock.Client) *ddblock.Lock {
			el, err := c.NewElection("leader")
			if err != nil {
				t.Fatal(err)
			}
			lead, err := el.Campaign(context.Background(), "me")
			if err != nil {
				t.Fatal(err)
			}
			return lead.Lock
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			c := e.client(k.opts...)
			var lock *ddblock.Lock
			if k.acquire != nil {
				lock = k.acquire(t, c)
			} else {
				lock = acquireN(t, c, "k")[0]
			}
			if lock.Tenure() == "" || lock.Info().Tenure != lock.Tenure() {
				t.Fatalf("tenure %q, Info().Tenure %q", lock.Tenure(), lock.Info().Tenure)
			}
			if got := strAttr(rawItem(t, e, lock.PartitionKey(), lock.SortKey()), "ddblock_tenure"); got != lock.Tenure() {
				t.Fatalf("item's ddblock_tenure = %q; want the lock's %q", got, lock.Tenure())
			}
			if !hasTransactions(t, lock, e) {
				return
			}
			for range 3 {
				if err := guardedIncr(ctx, e, lock, "c"); err != nil {
					t.Fatalf("GuardedWrite: %v", err)
				}
			}
			if got := e.counter("c"); got != 3 {
				t.Errorf("counter = %d; want 3", got)
			}
			if err := lock.Err(); err != nil {
				t.Errorf("lock.Err after guarded writes = %v", err)
			}
		})
	}
}

// The guard is on the tenure, not the version number: heartbeats that
// land between taking the guard and committing do not fail it.
func TestGuardHoldsAcrossHeartbeats(t *testing.T) {
	e := newEnv(t)
	c := e.client(ddblock.WithHeartbeatPeriod(20*time.Millisecond), ddblock.WithSafePeriod(20*time.Second),
		ddblock.WithLeaseDuration(30*time.Second))
	lock := acquireN(t, c, "k")[0]
	if !hasTransactions(t, lock, e) {
		return
	}
	guard, err := lock.Guard()
	if err != nil {
		t.Fatal(err)
	}
	first := lock.RecordVersionNumber()
	sent := c.Stats().HeartbeatsSent
	waitFor(t, "two heartbeats", func() bool { return c.Stats().HeartbeatsSent >= sent+2 })
	if lock.RecordVersionNumber() == first {
		t.Fatal("the version number did not change with the heartbeats")
	}
	if err := rawGuarded(e, guard, "c"); err != nil {
		t.Fatalf("the guard taken before two heartbeats failed: %v", err)
	}
	if err := guardedIncr(context.Background(), e, lock, "c"); err != nil {
		t.Fatal(err)
	}
	if got := e.counter("c"); got != 2 {
		t.Errorf("counter = %d; want 2", got)
	}
}

// checkNotHeld asserts a guarded write's answer when the lock is not
// held: LOCK_NOT_HELD, the guard's reason when a call was made, and no
// increment landed.
func checkNotHeld(t *testing.T, e *env, err error, called bool) {
	t.Helper()
	if !errors.Is(err, ddblock.CodeLockNotHeld) {
		t.Fatalf("GuardedWrite = %v; want LOCK_NOT_HELD", err)
	}
	var gw *ddblock.GuardedWriteError
	switch {
	case called && !errors.As(err, &gw):
		t.Fatalf("no GuardedWriteError in %v", err)
	case called && (gw.GuardReason == nil || aws.ToString(gw.GuardReason.Code) != "ConditionalCheckFailed" || gw.Action != -1):
		t.Fatalf("GuardedWriteError = %+v; want the guard's ConditionalCheckFailed and no action", gw)
	case !called && errors.As(err, &gw):
		t.Fatalf("a call was made: %+v", gw)
	}
	if got := e.counter("c"); got != 0 {
		t.Fatalf("counter = %d: a write landed without the lock", got)
	}
}

// The guard fails after any other acquisition of the key, and after a
// release; each case on the wire.
func TestGuardFailsOnceNotHeld(t *testing.T) {
	ctx := context.Background()
	t.Run("taken over by another ddblock client", func(t *testing.T) {
		e := newEnv(t)
		calls := newCounting(e.ddb)
		holder := e.clientOn(calls, ddblock.WithOwnerName("holder"), ddblock.WithLeaseDuration(10*time.Second),
			ddblock.WithSafePeriod(8*time.Second), ddblock.WithHeartbeatPeriod(2*time.Second))
		lock := acquireN(t, holder, "k")[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		guard, _ := lock.Guard()
		// The holder goes silent (its client closed, keeping the lock),
		// and a waiter takes it over after the lease on its own clock.
		if err := holder.Close(ctx, false); err != nil {
			t.Fatal(err)
		}
		clk := fakeClock()
		waiter := e.clientOn(e.ddb, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"))
		if _, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
			return waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
		}); err != nil {
			t.Fatal(err)
		}
		if err := rawGuarded(e, guard, "c"); !guardFailed(err) {
			t.Fatalf("the holder's guard after a takeover: %v; want the guard's condition to fail", err)
		}
		calls.reset()
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), true)
		if n := calls.snapshot()["TransactWriteItems"]; n != 1 {
			t.Errorf("%d TransactWriteItems calls; want 1", n)
		}
		// DynamoDB Local, like DynamoDB, returns the item that failed the
		// guard: it names another tenure, so the lock is known stolen.
		if !errors.Is(lock.Err(), ddblock.CodeLockStolen) || lock.Status() != ddblock.StatusInvalid {
			t.Errorf("after the failed guard: Err %v, Status %s; want LOCK_STOLEN, INVALID", lock.Err(), lock.Status())
		}
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), false)
		if n := calls.snapshot()["TransactWriteItems"]; n != 1 {
			t.Errorf("%d TransactWriteItems calls; want none more for a lock known stolen", n)
		}
	})
	t.Run("overwritten by python_dynamodb_lock", func(t *testing.T) {
		e := newEnv(t)
		c := e.client(ddblock.WithHeartbeatPeriod(time.Hour), ddblock.WithSafePeriod(2*time.Hour), ddblock.WithLeaseDuration(3*time.Hour))
		lock := acquireN(t, c, "k")[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		// Python's takeover is a put of its own item, conditioned on the
		// version number it watched: no ddblock_tenure.
		putRawLock(t, e, "k", "python-host#1")
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), true)
		if !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
			t.Errorf("Err = %v; want LOCK_STOLEN", lock.Err())
		}
	})
	t.Run("released by its holder", func(t *testing.T) {
		e := newEnv(t)
		calls := newCounting(e.ddb)
		c := e.clientOn(calls)
		lock := acquireN(t, c, "k")[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		guard, _ := lock.Guard()
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rawGuarded(e, guard, "c"); !guardFailed(err) {
			t.Fatalf("a guard after the release: %v; want the guard's condition to fail", err)
		}
		calls.reset()
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), false)
		if _, err := lock.Guard(); !errors.Is(err, ddblock.CodeLockNotHeld) || !errors.Is(err, ddblock.CodeLockReleased) {
			t.Errorf("Guard of a released lock: %v; want LOCK_NOT_HELD wrapping LOCK_RELEASED", err)
		}
		if got := calls.snapshot(); len(got) != 0 {
			t.Errorf("calls = %v; want none for a lock known released", got)
		}
	})
	t.Run("released and kept", func(t *testing.T) {
		e := newEnv(t)
		c := e.client(ddblock.WithFencingTokens()) // keeps released items
		lock := acquireN(t, c, "k")[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		guard, _ := lock.Guard()
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
		item := rawItem(t, e, "k", "-")
		if strAttr(item, "ddblock_tenure") != lock.Tenure() || strAttr(item, "owner_name") != lock.OwnerName() {
			t.Fatalf("kept item %v: want this tenure and owner still in it", item)
		}
		if err := rawGuarded(e, guard, "c"); !guardFailed(err) {
			t.Fatalf("a guard on a released, kept item: %v; want the guard's condition to fail", err)
		}
		if got := e.counter("c"); got != 0 {
			t.Fatalf("counter = %d", got)
		}
	})
	t.Run("force-released by someone else", func(t *testing.T) {
		e := newEnv(t)
		c := e.client(ddblock.WithHeartbeatPeriod(time.Hour), ddblock.WithSafePeriod(2*time.Hour), ddblock.WithLeaseDuration(3*time.Hour))
		lock := acquireN(t, c, "k")[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		other := e.client(ddblock.WithOwnerName("operator"))
		if err := other.ForceRelease(ctx, "k", "-", lock.RecordVersionNumber()); err != nil {
			t.Fatal(err)
		}
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), true)
		// The item is gone: that alone does not prove a thief (it may be
		// this lock's own release under way), so the lock is left to its
		// heartbeats.
		if lock.Status() != ddblock.StatusLocked {
			t.Errorf("status %s; want LOCKED until a heartbeat or release finds out", lock.Status())
		}
	})
	t.Run("acquired again by the same client", func(t *testing.T) {
		e := newEnv(t)
		c := e.client()
		first := acquireN(t, c, "k")[0]
		if !hasTransactions(t, first, e) {
			return
		}
		guard, _ := first.Guard()
		if err := first.Release(ctx); err != nil {
			t.Fatal(err)
		}
		second := acquireN(t, c, "k")[0]
		if second.Tenure() == first.Tenure() || second.OwnerName() != first.OwnerName() {
			t.Fatalf("tenures %q, %q for owners %q, %q", first.Tenure(), second.Tenure(), first.OwnerName(), second.OwnerName())
		}
		if err := rawGuarded(e, guard, "c"); !guardFailed(err) {
			t.Fatalf("the first tenure's guard during the second: %v; want the guard's condition to fail", err)
		}
		if err := guardedIncr(ctx, e, second, "c"); err != nil {
			t.Fatalf("the second tenure's guarded write: %v", err)
		}
		if got := e.counter("c"); got != 1 {
			t.Errorf("counter = %d; want 1", got)
		}
	})
	t.Run("session taken over", func(t *testing.T) {
		e := newEnv(t)
		_, held := deadSessionHolder(t, e, 10*time.Second, "k")
		lock := held[0]
		if !hasTransactions(t, lock, e) {
			return
		}
		clk := fakeClock()
		waiter := e.clientOn(e.ddb, ddblock.WithClock(clk), ddblock.WithOwnerName("waiter"))
		if _, _, err := acquireStepping(t, clk, 2, time.Minute, func() (*ddblock.Lock, error) {
			return waiter.AcquireLock(ctx, "k", ddblock.WithRetryPeriod(time.Second), ddblock.WithRetryTimeout(time.Minute))
		}); err != nil {
			t.Fatal(err)
		}
		// The dead session's holder does not know: its clock stood still.
		if lock.Status() != ddblock.StatusLocked {
			t.Fatalf("status %s before the guarded write", lock.Status())
		}
		checkNotHeld(t, e, guardedIncr(ctx, e, lock, "c"), true)
		if !errors.Is(lock.Err(), ddblock.CodeLockStolen) {
			t.Errorf("Err = %v; want LOCK_STOLEN: a session lock learns it from the guard", lock.Err())
		}
	})
}

// The caller's own conditions: one that fails cancels the transaction,
// the error names the action, and the lock stays held.
func TestGuardedWriteOwnConditionFails(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	lock := acquireN(t, e.client(), "k")[0]
	if !hasTransactions(t, lock, e) {
		return
	}
	mustNotExist := types.TransactWriteItem{Put: &types.Put{
		TableName:                aws.String(e.dataTable()),
		Item:                     e.dataKey("invoice-1"),
		ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": ddblock.DefaultPartitionKeyName},
	}}
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c"), mustNotExist}}
	if _, err := lock.GuardedWrite(ctx, in); err != nil {
		t.Fatal(err)
	}
	_, err := lock.GuardedWrite(ctx, in)
	var gw *ddblock.GuardedWriteError
	if !errors.Is(err, ddblock.CodeWriteConditionFailed) || !errors.As(err, &gw) {
		t.Fatalf("GuardedWrite = %v; want WRITE_CONDITION_FAILED", err)
	}
	if gw.Action != 1 || len(gw.Reasons) != 2 || aws.ToString(gw.Reasons[1].Code) != "ConditionalCheckFailed" ||
		gw.GuardReason == nil || aws.ToString(gw.GuardReason.Code) == "ConditionalCheckFailed" {
		t.Fatalf("GuardedWriteError = %+v; want action 1 failed, the guard not", gw)
	}
	if got := e.counter("c"); got != 1 {
		t.Errorf("counter = %d; want 1 (the second transaction wrote nothing)", got)
	}
	if err := lock.Err(); err != nil {
		t.Errorf("lock.Err = %v; the lock is still held", err)
	}
	if len(in.TransactItems) != 2 || in.ClientRequestToken != nil {
		t.Errorf("the caller's input was modified: %+v", in)
	}
}

// A transaction conflict (DynamoDB Local never raises one: the proxy
// injects DynamoDB's answer) is typed and retryable; nothing was written.
func TestGuardedWriteConflict(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	proxy, ddb := e.proxied()
	lock := acquireN(t, e.clientOn(ddb), "k")[0]
	if !hasTransactions(t, lock, e) {
		return
	}
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.TransactionConflict, Op: "TransactWriteItems", Count: 1})
	err := guardedIncr(ctx, e, lock, "c")
	var gw *ddblock.GuardedWriteError
	if !errors.Is(err, ddblock.CodeTransactionConflict) || !errors.As(err, &gw) || len(gw.Reasons) != 1 {
		t.Fatalf("GuardedWrite = %v; want TRANSACTION_CONFLICT with a reason for the one action", err)
	}
	if fault.Injected() != 1 || e.counter("c") != 0 {
		t.Fatalf("injected %d, counter %d", fault.Injected(), e.counter("c"))
	}
	if err := guardedIncr(ctx, e, lock, "c"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := e.counter("c"); got != 1 {
		t.Errorf("counter = %d; want 1", got)
	}
}

// A lost reply: the outcome is unknown, said so, and the same input sent
// again with the request token is applied at most once.
func TestGuardedWriteOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []faultproxy.Kind{faultproxy.DropReply, faultproxy.BlackHole} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t)
			proxy, ddb := e.proxied()
			lock := acquireN(t, e.clientOn(ddb), "k")[0]
			if !hasTransactions(t, lock, e) {
				return
			}
			fault := proxy.MustInject(faultproxy.Rule{Kind: kind, Op: "TransactWriteItems", Count: 1})
			in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c")}}
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := lock.GuardedWrite(callCtx, in)
			cancel()
			var gw *ddblock.GuardedWriteError
			if !errors.Is(err, ddblock.CodeOutcomeUnknown) || !errors.As(err, &gw) || gw.RequestToken == "" {
				t.Fatalf("GuardedWrite = %v; want OUTCOME_UNKNOWN with the request token", err)
			}
			fault.Remove()
			want := map[faultproxy.Kind]int{faultproxy.DropReply: 1, faultproxy.BlackHole: 0}[kind]
			if got := e.counter("c"); got != want {
				t.Fatalf("counter = %d after the %s; want %d", got, kind, want)
			}
			retry := *in
			retry.ClientRequestToken = aws.String(gw.RequestToken)
			if _, err := lock.GuardedWrite(ctx, &retry); err != nil {
				t.Fatalf("the retry with the same token: %v", err)
			}
			if got := e.counter("c"); got != 1 {
				t.Errorf("counter = %d after the retry; want 1: applied exactly once", got)
			}
		})
	}
}

// Bad input gets a typed error before any call, and leaves the lock and
// its item as they were.
func TestGuardedWriteBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	calls := newCounting(e.ddb)
	c := e.clientOn(calls)
	lock := acquireN(t, c, "k")[0]
	before := rawItem(t, e, "k", "-")
	lockItem := types.TransactWriteItem{Delete: &types.Delete{
		TableName: aws.String(e.table),
		Key: map[string]types.AttributeValue{
			ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: "k"},
			ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
		},
	}}
	twoKinds := e.incr("c")
	twoKinds.Delete = &types.Delete{TableName: aws.String(e.dataTable()), Key: e.dataKey("c")}
	many := make([]types.TransactWriteItem, ddblock.MaxGuardedActions+1)
	for i := range many {
		many[i] = e.incr(fmt.Sprint("c", i))
	}
	cases := []struct {
		name    string
		ctx     context.Context
		in      *dynamodb.TransactWriteItemsInput
		setting string
	}{
		{"nil context", nil, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c")}}, "Context"},
		{"nil input", ctx, nil, "TransactWriteItemsInput"},
		{"no actions", ctx, &dynamodb.TransactWriteItemsInput{}, "TransactItems"},
		{"too many actions", ctx, &dynamodb.TransactWriteItemsInput{TransactItems: many}, "TransactItems"},
		{"an empty action", ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{}}}, "TransactItems[0]"},
		{"two kinds in one action", ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c"), twoKinds}}, "TransactItems[1]"},
		{"the lock item itself", ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{lockItem}}, "TransactItems[0]"},
	}
	calls.reset()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lock.GuardedWrite(tc.ctx, tc.in)
			var de *ddblock.Error
			if !errors.Is(err, ddblock.CodeInvalidArgument) || !errors.As(err, &de) || de.Setting != tc.setting {
				t.Fatalf("GuardedWrite = %v; want INVALID_ARGUMENT naming %s", err, tc.setting)
			}
		})
	}
	if got := calls.snapshot(); len(got) != 0 {
		t.Errorf("calls = %v; want none", got)
	}
	for _, l := range []*ddblock.Lock{nil, {}} {
		if _, err := l.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{e.incr("c")}}); !errors.Is(err, ddblock.CodeLockNotHeld) {
			t.Errorf("GuardedWrite of %#v = %v; want LOCK_NOT_HELD", l, err)
		}
		if _, err := l.Guard(); !errors.Is(err, ddblock.CodeLockNotHeld) {
			t.Errorf("Guard of %#v = %v; want LOCK_NOT_HELD", l, err)
		}
	}
	if err := lock.Err(); err != nil {
		t.Errorf("lock.Err = %v", err)
	}
	after := rawItem(t, e, "k", "-")
	if strAttr(after, "ddblock_tenure") != strAttr(before, "ddblock_tenure") || strAttr(after, "owner_name") != strAttr(before, "owner_name") {
		t.Errorf("the lock item changed: %v -> %v", before, after)
	}
}

// A DynamoDBAPI without TransactWriteItems (one written before guarded
// writes) gets a typed error and no call.
func TestGuardedWriteWithoutTransactWriteItems(t *testing.T) {
	e := newEnv(t)
	type narrow struct{ ddblock.DynamoDBAPI }
	lock := acquireN(t, e.clientOn(narrow{e.ddb}), "k")[0]
	err := guardedIncr(context.Background(), e, lock, "c")
	if !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
		t.Fatalf("GuardedWrite = %v; want TRANSACTIONS_UNSUPPORTED", err)
	}
	if _, err := lock.Guard(); err != nil {
		t.Errorf("Guard needs no call and works with any client: %v", err)
	}
}
