package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
	locktiming "github.com/ddblock/ddblock/internal/timing"
)

const runAbout = `
Waits for the lock on KEY, runs COMMAND while heartbeating the lock, and
releases it when COMMAND ends. ddblock exits with COMMAND's status. Write
-- between KEY and COMMAND when COMMAND has flags of its own; a -- before
KEY is refused, so that a forgotten KEY cannot turn COMMAND into the key.

While it waits, ddblock says on stderr who holds the lock. With --wait 0 it
tries once. A holder that died is taken over once its lease has passed
without a heartbeat, so give --wait at least the holder's lease (the
default) if crashed holders must not block later runs.

With --slots N, KEY names a counting semaphore of N slots instead: ddblock
waits for any free slot of KEY and runs COMMAND while holding it, so that
at most N commands run at once under KEY across every host. A slot is an
ordinary lock (sort key slot-I under KEY; partition key KEY#slot-I with
--partition-key-only), guarded, heartbeated and released as above, and
DDBLOCK_SLOT gives COMMAND its index, 0 to N-1. Every run on KEY must
give the same N: the first writes it in the table, and a run with
another N is refused with exit status 78.

With --fair, ddblock waits in the key's line (the semaphore's, with
--slots): among the runs and library clients that wait fairly for KEY, the
lock goes to the one that came first. Waiters that do not wait in line
(runs without --fair, Python clients) may still take it ahead of the line;
two holders at once are never possible. A waiter killed or paused while
first in line loses its place after a few retry periods. 'ddblock ls'
shows how many wait in line. With --wait 0 the run tries once without
reading the line, like a run without --fair: a try does not wait, so it
takes no place in line, and takes a free lock whoever waits in line. See
doc/waiting.md.

With --session, the lock (or slot) is attached to a session item of its
own (partition key ddblock_session#<random>): the lock item is written
once, with a year-long lease that clients without sessions (Python's)
honour, and ddblock heartbeats the session item instead. Others take the
lock over once the lock and its session item stood unchanged (or the
session item gone) for --lease. The guard, the timing and the exit
statuses are as without it. A normal end deletes the lock and the session
item; a killed run leaves both, and waiters take the lock over after
--lease. 'ddblock ls' and 'ddblock get' show the session; 'ddblock release
--force --with-session KEY' removes such a lock by hand.

With --key K (repeatable), the run holds KEY and each K together, all or
none, in one DynamoDB transaction (TransactWriteItems): each an ordinary
lock item under the same --sort-key. While it waits it holds none, and
says who holds which. COMMAND is safe only while every lock is: the
guard's deadline is the earliest of theirs, and one lock lost stops
COMMAND (exit 76). A server without transactions (dynalite) is refused
with exit 69, nothing written. A key named twice, more than 100 keys, or
--key with --slots is exit 64. With --fair the run waits its turn in
each key's line, in one order for every run (see doc/waiting.md).

COMMAND runs in its own process group, with the lock in its environment:
  DDBLOCK_KEY, DDBLOCK_SORT_KEY   the lock's key (no sort key: empty)
  DDBLOCK_OWNER                   the owner name written in the lock
  DDBLOCK_TABLE                   the lock table
  DDBLOCK_PARTITION_KEY_NAME      the table's key attributes (no sort key:
  DDBLOCK_SORT_KEY_NAME           empty)
  DDBLOCK_TENURE                  this acquisition's tenure, written in the
                                  lock (heartbeats keep it)
  DDBLOCK_GUARD_CHECK             the guard for the command's own DynamoDB
                                  writes: a ConditionCheck on the lock item,
                                  as JSON for one element of 'aws dynamodb
                                  transact-write-items --transact-items'
  DDBLOCK_RECORD_VERSION_NUMBER   the version when the lock was taken
                                  (every heartbeat changes it)
  DDBLOCK_FENCING_TOKEN           the lock's fencing token, if it has one
  DDBLOCK_TAKEN_OVER_FROM         the owner of the lock item taken over from
                                  a holder presumed dead; unset otherwise
  DDBLOCK_ENCODED                 set when DDBLOCK_TAKEN_OVER_FROM holds a
                                  NUL, which no environment can: it then
                                  names it, percent-encoded (%00, %25)
  DDBLOCK_SLOT                    with --slots, the slot held (0 to N-1)
  DDBLOCK_SESSION_KEY             with --session, the session item's
                                  partition key
With --key, the variables above are KEY's lock's, and for each key I,
0 (KEY) to N-1 in the order given:
  DDBLOCK_KEYS                    N, the number of keys
  DDBLOCK_KEY_I, DDBLOCK_TENURE_I, DDBLOCK_GUARD_CHECK_I,
  DDBLOCK_RECORD_VERSION_NUMBER_I, DDBLOCK_FENCING_TOKEN_I,
  DDBLOCK_TAKEN_OVER_FROM_I       as above, of key I's lock
  DDBLOCK_GUARD_CHECKS            every guard, a JSON array for
                                  --transact-items: append the command's
                                  own actions to it
  DDBLOCK_ENCODED                 then names each encoded variable,
                                  space-separated
SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to ddblock are
passed to COMMAND's process group.

A write made in one transaction with DDBLOCK_GUARD_CHECK lands only if
the lock item still names this run's owner and tenure, unreleased, when
it commits: never after the lock was lost, however late it arrives. The
condition: #own = :own AND #ten = :ten AND attribute_not_exists(#rel),
#own owner_name, #ten ddblock_tenure, #rel ddblock_released, :own
DDBLOCK_OWNER, :ten DDBLOCK_TENURE, on the lock item's key. A lost lock
fails it with TransactionCanceledException, the first reason
ConditionalCheckFailed.

COMMAND is started and watched by a guard: a second ddblock process, told
after every successful heartbeat until when the lock is safe (the
heartbeat's send time plus --safe). When that moment passes without a
newer heartbeat, the guard sends COMMAND's process group SIGTERM, then
SIGKILL after --grace, on its own clock: COMMAND stops in time even if
ddblock itself is stopped, starved of CPU, or blocked on a full stderr.
If ddblock dies, the guard kills COMMAND's group at once; if the guard
dies, COMMAND is killed and the lock released.

If the lock goes into danger (no successful heartbeat for --safe), is
stolen, or is not renewed in time, COMMAND's process group gets SIGTERM,
then SIGKILL after --grace, and ddblock exits 76. Timing: --heartbeat
defaults to lease/6 and --safe to lease*2/3; at least two heartbeats must
fit in the safe period, and --grace in the time between the safe period
and the lease, so that COMMAND is stopped before anyone else can take the
lock.

Exit statuses: COMMAND's (128+N when killed by signal N); 75 the lock was
not acquired within --wait (with --slots: no slot was free); 76 the lock
was lost while COMMAND ran; 126 COMMAND cannot be run; 127 COMMAND was not
found; 64 usage; 65 an item at KEY (or the semaphore's) that ddblock
cannot read, which it does not wait on: the message says how to clear
it; 69 DynamoDB unavailable (with --session, also: the
session's heartbeats were not landing at the end of --wait; with --key,
a server without transactions); 70 internal
error (the guard died); 77 AWS refused a permission or the credentials
(the message names the action); 78 the table's keys are not the ones configured,
or --slots differs from the semaphore's number of slots; 128+N
interrupted by signal N while waiting.`

// forwardedSignals are passed to the command; while ddblock waits for the
// lock they end the wait instead.
var forwardedSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2,
}

// releaseTimeout bounds the release after the command ended.
const releaseTimeout = 10 * time.Second

// holderReportInterval is how often a waiting run looks whether the lock
// changed hands, to say so.
const holderReportInterval = 10 * time.Second

// timing is a run's lock timing, checked.
type timing struct {
	lease, heartbeat, safe, grace time.Duration
}

// runTiming derives the unset durations (zero) from the lease, by
// the rule of ddblock.Options, as a library client does, and checks that the
// whole can keep the command safe.
func runTiming(lease, heartbeat, safe, grace time.Duration, graceSet bool) (timing, error) {
	if lease <= 0 {
		return timing{}, usageError("--lease must be positive, got %v", lease)
	}
	// The library's rule, so that a run and a client given the same lease
	// agree: a sixth and two thirds of it.
	derived, _ := locktiming.Derive(locktiming.Durations{LeaseDuration: lease, HeartbeatPeriod: heartbeat, SafePeriod: safe},
		ddblock.DefaultLeaseDuration, ddblock.DefaultExpiryPeriod)
	heartbeat, safe = derived.HeartbeatPeriod, derived.SafePeriod
	switch {
	case heartbeat <= 0:
		return timing{}, usageError("--heartbeat must be positive, got %v", heartbeat)
	case safe <= 0:
		return timing{}, usageError("--safe must be positive, got %v", safe)
	case safe >= lease:
		return timing{}, usageError("--safe %v must be shorter than --lease %v", safe, lease)
	case 2*heartbeat > safe:
		return timing{}, usageError("--heartbeat %v is too long for a safe period of %v: at least two heartbeats must fit in it (lower --heartbeat or raise --lease)", heartbeat, safe)
	}
	margin := lease - safe
	if !graceSet {
		grace = margin / 2
	}
	switch {
	case grace < 0:
		return timing{}, usageError("--grace must not be negative, got %v", grace)
	case grace > margin:
		return timing{}, usageError("--grace %v is longer than the %v between the safe period and the lease: someone else could take the lock before the command is stopped", grace, margin)
	}
	return timing{lease: lease, heartbeat: heartbeat, safe: safe, grace: grace}, nil
}

// runner is one `ddblock run`.
type runner struct {
	env     *environ
	conn    connFlags
	client  *ddblock.Client
	key     string
	sortKey string
	wait    time.Duration
	lease   time.Duration
	attrs   map[string]types.AttributeValue
	sigs    chan os.Signal
	// slots, when positive, makes KEY a semaphore of that many slots,
	// sem; the lock is then one of its slots.
	slots int
	sem   *ddblock.Semaphore
	// fair: wait in the key's line of fair waiters.
	fair bool
	// keys are every key the run holds, KEY first: more than one with
	// --key, taken together, all or none (Client.AcquireLocks).
	keys []string
}

// held is what a run holds: one lock, or with several keys the set taken
// together.
type held struct {
	locks []*ddblock.Lock  // in the keys' order
	set   *ddblock.LockSet // with several keys: the set the locks came in
}

// multi reports whether the run holds several keys together.
func (r *runner) multi() bool { return len(r.keys) > 1 }

// keysFlag collects repeated --key flags.
type keysFlag []string

func (k *keysFlag) String() string { return strings.Join(*k, " ") }

func (k *keysFlag) Set(s string) error {
	*k = append(*k, s)
	return nil
}

func cmdRun(ctx context.Context, env *environ, args []string) error {
	r := &runner{env: env}
	var (
		lease, heartbeat, safe, grace time.Duration
		owner                         string
		fencing                       bool
		session                       bool
		fair                          bool
		maxSkew                       time.Duration
		attrs                         = attrFlag{}
		moreKeys                      keysFlag
	)
	f := newFlags(env, "run", "run [flags] KEY [--] COMMAND [ARG...]", runAbout)
	r.conn.register(f)
	r.conn.sortKeyVar(&r.sortKey)
	f.DurationVar(&lease, "lease", ddblock.DefaultLeaseDuration, "how long others wait on a silent holder before taking the lock over")
	f.DurationVar(&heartbeat, "heartbeat", 0, "how often the lock is heartbeated (default lease/6)")
	f.DurationVar(&safe, "safe", 0, "how long without a successful heartbeat before the lock is in danger\nand the command is stopped (default lease*2/3)")
	f.DurationVar(&r.wait, "wait", 0, "how long to wait for the lock; 0 tries once (default lease+heartbeat)")
	f.DurationVar(&grace, "grace", 0, "after the lock is lost, how long between SIGTERM and SIGKILL\n(default half the time between --safe and --lease)")
	f.StringVar(&owner, "owner", "", "`owner` name written in the lock (default: host name and a random suffix)")
	f.BoolVar(&fencing, "fencing-token", false, "write a fencing token with the lock and give it to the command as\nDDBLOCK_FENCING_TOKEN (released items then stay in the table, marked released)")
	f.DurationVar(&maxSkew, "max-clock-skew", 0, "take over a crashed holder's lock as soon as its wall-clock stamp plus its\nlease plus this has passed, instead of watching it for a whole lease; and\nstamp this lock so others can do the same. Safe only if no two hosts'\nclocks differ by more (0: off)")
	f.Var(attrs, "attr", "additional attribute `NAME=VALUE` stored with the lock, as a string (repeatable)")
	f.BoolVar(&session, "session", false, "attach the lock to a session item of its own and heartbeat that\ninstead of the lock (see above)")
	f.BoolVar(&fair, "fair", false, "wait in line: among runs (and library clients) that wait fairly for KEY,\nthe lock (or a slot) goes to the one that came first (see above)")
	f.Var(&moreKeys, "key", "another `KEY` to hold with the first, all or none (repeatable; see above)")
	f.IntVar(&r.slots, "slots", 0, "hold one of `N` slots of the semaphore KEY: at most N commands at once\n(0: KEY is a plain lock)")
	pos, command, err := f.parse(args, 1, true, "KEY")
	if err != nil {
		return err
	}
	r.key = pos[0]
	r.keys = append([]string{r.key}, moreKeys...)
	if len(command) == 0 {
		return usageError("missing COMMAND (see ddblock run --help)")
	}
	if err := r.conn.check(); err != nil {
		return err
	}
	if f.isSet("slots") {
		if r.slots < 1 || r.slots > ddblock.MaxSemaphoreSlots {
			return usageError("--slots must be from 1 to %d, got %d", ddblock.MaxSemaphoreSlots, r.slots)
		}
		if f.isSet("sort-key") {
			return usageError("--sort-key does not apply with --slots: the semaphore names its slots' keys")
		}
	}
	if r.sortKey, err = r.conn.lockKey(r.key, r.sortKey); err != nil {
		return err
	}
	if err := r.checkKeys(); err != nil {
		return err
	}
	if err := nonNegative("wait", r.wait); err != nil {
		return err
	}
	if err := nonNegative("max-clock-skew", maxSkew); err != nil {
		return err
	}
	tm, err := runTiming(lease, heartbeat, safe, grace, f.isSet("grace"))
	if err != nil {
		return err
	}
	if !f.isSet("wait") {
		r.wait = tm.lease + tm.heartbeat
	}
	r.lease = tm.lease
	r.fair = fair
	for k, v := range attrs {
		if r.attrs == nil {
			r.attrs = map[string]types.AttributeValue{}
		}
		r.attrs[k] = &types.AttributeValueMemberS{Value: v}
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		// Not on PATH, or a path to nothing: the shell's 127.
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fail(exitCommandNotFound, "command not found: %s", command[0])
		}
		return fail(exitCannotExecute, "cannot run %s: %v", command[0], err)
	}
	if r.env.self == "" {
		return fail(exitInternal, "cannot find the ddblock binary to start the guard of the command")
	}
	// A stderr whose reader went away must not end ddblock (and with it
	// the command), nor change its exit status as it says its last word:
	// its writes then fail quietly, until the process ends. Catching
	// SIGPIPE, rather than ignoring it, leaves the command's own SIGPIPE
	// as it was.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)

	// Catch the signals before anything can be held, so that none is lost
	// between taking the lock and starting the command.
	r.sigs = make(chan os.Signal, 16)
	signal.Notify(r.sigs, forwardedSignals...)
	defer signal.Stop(r.sigs)

	opts := []ddblock.Option{
		// The guard reads the same clock (see machineClock).
		hooks.Option[ddblock.Option](newMachineClock()),
		ddblock.WithLeaseDuration(tm.lease),
		ddblock.WithHeartbeatPeriod(tm.heartbeat),
		ddblock.WithSafePeriod(tm.safe),
	}
	if owner != "" {
		opts = append(opts, ddblock.WithOwnerName(owner))
	}
	if fencing {
		opts = append(opts, ddblock.WithFencingTokens())
	}
	if session {
		// The lock's last heartbeat follows the session item's heartbeats,
		// so the guard's deadline does too.
		opts = append(opts, ddblock.WithSessionLease())
	}
	if maxSkew > 0 {
		opts = append(opts, ddblock.WithMaxClockSkew(maxSkew))
	}
	r.client, err = r.conn.client(ctx, logger(env.stderr), opts...)
	if err != nil {
		return err
	}
	if session {
		// By the time the client closes, the command has ended and the
		// lock is released (or could not be): the session item goes too,
		// rather than being left for waiters to time out.
		defer closeClientEndingSession(r.client)
	} else {
		defer closeClient(r.client)
	}
	if r.slots > 0 {
		if r.sem, err = r.client.NewSemaphore(r.key, r.slots); err != nil {
			return r.acquireError(err)
		}
	}

	h, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	return r.supervise(h, path, command, tm)
}

// checkKeys refuses, before anything is sent, the keys given with --key
// that cannot be held with KEY. How many keys one run may hold is the
// library's limit: it refuses more (exit 64) before any call.
func (r *runner) checkKeys() error {
	if !r.multi() {
		return nil
	}
	if r.slots > 0 {
		return usageError("--key does not apply with --slots: a run holds one slot of one semaphore")
	}
	seen := map[string]bool{}
	for _, k := range r.keys {
		if err := checkKeyValue("--key", k, maxPartitionKeyBytes); err != nil {
			return err
		}
		if seen[k] {
			return usageError("key %s is named twice", strconv.Quote(k))
		}
		seen[k] = true
	}
	return nil
}

// acquire waits for the lock; a forwarded signal ends the wait.
func (r *runner) acquire(ctx context.Context) (held, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		h   held
		err error
	}
	done := make(chan result, 1)
	go func() {
		h, err := r.waitForLock(ctx)
		done <- result{h, err}
	}()
	select {
	case res := <-done:
		return res.h, res.err
	case sig := <-r.sigs:
		cancel()
		if res := <-done; res.h.locks != nil {
			r.release(res.h, false)
		}
		return held{}, fail(signalStatus(sig), "interrupted by %v while waiting for %s", sig, r.subject())
	}
}

// inLine is how many wait in the key's line, with --fair; 0 without.
func (r *runner) inLine(ctx context.Context) (int, error) {
	if !r.fair {
		return 0, nil
	}
	var line *hooks.LineInfo
	var err error
	if r.sem != nil {
		line, err = hooks.SemaphoreLine(ctx, r.sem)
	} else {
		line, err = hooks.Line(ctx, r.client, r.key, r.sortKey)
	}
	if err != nil {
		return 0, err
	}
	return len(line.Tickets), nil
}

// waitForLock tries once; if the lock is held, it says by whom and waits
// for it up to --wait.
func (r *runner) waitForLock(ctx context.Context) (held, error) {
	start := time.Now()
	take := func(wait time.Duration, inLine bool) (held, error) {
		opts := []ddblock.AcquireOption{ddblock.WithRetryTimeout(wait), ddblock.WithAdditionalAttributes(r.attrs)}
		if inLine {
			opts = append(opts, ddblock.WithFairWaiting())
		}
		var lock *ddblock.Lock
		var err error
		switch {
		case r.multi():
			set, err := r.client.AcquireLocks(ctx, r.keys, append(opts, ddblock.WithSortKeyValue(r.sortKey))...)
			if err != nil {
				return held{}, err
			}
			return held{locks: set.Locks(), set: set}, nil
		case r.sem != nil:
			lock, err = r.sem.Acquire(ctx, opts...)
		default:
			lock, err = r.client.AcquireLock(ctx, r.key, append(opts, ddblock.WithSortKeyValue(r.sortKey))...)
		}
		if err != nil {
			return held{}, err
		}
		return held{locks: []*ddblock.Lock{lock}}, nil
	}
	what := r.subject()
	var h held
	var err error
	waiting := 0
	if r.wait > 0 && !r.multi() {
		// With --wait 0 the line is not read: the one try below waits
		// for nothing, so it takes no place in line, as the library's
		// TryAcquireLock; tickets of waiters that died cannot refuse
		// it a free lock.
		if n, lerr := r.inLine(ctx); lerr == nil {
			waiting = n
		}
	}
	holder := "someone else"
	if r.multi() && r.fair && r.wait > 0 {
		// Several keys wait in line from the start: a plain first try
		// would take the keys out of line.
		holder = ""
	} else {
		switch {
		case waiting > 0:
			// Others wait in line: a first try would only take a place and
			// give it up again, or take the lock ahead of them.
			err = &ddblock.Error{Code: ddblock.CodeAcquireTimeout, Message: fmt.Sprintf("%d wait in line", waiting)}
		default:
			// Nobody waits in line: one plain try, out of line. A fair try
			// would come into the line and leave it when it fails; a run
			// that came in between would then stand ahead of this one when
			// it comes back to wait.
			h, err = take(0, false)
		}
		switch {
		case err == nil:
			return h, nil
		case errors.Is(err, ddblock.CodeAcquireTimeout):
			hd, herr := r.holder(ctx)
			switch {
			case herr == nil:
				holder = hd
			case ddblock.CodeOf(herr) != ddblock.CodeUnknown:
				return held{}, r.acquireError(herr)
			}
			if r.wait == 0 {
				return held{}, fail(exitBusy, "%s; not waiting (--wait 0)", r.heldBy(holder))
			}
			if holder == heldByNobody && waiting == 0 {
				// The try ran out of time on a call that did not answer.
				fmt.Fprintf(r.env.stderr, "ddblock run: could not take %s yet (%s); trying again for up to %v\n",
					what, oneLine(trimmed{err}.Error()), r.wait)
				break
			}
			fmt.Fprintf(r.env.stderr, "ddblock run: %s; waiting up to %v\n", r.heldBy(holder), r.wait)
		case transientAcquireError(err) && r.wait > 0:
			// A DynamoDB call failed (unreachable, throttled, a server
			// error), or the session's heartbeats have not landed lately:
			// that may pass, and the library retries such failures within
			// the wait.
			fmt.Fprintf(r.env.stderr, "ddblock run: could not take %s yet (%s); trying again for up to %v\n",
				what, oneLine(trimmed{err}.Error()), r.wait)
		default:
			return held{}, r.acquireError(err)
		}
	}

	reportCtx, stopReports := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		r.reportHolders(reportCtx, holder, start)
	}()
	h, err = take(max(r.wait-time.Since(start), 0), r.fair)
	stopReports()
	<-reported
	if err == nil {
		fmt.Fprintf(r.env.stderr, "ddblock run: acquired %s after %v\n", what, time.Since(start).Round(time.Millisecond))
		return h, nil
	}
	if errors.Is(err, ddblock.CodeAcquireTimeout) {
		holder, herr := r.holder(context.WithoutCancel(ctx))
		switch {
		case herr != nil:
			holder = "someone else"
		case holder == heldByNobody:
			// Free at the end: say why the wait failed (calls that
			// did not answer in time, say), not only who holds it.
			they := "it is"
			if r.multi() {
				they = "they are"
			}
			return held{}, fail(exitBusy, "%s not acquired within %v (%s); %s held by %s", what, r.wait, oneLine(trimmed{err}.Error()), they, holder)
		}
		if r.multi() {
			return held{}, fail(exitBusy, "%s not acquired within %v: %s", what, r.wait, holder)
		}
		return held{}, fail(exitBusy, "%s not acquired within %v: held by %s", what, r.wait, holder)
	}
	return held{}, r.acquireError(err)
}

// subject is what messages call what the run takes: "lock" and its name,
// or with several keys "locks" and theirs.
func (r *runner) subject() string {
	if r.multi() {
		return "locks " + r.name()
	}
	return "lock " + r.name()
}

// heldBy says that what the run takes is held, holder as holder says it.
func (r *runner) heldBy(holder string) string {
	if r.multi() && holder != heldByNobody {
		return fmt.Sprintf("%s are not all free: %s", r.subject(), holder)
	}
	if r.multi() {
		return fmt.Sprintf("%s are held by %s", r.subject(), holder)
	}
	return fmt.Sprintf("%s is held by %s", r.subject(), holder)
}

// name is what messages call the lock: the key, or the semaphore. The
// number of slots is not named: after a resize (ddblock resize) the
// number in force is the table's, not --slots.
func (r *runner) name() string {
	if r.multi() {
		names := make([]string, len(r.keys))
		for i, k := range r.keys {
			names[i] = lockName(k, r.sortKey)
		}
		return strings.Join(names, ", ")
	}
	if r.sem != nil {
		return fmt.Sprintf("semaphore %s", strconv.Quote(r.key))
	}
	return lockName(r.key, r.sortKey)
}

// heldByNobody is what holder says of a free lock.
const heldByNobody = "nobody now"

// holder describes who holds the lock now; with several keys, who holds
// each key that is held.
func (r *runner) holder(ctx context.Context) (string, error) {
	if r.multi() {
		var held []string
		for _, k := range r.keys {
			info, err := r.client.GetLock(ctx, k, r.sortKey)
			if errors.Is(err, ddblock.CodeLockNotFound) {
				continue
			}
			if err != nil {
				return "", err
			}
			held = append(held, lockName(k, r.sortKey)+" is held by "+describe(info))
		}
		if len(held) == 0 {
			return heldByNobody, nil
		}
		return strings.Join(held, ", "), nil
	}
	if r.sem != nil {
		held, err := r.sem.Holders(ctx)
		if err != nil {
			return "", err
		}
		if len(held) == 0 {
			return heldByNobody, nil
		}
		owners := make([]string, len(held))
		for i, info := range held {
			owners[i] = describe(info)
		}
		return strings.Join(owners, ", "), nil
	}
	info, err := r.client.GetLock(ctx, r.key, r.sortKey)
	if errors.Is(err, ddblock.CodeLockNotFound) {
		return heldByNobody, nil
	}
	if err != nil {
		return "", err
	}
	return describe(info), nil
}

func describe(info *ddblock.LockInfo) string {
	return fmt.Sprintf("%s (lease %v)", cell(info.OwnerName), info.LeaseDuration)
}

// reportHolders says when the lock changes hands while we wait.
func (r *runner) reportHolders(ctx context.Context, last string, start time.Time) {
	t := time.NewTicker(holderReportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, err := r.holder(ctx)
		if err != nil || now == last {
			continue
		}
		last = now
		if r.multi() {
			fmt.Fprintf(r.env.stderr, "ddblock run: still waiting after %v; %s, now: %s\n",
				time.Since(start).Round(time.Second), r.subject(), now)
			continue
		}
		fmt.Fprintf(r.env.stderr, "ddblock run: still waiting after %v; lock %s is now held by %s\n",
			time.Since(start).Round(time.Second), r.name(), now)
	}
}

func (r *runner) acquireError(err error) error {
	if err == nil {
		return nil
	}
	if ddblock.CodeOf(err) == ddblock.CodeInvalidItem {
		// Another client's data at the key (or the semaphore's): the
		// library takes no such item over, and no lease ends it, so
		// waiting cannot help; the operator can clear it.
		pk, sk := r.key, r.sortKey
		subject := "cannot take " + r.name()
		if r.multi() {
			// The error names the key of the item.
			pk, sk, _ = invalidItem(err, pk, sk)
			subject = "lock " + lockName(pk, sk) + " is not free"
		} else if r.sem != nil {
			pk, sk = metadataKey(&r.conn, r.key)
			subject = "cannot take a slot of " + r.name()
		} else if ipk, isk, _ := invalidItem(err, pk, sk); ipk == pk && isk == sk {
			subject = "lock " + r.name() + " is not free"
		}
		return unreadableError(r.client, &r.conn, subject, err, pk, sk)
	}
	if ddblock.CodeOf(err) == ddblock.CodeTransactionsUnsupported {
		return fail(exitUnavailable, "cannot take %s: several keys are taken in one DynamoDB transaction, and this server has none (TransactWriteItems); nothing was written", r.subject())
	}
	return libError(err, r.conn.table)
}

// sortKeyName is the table's sort key attribute; empty when the table
// has none.
func (r *runner) sortKeyName() string {
	if r.conn.pkOnly {
		return ""
	}
	return r.conn.skName
}

// commandEnv is the command's environment: ddblock's own, and the lock;
// with several keys, the first lock as for one, and every lock indexed.
func (r *runner) commandEnv(h held) ([]string, error) {
	env, err := r.lockEnv(os.Environ(), h.locks[0])
	if err != nil || !r.multi() {
		return env, err
	}
	env = append(env, "DDBLOCK_KEYS="+strconv.Itoa(len(h.locks)))
	checks := make([]string, 0, len(h.locks))
	var encoded []string
	for i, lock := range h.locks {
		n := "_" + strconv.Itoa(i)
		env = append(env,
			"DDBLOCK_KEY"+n+"="+lock.PartitionKey(),
			"DDBLOCK_RECORD_VERSION_NUMBER"+n+"="+lock.RecordVersionNumber(),
			"DDBLOCK_TENURE"+n+"="+lock.Tenure(),
		)
		if guard, err := lock.Guard(); err == nil {
			check, err := cliTransactItem(guard)
			if err != nil {
				return nil, err
			}
			env = append(env, "DDBLOCK_GUARD_CHECK"+n+"="+check)
			checks = append(checks, check)
		}
		if token := lock.FencingToken(); token > 0 {
			env = append(env, "DDBLOCK_FENCING_TOKEN"+n+"="+strconv.FormatInt(token, 10))
		}
		if prev := lock.TakenOverFrom(); prev != nil {
			value, enc := envValue(prev.OwnerName)
			env = append(env, "DDBLOCK_TAKEN_OVER_FROM"+n+"="+value)
			if enc {
				encoded = append(encoded, "DDBLOCK_TAKEN_OVER_FROM"+n)
			}
		}
	}
	if len(checks) == len(h.locks) {
		// Every guard, ready for --transact-items with the command's own
		// actions appended; a lock lost already leaves it out.
		env = append(env, "DDBLOCK_GUARD_CHECKS=["+strings.Join(checks, ",")+"]")
	}
	if len(encoded) > 0 {
		// The first lock's own, if any, stays in DDBLOCK_ENCODED too.
		for i, kv := range env {
			if v, ok := strings.CutPrefix(kv, "DDBLOCK_ENCODED="); ok {
				encoded = append([]string{v}, encoded...)
				env = slices.Delete(env, i, i+1)
				break
			}
		}
		env = append(env, "DDBLOCK_ENCODED="+strings.Join(encoded, " "))
	}
	return env, nil
}

// lockEnv adds one lock's variables to env.
func (r *runner) lockEnv(env []string, lock *ddblock.Lock) ([]string, error) {
	env = append(env,
		"DDBLOCK_KEY="+lock.PartitionKey(),
		"DDBLOCK_SORT_KEY="+lock.SortKey(),
		"DDBLOCK_OWNER="+lock.OwnerName(),
		"DDBLOCK_RECORD_VERSION_NUMBER="+lock.RecordVersionNumber(),
		tableEnv+"="+r.conn.table,
		"DDBLOCK_PARTITION_KEY_NAME="+r.conn.pkName,
		"DDBLOCK_SORT_KEY_NAME="+r.sortKeyName(),
		"DDBLOCK_TENURE="+lock.Tenure(),
	)
	// A lock lost already has no guard: the command does not start then
	// (or is stopped at once), and its writes could not commit anyway.
	if guard, err := lock.Guard(); err == nil {
		check, err := cliTransactItem(guard)
		if err != nil {
			return nil, err
		}
		env = append(env, "DDBLOCK_GUARD_CHECK="+check)
	}
	if token := lock.FencingToken(); token > 0 {
		env = append(env, "DDBLOCK_FENCING_TOKEN="+strconv.FormatInt(token, 10))
	}
	if prev := lock.TakenOverFrom(); prev != nil {
		// The previous holder died holding the lock: the command may need
		// to clean up after it. Its name comes from the table, where
		// any writer may have put a NUL, which no environment holds.
		value, encoded := envValue(prev.OwnerName)
		env = append(env, "DDBLOCK_TAKEN_OVER_FROM="+value)
		if encoded {
			env = append(env, "DDBLOCK_ENCODED=DDBLOCK_TAKEN_OVER_FROM")
		}
	}
	if sk := lock.SessionKey(); sk != "" {
		env = append(env, "DDBLOCK_SESSION_KEY="+sk)
	}
	if r.sem != nil {
		slot, _ := r.sem.SlotOf(lock)
		env = append(env, "DDBLOCK_SLOT="+strconv.Itoa(slot))
	}
	return env, nil
}

// envValue is v as an environment variable can hold it: v itself, or,
// when v holds a NUL byte, v percent-encoded (each NUL as %00, each % as
// %25) and encoded true, so that the command can tell (DDBLOCK_ENCODED
// names such variables) and decode it.
func envValue(v string) (string, bool) {
	if !strings.ContainsRune(v, 0) {
		return v, false
	}
	return strings.NewReplacer("%", "%25", "\x00", "%00").Replace(v), true
}

// transientAcquireError reports whether a failed first try may succeed
// later without anyone releasing the lock: a DynamoDB call failed, the
// run's own session (--session) is in danger, which the library retries
// within the wait like a failed call, or other writes kept changing the
// items of a set of keys while it was put.
func transientAcquireError(err error) bool {
	switch ddblock.CodeOf(err) {
	case ddblock.CodeUnknown, ddblock.CodeLockInDanger, ddblock.CodeTransactionConflict:
		return true
	}
	return false
}

func isLost(err error) bool {
	return errors.Is(err, ddblock.CodeLockStolen) || errors.Is(err, ddblock.CodeLockInDanger)
}

// release gives the lock back (every lock of a set, at once); quiet
// when a lock is known to be lost. A lost lock's release is only a
// courtesy (it frees an item that is still ours at once), so it gets no
// longer than a lease.
func (r *runner) release(h held, lost bool) {
	timeout := releaseTimeout
	if lost {
		timeout = min(timeout, r.lease)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if h.set != nil {
		err := h.set.Release(ctx, ddblock.WithBestEffort(false))
		if err != nil && !lost {
			fmt.Fprintf(r.env.stderr, "ddblock run: could not release every lock of %s; those left expire after their lease: %s\n",
				r.name(), oneLine(err.Error()))
		}
		return
	}
	err := h.locks[0].Release(ctx, ddblock.WithBestEffort(false))
	if err != nil && !lost {
		fmt.Fprintf(r.env.stderr, "ddblock run: could not release lock %s; it expires after its lease: %s\n",
			lockName(r.key, r.sortKey), oneLine(err.Error()))
	}
}

// exitStatus is the shell's view of how a process ended.
func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return exitInternal
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitSignalBase + int(syscall.SIGINT)
}

// signalGroup sends sig to every process of the group; a group that is
// gone already is no error. A pgid that is not positive is ignored:
// kill(0) would signal ddblock's own group.
func signalGroup(pgid int, sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && pgid > 0 {
		_ = syscall.Kill(-pgid, s)
	}
}
