package mutexcheck

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// The lost-update workload needs no overlap checker: holders increment a
// counter item by read-modify-write under a lock, and every increment
// whose write was acknowledged is on record. If a write ever landed on a
// counter after another holder had read it (a holder paused, cut off or
// slowed between its last look at the lock and its write), one of the
// two increments is lost, and the final count falls below the number of
// acknowledged increments. [CountIncrements] compares them.

// CounterAPI is the part of the DynamoDB client an [Incrementer] uses
// for its counter items.
type CounterAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// CounterAttr is the attribute of a counter item that holds its count.
const CounterAttr = "n"

// CounterKey returns the key of the counter item of a lock key (a key
// as the log names it: "KEY", or "KEY/slot-I" for a semaphore's slot) in
// a data table with ddblock's default key attribute names.
func CounterKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		ddblock.DefaultPartitionKeyName: &types.AttributeValueMemberS{Value: key},
		ddblock.DefaultSortKeyName:      &types.AttributeValueMemberS{Value: "-"},
	}
}

// ReadCounter reads a counter item with a strongly consistent read: 0
// when it does not exist.
func ReadCounter(ctx context.Context, ddb CounterAPI, table, key string) (int64, error) {
	out, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: CounterKey(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, err
	}
	return counterValue(out.Item)
}

func counterValue(item map[string]types.AttributeValue) (int64, error) {
	v, ok := item[CounterAttr]
	if !ok {
		return 0, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("mutexcheck: counter attribute %q is a %T, not a number", CounterAttr, v)
	}
	return strconv.ParseInt(n.Value, 10, 64)
}

// Incrementer contends for a few keys with one ddblock client, like a
// [Holder], and under each lock it holds increments the key's counter
// item in DataTable a few times by read-modify-write: a strongly
// consistent GetItem of n, a check that the lock is safe (Lock.Err(),
// and the context the library handed over, if any; logged as a Step),
// then a write of n+1. The write sets n to the new value with no
// condition of its own: with Guarded it is a [ddblock.Lock.GuardedWrite],
// so that only the lock's guard protects it; without, a plain UpdateItem,
// as a careful user without guarded writes would write.
//
// Every write is logged before it is sent ([Log.Write]), and its outcome
// after: acknowledged ([Log.Incremented]) or known not applied
// ([Log.NotApplied]). A guarded write whose outcome is unknown (no reply,
// a server error, or an answer the fault proxy made up, such as an
// injected conflict, which says nothing about an earlier attempt of the
// same call) is sent again with its request token until DynamoDB says
// which: success (it committed, then or now) or the guard failed (it
// never did, and never will: a tenure does not come back). When the lock
// is already known lost, GuardedWrite makes no call, and the retry goes
// out as the same transaction sent by hand: the guard taken at the start
// of the tenure ([ddblock.Lock.Guard]) and the same action, with the same
// token. A write whose outcome is still unknown after ResolveFor, or
// whose process was killed, has a Write and no outcome: unresolved.
type Incrementer struct {
	// ID names the incrementer in the log, as Holder.ID.
	ID string
	// Client is its lock client; Data its client for the counter items
	// (normally the same SDK client, behind the same fault proxy).
	Client *ddblock.Client
	Data   CounterAPI
	// DataTable holds the counter items, one per lock key (see
	// CounterKey).
	DataTable string
	// Keys are the partition keys to contend for.
	Keys []string
	// Log receives the events.
	Log *Log
	// Guarded makes the writes guarded writes.
	Guarded bool
	// IncMin and IncMax bound the increments of one tenure.
	IncMin, IncMax int
	// StallShare is the share of writes, in [0, 1], before which Stall is
	// called (after the lock was checked): the test stalls the holder
	// there, as a GC pause or a slow network would, and the returned
	// function, called when the write's outcome is known, ends the stall.
	StallShare float64
	Stall      func(ctx context.Context) (resume func())
	// CallTimeout bounds each call to DynamoDB; ResolveFor how long an
	// unknown outcome is retried.
	CallTimeout, ResolveFor time.Duration
	// AcquireTimeout and AcquireOptions are as for Holder.
	AcquireTimeout time.Duration
	AcquireOptions []ddblock.AcquireOption
	// UseWithLock, UseElection and UseSemaphore (with Slots) take the
	// locks as Holder does; a semaphore's slot "KEY/slot-I" has a counter
	// of its own.
	UseWithLock, UseElection, UseSemaphore bool
	Slots                                  int
	// Seed seeds the random choices.
	Seed uint64
	// Proc and CallsRecorded are as for Holder, for the progress check.
	Proc          string
	CallsRecorded bool

	rng     *mrand.Rand
	tenures int
	stalls  atomic.Int64
}

// Stalls returns how many times Stall was called.
func (h *Incrementer) Stalls() int64 { return h.stalls.Load() }

// holder is the Holder whose logging and release this one shares.
func (h *Incrementer) holder() *Holder {
	return &Holder{ID: h.ID, Client: h.Client, Log: h.Log, AcquireTimeout: h.AcquireTimeout, AcquireOptions: h.AcquireOptions,
		UseElection: h.UseElection, Proc: h.Proc, CallsRecorded: h.CallsRecorded}
}

// Run contends until ctx ends or the client is closed. It returns nil
// then; any other end is a bug it reports.
func (h *Incrementer) Run(ctx context.Context) error {
	if h.Client == nil || h.Data == nil || h.DataTable == "" || h.Log == nil || len(h.Keys) == 0 ||
		h.IncMin < 1 || h.IncMax < h.IncMin || h.StallShare < 0 || h.StallShare > 1 ||
		(h.StallShare > 0 && h.Stall == nil) || h.CallTimeout <= 0 || (h.UseSemaphore && h.Slots < 1) {
		return errors.New("mutexcheck: Incrementer needs a Client, Data, a DataTable, a Log, Keys, 1 <= IncMin <= IncMax, a StallShare in [0, 1] (and a Stall when positive), a positive CallTimeout, and positive Slots with UseSemaphore")
	}
	h.rng = mrand.New(mrand.NewPCG(h.Seed, uint64(len(h.ID))+7))
	h.holder().logParams()
	for ctx.Err() == nil {
		key := h.Keys[h.rng.IntN(len(h.Keys))]
		var closed bool
		switch {
		case h.UseSemaphore:
			closed = h.roundSemaphore(ctx, key)
		case h.UseElection:
			closed = h.roundElection(ctx, key)
		case h.UseWithLock:
			closed = h.roundWithLock(ctx, key)
		default:
			closed = h.round(ctx, key)
		}
		if closed {
			return nil
		}
	}
	return nil
}

func (h *Incrementer) round(ctx context.Context, key string) bool {
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.holder().attempting(key)
	lock, err := h.Client.AcquireLock(actx, key, h.AcquireOptions...)
	ended(err)
	cancel()
	if err != nil {
		return h.holder().failed("acquire", err)
	}
	tenure := h.work(ctx, nil, lock, key)
	h.holder().release(ctx, tenure, lock)
	return false
}

func (h *Incrementer) roundSemaphore(ctx context.Context, key string) bool {
	sem, err := h.Client.NewSemaphore(key, h.Slots)
	if err != nil {
		return h.holder().failed("acquire", err)
	}
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.holder().attempting(key + "/slot-*")
	lock, err := sem.Acquire(actx, h.AcquireOptions...)
	ended(err)
	cancel()
	if err != nil {
		return h.holder().failed("acquire", err)
	}
	slot, ok := sem.SlotOf(lock)
	if !ok {
		h.Log.Failure(h.ID, "acquire", Now(), CodeUnclear, "Semaphore.Acquire returned a lock that is not one of its slots: "+lock.ID())
		return false
	}
	tenure := h.work(ctx, nil, lock, fmt.Sprintf("%s/slot-%d", key, slot))
	h.holder().release(ctx, tenure, lock)
	return false
}

func (h *Incrementer) roundElection(ctx context.Context, key string) bool {
	election, err := h.Client.NewElection(key)
	if err != nil {
		return h.holder().failed("campaign", err)
	}
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.holder().attempting(key)
	lead, err := election.Campaign(actx, h.ID)
	ended(err)
	cancel()
	if err != nil {
		return h.holder().failed("acquire", err)
	}
	tenure := h.work(ctx, lead.Context(), lead.Lock, key)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), h.AcquireTimeout)
	err = election.Resign(rctx)
	rcancel()
	outcome := "unknown"
	if err != nil {
		h.holder().failed("resign", err)
		outcome = string(ddblock.CodeOf(err))
	}
	h.Log.Released(tenure, Now(), outcome)
	return false
}

func (h *Incrementer) roundWithLock(ctx context.Context, key string) bool {
	var held *ddblock.Lock
	var tenure string
	opts := append(slices.Clone(h.AcquireOptions), ddblock.WithRetryTimeout(h.AcquireTimeout))
	ended := h.holder().attempting(key)
	err := h.Client.WithLock(ctx, key, func(lctx context.Context, lock *ddblock.Lock) error {
		ended(nil)
		held = lock
		tenure = h.work(ctx, lctx, lock, key)
		return nil
	}, opts...)
	if held != nil {
		h.Log.Released(tenure, Now(), "unknown")
	} else {
		ended(err)
	}
	switch {
	case err == nil:
		return false
	case held == nil:
		return h.holder().failed("acquire", err)
	default:
		h.holder().failed("withlock", err)
		return false
	}
}

// work is one tenure: a few increments of key's counter while the lock
// is safe. It returns the tenure's name.
func (h *Incrementer) work(ctx, lctx context.Context, lock *ddblock.Lock, key string) string {
	h.tenures++
	tenure := fmt.Sprintf("%s#%d", h.ID, h.tenures)
	from := ""
	if prev := lock.TakenOverFrom(); prev != nil {
		from = prev.OwnerName
	}
	h.Log.Acquired(tenure, key, Now(), lock.RecordVersionNumber(), lock.FencingToken(), from)
	var guard types.TransactWriteItem
	if h.Guarded {
		g, err := lock.Guard()
		if err != nil {
			h.Log.Ended(tenure, Now(), string(ddblock.CodeOf(err)))
			return tenure
		}
		guard = g
	}
	want := h.IncMin + h.rng.IntN(h.IncMax-h.IncMin+1)
	// A few more tries than increments: a read may fail under faults.
	for range 2 * want {
		if want == 0 {
			break
		}
		done, reason := h.increment(ctx, lctx, lock, guard, tenure, key)
		if reason != "" {
			h.Log.Ended(tenure, Now(), reason)
			return tenure
		}
		if done {
			want--
		}
	}
	h.Log.Ended(tenure, Now(), "done")
	return tenure
}

// safe says why the lock may not be worked under, or "".
func safe(ctx, lctx context.Context, lock *ddblock.Lock) string {
	switch {
	case ctx.Err() != nil:
		return "stopped"
	case lock.Err() != nil:
		return string(ddblock.CodeOf(lock.Err()))
	case lctx != nil && lctx.Err() != nil:
		return "fn-context-" + string(ddblock.CodeOf(context.Cause(lctx)))
	}
	return ""
}

// increment reads the counter, checks the lock, and writes n+1. done
// says a write was made (whatever its outcome); reason, when not empty,
// ends the tenure.
func (h *Incrementer) increment(ctx, lctx context.Context, lock *ddblock.Lock, guard types.TransactWriteItem, tenure, key string) (done bool, reason string) {
	if r := safe(ctx, lctx, lock); r != "" {
		return false, r
	}
	calls := context.WithoutCancel(ctx)
	rctx, cancel := context.WithTimeout(calls, h.CallTimeout)
	n, err := ReadCounter(rctx, h.Data, h.DataTable, key)
	cancel()
	if err != nil {
		h.Log.Failure(h.ID, "read", Now(), "SDK", err.Error())
		return false, ""
	}
	// The careful holder's last look before it writes.
	t := Now()
	if r := safe(ctx, lctx, lock); r != "" {
		return false, r
	}
	h.Log.Step(tenure, t)
	if h.StallShare > 0 && h.rng.Float64() < h.StallShare {
		h.stalls.Add(1)
		if resume := h.Stall(ctx); resume != nil {
			defer resume()
		}
	}
	id := newWriteID()
	update := &types.Update{
		TableName:                 aws.String(h.DataTable),
		Key:                       CounterKey(key),
		UpdateExpression:          aws.String("SET #n = :new"),
		ExpressionAttributeNames:  map[string]string{"#n": CounterAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":new": &types.AttributeValueMemberN{Value: strconv.FormatInt(n+1, 10)}},
	}
	h.Log.Write(tenure, key, Now(), n, id)
	if !h.Guarded {
		wctx, cancel := context.WithTimeout(calls, h.CallTimeout)
		_, err := h.Data.UpdateItem(wctx, &dynamodb.UpdateItemInput{
			TableName: update.TableName, Key: update.Key, UpdateExpression: update.UpdateExpression,
			ExpressionAttributeNames: update.ExpressionAttributeNames, ExpressionAttributeValues: update.ExpressionAttributeValues,
		})
		cancel()
		if err != nil {
			// Maybe applied, maybe not: left unresolved.
			h.Log.Failure(h.ID, "write", Now(), "SDK", err.Error())
			return true, ""
		}
		h.Log.Incremented(tenure, key, Now(), n+1, id)
		return true, ""
	}
	in := &dynamodb.TransactWriteItemsInput{
		TransactItems:      []types.TransactWriteItem{{Update: update}},
		ClientRequestToken: aws.String(id),
	}
	wctx, wcancel := context.WithTimeout(calls, h.CallTimeout)
	_, err = lock.GuardedWrite(wctx, in)
	wcancel()
	switch code := ddblock.CodeOf(err); {
	case err == nil:
		h.Log.Incremented(tenure, key, Now(), n+1, id)
	case code == ddblock.CodeLockNotHeld || code == ddblock.CodeTransactionsUnsupported:
		// DynamoDB's own answer (or no call at all): not applied. With
		// the token, a repeat of a committed transaction would have
		// answered success.
		h.holder().failed("guarded-write", err)
		h.Log.NotApplied(tenure, key, Now(), n+1, id, string(code))
	default:
		h.holder().failed("guarded-write", err)
		h.resolve(calls, lock, guard, in, tenure, key, n+1)
	}
	return true, ""
}

// resolve sends the guarded write in again with its request token until
// DynamoDB says whether it committed, for at most ResolveFor, and logs
// the outcome; it logs none when it cannot tell.
func (h *Incrementer) resolve(ctx context.Context, lock *ddblock.Lock, guard types.TransactWriteItem, in *dynamodb.TransactWriteItemsInput, tenure, key string, value int64) {
	id := aws.ToString(in.ClientRequestToken)
	deadline := time.Now().Add(h.ResolveFor)
	for attempt := 1; time.Now().Before(deadline); attempt++ {
		time.Sleep(min(time.Duration(attempt)*20*time.Millisecond, 300*time.Millisecond))
		rctx, cancel := context.WithTimeout(ctx, h.CallTimeout)
		_, err := lock.GuardedWrite(rctx, in)
		var gw *ddblock.GuardedWriteError
		if ddblock.CodeOf(err) == ddblock.CodeLockNotHeld && !errors.As(err, &gw) {
			// The lock is known lost and GuardedWrite made no call: send
			// the same transaction ourselves.
			raw := &dynamodb.TransactWriteItemsInput{
				TransactItems:      append([]types.TransactWriteItem{guard}, in.TransactItems...),
				ClientRequestToken: in.ClientRequestToken,
			}
			_, rerr := h.Data.TransactWriteItems(rctx, raw)
			switch {
			case rerr == nil:
				err = nil
			case guardCheckFailed(rerr):
				h.Log.NotApplied(tenure, key, Now(), value, id, "resolved-"+string(ddblock.CodeLockNotHeld))
				h.Log.Failure(h.ID, "resolve", Now(), "NOT_APPLIED", "write "+id+", sent by hand: the guard failed")
				cancel()
				return
			default:
				err = rerr
			}
		}
		cancel()
		switch code := ddblock.CodeOf(err); {
		case err == nil:
			h.Log.Incremented(tenure, key, Now(), value, id)
			h.Log.Failure(h.ID, "resolve", Now(), "COMMITTED", fmt.Sprintf("write %s committed (retry %d)", id, attempt))
			return
		case code == ddblock.CodeLockNotHeld:
			h.Log.NotApplied(tenure, key, Now(), value, id, "resolved-"+string(code))
			h.Log.Failure(h.ID, "resolve", Now(), "NOT_APPLIED", fmt.Sprintf("write %s: the guard failed (retry %d)", id, attempt))
			return
		case code == ddblock.CodeInvalidArgument:
			// The token was refused: nothing more to learn.
			h.holder().failed("resolve", err)
			return
		}
	}
	h.Log.Failure(h.ID, "resolve", Now(), "UNRESOLVED", "the outcome of write "+id+" is still unknown after "+h.ResolveFor.String())
}

// guardCheckFailed reports whether err is a cancelled transaction whose
// first action, the guard, failed its condition.
func guardCheckFailed(err error) bool {
	var tce *types.TransactionCanceledException
	return errors.As(err, &tce) && len(tce.CancellationReasons) > 0 &&
		aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed"
}

// newWriteID returns a random ID of 32 hex digits, fit for a
// ClientRequestToken (at most 36 characters).
func newWriteID() string { return hex.EncodeToString(wire.NewUUID4()) }

// KeyCount is what CountIncrements found on one counter.
type KeyCount struct {
	Key string
	// Writes were made; Acked were acknowledged; NotApplied are known
	// not to have been applied; Unresolved have no known outcome.
	Writes, Acked, NotApplied, Unresolved int
	// Final is the counter's value at the end.
	Final int64
	// Lost is how many acknowledged increments the final value misses:
	// Acked - Final when positive.
	Lost int64
	// Excess is how far Final is above Acked + Unresolved: increments
	// that landed although their writes were reported not applied.
	Excess int64
	// Duplicates counts acknowledged writes of a value that another
	// acknowledged write of the counter had written already: each is an
	// increment built on a stale read.
	Duplicates int
}

// CountReport is what CountIncrements found.
type CountReport struct {
	// Counters are the keys' figures, sorted by key; the fields below
	// add them up.
	Counters []KeyCount
	Writes   int
	Acked    int
	// NotApplied counts the writes known not applied, by the code that
	// said so ("resolved-..." when a retry with the request token did).
	NotApplied map[string]int
	Unresolved int
	// GuardedFailures counts the guarded writes that failed, by code;
	// Resolutions the outcomes of those retried with their request token
	// ("COMMITTED", "NOT_APPLIED", "UNRESOLVED", or an error code).
	GuardedFailures map[string]int
	Resolutions     map[string]int
	Final           int64
	Lost            int64
	Excess          int64
	Duplicates      int
	// Examples shows a few of the duplicated values: which two tenures
	// acknowledged the same value on one counter.
	Examples []string
	// Problems lists inconsistent records (an outcome of a write never
	// announced, two outcomes of one write), which point at a harness
	// bug.
	Problems []string
}

// CountIncrements compares the acknowledged increments in the events of
// every log of a run with the counters' final values (final, by key;
// a key missing from it counts 0).
func CountIncrements(events []Event, final map[string]int64) CountReport {
	r := CountReport{NotApplied: map[string]int{}, GuardedFailures: map[string]int{}, Resolutions: map[string]int{}}
	type write struct {
		key, tenure string
		outcome     EventKind
		failedFirst bool
	}
	writes := map[string]*write{}
	var order []string
	for _, ev := range events {
		switch ev.Kind {
		case Write:
			if writes[ev.Note] != nil {
				r.Problems = append(r.Problems, "write "+ev.Note+" announced twice")
				continue
			}
			writes[ev.Note] = &write{key: ev.Key, tenure: ev.Tenure}
			order = append(order, ev.Note)
		case Incremented, NotApplied:
			w := writes[ev.Note]
			switch {
			case w == nil:
				r.Problems = append(r.Problems, fmt.Sprintf("outcome of write %s, never announced, by %s", ev.Note, ev.Tenure))
				continue
			case w.outcome != 0:
				r.Problems = append(r.Problems, fmt.Sprintf("write %s of %s has two outcomes", ev.Note, ev.Tenure))
				continue
			}
			w.outcome = ev.Kind
			if ev.Kind == NotApplied {
				r.NotApplied[ev.Detail]++
			}
		case Failure:
			switch ev.Key {
			case "guarded-write":
				r.GuardedFailures[ev.Note]++
			case "resolve":
				r.Resolutions[ev.Note]++
			}
		}
	}
	counts := map[string]*KeyCount{}
	seen := map[string]map[int64]string{} // key -> acknowledged value -> tenure
	get := func(key string) *KeyCount {
		if counts[key] == nil {
			counts[key] = &KeyCount{Key: key, Final: final[key]}
			seen[key] = map[int64]string{}
		}
		return counts[key]
	}
	for key := range final {
		get(key)
	}
	// Values come from the events in log order; a duplicate is a value
	// acknowledged twice on one counter.
	values := map[string]int64{}
	for _, ev := range events {
		if ev.Kind == Incremented {
			values[ev.Note] = ev.Token
		}
	}
	for _, id := range order {
		w := writes[id]
		kc := get(w.key)
		kc.Writes++
		switch w.outcome {
		case Incremented:
			kc.Acked++
			v := values[id]
			if prev, dup := seen[w.key][v]; dup {
				kc.Duplicates++
				if len(r.Examples) < 3 {
					r.Examples = append(r.Examples, fmt.Sprintf("counter %q: value %d acknowledged to %s and to %s", w.key, v, prev, w.tenure))
				}
			} else {
				seen[w.key][v] = w.tenure
			}
		case NotApplied:
			kc.NotApplied++
		default:
			kc.Unresolved++
		}
	}
	for _, key := range slices.Sorted(maps.Keys(counts)) {
		kc := counts[key]
		kc.Lost = max(0, int64(kc.Acked)-kc.Final)
		kc.Excess = max(0, kc.Final-int64(kc.Acked+kc.Unresolved))
		r.Counters = append(r.Counters, *kc)
		r.Writes += kc.Writes
		r.Acked += kc.Acked
		r.Unresolved += kc.Unresolved
		r.Final += kc.Final
		r.Lost += kc.Lost
		r.Excess += kc.Excess
		r.Duplicates += kc.Duplicates
	}
	slices.SortFunc(r.Counters, func(a, b KeyCount) int { return cmp.Compare(a.Key, b.Key) })
	return r
}

// Summary formats the report's figures.
func (r CountReport) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "counters %d: writes %d, acknowledged %d, known not applied %d (%s), unresolved %d\n",
		len(r.Counters), r.Writes, r.Acked, r.Writes-r.Acked-r.Unresolved, formatCounts(r.NotApplied), r.Unresolved)
	if len(r.GuardedFailures) > 0 || len(r.Resolutions) > 0 {
		fmt.Fprintf(&b, "guarded writes failed: %s; retried with their request token until known: %s\n",
			formatCounts(r.GuardedFailures), formatCounts(r.Resolutions))
	}
	fmt.Fprintf(&b, "final counts add up to %d: LOST UPDATES %d (acknowledged increments missing), acknowledged values written twice %d, excess over acknowledged+unresolved %d\n",
		r.Final, r.Lost, r.Duplicates, r.Excess)
	for _, kc := range r.Counters {
		fmt.Fprintf(&b, "  %s: final %d, acknowledged %d, unresolved %d, lost %d, duplicates %d\n",
			kc.Key, kc.Final, kc.Acked, kc.Unresolved, kc.Lost, kc.Duplicates)
	}
	for _, e := range r.Examples {
		fmt.Fprintf(&b, "  e.g. %s\n", e)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(&b, "harness problems %d\n", len(r.Problems))
	}
	return b.String()
}
