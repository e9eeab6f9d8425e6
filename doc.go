// Package ddblock provides distributed locks on Amazon DynamoDB, for
// mutual exclusion and leader election across hosts with nothing but an
// AWS account.
//
// It is a faithful Go port of Python's python_dynamodb_lock: the same
// table, the same item, the same timing rules and defaults, so that a
// Python service and a Go service can share one lock table, during a
// migration or for good, and never both hold a lock.
//
// # Getting a lock
//
// Create one [Client] per process with [New], around a *dynamodb.Client,
// and close it with [Client.Close] on the way out. [Client.AcquireLock]
// waits for the lock and returns a [*Lock]; [Lock.Release] gives it back.
// [Client.WithLock] does both around a function, like Python's `with`
// block.
//
// # Settings
//
// [New] takes [Option] values over python_dynamodb_lock's defaults, and
// resolves them once, after the last: their order never matters. The
// durations follow each other by one rule (see [Options]): set the lease
// alone, and the heartbeat period and safe period are a sixth and two
// thirds of it, as Python's 5 s, 20 s and 30 s are. Settings set together
// are checked together, and a contradiction is refused with an error
// naming both settings. See [Options].
//
// # How a lock stays safe
//
// A lock is an item in the table, keyed by a partition key and a sort key
// (default "-"). The holder rewrites the item's record version number
// every heartbeat period (default 5 s). A client that finds the lock held
// remembers the version number it saw and when, on its own monotonic
// clock; once the same number has stood unchanged for the lease duration
// written in the item (default 30 s), it presumes the holder dead and
// takes the lock over with a write conditioned on that number. No wall
// clock is compared across hosts.
//
// The holder, in turn, is told to stop working once its safe period
// (default 20 s) passes without a successful heartbeat: well before any
// other client may take over. It can be told in three ways, use whichever
// fits:
//
//   - [Lock.Done] closes, and [Lock.Err] says why (released, stolen, in
//     danger, client closed); [Lock.Err] also checks the clock itself, so
//     it is right even the instant a paused process wakes up;
//   - the context given to [Client.WithLock]'s function, or made by
//     [Lock.Context], is cancelled with the lock error as its cause;
//   - the callback set with [WithCallback] is called with
//     [CodeLockInDanger] or [CodeLockStolen], as Python's app_callback is.
//
// Unlike Python, a lock in danger is still heartbeated; if a heartbeat
// succeeds before anyone takes the lock over, the lock returns to
// [StatusLocked] and the callback hears [CodeLockRecovered]. [Lock.Done]
// stays closed: work that stopped must be restarted deliberately, under a
// fresh check of [Lock.Status].
//
// # Guarded writes
//
// Every way of being told comes a little late for a holder that was
// paused between its last look and its write. Where the work under the
// lock is writing DynamoDB items, close that window with
// [Lock.GuardedWrite]: it runs your Put, Update, Delete and
// ConditionCheck actions in one DynamoDB transaction with a check that
// the lock item still names this holder's tenure (see [Lock.Tenure]), so
// that they commit only while the lock is held, as DynamoDB orders
// things, whatever the holder's clock says. [Lock.Guard] gives the check
// alone, for a transaction of your own. A failed guard is
// [CodeLockNotHeld]. doc/guarded-writes.md states the guarantee and its
// limits.
//
// # Elections and semaphores
//
// [Client.NewElection] gives a leader election under one name, and
// [Client.NewSemaphore] a counting semaphore: at most N holders of a name
// at once, each holding one of its N slots. Both are built of ordinary
// lock items, so a leadership and a held slot are locks in every respect;
// see doc/election.md.
//
// # Session leases
//
// With [WithSessionLease] a client keeps one session item alive instead
// of each lock: one heartbeat write a period per client, whatever the
// number of locks it holds. Each lock is written once, naming the
// session; others take it over only after the session item (or its
// absence) stood unchanged for the session's lease. A session in danger
// puts every lock on it in danger; a lost session loses them all. For
// tables that only ddblock clients contend on; see doc/sessions.md.
//
// # Background work
//
// A client runs a fixed set of goroutines, whatever the number of locks:
// one heartbeat scheduler, which spreads each period's heartbeats evenly
// over the period (or paces them at [Options.HeartbeatTPS]) with a bounded
// number of calls in flight; one safety monitor; and a small pool of
// callback workers. [Client.Close] stops them all and waits for them, or
// for as long as its context allows: callbacks still running then are the
// application's, and no callback starts after Close has returned. Locks
// that Close keeps (as Python's close does by default) stay held until
// their lease runs out or they are released.
//
// # Errors
//
// Every error is an [*Error] with a [Code]: Python's six codes
// (CLIENT_SHUTDOWN, ACQUIRE_TIMEOUT, LOCK_NOT_OWNED, LOCK_STOLEN,
// LOCK_IN_DANGER, UNKNOWN) and a few of ddblock's own. Match them with
// errors.Is against the code (errors.Is(err, ddblock.CodeLockStolen));
// the cause, such as an AWS SDK
// error or the context's error, is reachable with errors.As and
// errors.Is. Bad arguments, a nil context included, give
// [CodeInvalidArgument] before anything changes, never a panic.
//
// # The table
//
// [CreateTable] makes a table as Python's create_dynamodb_table does: a
// string partition key "lock_key", a string sort key "sort_key", TTL on
// "expiry_time".
package ddblock
