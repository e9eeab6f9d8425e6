package main

// The supervisor: `ddblock run` from the moment it holds the lock. It
// starts the guard (guard.go), which starts the command, then waits for
// events: a forwarded signal, time to pass on the lock's newest deadline,
// the lock lost, the grace after SIGTERM over, a message from the guard
// (guardproto.go), the guard's end. Each event has a method (on…) that
// records what it learnt in the supervisor's fields; once the guard has
// ended and said all it had to say, exit turns those fields into
// ddblock's exit.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// supervisor is one command run under a held lock. Only the goroutine of
// watch and exit uses it.
type supervisor struct {
	r       *runner
	held    held
	g       *guardProc
	tm      timing
	name    string   // the lock, for messages
	subject string   // "lock" and name; with several keys, "locks" and theirs
	command []string // the command's argv, for messages

	// What has happened so far.
	pgid         int         // the command's process group, once started
	status       int         // the command's exit status, once it ended; -1 before
	lost         error       // the lock's error, once the library gave it up
	lostName     string      // the lock lost, for messages
	notRenewed   bool        // the guard stopped the command at its deadline
	notStarted   bool        // the guard did not start the command
	startFailure string      // why the guard could not start the command: "<status> <msg>"
	killSaid     bool        // "sending SIGKILL" was said
	kill         *time.Timer // ddblock's own SIGKILL, once the lock is lost
}

// supervise runs the command under the lock, through the guard, and
// returns ddblock's exit.
func (r *runner) supervise(h held, path string, command []string, tm timing) error {
	env, err := r.commandEnv(h)
	if err != nil {
		r.release(h, false)
		what := "lock " + lockName(r.key, r.sortKey)
		if r.multi() {
			what = r.subject()
		}
		return fail(exitInternal, "cannot write the guard of %s for the command: %v", what, err)
	}
	if r.sem != nil {
		// From here on, messages name the slot's own lock.
		r.key, r.sortKey = h.locks[0].PartitionKey(), h.locks[0].SortKey()
	}
	s := &supervisor{r: r, held: h, tm: tm, name: r.name(), subject: r.subject(), command: command, status: -1}
	if r.sem != nil {
		s.name = lockName(r.key, r.sortKey)
		s.subject = "lock " + s.name
	}
	g, err := startGuard(guardSpec{
		self: r.env.self, path: path, argv: command, env: env,
		grace: tm.grace, deadline: s.safeUntil(),
		// A guard that starts after the deadline waits for the next
		// heartbeat's; within a lease one comes, or the lock is lost
		// and ddblock tells the guard so.
		startWait: tm.lease,
		stdin:     r.env.stdin, stdout: r.env.stdout, stderr: r.env.childStderr,
	})
	if err != nil {
		r.release(h, false)
		return fail(exitInternal, "cannot start the guard process (%s): %v", r.env.self, err)
	}
	defer g.close()
	s.g = g
	s.watch()
	return s.exit()
}

// safeUntil is when the lock stops being safe: its last successful
// write's send time plus the safe period, the library's own rule for
// danger, on the clock the guard reads too. With several locks, the
// command is safe only while every lock is: the earliest of theirs.
func (s *supervisor) safeUntil() int64 {
	last := hooks.LastHeartbeat(s.held.locks[0])
	for _, l := range s.held.locks[1:] {
		last = min(last, hooks.LastHeartbeat(l))
	}
	return int64(last + s.tm.safe)
}

// done is closed when the lock is given up; with several locks, when
// any of them is. Call stop when done with it.
func (s *supervisor) done() (done <-chan struct{}, stop func()) {
	if s.held.set == nil {
		return s.held.locks[0].Done(), func() {}
	}
	ctx, cancel := s.held.set.Context(context.Background())
	return ctx.Done(), cancel
}

// lockErr is the name and the error of the lock given up (the first of
// the set that was lost, if any was); a nil error while every lock is
// held.
func (s *supervisor) lockErr() (string, error) {
	if s.held.set == nil {
		return s.name, s.held.locks[0].Err()
	}
	var first error
	var name string
	for _, l := range s.held.locks {
		err := l.Err()
		if err == nil {
			continue
		}
		if isLost(err) {
			return lockName(l.PartitionKey(), l.SortKey()), err
		}
		if first == nil {
			first, name = err, lockName(l.PartitionKey(), l.SortKey())
		}
	}
	return name, first
}

// watch hands each event to its method until the guard has ended and
// its event pipe is drained.
func (s *supervisor) watch() {
	// Heartbeats are looked for several times per period, so that the
	// guard's deadline trails each one by a fraction of a period.
	poll := time.NewTicker(min(max(s.tm.heartbeat/4, 5*time.Millisecond), time.Second))
	defer poll.Stop()
	lockDone, stop := s.done()
	defer stop()
	events, exited := s.g.events, s.g.exited
	var graceOver <-chan time.Time
	for events != nil || exited != nil {
		select {
		case sig := <-s.r.sigs:
			s.onSignal(sig)
		case <-poll.C:
			s.onPoll()
		case <-lockDone:
			lockDone = nil
			graceOver = s.onLockDone()
		case <-graceOver:
			graceOver = nil
			s.onGraceOver()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			s.onGuardEvent(ev)
		case <-exited:
			exited = nil
		}
	}
	if s.kill != nil {
		s.kill.Stop()
	}
}

// onSignal passes a signal sent to ddblock on to the command's group.
func (s *supervisor) onSignal(sig os.Signal) {
	if n, ok := sig.(syscall.Signal); ok {
		s.g.forward(n)
	}
}

// onPoll passes the newest heartbeat's deadline on to the guard.
func (s *supervisor) onPoll() { s.g.extend(s.safeUntil()) }

// onLockDone: the library gave the lock up. Unless the command has ended
// already, the guard is told to stop it, and ddblock's own SIGKILL is
// due after the grace; the channel returned says when.
func (s *supervisor) onLockDone() <-chan time.Time {
	if s.status >= 0 {
		return nil // the command ended already: exit says so
	}
	s.lostName, s.lost = s.lockErr()
	fmt.Fprintf(s.r.env.stderr, "ddblock run: lock %s lost (%s): sending SIGTERM to the command, SIGKILL after %v\n",
		s.lostName, ddblock.CodeOf(s.lost), s.tm.grace)
	s.g.terminate()
	// Should the guard be unable to act (stopped), ddblock kills the
	// group itself when the grace is over.
	s.kill = time.NewTimer(s.tm.grace)
	return s.kill.C
}

// onGraceOver: the grace after the lock was lost is over; a command
// still running gets SIGKILL from ddblock itself.
func (s *supervisor) onGraceOver() {
	if s.pgid > 0 && s.status < 0 {
		s.sayKill()
		signalGroup(s.pgid, syscall.SIGKILL)
	}
}

// onGuardEvent hands one message of the guard to its method.
func (s *supervisor) onGuardEvent(ev guardEvent) {
	switch ev.kind {
	case evStarted:
		s.pgid, _ = strconv.Atoi(ev.arg)
	case evNotStarted:
		s.notStarted = true
	case evStartFailed:
		s.startFailure = ev.arg
	case evTerminated:
		s.onTerminated(ev.arg)
	case evKilled:
		s.sayKill()
	case evExited:
		s.status, _ = strconv.Atoi(ev.arg)
	}
}

// onTerminated: the guard sent the command SIGTERM, at its deadline or
// because ddblock asked (said already, in onLockDone).
func (s *supervisor) onTerminated(why string) {
	if why != termDeadline {
		return
	}
	s.notRenewed = true
	fmt.Fprintf(s.r.env.stderr, "ddblock run: %s not renewed within the safe period (%v without a successful heartbeat): the guard sent SIGTERM to the command, SIGKILL after %v\n",
		s.subject, s.tm.safe, s.tm.grace)
}

// sayKill says, once, that the command gets SIGKILL.
func (s *supervisor) sayKill() {
	if !s.killSaid {
		s.killSaid = true
		fmt.Fprintf(s.r.env.stderr, "ddblock run: the command is still running %v after SIGTERM: sending SIGKILL\n", s.tm.grace)
	}
}

// exit decides, once the guard has ended, what becomes of the lock and
// what ddblock exits with.
func (s *supervisor) exit() error {
	switch {
	case s.startFailure != "":
		s.r.release(s.held, false)
		code, msg, _ := strings.Cut(s.startFailure, " ")
		n, err := strconv.Atoi(code)
		if err != nil {
			n = exitCannotExecute
		}
		if n == exitCommandNotFound {
			return fail(n, "command not found: %s (%s)", s.command[0], msg)
		}
		return fail(n, "cannot run %s: %s", s.command[0], msg)
	case s.notStarted && s.lost != nil:
		s.r.release(s.held, true)
		return fail(exitLockLost, "lock %s was lost (%s) before the command could start; the command did not run", s.lostName, ddblock.CodeOf(s.lost))
	case s.notStarted:
		s.r.release(s.held, true)
		return fail(exitLockLost, "%s: its safe period ran out before the command could start (ddblock or its guard was stopped or starved); the command did not run", s.subject)
	case s.status < 0:
		return s.guardDied()
	}
	if s.lost == nil {
		// The command may have finished just as the lock was lost: its
		// work was then not exclusive to the end.
		if name, err := s.lockErr(); isLost(err) {
			s.lost, s.lostName = err, name
			fmt.Fprintf(s.r.env.stderr, "ddblock run: lock %s was lost (%s) as the command ended\n", s.lostName, ddblock.CodeOf(s.lost))
		}
	}
	if s.lost != nil || s.notRenewed {
		// Whatever the command left behind in its group must not go on
		// working without the lock.
		signalGroup(s.pgid, syscall.SIGKILL)
		s.r.release(s.held, true)
		if s.lost != nil {
			return fail(exitLockLost, "lock %s was lost while the command ran (%s); the command exited with status %d", s.lostName, ddblock.CodeOf(s.lost), s.status)
		}
		return fail(exitLockLost, "%s was not renewed within the safe period while the command ran (ddblock was stopped, starved or blocked); the command was stopped and exited with status %d", s.subject, s.status)
	}
	s.r.release(s.held, false)
	return exitWith(s.status)
}

// groupGoneTimeout bounds the wait for the command's group to die after
// its guard did, before the lock is released.
const groupGoneTimeout = 5 * time.Second

// guardDied ends a run whose guard ended without reporting the command's
// end (killed, or crashed). The kernel killed the command with it (Linux);
// ddblock kills the rest of the group, and releases the lock only once
// none of the group runs any more: otherwise it leaves the lock to
// expire, which takes a lease after ddblock stops heartbeating it.
func (s *supervisor) guardDied() error {
	how := "ended"
	if ps := s.g.cmd.ProcessState; ps != nil {
		how = ps.String()
	}
	if s.pgid <= 0 {
		// The guard died before it said whether the command started; the
		// group is unknown, so the lock is left to expire.
		return fail(exitInternal, "the guard process died (%s) before the command started; %s is left to expire", how, s.subject)
	}
	signalGroup(s.pgid, syscall.SIGKILL)
	deadline := time.Now().Add(groupGoneTimeout)
	for groupAlive(s.pgid) {
		if time.Now().After(deadline) {
			return fail(exitInternal, "the guard process died (%s); the command's processes did not die of SIGKILL within %v; %s is left to expire",
				how, groupGoneTimeout, s.subject)
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.r.release(s.held, false)
	return fail(exitInternal, "the guard process died (%s); the command was killed and %s released", how, s.subject)
}
