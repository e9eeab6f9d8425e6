package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
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

COMMAND runs in its own process group, with the lock in its environment:
  DDBLOCK_KEY, DDBLOCK_SORT_KEY   the lock's key (no sort key: empty)
  DDBLOCK_OWNER                   the owner name written in the lock
  DDBLOCK_TABLE                   the lock table
  DDBLOCK_RECORD_VERSION_NUMBER   the version when the lock was taken
                                  (every heartbeat changes it)
  DDBLOCK_FENCING_TOKEN           the lock's fencing token, if it has one
  DDBLOCK_TAKEN_OVER_FROM         the owner of the lock item taken over from
                                  a holder presumed dead; unset otherwise
  DDBLOCK_SLOT                    with --slots, the slot held (0 to N-1)
  DDBLOCK_SESSION_KEY             with --session, the session item's
                                  partition key
SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1 and SIGUSR2 sent to ddblock are
passed to COMMAND's process group.

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
found; 64 usage; 69 DynamoDB unavailable; 70 internal error (the guard
died); 78 the table's keys are not the ones configured, or --slots differs
from the semaphore's number of slots; 128+N interrupted by signal N while
waiting.`

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
// ddblock.Timing.Derive as a library client does, and checks that the
// whole can keep the command safe.
func runTiming(lease, heartbeat, safe, grace time.Duration, graceSet bool) (timing, error) {
	if lease <= 0 {
		return timing{}, usageError("--lease must be positive, got %v", lease)
	}
	// The library's rule, so that a run and a client given the same lease
	// agree: a sixth and two thirds of it.
	derived := ddblock.Timing{LeaseDuration: lease, HeartbeatPeriod: heartbeat, SafePeriod: safe}.Derive()
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
}

func cmdRun(ctx context.Context, env *environ, args []string) error {
	r := &runner{env: env}
	var (
		lease, heartbeat, safe, grace time.Duration
		owner                         string
		fencing                       bool
		session                       bool
		maxSkew                       time.Duration
		attrs                         = attrFlag{}
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
	f.IntVar(&r.slots, "slots", 0, "hold one of `N` slots of the semaphore KEY: at most N commands at once\n(0: KEY is a plain lock)")
	pos, command, err := f.parse(args, 1, true, "KEY")
	if err != nil {
		return err
	}
	r.key = pos[0]
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
		ddblock.WithClock(newMachineClock()),
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
		// The lock's LastHeartbeat follows the session item's heartbeats,
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

	lock, err := r.acquire(ctx)
	if err != nil {
		return err
	}
	return r.supervise(lock, path, command, tm)
}

// acquire waits for the lock; a forwarded signal ends the wait.
func (r *runner) acquire(ctx context.Context) (*ddblock.Lock, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		lock *ddblock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		l, err := r.waitForLock(ctx)
		done <- result{l, err}
	}()
	select {
	case res := <-done:
		return res.lock, res.err
	case sig := <-r.sigs:
		cancel()
		if res := <-done; res.lock != nil {
			r.release(res.lock, false)
		}
		return nil, fail(signalStatus(sig), "interrupted by %v while waiting for lock %s", sig, r.name())
	}
}

// waitForLock tries once; if the lock is held, it says by whom and waits
// for it up to --wait.
func (r *runner) waitForLock(ctx context.Context) (*ddblock.Lock, error) {
	start := time.Now()
	take := func(wait time.Duration) (*ddblock.Lock, error) {
		opts := []ddblock.AcquireOption{ddblock.WithRetryTimeout(wait), ddblock.WithAdditionalAttributes(r.attrs)}
		if r.sem != nil {
			return r.sem.Acquire(ctx, opts...)
		}
		return r.client.AcquireLock(ctx, r.key, append(opts, ddblock.WithSortKeyValue(r.sortKey))...)
	}
	name := r.name()
	lock, err := take(0)
	holder := "someone else"
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(err, ddblock.ErrAcquireTimeout):
		h, herr := r.holder(ctx)
		switch {
		case herr == nil:
			holder = h
		case ddblock.CodeOf(herr) != ddblock.CodeUnknown:
			return nil, r.acquireError(herr)
		}
		if r.wait == 0 {
			return nil, fail(exitBusy, "lock %s is held by %s; not waiting (--wait 0)", name, holder)
		}
		fmt.Fprintf(r.env.stderr, "ddblock run: lock %s is held by %s; waiting up to %v\n", name, holder, r.wait)
	case ddblock.CodeOf(err) == ddblock.CodeUnknown && r.wait > 0:
		// A DynamoDB call failed (unreachable, throttled, a server
		// error): that may pass, and the library retries such failures
		// within the wait.
		fmt.Fprintf(r.env.stderr, "ddblock run: could not take lock %s yet (%s); trying again for up to %v\n",
			name, oneLine(trimmed{err}.Error()), r.wait)
	default:
		return nil, r.acquireError(err)
	}

	reportCtx, stopReports := context.WithCancel(ctx)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		r.reportHolders(reportCtx, holder, start)
	}()
	lock, err = take(max(r.wait-time.Since(start), 0))
	stopReports()
	<-reported
	if err == nil {
		fmt.Fprintf(r.env.stderr, "ddblock run: acquired lock %s after %v\n", name, time.Since(start).Round(time.Millisecond))
		return lock, nil
	}
	if errors.Is(err, ddblock.ErrAcquireTimeout) {
		holder, herr := r.holder(context.WithoutCancel(ctx))
		if herr != nil {
			holder = "someone else"
		}
		return nil, fail(exitBusy, "lock %s not acquired within %v: held by %s", name, r.wait, holder)
	}
	return nil, r.acquireError(err)
}

// name is what messages call the lock: the key, or the semaphore.
func (r *runner) name() string {
	if r.sem != nil {
		return fmt.Sprintf("%s (semaphore of %d slots)", strconv.Quote(r.key), r.slots)
	}
	return lockName(r.key, r.sortKey)
}

// holder describes who holds the lock now.
func (r *runner) holder(ctx context.Context) (string, error) {
	if r.sem != nil {
		held, err := r.sem.Holders(ctx)
		if err != nil {
			return "", err
		}
		if len(held) == 0 {
			return "nobody any more (a slot was just released)", nil
		}
		owners := make([]string, len(held))
		for i, info := range held {
			owners[i] = describe(info)
		}
		return strings.Join(owners, ", "), nil
	}
	info, err := r.client.GetLock(ctx, r.key, r.sortKey)
	if errors.Is(err, ddblock.ErrLockNotFound) {
		return "nobody any more (it was just released)", nil
	}
	if err != nil {
		return "", err
	}
	return describe(info), nil
}

func describe(info *ddblock.LockInfo) string {
	return fmt.Sprintf("%s (lease %v)", info.OwnerName, info.LeaseDuration)
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
		fmt.Fprintf(r.env.stderr, "ddblock run: still waiting after %v; lock %s is now held by %s\n",
			time.Since(start).Round(time.Second), r.name(), now)
	}
}

func (r *runner) acquireError(err error) error {
	if err == nil {
		return nil
	}
	return libError(err, r.conn.table)
}

// supervise runs the command under the lock, through the guard, and
// returns ddblock's exit.
func (r *runner) supervise(lock *ddblock.Lock, path string, command []string, tm timing) error {
	env := append(os.Environ(),
		"DDBLOCK_KEY="+lock.PartitionKey(),
		"DDBLOCK_SORT_KEY="+lock.SortKey(),
		"DDBLOCK_OWNER="+lock.OwnerName(),
		"DDBLOCK_RECORD_VERSION_NUMBER="+lock.RecordVersionNumber(),
		tableEnv+"="+r.conn.table,
	)
	if token := lock.FencingToken(); token > 0 {
		env = append(env, "DDBLOCK_FENCING_TOKEN="+strconv.FormatInt(token, 10))
	}
	if prev := lock.TakenOverFrom(); prev != nil {
		// The previous holder died holding the lock: the command may need
		// to clean up after it.
		env = append(env, "DDBLOCK_TAKEN_OVER_FROM="+prev.OwnerName)
	}
	if sk := lock.SessionKey(); sk != "" {
		env = append(env, "DDBLOCK_SESSION_KEY="+sk)
	}
	if r.sem != nil {
		slot, _ := r.sem.SlotOf(lock)
		env = append(env, "DDBLOCK_SLOT="+strconv.Itoa(slot))
		// From here on, messages name the slot's own lock.
		r.key, r.sortKey = lock.PartitionKey(), lock.SortKey()
	}
	// The lock is safe until its last successful write's send time plus
	// the safe period: the library's own rule for danger, on the clock
	// the guard reads too.
	safeUntil := func() int64 { return int64(lock.LastHeartbeat() + tm.safe) }
	g, err := startGuard(guardSpec{
		self: r.env.self, path: path, argv: command, env: env,
		grace: tm.grace, deadline: safeUntil(),
		// A guard that starts after the deadline waits for the next
		// heartbeat's; within a lease one comes, or the lock is lost
		// and ddblock tells the guard so.
		startWait: tm.lease,
		stdin:     r.env.stdin, stdout: r.env.stdout, stderr: r.env.childStderr,
	})
	if err != nil {
		r.release(lock, false)
		return fail(exitInternal, "cannot start the guard process (%s): %v", r.env.self, err)
	}
	defer g.close()

	name := lockName(r.key, r.sortKey)
	// Heartbeats are looked for several times per period, so that the
	// guard's deadline trails each one by a fraction of a period.
	poll := time.NewTicker(min(max(tm.heartbeat/4, 5*time.Millisecond), time.Second))
	defer poll.Stop()
	var (
		pgid       int        // the command's process group, once started
		status     = -1       // the command's, once it ended
		lost       error      // the lock's error, once the library gave it up
		notRenewed bool       // the guard stopped the command at its deadline
		startErr   guardEvent // the guard could not start the command
		notStarted bool       // the guard did not start the command
		killSaid   bool
		kill       *time.Timer
		killC      <-chan time.Time
		events     = g.events
		exited     = g.exited
		lockDone   = lock.Done()
	)
	sayKill := func() {
		if !killSaid {
			killSaid = true
			fmt.Fprintf(r.env.stderr, "ddblock run: the command is still running %v after SIGTERM: sending SIGKILL\n", tm.grace)
		}
	}
	for events != nil || exited != nil {
		select {
		case sig := <-r.sigs:
			if s, ok := sig.(syscall.Signal); ok {
				g.forward(s)
			}
		case <-poll.C:
			g.extend(safeUntil())
		case <-lockDone:
			lockDone = nil
			if status >= 0 {
				continue // the command ended already: said below
			}
			lost = lock.Err()
			fmt.Fprintf(r.env.stderr, "ddblock run: lock %s lost (%s): sending SIGTERM to the command, SIGKILL after %v\n",
				name, ddblock.CodeOf(lost), tm.grace)
			g.terminate()
			// Should the guard be unable to act (stopped), ddblock kills
			// the group itself when the grace is over.
			kill = time.NewTimer(tm.grace)
			killC = kill.C
		case <-killC:
			killC = nil
			if pgid > 0 && status < 0 {
				sayKill()
				signalGroup(pgid, syscall.SIGKILL)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch ev.kind {
			case "P":
				pgid, _ = strconv.Atoi(ev.arg)
			case "N":
				notStarted = true
			case "E":
				startErr = ev
			case "T":
				if ev.arg == "deadline" {
					notRenewed = true
					fmt.Fprintf(r.env.stderr, "ddblock run: lock %s not renewed within the safe period (%v without a successful heartbeat): the guard sent SIGTERM to the command, SIGKILL after %v\n",
						name, tm.safe, tm.grace)
				}
			case "K":
				sayKill()
			case "X":
				status, _ = strconv.Atoi(ev.arg)
			}
		case <-exited:
			exited = nil
		}
	}
	if kill != nil {
		kill.Stop()
	}

	switch {
	case startErr.kind != "":
		r.release(lock, false)
		code, msg, _ := strings.Cut(startErr.arg, " ")
		n, err := strconv.Atoi(code)
		if err != nil {
			n = exitCannotExecute
		}
		if n == exitCommandNotFound {
			return fail(n, "command not found: %s (%s)", command[0], msg)
		}
		return fail(n, "cannot run %s: %s", command[0], msg)
	case notStarted && lost != nil:
		r.release(lock, true)
		return fail(exitLockLost, "lock %s was lost (%s) before the command could start; the command did not run", name, ddblock.CodeOf(lost))
	case notStarted:
		r.release(lock, true)
		return fail(exitLockLost, "lock %s: its safe period ran out before the command could start (ddblock or its guard was stopped or starved); the command did not run", name)
	case status < 0:
		return r.guardDied(lock, g, pgid)
	}
	if lost == nil {
		// The command may have finished just as the lock was lost: its
		// work was then not exclusive to the end.
		if err := lock.Err(); isLost(err) {
			lost = err
			fmt.Fprintf(r.env.stderr, "ddblock run: lock %s was lost (%s) as the command ended\n", name, ddblock.CodeOf(lost))
		}
	}
	if lost != nil || notRenewed {
		// Whatever the command left behind in its group must not go on
		// working without the lock.
		signalGroup(pgid, syscall.SIGKILL)
		r.release(lock, true)
		if lost != nil {
			return fail(exitLockLost, "lock %s was lost while the command ran (%s); the command exited with status %d", name, ddblock.CodeOf(lost), status)
		}
		return fail(exitLockLost, "lock %s was not renewed within the safe period while the command ran (ddblock was stopped, starved or blocked); the command was stopped and exited with status %d", name, status)
	}
	r.release(lock, false)
	return exitWith(status)
}

// groupGoneTimeout bounds the wait for the command's group to die after
// its guard did, before the lock is released.
const groupGoneTimeout = 5 * time.Second

// guardDied ends a run whose guard ended without reporting the command's
// end (killed, or crashed). The kernel killed the command with it (Linux);
// ddblock kills the rest of the group, and releases the lock only once
// none of the group runs any more: otherwise it leaves the lock to
// expire, which takes a lease after ddblock stops heartbeating it.
func (r *runner) guardDied(lock *ddblock.Lock, g *guardProc, pgid int) error {
	name := lockName(r.key, r.sortKey)
	how := "ended"
	if ps := g.cmd.ProcessState; ps != nil {
		how = ps.String()
	}
	if pgid <= 0 {
		// The guard died before it said whether the command started; the
		// group is unknown, so the lock is left to expire.
		return fail(exitInternal, "the guard process died (%s) before the command started; lock %s is left to expire", how, name)
	}
	signalGroup(pgid, syscall.SIGKILL)
	deadline := time.Now().Add(groupGoneTimeout)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return fail(exitInternal, "the guard process died (%s); the command's processes did not die of SIGKILL within %v; lock %s is left to expire",
				how, groupGoneTimeout, name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.release(lock, false)
	return fail(exitInternal, "the guard process died (%s); the command was killed and lock %s released", how, name)
}

func isLost(err error) bool {
	return errors.Is(err, ddblock.ErrLockStolen) || errors.Is(err, ddblock.ErrLockInDanger)
}

// release gives the lock back; quiet when the lock is known to be lost.
// A lost lock's release is only a courtesy (it frees an item that is
// still ours at once), so it gets no longer than a lease.
func (r *runner) release(lock *ddblock.Lock, lost bool) {
	timeout := releaseTimeout
	if lost {
		timeout = min(timeout, r.lease)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := lock.Release(ctx, ddblock.WithBestEffort(false))
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
