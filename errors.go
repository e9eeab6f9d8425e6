package ddblock

import (
	"context"
	"errors"
	"strings"

	"github.com/ddblock/ddblock/internal/wire"
)

// Code says what kind of failure an [Error] reports. The first six are
// python_dynamodb_lock's codes, spelled as Python spells them; the rest
// are ddblock's own.
type Code string

// Error makes a code an error value to match with errors.Is: every
// [Error] of the code matches it, however wrapped (errors.Is(err,
// ddblock.CodeLockNotFound)). It is the code itself, as fmt prints it;
// ddblock never returns a bare Code.
func (c Code) Error() string { return string(c) }

// Python's codes.
const (
	// CodeClientShutdown: the client was closed.
	CodeClientShutdown Code = "CLIENT_SHUTDOWN"
	// CodeAcquireTimeout: the lock was not acquired within the retry timeout.
	CodeAcquireTimeout Code = "ACQUIRE_TIMEOUT"
	// CodeLockNotOwned: the lock is not held by this client.
	CodeLockNotOwned Code = "LOCK_NOT_OWNED"
	// CodeLockStolen: another client took the lock (its record version
	// number changed under us).
	CodeLockStolen Code = "LOCK_STOLEN"
	// CodeLockInDanger: the lock went longer than the safe period without
	// a successful heartbeat; another client may take it soon.
	CodeLockInDanger Code = "LOCK_IN_DANGER"
	// CodeUnknown: any other failure; the cause is wrapped.
	CodeUnknown Code = "UNKNOWN"
)

// ddblock's own codes.
const (
	// CodeCanceled: the caller's context was cancelled during a wait, or
	// (for Close, which has no timeout code of its own) its deadline
	// passed. The error also matches context.Canceled or
	// context.DeadlineExceeded (or the context's cause) with errors.Is.
	CodeCanceled Code = "CANCELED"
	// CodeInvalidArgument: a setting or argument that cannot work.
	CodeInvalidArgument Code = "INVALID_ARGUMENT"
	// CodeLockReleased: the lock was released by its holder. It is the
	// reason [Lock.Err] gives after a release, never an error of Release.
	CodeLockReleased Code = "LOCK_RELEASED"
	// CodeLockRecovered: a lock that was in danger was heartbeated again
	// before anyone took it over. It is an event code for callbacks only.
	CodeLockRecovered Code = "LOCK_RECOVERED"
	// CodeLockHeld: TryAcquireLock found the lock held by someone else.
	CodeLockHeld Code = "LOCK_HELD"
	// CodeLockNotFound: no lock item exists for the key.
	CodeLockNotFound Code = "LOCK_NOT_FOUND"
	// CodeInvalidItem: an item in the table is not a lock item this
	// library can read (a missing or mistyped attribute).
	CodeInvalidItem Code = "INVALID_ITEM"
	// CodeTableNotFound: the lock table does not exist.
	CodeTableNotFound Code = "TABLE_NOT_FOUND"
	// CodeTableMismatch: the table exists but its key schema differs from
	// the client's settings.
	CodeTableMismatch Code = "TABLE_MISMATCH"
	// CodeSemaphoreMismatch: a semaphore's metadata item holds another
	// number of slots than the one asked for (see [Semaphore]).
	CodeSemaphoreMismatch Code = "SEMAPHORE_MISMATCH"
	// CodeTTLUnsupported: the server does not implement UpdateTimeToLive.
	// The table was created and is usable; expired items are not cleaned
	// up by the server.
	CodeTTLUnsupported Code = "TTL_UNSUPPORTED"
)

// The codes of guarded writes (see [Lock.GuardedWrite]).
const (
	// CodeLockNotHeld: a guarded write found the lock not held (known
	// lost beforehand, or the guard's condition failed), so nothing was
	// written.
	CodeLockNotHeld Code = "LOCK_NOT_HELD"
	// CodeWriteConditionFailed: the guard held, but the condition of one
	// of the caller's own actions failed, so nothing was written.
	CodeWriteConditionFailed Code = "WRITE_CONDITION_FAILED"
	// CodeTransactionConflict: DynamoDB cancelled the transaction because
	// another write to one of its items was under way; nothing was
	// written, and the same call may be retried.
	CodeTransactionConflict Code = "TRANSACTION_CONFLICT"
	// CodeOutcomeUnknown: no answer came, so the write may or may not
	// have been applied.
	CodeOutcomeUnknown Code = "OUTCOME_UNKNOWN"
	// CodeTransactionsUnsupported: the server, or the DynamoDBAPI given
	// to New, has no TransactWriteItems.
	CodeTransactionsUnsupported Code = "TRANSACTIONS_UNSUPPORTED"
)

// ddblock's codes for tables that cannot hold a lock safely.
const (
	// CodeTableUnsafe: the table cannot hold a lock safely. A global table
	// replicated with multi-Region eventual consistency (MREC) lets
	// clients writing in two regions both take the same lock; EnsureTable
	// and Client.CheckTable refuse it unless the table options say that
	// every client writes through one region
	// ([WithSingleRegionWrites]).
	CodeTableUnsafe Code = "TABLE_UNSAFE"
)

// A client never waits on itself.
const (
	// CodeAlreadyHeld: AcquireLock or TryAcquireLock asked for a lock
	// (partition key and sort key) that this client holds already. It
	// is answered at once: waiting could only end in ACQUIRE_TIMEOUT.
	// The held lock is untouched; find it with [Client.HeldLocks].
	// [Election.Campaign] answers it too while the Election leads.
	CodeAlreadyHeld Code = "ALREADY_HELD"
)

// A refusal is not a failure to wait through.
const (
	// CodeAccessDenied: AWS refused a call for want of permission (an IAM
	// policy that does not allow the action: AccessDeniedException) or
	// of valid credentials (expired, unknown or badly signed:
	// ExpiredTokenException, UnrecognizedClientException,
	// InvalidSignatureException, …). The cause is the SDK's error,
	// whose text names the operation and carries AWS's message, which
	// for a refused permission names the action (such as
	// dynamodb:PutItem) and the resource. Asking again cannot help, so
	// no wait goes on through it: AcquireLock, TryAcquireLock,
	// Semaphore.Acquire, fair waiting, Election.Campaign and
	// Election.Run all end with it at once.
	CodeAccessDenied Code = "ACCESS_DENIED"
)

// A limit the client cannot go past without putting its locks at risk.
const (
	// CodeTooManyLocks: an acquire was refused because the client holds
	// as many locks as its heartbeats can keep: with an explicit
	// [Options.HeartbeatTPS] it sends at most HeartbeatTPS ×
	// HeartbeatPeriod heartbeats a period, one per lock, and a lock
	// more would make every lock's heartbeats late. It is answered at
	// once, before any call, and nothing was written. Release a lock,
	// raise HeartbeatTPS, leave it adaptive (-1, the default, which
	// has no such limit), or use [WithSessionLease], whose one
	// heartbeat covers every lock.
	CodeTooManyLocks Code = "TOO_MANY_LOCKS"
)

// Error is the one error type ddblock returns. Match a kind with
// errors.Is against its code (errors.Is(err, ddblock.CodeAcquireTimeout)),
// or read the fields with errors.As:
//
//	var lerr *ddblock.Error
//	if errors.As(err, &lerr) && lerr.Code == ddblock.CodeAcquireTimeout { … }
//
// Unwrap reaches the cause: an AWS SDK error, or the context's error when
// a wait was cancelled.
type Error struct {
	// Code is the kind of failure.
	Code Code
	// Message says what happened, for people.
	Message string
	// PartitionKey and SortKey name the lock, when there is one.
	PartitionKey, SortKey string
	// Setting names the option or argument that was refused
	// (CodeInvalidArgument only).
	Setting string
	// Err is the cause, if any.
	Err error
}

// Error formats the error as "ddblock: CODE: message (key "pk"/"sk"): cause".
func (e *Error) Error() string {
	if e == nil {
		return "ddblock: <nil>"
	}
	var b strings.Builder
	b.WriteString("ddblock: ")
	b.WriteString(string(e.Code))
	if e.Setting != "" {
		b.WriteString(": ")
		b.WriteString(e.Setting)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.PartitionKey != "" || e.SortKey != "" {
		b.WriteString(" (key ")
		b.WriteString(quoteKey(e.PartitionKey))
		b.WriteString("/")
		b.WriteString(quoteKey(e.SortKey))
		b.WriteString(")")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Err
}

// Is reports whether target is e's code, so that
// errors.Is(err, ddblock.CodeAcquireTimeout) works through any wrapping.
func (e *Error) Is(target error) bool {
	if e == nil {
		return false
	}
	c, ok := target.(Code)
	return ok && c == e.Code
}

// callCode is the code of a DynamoDB call's failure that nothing more
// precise explains: CodeAccessDenied when AWS refused the permission or
// the credentials, CodeUnknown otherwise.
func callCode(err error) Code {
	if wire.AccessDenied(err) {
		return CodeAccessDenied
	}
	return CodeUnknown
}

// CodeOf returns the code of the first *Error in err's chain, or "" when
// there is none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// checkContext refuses a nil context, which the standard library would
// dereference deep inside a call, before anything changes.
func checkContext(ctx context.Context) error {
	if ctx == nil {
		return invalidArg("Context", "must not be nil (use context.Background() or context.TODO())")
	}
	return nil
}

func invalidArg(setting, msg string) *Error {
	return &Error{Code: CodeInvalidArgument, Setting: setting, Message: msg}
}

func quoteKey(s string) string {
	if len(s) > 64 {
		s = s[:61] + "..."
	}
	return `"` + s + `"`
}
