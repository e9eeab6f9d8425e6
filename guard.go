package ddblock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// Guarded writes: a held lock lends a ConditionCheck on its own item to
// the holder's DynamoDB transaction, so that the holder's writes commit
// only if, at the instant DynamoDB commits them, the lock item still names
// this holder's tenure. DynamoDB serializes the check with every other
// write of the lock item (acquisitions, releases, takeovers by ddblock or
// python_dynamodb_lock), so no pause, clock or network delay on the
// holder's side can make a guarded write land after another holder took
// the lock. See doc/guarded-writes.md.
//
// The condition is on the tenure, not on the record version number: every
// heartbeat changes the version number, and a guard conditioned on it
// would fail whenever a heartbeat landed between the holder's look and its
// write. The tenure is written once per acquisition and kept by the
// holder's heartbeats; it changes with every acquisition of the key, by
// anyone, this client included, and a python_dynamodb_lock acquisition
// removes it (Python overwrites the whole item).

// MaxGuardedActions is the most actions a guarded write takes from the
// caller: DynamoDB's limit of 100 actions a transaction, less the guard.
const MaxGuardedActions = 99

// GuardedWriteError details a guarded write that DynamoDB cancelled or
// whose outcome is unknown. It is the cause ([Error.Err]) of the *Error
// that [Lock.GuardedWrite] returns; reach it with errors.As. It unwraps
// to the AWS SDK's error.
type GuardedWriteError struct {
	// Action is the index, in the caller's TransactItems, of the action
	// whose own condition failed (CodeWriteConditionFailed), or -1.
	Action int
	// Reasons are DynamoDB's cancellation reasons for the caller's
	// actions, in the caller's order (the guard's own reason is left
	// out); nil unless the transaction was cancelled.
	Reasons []types.CancellationReason
	// GuardReason is DynamoDB's cancellation reason for the guard: its
	// Code is "ConditionalCheckFailed" when the lock was no longer held,
	// and then Item is the lock item as it stood, where the server
	// returns it (DynamoDB and DynamoDB Local do); nil unless the
	// transaction was cancelled.
	GuardReason *types.CancellationReason
	// RequestToken is the ClientRequestToken the transaction was sent
	// with. Within ten minutes, the same input sent again with this token
	// is applied at most once in all: DynamoDB answers a repeat of a
	// committed transaction with success and does not apply it again.
	RequestToken string
	// Err is the AWS SDK's error.
	Err error
}

// Error says which action failed, if one did, and the SDK's error.
func (e *GuardedWriteError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	if e.Action >= 0 {
		fmt.Fprintf(&b, "action %d: ", e.Action)
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the AWS SDK's error.
func (e *GuardedWriteError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Guard returns the action that guards a write with the lock: a
// ConditionCheck on the lock item that holds while the item names this
// lock's owner and tenure (see [Lock.Tenure]) and was not released. Put
// it among the actions of your own TransactWriteItems call to make them
// commit only while this lock is held; DynamoDB then answers a cancelled
// transaction with a TransactionCanceledException whose reason at the
// guard's index is "ConditionalCheckFailed" when the lock was not held.
// [Lock.GuardedWrite] does all that and explains the answer.
//
// The guard holds across this holder's heartbeats and fails after any
// other acquisition of the key: a takeover by any client, a release, or
// the same client acquiring the key again (a new tenure). It asks
// DynamoDB to return the lock item when it fails.
//
// Guard returns an error of CodeLockNotHeld, without a guard, when the
// lock is already known to be lost (released, stolen) or was never
// acquired.
func (l *Lock) Guard() (types.TransactWriteItem, error) {
	if err := l.guardable(); err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{ConditionCheck: l.guardCheck()}, nil
}

func (l *Lock) guardCheck() *types.ConditionCheck {
	return l.client.wire().Guard(l.pk, l.sk, l.owner, l.tenure)
}

// guardable refuses a guard for a lock known not to be held.
func (l *Lock) guardable() error {
	if l == nil || l.client == nil || l.tenure == "" {
		return &Error{Code: CodeLockNotHeld, Message: "not a lock acquired by this library"}
	}
	l.mu.Lock()
	defer l.unlock()
	l.checkDangerLocked(l.client.clock.Monotonic())
	switch l.status {
	case StatusLocked, StatusInDanger:
		// In danger the lock may still be held: the condition decides.
		return nil
	}
	e := l.lockError(CodeLockNotHeld, "the lock is "+strings.ToLower(string(l.status))+": a guarded write cannot commit", l.err)
	return e
}

// transactWriter is the part of *dynamodb.Client a guarded write needs,
// apart from [DynamoDBAPI], so that implementations of DynamoDBAPI
// written before guarded writes still satisfy it.
type transactWriter interface {
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// GuardedWrite runs the caller's TransactWriteItems with the lock's guard
// (see [Lock.Guard]) in front of its actions, in one DynamoDB
// transaction: the caller's Put, Update, Delete and ConditionCheck
// actions (at most [MaxGuardedActions]) commit together, and only if the
// lock item still names this lock's tenure when DynamoDB commits them.
// The input is not modified. Where in.ClientRequestToken is empty, a new
// random token is sent, so that the SDK's own retries of the call are
// applied at most once.
//
// DynamoDB refuses the lock's heartbeat while a transaction that includes
// the lock item is under way, and every guarded write does. So when a
// heartbeat of this lock is refused that way, guarded writes of this lock
// wait until it has landed (or its HeartbeatTimeout has run out): the
// holder keeps its lock however densely it writes. Such a wait lasts
// about as long as the guarded writes in flight then take, plus one
// UpdateItem.
//
// The errors, each an *Error:
//   - CodeLockNotHeld: the lock is not held, so nothing was written. When
//     the lock is already known to be lost, no call is made; when the
//     guard's condition failed, the lock item said another tenure (taken
//     over, released, acquired again) or was gone, and where the server
//     returned the item and it shows another acquisition, the lock is
//     marked stolen as a failed heartbeat would mark it.
//   - CodeWriteConditionFailed: the guard held but one of the caller's
//     own conditions failed, so nothing was written;
//     [GuardedWriteError].Action says which.
//   - CodeTransactionConflict: DynamoDB cancelled the transaction because
//     another transaction or write touched one of its items at the same
//     time. Nothing was written; the same call may be retried, after a
//     short back-off.
//   - CodeOutcomeUnknown: no answer came (a lost reply, a timeout, a
//     cancelled context after the request left, a server error): the
//     transaction may or may not have committed. Send the same input
//     again with the token in [GuardedWriteError].RequestToken, within
//     ten minutes, to learn the answer without applying it twice: a
//     committed transaction answers success again.
//   - CodeTransactionsUnsupported: the server (dynalite, for one) or the
//     DynamoDBAPI given to [New] has no TransactWriteItems.
//   - CodeInvalidArgument: nil or empty arguments, too many actions, an
//     action that is not exactly one of Put, Update, Delete and
//     ConditionCheck, an action on the lock item itself (DynamoDB refuses
//     two actions on one item in a transaction), or a request token
//     reused with other parameters.
//   - CodeCanceled: ctx ended before the request was sent.
//   - CodeAccessDenied: AWS refused the transaction for want of a
//     permission or of valid credentials; nothing was written.
//
// Any other failure is CodeUnknown with the SDK's error as its cause.
func (l *Lock) GuardedWrite(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return guardedWrite(ctx, []*Lock{l}, in, optFns)
}

// guardedWrite is the guarded write of one lock, or of a set's locks
// (locks are never empty): one guard per lock, then the caller's
// actions. It is measured and traced as the first lock's.
func guardedWrite(ctx context.Context, locks []*Lock, in *dynamodb.TransactWriteItemsInput, optFns []func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	l := locks[0]
	if l == nil || l.client == nil {
		return writeGuarded(ctx, locks, in, optFns)
	}
	c := l.client
	start := c.clock.Monotonic()
	ctx, span := c.startSpan(ctx, spanGuardedWrite)
	out, err := writeGuarded(ctx, locks, in, optFns)
	c.opts.Metrics.GuardedWriteFinished(c.clock.Monotonic()-start, err)
	if span != nil {
		setLockProperties(span, l.pk, l.sk, l.owner)
		if l.token > 0 {
			span.SetProperty(attrToken, l.token)
		}
		endSpan(span, err)
	}
	return out, err
}

// writeGuarded is guardedWrite's work, once ctx is checked.
func writeGuarded(ctx context.Context, locks []*Lock, in *dynamodb.TransactWriteItemsInput, optFns []func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, l := range locks {
		if err := l.guardable(); err != nil {
			return nil, err
		}
	}
	l := locks[0]
	if err := checkGuardedInput(locks, in); err != nil {
		return nil, err
	}
	c := l.client
	tw, ok := c.ddb.(transactWriter)
	if !ok {
		return nil, l.lockError(CodeTransactionsUnsupported, "the DynamoDBAPI given to New has no TransactWriteItems method", nil)
	}
	if err := ctx.Err(); err != nil {
		return nil, l.lockError(CodeCanceled, "the context ended before the guarded write was sent", context.Cause(ctx))
	}
	// A heartbeat of a lock refused by a conflict with this holder's own
	// guarded writes goes first (sendHeartbeatThroughConflicts). The
	// gates are entered in the set's order; a gate is never held while
	// waiting for another, so entering several cannot deadlock.
	entered := 0
	defer func() {
		for _, gl := range locks[:entered] {
			gl.gate.leave()
		}
	}()
	for _, gl := range locks {
		waited, err := gl.gate.enter(ctx)
		if err != nil {
			return nil, gl.lockError(CodeCanceled, "the context ended before the guarded write was sent, while the lock's heartbeat went first", context.Cause(ctx))
		}
		entered++
		if waited {
			if err := gl.guardable(); err != nil {
				return nil, err
			}
		}
	}
	req := *in
	req.TransactItems = make([]types.TransactWriteItem, 0, len(in.TransactItems)+len(locks))
	for _, gl := range locks {
		req.TransactItems = append(req.TransactItems, types.TransactWriteItem{ConditionCheck: gl.guardCheck()})
	}
	req.TransactItems = append(req.TransactItems, in.TransactItems...)
	if aws.ToString(req.ClientRequestToken) == "" {
		req.ClientRequestToken = aws.String(wire.NewRecordVersionNumber())
	}
	out, err := tw.TransactWriteItems(ctx, &req, append(c.callOpts("TransactWriteItems"), optFns...)...)
	if err == nil {
		return out, nil
	}
	return nil, guardedWriteError(ctx, locks, err, aws.ToString(req.ClientRequestToken))
}

// writeGate lets a lock's heartbeat through the holder's own guarded
// writes. DynamoDB refuses a heartbeat (an UpdateItem of the lock item)
// while a transaction that includes the item is under way, and every
// guarded write includes it. A holder writing back to back, from several
// goroutines, leaves no gap for its heartbeat to land in, so a refused
// heartbeat holds the gate: guarded writes not yet sent wait until the
// heartbeat is done, those in flight finish, and the heartbeat is sent
// again on an item no transaction of this holder is touching. One
// heartbeat of a lock is in flight at a time, so one holds the gate at
// most. The gate's mutex is a leaf: nothing is called under it.
type writeGate struct {
	mu      sync.Mutex
	writes  int           // guarded writes in flight
	held    chan struct{} // while a heartbeat holds the gate; closed when it lets go
	drained chan struct{} // closed once writes falls to 0 while held
}

// enter counts a guarded write in flight, after waiting, while a
// heartbeat holds the gate, for it to let go; waited says it did. It
// fails only when ctx ends first.
func (g *writeGate) enter(ctx context.Context) (waited bool, err error) {
	for {
		g.mu.Lock()
		held := g.held
		if held == nil {
			g.writes++
			g.mu.Unlock()
			return waited, nil
		}
		g.mu.Unlock()
		waited = true
		select {
		case <-held:
		case <-ctx.Done():
			return waited, ctx.Err()
		}
	}
}

// leave counts a guarded write done.
func (g *writeGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes--
	if g.writes == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// hold holds guarded writes back until release is called, and returns a
// channel closed once those in flight have finished.
func (g *writeGate) hold() (drained <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	held, d := make(chan struct{}), make(chan struct{})
	g.held = held
	if g.writes == 0 {
		close(d)
	} else {
		g.drained = d
	}
	return d, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.held == held {
			g.held, g.drained = nil, nil
		}
		close(held)
	}
}

// checkGuardedInput refuses what DynamoDB would refuse, or worse accept
// in a way the caller did not mean, before anything is sent.
func checkGuardedInput(locks []*Lock, in *dynamodb.TransactWriteItemsInput) error {
	if in == nil {
		return invalidArg("TransactWriteItemsInput", "must not be nil")
	}
	n := len(in.TransactItems)
	if n == 0 {
		return invalidArg("TransactItems", "nothing to write: give at least one action")
	}
	if limit := MaxGuardedActions + 1 - len(locks); n > limit {
		return invalidArg("TransactItems", fmt.Sprintf("%d actions: a write guarded by %d locks takes at most %d (DynamoDB's 100 a transaction, less a guard per lock)", n, len(locks), limit))
	}
	for i, a := range in.TransactItems {
		table, key, kinds := guardedAction(a)
		setting := fmt.Sprintf("TransactItems[%d]", i)
		if kinds != 1 {
			return invalidArg(setting, fmt.Sprintf("sets %d of Put, Update, Delete and ConditionCheck: exactly one, please", kinds))
		}
		for _, l := range locks {
			if table == l.client.opts.TableName && sameKey(key, l.client.codec.key(l.pk, l.sk)) {
				return invalidArg(setting, "acts on a lock item itself: DynamoDB refuses two actions on one item in a transaction, and the guard is one")
			}
		}
	}
	return nil
}

// guardedAction returns an action's table and key, and how many kinds of
// action it sets.
func guardedAction(a types.TransactWriteItem) (table string, key map[string]types.AttributeValue, kinds int) {
	if a.Put != nil {
		kinds++
		table, key = aws.ToString(a.Put.TableName), a.Put.Item
	}
	if a.Update != nil {
		kinds++
		table, key = aws.ToString(a.Update.TableName), a.Update.Key
	}
	if a.Delete != nil {
		kinds++
		table, key = aws.ToString(a.Delete.TableName), a.Delete.Key
	}
	if a.ConditionCheck != nil {
		kinds++
		table, key = aws.ToString(a.ConditionCheck.TableName), a.ConditionCheck.Key
	}
	return table, key, kinds
}

// sameKey reports whether item (a key, or a whole item for a Put) has
// every attribute of key with an equal string value.
func sameKey(item, key map[string]types.AttributeValue) bool {
	for name, v := range key {
		want, ok1 := v.(*types.AttributeValueMemberS)
		got, ok2 := item[name].(*types.AttributeValueMemberS)
		if !ok1 || !ok2 || want.Value != got.Value {
			return false
		}
	}
	return true
}

// guardedWriteError explains a failed TransactWriteItems. The answer is
// the SDK's last attempt's, and an earlier attempt of the same call may
// have been sent and lost. A cancellation still says what happened,
// because every attempt carries the same ClientRequestToken: DynamoDB
// answers a repeat of a transaction that committed with success, and of
// one still under way with TransactionInProgressException, so a
// cancellation on a later attempt means no attempt committed. (A fault
// proxy that makes up a cancellation without asking the server breaks
// this; real DynamoDB and DynamoDB Local do not.) Any other last answer
// (a failed dial, a throttle) says nothing of an earlier attempt that was
// sent and lost: the call's options judge every attempt
// (wire.JudgeAttempts), and such a call is OUTCOME_UNKNOWN.
func guardedWriteError(ctx context.Context, locks []*Lock, err error, token string) error {
	l := locks[0]
	gw := &GuardedWriteError{Action: -1, RequestToken: token, Err: err}
	if reasons, ok := wire.CancellationReasons(err); ok && len(reasons) > len(locks) {
		guards := reasons[:len(locks)]
		gw.Reasons = reasons[len(locks):]
		conflict := false
		for i, guard := range guards {
			switch aws.ToString(guard.Code) {
			case "ConditionalCheckFailed":
				gw.GuardReason = &guards[i]
				locks[i].guardFailed(guard.Item, err)
				return locks[i].lockError(CodeLockNotHeld, "the lock item no longer names this tenure: nothing was written", gw)
			case "TransactionConflict":
				conflict = true
			}
		}
		gw.GuardReason = &guards[0]
		for i, r := range gw.Reasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				gw.Action = i
				return l.lockError(CodeWriteConditionFailed, fmt.Sprintf("the condition of action %d failed: nothing was written", i), gw)
			case "TransactionConflict":
				conflict = true
			}
		}
		if conflict {
			return l.lockError(CodeTransactionConflict, "another write to one of its items was under way: nothing was written; retry after a short back-off", gw)
		}
		return l.lockError(CodeUnknown, "DynamoDB cancelled the transaction: "+reasonCodes(gw.Reasons), gw)
	}
	var conflict *types.TransactionConflictException
	if errors.As(err, &conflict) {
		return l.lockError(CodeTransactionConflict, "another transaction on one of its items was under way: nothing was written; retry after a short back-off", gw)
	}
	var inProgress *types.TransactionInProgressException
	if errors.As(err, &inProgress) {
		return l.lockError(CodeOutcomeUnknown, "a transaction with this request token is still under way: send it again later to learn its outcome", gw)
	}
	var mismatch *types.IdempotentParameterMismatchException
	if errors.As(err, &mismatch) {
		e := l.lockError(CodeInvalidArgument, "the request token was used within ten minutes for a transaction with other parameters", gw)
		e.Setting = "ClientRequestToken"
		return e
	}
	if wire.UnsupportedOperation(err) {
		return l.lockError(CodeTransactionsUnsupported, "the server does not implement TransactWriteItems (dynalite does not)", gw)
	}
	if wire.NeverSent(err) {
		return l.lockError(CodeUnknown, "the request could not be sent: nothing was written", gw)
	}
	if wire.OutcomeUnknown(err) {
		if ctx.Err() != nil {
			return l.lockError(CodeOutcomeUnknown, "the context ended while the transaction was under way: it may have committed; send it again with the same request token to learn which", gw)
		}
		return l.lockError(CodeOutcomeUnknown, "no answer: the transaction may have committed; send it again with the same request token to learn which", gw)
	}
	if ctx.Err() != nil {
		return l.lockError(CodeCanceled, "the context ended before the guarded write was sent", gw)
	}
	return l.lockError(callCode(err), "the guarded write failed", gw)
}

func reasonCodes(rs []types.CancellationReason) string {
	codes := make([]string, len(rs))
	for i, r := range rs {
		codes[i] = aws.ToString(r.Code)
		if codes[i] == "" {
			codes[i] = "None"
		}
	}
	return strings.Join(codes, ", ")
}

// guardFailed marks the lock stolen when the item the failed guard saw
// shows another acquisition of the key: another tenure or owner. For a
// lock on a session that is the only way to learn it, since its own item
// is never heartbeated. An item that is gone proves less (it may be this
// lock's own release under way), and leaves the lock to its heartbeats
// and its release.
func (l *Lock) guardFailed(item map[string]types.AttributeValue, cause error) {
	if len(item) == 0 {
		return
	}
	tenure, _ := item[attrTenure].(*types.AttributeValueMemberS)
	owner, _ := item[attrOwnerName].(*types.AttributeValueMemberS)
	if tenure != nil && tenure.Value == l.tenure && owner != nil && owner.Value == l.owner {
		return // our tenure, released and kept: the release reports it
	}
	l.mu.Lock()
	defer l.unlock()
	l.markStolenLocked("a guarded write found another acquisition of the key", cause)
}
