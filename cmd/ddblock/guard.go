package main

// The guard: `ddblock run` does not start its command itself. It starts
// a second ddblock process in guard mode (guardCommand), which starts the
// command in a process group of its own and keeps it to the lock's safe
// period on its own clock: after every successful heartbeat ddblock tells
// the guard until when the lock is safe (the heartbeat's send time plus
// --safe, on the machine's shared monotonic clock), and when that moment
// passes without a newer one the guard sends the command's group SIGTERM,
// then SIGKILL after --grace. The guard does nothing else that could
// block: it writes nothing to stderr, and it reads ddblock's messages on
// a goroutine of their own.
//
// So the command stops in time even when ddblock itself cannot act:
// stopped (SIGSTOP), starved of CPU, blocked on a full stderr, or
// deadlocked. When ddblock dies, the guard sees its pipe close and kills
// the command's group at once. When the guard dies, the kernel kills the
// command (Linux) and ddblock kills the rest of the group.
//
// The two speak the guard protocol, guardproto.go.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// guardCommand is the hidden subcommand that runs the guard. It is not
// for people: it needs the pipes ddblock run hands it.
const guardCommand = "__guard"

// guardRecheck bounds the guard's sleep, so that it reads the clock
// again now and then whatever its timer says.
const guardRecheck = time.Second

// runGuard is the guard process: args are its flags, "--", and the
// command's argv. It returns the guard's exit status.
func runGuard(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(guardCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	grace := fs.Duration("grace", 0, "")
	startWait := fs.Duration("start-wait", guardStartWait, "")
	deadline := fs.Int64("deadline", 0, "")
	path := fs.String("path", "", "")
	if err := fs.Parse(args); err != nil || *path == "" || fs.NArg() == 0 || *grace < 0 || *startWait <= 0 {
		fmt.Fprintf(stderr, "ddblock %s: internal command of ddblock run, not for direct use\n", guardCommand)
		return exitUsage
	}
	var st syscall.Stat_t
	if syscall.Fstat(guardControlFD, &st) != nil || syscall.Fstat(guardEventFD, &st) != nil {
		fmt.Fprintf(stderr, "ddblock %s: internal command of ddblock run, not for direct use (no control pipes)\n", guardCommand)
		return exitUsage
	}
	// The command must not inherit the pipes: ddblock would not see the
	// event pipe close when the guard dies.
	syscall.CloseOnExec(guardControlFD)
	syscall.CloseOnExec(guardEventFD)
	g := &guard{
		control:   os.NewFile(guardControlFD, "ddblock-control"),
		events:    os.NewFile(guardEventFD, "ddblock-events"),
		grace:     *grace,
		deadline:  *deadline,
		startWait: *startWait,
	}
	// The kernel kills the command when the thread that started it ends
	// (PR_SET_PDEATHSIG); this thread ends with the guard.
	runtime.LockOSThread()
	return g.run(*path, fs.Args())
}

// guard is the guard process's state.
type guard struct {
	control, events *os.File
	grace           time.Duration
	deadline        int64         // shared clock, ns
	startWait       time.Duration // see guardStartWait

	pgid        int
	terminating bool  // SIGTERM sent
	killAt      int64 // when SIGKILL is due, once terminating
	killed      bool  // SIGKILL sent
}

// guardMsg is one line from ddblock; eof marks the pipe's end.
type guardMsg struct {
	line string
	eof  bool
}

func (g *guard) run(path string, argv []string) int {
	msgs := make(chan guardMsg, 64)
	go readLines(g.control, msgs)
	signals, ok := g.awaitStart(msgs)
	if !ok {
		g.report(evNotStarted)
		return 0
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandSysProcAttr()
	if err := cmd.Start(); err != nil {
		status := exitCannotExecute
		if errors.Is(err, fs.ErrNotExist) {
			status = exitCommandNotFound
		}
		g.report(evStartFailed, strconv.Itoa(status), oneLine(err.Error()))
		return 0
	}
	g.pgid = cmd.Process.Pid
	g.report(evStarted, strconv.Itoa(g.pgid))
	for _, sig := range signals {
		g.signal(sig)
	}

	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the status is read from cmd.ProcessState
		close(exited)
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		timer.Reset(g.sleep())
		select {
		case m := <-msgs:
			if !g.handle(m) {
				msgs = nil // ddblock is gone; the group is being killed
			}
		case <-timer.C:
			// Messages that came in while this process was stopped may
			// move the deadline: read them before judging it.
			for drained := false; !drained && msgs != nil; {
				select {
				case m := <-msgs:
					if !g.handle(m) {
						msgs = nil
					}
				default:
					drained = true
				}
			}
			g.check()
		case <-exited:
			status := exitStatus(cmd.ProcessState)
			if g.terminating {
				// Whatever the command left in its group must not go on
				// working without the lock.
				g.signal(syscall.SIGKILL)
			}
			g.report(evExited, strconv.Itoa(status))
			return 0
		}
	}
}

// guardStartWait bounds how long the guard waits, before starting the
// command, for a deadline later than the one it was started with, unless
// ddblock says otherwise (-start-wait: the lease, so that a guard started
// late waits for the next heartbeat however long the period).
const guardStartWait = 2 * time.Second

// awaitStart decides whether the command may start: only while the lock
// is safe. Starting the guard takes time (a loaded machine, a slow
// exec), in which the deadline it was given may pass while ddblock,
// heartbeating on, has sent newer ones: it reads those before it judges.
// Signals ddblock forwarded meanwhile are returned, for the command once
// it runs. false: the command must not start (the lock is not safe, or
// ddblock asked to stop it, or is gone).
func (g *guard) awaitStart(msgs <-chan guardMsg) (signals []syscall.Signal, ok bool) {
	wait := time.NewTimer(g.startWait)
	defer wait.Stop()
	for {
		var m guardMsg
		select {
		case m = <-msgs: // what has come in already counts first
		default:
			if machineNow() < g.deadline {
				return signals, true
			}
			select {
			case m = <-msgs:
			case <-wait.C:
				return nil, false
			}
		}
		if m.eof {
			return nil, false // ddblock is gone
		}
		switch word, arg := parseLine(m.line); word {
		case ctlTerminate:
			return nil, false
		case ctlSignal:
			if n, err := strconv.Atoi(arg); err == nil {
				signals = append(signals, syscall.Signal(n))
			}
		default:
			g.handle(m)
		}
	}
}

// sleep is how long until the next thing due: the deadline, or SIGKILL.
func (g *guard) sleep() time.Duration {
	due := g.deadline
	switch {
	case g.killed:
		return guardRecheck
	case g.terminating:
		due = g.killAt
	}
	return min(max(time.Duration(due-machineNow()), 0), guardRecheck)
}

// check acts on the clock: SIGTERM once the deadline has passed, SIGKILL
// once the grace after it has.
func (g *guard) check() {
	now := machineNow()
	switch {
	case !g.terminating && now >= g.deadline:
		g.terminate(termDeadline)
	case g.terminating && !g.killed && now >= g.killAt:
		g.kill()
	}
}

// handle acts on one message from ddblock; false when ddblock is gone.
func (g *guard) handle(m guardMsg) bool {
	if m.eof {
		// ddblock died (or ended without a word): nobody heartbeats the
		// lock any more, and nobody would stop the command.
		g.terminating, g.killed = true, true
		g.signal(syscall.SIGKILL)
		return false
	}
	switch word, arg := parseLine(m.line); word {
	case ctlDeadline:
		if d, err := strconv.ParseInt(arg, 10, 64); err == nil && d > g.deadline {
			g.deadline = d
		}
	case ctlTerminate:
		if !g.terminating {
			g.terminate(termAsked)
		}
	case ctlSignal:
		if n, err := strconv.Atoi(arg); err == nil && !g.killed {
			g.signal(syscall.Signal(n))
		}
	}
	return true
}

func (g *guard) terminate(why string) {
	g.terminating = true
	g.killAt = machineNow() + int64(g.grace)
	g.signal(syscall.SIGTERM)
	g.report(evTerminated, why)
	if g.grace == 0 {
		g.kill()
	}
}

func (g *guard) kill() {
	g.killed = true
	g.signal(syscall.SIGKILL)
	g.report(evKilled)
}

// signal sends sig to the command's group; a group gone already is no
// error.
func (g *guard) signal(sig syscall.Signal) { signalGroup(g.pgid, sig) }

// report tells ddblock an event; if ddblock is gone there is nobody to
// tell.
func (g *guard) report(event string, args ...string) {
	_, _ = g.events.WriteString(protoLine(event, args...) + "\n")
}

// readLines sends each line of r, then an eof mark.
func readLines(r io.Reader, out chan<- guardMsg) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out <- guardMsg{line: sc.Text()}
	}
	out <- guardMsg{eof: true}
}

// guardProc is ddblock's side of the guard: the process, and the two
// pipes. Its methods never block on the guard: a stopped guard must not
// stop ddblock from heartbeating, forwarding signals, or killing the
// command's group itself.
type guardProc struct {
	cmd    *exec.Cmd
	events chan guardEvent // closed when the event pipe ends
	exited chan struct{}   // closed when the guard process has ended

	mu       sync.Mutex
	pending  []string // control lines not written yet
	deadline int64    // the latest deadline queued or sent
	wake     chan struct{}
	stop     chan struct{}
	control  *os.File
}

// guardEvent is one line from the guard.
type guardEvent struct {
	kind string // evStarted, evNotStarted, ...
	arg  string
}

// guardSpec says what the guard runs.
type guardSpec struct {
	self     string // the ddblock binary
	path     string // the command, found on PATH
	argv     []string
	env      []string
	grace    time.Duration
	deadline int64 // shared clock, ns
	// startWait bounds the guard's wait for a newer deadline when the
	// one above has passed by the time it runs.
	startWait time.Duration
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
}

// startGuard starts the guard, which starts the command.
func startGuard(s guardSpec) (*guardProc, error) {
	controlR, controlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	eventR, eventW, err := os.Pipe()
	if err != nil {
		controlR.Close()
		controlW.Close()
		return nil, err
	}
	args := []string{guardCommand,
		"-grace", s.grace.String(),
		"-deadline", strconv.FormatInt(s.deadline, 10),
		"-start-wait", max(s.startWait, guardStartWait).String(),
		"-path", s.path, "--"}
	cmd := exec.Command(s.self, append(args, s.argv...)...)
	cmd.Env = s.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.stdin, s.stdout, s.stderr
	cmd.ExtraFiles = []*os.File{controlR, eventW}
	cmd.SysProcAttr = guardSysProcAttr()
	err = cmd.Start()
	// The guard holds its ends now; ddblock must not, or it would never
	// see the event pipe end when the guard dies.
	controlR.Close()
	eventW.Close()
	if err != nil {
		controlW.Close()
		eventR.Close()
		return nil, err
	}
	g := &guardProc{
		cmd:      cmd,
		events:   make(chan guardEvent, 16),
		exited:   make(chan struct{}),
		deadline: s.deadline,
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		control:  controlW,
	}
	go func() {
		defer close(g.events)
		defer eventR.Close()
		sc := bufio.NewScanner(eventR)
		for sc.Scan() {
			kind, arg := parseLine(sc.Text())
			g.events <- guardEvent{kind, arg}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(g.exited)
	}()
	go g.writeControl()
	return g, nil
}

// extend tells the guard that the lock is safe until deadline.
func (g *guardProc) extend(deadline int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if deadline <= g.deadline {
		return
	}
	g.deadline = deadline
	// Only the latest deadline matters: replace one still queued.
	for i, l := range g.pending {
		if word, _ := parseLine(l); word == ctlDeadline {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			break
		}
	}
	g.queueLocked(protoLine(ctlDeadline, strconv.FormatInt(deadline, 10)))
}

// terminate asks the guard to stop the command now.
func (g *guardProc) terminate() { g.queue(ctlTerminate) }

// forward asks the guard to pass a signal to the command's group.
func (g *guardProc) forward(sig syscall.Signal) {
	g.queue(protoLine(ctlSignal, strconv.Itoa(int(sig))))
}

func (g *guardProc) queue(line string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queueLocked(line)
}

func (g *guardProc) queueLocked(line string) {
	g.pending = append(g.pending, line)
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// writeControl writes the queued lines to the guard, in order.
func (g *guardProc) writeControl() {
	for {
		select {
		case <-g.stop:
			return
		case <-g.wake:
		}
		g.mu.Lock()
		lines := g.pending
		g.pending = nil
		g.mu.Unlock()
		if len(lines) == 0 {
			continue
		}
		// A guard that has ended makes this fail (EPIPE); its end is seen
		// on the event pipe.
		_, _ = g.control.WriteString(strings.Join(lines, "\n") + "\n")
	}
}

// close stops the control writer and closes the control pipe: a guard
// still running then kills the command's group at once. Call it once the
// guard has ended, or to abandon the command.
func (g *guardProc) close() {
	close(g.stop)
	g.control.Close()
}
