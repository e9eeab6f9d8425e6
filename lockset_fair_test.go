package ddblock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
)

// A set of keys that waits fairly (AcquireLocks with WithFairWaiting,
// lockset.go): it climbs its keys' lines in lock-id order and keeps the
// head of each while it waits in the next, so that it neither deadlocks
// with other sets nor starves behind a stream of fair single-key
// waiters; a dead set's places go with its session.

// txTap is a Tap that also passes TransactWriteItems on (through its
// Before and After hooks, as Op "TransactWriteItems"), which a set needs.
type txTap struct {
	*ddbtest.Tap
	tx interface {
		TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	}
}

func (d txTap) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	call := &ddbtest.Call{Op: "TransactWriteItems", In: in}
	if d.Before != nil {
		if err := d.Before(ctx, call); err != nil {
			return nil, err
		}
	}
	out, err := d.tx.TransactWriteItems(ctx, in, o...)
	if d.After != nil {
		d.After(call, err)
	}
	return out, err
}

// lineItems returns the partition keys of the line counters and tickets
// in e's table.
func lineItems(t *testing.T, e *env) []string {
	t.Helper()
	var keys []string
	var start map[string]types.AttributeValue
	for {
		out, err := e.ddb.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String(e.table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		for _, item := range out.Items {
			pk, _ := item[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS)
			if pk != nil && (strings.HasPrefix(pk.Value, "ddblock_line#") || strings.HasPrefix(pk.Value, "ddblock_wait#")) {
				keys = append(keys, pk.Value)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return keys
		}
		start = out.LastEvaluatedKey
	}
}

// hasFairSetTransactions is hasSetTransactions for a set that waits
// fairly: where the server has no transactions, the set climbs its
// lines, learns it at its first transaction, and leaves no lock item
// and, once its tickets' deletes have landed, no line behind.
func hasFairSetTransactions(t *testing.T, e *env, c *ddblock.Client) bool {
	t.Helper()
	if !hasSetTransactions(t, e, c) {
		set, err := c.AcquireLocks(context.Background(), []string{"x1", "x2"}, ddblock.WithFairWaiting(), ddblock.WithRetryTimeout(time.Minute))
		if !errors.Is(err, ddblock.CodeTransactionsUnsupported) || set != nil {
			t.Fatalf("a fair AcquireLocks on %s: %v, %v; want TRANSACTIONS_UNSUPPORTED", ddbtest.Shared(t).Name(), set, err)
		}
		for _, k := range []string{"x1", "x2"} {
			if item := rawItem(t, e, k, "-"); item != nil {
				t.Fatalf("an unsupported fair AcquireLocks left an item at %s: %v", k, item)
			}
		}
		waitFor(t, "the set's lines to go", func() bool { return len(lineItems(t, e)) == 0 })
		return false
	}
	return true
}

// fsExclusion counts the holders of each key: a set counts in on every
// key of it.
type fsExclusion struct {
	mu       sync.Mutex
	holders  map[string]int
	overlaps atomic.Int32
}

func (x *fsExclusion) in(keys ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.holders[k]++
		if x.holders[k] != 1 {
			x.overlaps.Add(1)
		}
	}
}

func (x *fsExclusion) out(keys ...string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range keys {
		x.holders[k]--
	}
}

// Fair sets that want overlapping keys, named in different orders, and
// fair single-key waiters of the same keys all finish: every set climbs
// the lines in one order, so none waits in a line another heads while
// heading one that other waits in; two of the sets wait in one client,
// in the same rooms. No two ever hold a key at once.
func TestAcquireLocksFairNoDeadlock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	first := e.client()
	if !hasFairSetTransactions(t, e, first) {
		return
	}
	opts := []ddblock.AcquireOption{ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(20 * time.Millisecond), ddblock.WithRetryTimeout(3 * time.Minute)}
	sets := [][]string{{"x", "y", "z"}, {"z", "y", "x"}, {"y", "z"}, {"z", "x"}, {"y", "x"}}
	singles := []string{"x", "y", "z"}
	const rounds = 4
	x := &fsExclusion{holders: map[string]int{}}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i, keys := range sets {
		// The first two sets share a client, and its rooms; each waits
		// for the keys the other holds (WithWaitOnOwn).
		c, setOpts := first, append(slices.Clip(opts), ddblock.WithWaitOnOwn())
		if i > 1 {
			c, setOpts = e.client(), opts
		}
		wg.Go(func() {
			for range rounds {
				set, err := c.AcquireLocks(ctx, keys, setOpts...)
				if err != nil {
					t.Errorf("AcquireLocks(%v): %v", keys, err)
					return
				}
				x.in(keys...)
				wins.Add(1)
				time.Sleep(2 * time.Millisecond) // work under the set, so that the others find it held
				x.out(keys...)
				if err := set.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	for _, k := range singles {
		c := e.client()
		wg.Go(func() {
			for range rounds {
				l, err := c.AcquireLock(ctx, k, opts...)
				if err != nil {
					t.Errorf("AcquireLock(%s): %v", k, err)
					return
				}
				x.in(k)
				wins.Add(1)
				time.Sleep(2 * time.Millisecond)
				x.out(k)
				if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
					t.Errorf("Release: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := x.overlaps.Load(); n != 0 {
		t.Fatalf("%d overlapping holds of a key", n)
	}
	if got, want := wins.Load(), int32(rounds*(len(sets)+len(singles))); got != want {
		t.Fatalf("%d acquires won; want %d", got, want)
	}
	waitFor(t, "every line to go with its last waiter", func() bool { return len(lineItems(t, e)) == 0 })
}

// fsStream is a stream of fair single-key holders of some keys, perKey
// clients a key: each takes its key, holds it a moment, gives it back
// and comes again at the back of the line, until stopped. It counts the
// acquisitions (handoffs) of each key. A holder keeps its key for hold.
type fsStream struct {
	handoffs map[string]*atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startStream(t testing.TB, clients func(owner string) *ddblock.Client, keys []string, perKey int, hold time.Duration, x *fsExclusion) *fsStream {
	s := &fsStream{handoffs: map[string]*atomic.Int64{}, stop: make(chan struct{})}
	ctx := context.Background()
	for _, k := range keys {
		s.handoffs[k] = new(atomic.Int64)
	}
	for _, k := range keys {
		for i := range perKey {
			c := clients("holder-" + k + "-" + string(rune('0'+i)))
			s.wg.Go(func() {
				for {
					select {
					case <-s.stop:
						return
					default:
					}
					l, err := c.AcquireLock(ctx, k, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fsPeriod), ddblock.WithRetryTimeout(5*time.Minute))
					if err != nil {
						t.Errorf("holder of %s: %v", k, err)
						return
					}
					x.in(k)
					s.handoffs[k].Add(1)
					time.Sleep(hold)
					x.out(k)
					if err := l.Release(ctx, ddblock.WithBestEffort(false)); err != nil {
						t.Errorf("holder of %s: Release: %v", k, err)
						return
					}
				}
			})
		}
	}
	return s
}

func (s *fsStream) end() {
	close(s.stop)
	s.wg.Wait()
}

func (s *fsStream) count(k string) int64 { return s.handoffs[k].Load() }

const (
	// fsPeriod is the retry period of the stream and the set.
	fsPeriod = 50 * time.Millisecond
	// fsHold is how long a holder of the stream keeps its key.
	fsHold = 5 * time.Millisecond
)

// fsTakes records, for a client's calls, the handoffs of each key of the
// stream at the client's last take of a number in that key's line.
type fsTakes struct {
	mu    sync.Mutex
	at    map[string]int64
	takes map[string]int
}

func newTakesTap(ddb *dynamodb.Client, s *fsStream) (txTap, *fsTakes) {
	r := &fsTakes{at: map[string]int64{}, takes: map[string]int{}}
	tap := &ddbtest.Tap{DynamoDBAPI: ddb, Before: func(_ context.Context, call *ddbtest.Call) error {
		in, ok := call.In.(*dynamodb.UpdateItemInput)
		if !ok || call.Kind() != "line" || !strings.HasPrefix(aws.ToString(in.UpdateExpression), "SET #next = if_not_exists") {
			return nil
		}
		pk := call.Item[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS).Value
		key := strings.TrimPrefix(pk, "ddblock_line#")
		if h := s.handoffs[key]; h != nil {
			r.mu.Lock()
			r.at[key] = h.Load()
			r.takes[key]++
			r.mu.Unlock()
		}
		return nil
	}}
	return txTap{Tap: tap, tx: ddb}, r
}

// A set of two keys that waits fairly, against a stream of fair
// single-key holders of both (three a key, each holding a moment and
// coming again): it is won within a bounded number of handoffs. Once it
// has taken its number in a key's line, at most the waiters then ahead
// of it (the key's three holders, one of them perhaps winning as it
// came) take that key before it. The same stream against a set that
// polls is measured, not judged: its keys are rarely free together.
func TestAcquireLocksFairNotStarved(t *testing.T) {
	e := newEnv(t)
	if !hasFairSetTransactions(t, e, e.client()) {
		return
	}
	const perKey = 3
	keys := []string{"a", "b"}
	for _, fair := range []bool{true, false} {
		name := "fair"
		if !fair {
			name = "polling"
		}
		t.Run(name, func(t *testing.T) {
			x := &fsExclusion{holders: map[string]int{}}
			stream := startStream(t, func(owner string) *ddblock.Client { return e.client(ddblock.WithOwnerName(owner)) }, keys, perKey, fsHold, x)
			defer stream.end()
			// The stream in full swing: every holder has come round.
			waitFor(t, "the stream", func() bool { return stream.count("a") >= 2*perKey && stream.count("b") >= 2*perKey })
			tap, takes := newTakesTap(e.ddb, stream)
			c := e.clientOn(tap, ddblock.WithOwnerName("set"))
			opts := []ddblock.AcquireOption{ddblock.WithRetryPeriod(fsPeriod), ddblock.WithRetryTimeout(2 * time.Minute)}
			if fair {
				opts = append(opts, ddblock.WithFairWaiting())
			} else {
				opts = []ddblock.AcquireOption{ddblock.WithRetryPeriod(fsPeriod), ddblock.WithRetryTimeout(10 * time.Second)}
			}
			before := map[string]int64{"a": stream.count("a"), "b": stream.count("b")}
			start := time.Now()
			set, err := c.AcquireLocks(context.Background(), keys, opts...)
			waited := time.Since(start)
			won := map[string]int64{"a": stream.count("a"), "b": stream.count("b")}
			during := map[string]int64{"a": won["a"] - before["a"], "b": won["b"] - before["b"]}
			if err == nil {
				x.in(keys...)
				x.out(keys...)
				if rerr := set.Release(context.Background(), ddblock.WithBestEffort(false)); rerr != nil {
					t.Errorf("Release: %v", rerr)
				}
			}
			t.Logf("%s set: %v after %v; handoffs meanwhile a=%d b=%d", name, err, waited.Round(time.Millisecond), during["a"], during["b"])
			if n := x.overlaps.Load(); n != 0 {
				t.Errorf("%d overlapping holds of a key", n)
			}
			if !fair {
				return
			}
			if err != nil {
				t.Fatalf("the fair set: %v", err)
			}
			takes.mu.Lock()
			defer takes.mu.Unlock()
			for _, k := range keys {
				after := won[k] - takes.at[k]
				t.Logf("key %s: %d numbers taken by the set, %d handoffs of it between its last and the set's win", k, takes.takes[k], after)
				if takes.takes[k] == 0 || after > perKey+1 {
					t.Errorf("key %s: %d handoffs between the set's number and its win; want at most the %d holders that can stand ahead of it, and one that won as it came", k, after, perKey)
				}
			}
		})
	}
}

// fsClient is fjWorld.client for a set: its calls go through a fjDDB of
// its own, which can kill it, and TransactWriteItems too.
func fsClient(w *fjWorld, owner string) (*ddblock.Client, *fjDDB) {
	w.t.Helper()
	d := newFJDDB(w.e.ddb, w.clk)
	w.mu.Lock()
	w.dbs = append(w.dbs, d)
	w.mu.Unlock()
	c := w.e.clientOn(txTap{Tap: &d.Tap, tx: w.e.ddb}, append(fakeTimes(), ddblock.WithClock(w.clk), ddblock.WithOwnerName(owner))...)
	w.t.Cleanup(func() { d.dead.Store(false); d.resume() }) // runs before the client's Close
	return c, d
}

// A fair set that heads the line of its first key and waits for its
// second keeps the first: the fair waiter behind it does not take that
// key, free as it is, while the set lives. Killed, the set jams nothing:
// its session stands still, and the waiter behind takes the key within
// lineBound of the death, as behind any dead waiter. Fake time
// throughout, for the set and the waiter; the second key's holder is on
// the real clock.
func TestAcquireLocksFairDeadSetWaiter(t *testing.T) {
	w := newFJWorld(t)
	ctx := context.Background()
	observer := w.e.client(ddblock.WithOwnerName("observer"))
	if !hasFairSetTransactions(t, w.e, observer) {
		return
	}
	held := fjHold(t, w.e, "b")
	cs, ds := fsClient(w, "set")
	set := fjGo("set", func(ctx context.Context) (*ddblock.Lock, error) {
		s, err := cs.AcquireLocks(ctx, []string{"b", "a"}, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(fjRetry), ddblock.WithRetryTimeout(time.Hour))
		if err != nil {
			return nil, err
		}
		return s.Locks()[0], nil
	})
	waitFor(t, "the set's tickets in both lines", func() bool { return w.ticketCount() == 2 })
	cl, dl := w.client("live")
	live := fjFair(cl, "live", "a")
	waitFor(t, "the live waiter's ticket", func() bool { return w.ticketCount() == 3 })
	w.stepFor(5 * fjRetry)
	if got := fjOwners(t, observer, "a", ""); got != "set live" {
		t.Fatalf("line of a: %q; want \"set live\"", got)
	}
	if got := fjOwners(t, observer, "b", ""); got != "set" {
		t.Fatalf("line of b: %q; want \"set\"", got)
	}
	grace := fjGraceOf(t, observer, "a", "")
	bound := fjBound(grace, fjRetry)

	// Alive, the set keeps a, which stands free, for longer than any
	// single head's grace: its set wait (an hour here) counts too.
	w.stepFor(2 * bound)
	if live.finished() {
		t.Fatalf("the waiter behind a live set took a (%v) within %v: the set's place was skipped", live.err, 2*bound)
	}
	if owner := w.lockOwner("a", "-"); owner != "" {
		t.Fatalf("a is held by %q while the set waits for b", owner)
	}

	ds.dead.Store(true)
	killed := w.clk.Monotonic()
	w.stepUntil("the waiter behind the dead set to acquire", live.finished, 2*bound)
	if live.err != nil {
		t.Fatalf("the waiter behind the dead set: %v", live.err)
	}
	at, _ := dl.lastPut()
	took := at - killed
	t.Logf("the waiter behind the dead set took a %v after the death (grace %v, lineBound %v)", took, grace, bound)
	if took > bound {
		t.Errorf("the waiter behind the dead set took a %v after the death; want within lineBound, %v", took, bound)
	}
	w.stepUntil("the dead set to fail", set.finished, time.Minute)
	if set.err == nil {
		t.Error("the dead set acquired")
	}
	if err := live.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A single key's put that DynamoDB refuses because a set's transaction
// on the key is under way (TransactionConflictException: nothing
// written) is tried again at the next attempt, not an error of the
// acquire: a stream of single-key holders meets a set's transactions.
func TestAcquireLockThroughSetTransaction(t *testing.T) {
	e := newEnv(t)
	var refused atomic.Int32
	tap := &ddbtest.Tap{DynamoDBAPI: e.ddb, Before: func(_ context.Context, call *ddbtest.Call) error {
		if call.Op == "PutItem" && call.Kind() == "lock" && refused.Add(1) == 1 {
			return &types.TransactionConflictException{Message: aws.String("Transaction is ongoing for the item")}
		}
		return nil
	}}
	c := e.clientOn(tap)
	l, err := c.AcquireLock(context.Background(), "k", ddblock.WithRetryPeriod(20*time.Millisecond), ddblock.WithRetryTimeout(time.Minute))
	if err != nil {
		t.Fatalf("AcquireLock through a transaction conflict: %v", err)
	}
	if refused.Load() != 2 {
		t.Fatalf("lock puts: %d; want 2 (one refused)", refused.Load())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A set that loses the head of an earlier line (here the line is
// cleared under it) gives up its place in the later line before it comes
// again: it never keeps a place in a later line while it waits in an
// earlier one. The fair waiter behind it in the later line moves up.
func TestAcquireLocksFairLosesEarlierHead(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	observer := e.client(ddblock.WithOwnerName("observer"))
	if !hasFairSetTransactions(t, e, observer) {
		return
	}
	holder := e.client(ddblock.WithOwnerName("holder"))
	held, err := holder.AcquireLock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	opts := []ddblock.AcquireOption{ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(50 * time.Millisecond), ddblock.WithRetryTimeout(2 * time.Minute)}
	cs := e.client(ddblock.WithOwnerName("set"))
	type result struct {
		set *ddblock.LockSet
		err error
	}
	setDone := make(chan result, 1)
	go func() {
		s, err := cs.AcquireLocks(ctx, []string{"a", "b"}, opts...)
		setDone <- result{s, err}
	}()
	waitFor(t, "the set at the head of both lines", func() bool {
		return fjOwners(t, observer, "a", "") == "set" && fjOwners(t, observer, "b", "") == "set"
	})
	cw := e.client(ddblock.WithOwnerName("single"))
	single := startFair(cw, "single", "b", opts...)
	waitFor(t, "the single waiter behind the set", func() bool { return fjOwners(t, observer, "b", "") == "set single" })

	if _, err := observer.ClearLine(ctx, "a", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the set to come again behind the single waiter", func() bool {
		return fjOwners(t, observer, "a", "") == "set" && fjOwners(t, observer, "b", "") == "single set"
	})
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	<-single.done
	if single.err != nil {
		t.Fatalf("the single waiter: %v", single.err)
	}
	select {
	case r := <-setDone:
		t.Fatalf("the set won (%v) while the single waiter ahead of it held b", r.err)
	default:
	}
	if err := single.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-setDone
	if r.err != nil {
		t.Fatalf("the set: %v", r.err)
	}
	if err := r.set.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
