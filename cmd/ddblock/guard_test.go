package main

// The guard keeps `ddblock run`'s command to its lock's safe period when
// ddblock itself cannot. Each test runs two `ddblock run` of one key, A
// holding and B waiting, both running the writer (writer_test.go), and
// reads from the writers' own CLOCK_MONOTONIC timestamps whether the two
// commands ever ran at once: A's last line must come before B's first.
// That order is the only timing asserted; the rest is logged.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ddblock/ddblock/internal/faultproxy"
)

// writerEvery is the writers' interval: fine enough to catch an overlap
// of a few tens of milliseconds.
const writerEvery = 20 * time.Millisecond

// holdAndWait starts A, holding "job" with a writer that runs until it is
// stopped, and B, waiting for "job" to run a writer of bCount lines; it
// returns them once A's writer is writing and B says it waits, with A's
// writer's pid and its parent's (the guard's).
func holdAndWait(t *testing.T, f *fixture, lines string, bCount int, aExtra ...string) (a, b *proc, writerPid, guardPid int) {
	t.Helper()
	a = f.start("run", append(append(slices.Clone(timingFlags), "--owner", "owner-A", "job", "--"),
		writerCommand(t, "A", lines, writerEvery, 0, aExtra...)...)...)
	a.eventuallyWhileRunning("A's command to write", func() bool { return len(linesOf(readWriterLines(t, lines), "A")) > 0 })
	first := linesOf(readWriterLines(t, lines), "A")[0]
	writerPid, guardPid = first.pid, first.ppid
	t.Cleanup(func() {
		for _, pid := range []int{writerPid, guardPid} {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	if guardPid == a.cmd.Process.Pid {
		t.Fatalf("the command's parent is ddblock itself (pid %d), not a guard", guardPid)
	}
	if ppid := parentOf(t, guardPid); ppid != a.cmd.Process.Pid {
		t.Fatalf("the command's parent %d is a child of %d, not of ddblock (%d)", guardPid, ppid, a.cmd.Process.Pid)
	}
	// B holds with a long lease of its own: it takes A's lock over after
	// A's lease (the one in A's item), and a slow heartbeat of its own on
	// a busy machine must not cost it the lock while its writer writes.
	b = f.start("run", append([]string{"--lease", "10s", "--heartbeat", "1s", "--owner", "owner-B", "--wait", "30s", "job", "--"},
		writerCommand(t, "B", lines, writerEvery, bCount)...)...)
	b.eventuallyWhileRunning("B to wait for A", func() bool { return strings.Contains(b.stderr.String(), "is held by owner-A") })
	return a, b, writerPid, guardPid
}

// parentOf reads a process's parent from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("reading /proc/%d/stat: %v", pid, err)
	}
	f := bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	return ppid
}

// exclusive checks the safety property from the writers' lines: every
// line of A came before B's first. It returns the gap between them.
func exclusive(t *testing.T, lines []writerLine) time.Duration {
	t.Helper()
	as, bs := linesOf(lines, "A"), linesOf(lines, "B")
	if len(as) == 0 || len(bs) == 0 {
		t.Fatalf("want lines of both A and B, got %d and %d", len(as), len(bs))
	}
	lastA := slices.MaxFunc(as, func(x, y writerLine) int { return int(x.at - y.at) })
	firstB := slices.MinFunc(bs, func(x, y writerLine) int { return int(x.at - y.at) })
	if lastA.at >= firstB.at {
		after := 0
		for _, l := range as {
			if l.at >= firstB.at {
				after++
			}
		}
		t.Errorf("BOTH COMMANDS RAN AT ONCE: %d lines of A at or after B's first line (A's last %+v, B's first %+v)", after, lastA, firstB)
	}
	return time.Duration(firstB.at - lastA.at)
}

// howEnded says whether a writer recorded a SIGTERM (it was stopped
// with SIGKILL, or ended by itself, if not).
func howEnded(lines []writerLine) string {
	if len(lines) > 0 && lines[len(lines)-1].kind == "term" {
		return "ended on SIGTERM"
	}
	return "left no SIGTERM line (SIGKILL)"
}

// ddblock alone is stopped past the lease while B waits: the guard stops
// A's command when the safe period runs out, B takes the lock once the
// lease has passed, and A's command wrote its last line before B's
// first. On SIGCONT, A's ddblock says what happened and exits 76.
func TestGuardDdblockStoppedAlone(t *testing.T) {
	f := newFixture(t)
	lines := writerFile(t)
	a, b, writerPid, guardPid := holdAndWait(t, f, lines, 10)

	a.signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	rb := b.wait()
	if rb.code != 0 || !strings.Contains(rb.stderr, "acquired lock") {
		t.Fatalf("B did not run after A's lease passed: %v", rb)
	}
	if !processGone(writerPid) {
		t.Error("A's command still runs after B ran")
	}
	a.signal(syscall.SIGCONT)
	stopped = false
	ra := a.wait()
	if ra.code != exitLockLost || !strings.Contains(ra.stderr, "not renewed within the safe period") {
		t.Errorf("A after SIGCONT: want exit %d saying the lock was not renewed: %v", exitLockLost, ra)
	}
	all := readWriterLines(t, lines)
	gap := exclusive(t, all)
	// Its SIGKILL is sent, not yet acted on, when A exits.
	eventually(t, "A's guard to end with A", func() bool { return processGone(guardPid) })
	t.Logf("ddblock stopped alone: A's last line %v before B's first; A's command %s", gap, howEnded(linesOf(all, "A")))
}

// The guard is killed: its command dies with it, ddblock kills what is
// left of the group, releases the lock and exits 70; B runs after A.
func TestGuardKilled(t *testing.T) {
	f := newFixture(t)
	lines := writerFile(t)
	a, b, writerPid, guardPid := holdAndWait(t, f, lines, 10)

	if err := syscall.Kill(guardPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ra := a.wait()
	if ra.code != exitInternal || !strings.Contains(ra.stderr, "the guard process died") || !strings.Contains(ra.stderr, "released") {
		t.Errorf("A after its guard was killed: want exit %d saying so: %v", exitInternal, ra)
	}
	// ddblock sends SIGKILL to the group on its way out; the kernel acts
	// on it when the process next runs, which on a busy machine is after
	// ddblock's exit.
	eventually(t, "A's command to end with its guard and ddblock", func() bool { return processGone(writerPid) })
	rb := b.wait()
	if rb.code != 0 {
		t.Fatalf("B: %v", rb)
	}
	gap := exclusive(t, readWriterLines(t, lines))
	t.Logf("guard killed: A's last line %v before B's first", gap)
}

// ddblock is killed: the guard sees its pipe close and kills the command
// at once, then ends; B takes the lock over after the lease.
func TestGuardDdblockKilled(t *testing.T) {
	f := newFixture(t)
	lines := writerFile(t)
	a, b, writerPid, guardPid := holdAndWait(t, f, lines, 10)

	a.signal(syscall.SIGKILL)
	a.wait()
	eventually(t, "A's command to die with A", func() bool { return processGone(writerPid) })
	eventually(t, "A's guard to end", func() bool { return processGone(guardPid) })
	rb := b.wait()
	if rb.code != 0 || !strings.Contains(rb.stderr, "acquired lock") {
		t.Fatalf("B: %v", rb)
	}
	gap := exclusive(t, readWriterLines(t, lines))
	t.Logf("ddblock killed: A's last line %v before B's first", gap)
}

// ddblock, its guard and its command are all stopped past the lease (a
// frozen machine or container), and B takes the lock. On SIGCONT the
// guard finds its deadline passed and stops the command at once. The
// command may write before the guard runs again: SIGCONT is sent to the
// command first here, the worst order. That is the resume race that no
// process-level guard can close; fencing tokens do. The lines A wrote
// after B's first are logged, not asserted.
func TestGuardWholeGroupStopped(t *testing.T) {
	f := newFixture(t)
	lines := writerFile(t)
	a, b, writerPid, guardPid := holdAndWait(t, f, lines, 0)
	pids := []int{writerPid, guardPid, a.cmd.Process.Pid}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	b.eventuallyWhileRunning("B's command to write", func() bool { return len(linesOf(readWriterLines(t, lines), "B")) > 0 })
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	ra := a.wait()
	if ra.code != exitLockLost {
		t.Errorf("A after SIGCONT: want exit %d: %v", exitLockLost, ra)
	}
	eventually(t, "A's command to end", func() bool { return processGone(writerPid) })
	b.signal(syscall.SIGTERM)
	if rb := b.wait(); rb.code != 128+int(syscall.SIGTERM) {
		t.Errorf("B, ended by SIGTERM passed to its command: %v", rb)
	}
	all := readWriterLines(t, lines)
	as := linesOf(all, "A")
	firstB := linesOf(all, "B")[0].at
	after := 0
	for _, l := range as {
		if l.at >= firstB && l.kind == "line" {
			after++
		}
	}
	t.Logf("whole group stopped and continued: A wrote %d lines after B's first; A's command %s", after, howEnded(as))
}

// ddblock's own output never blocks its heartbeats: with a stderr pipe
// that nobody reads (full before ddblock starts), heartbeats fail now and
// then and the library logs a warning for each; the run keeps its lock
// and its command runs to the end. Once the pipe is read, the queued
// warnings come out.
func TestRunStderrNotRead(t *testing.T) {
	f, proxy := newProxiedFixture(t)
	// One attempt per call: a failed heartbeat is logged at once.
	env := append(slices.Clone(f.env), "AWS_MAX_ATTEMPTS=1")

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	filled := fillPipe(t, pw)

	lines := writerFile(t)
	const count = 150 // 3 s of writing: twelve heartbeat periods
	// A lease of 6 s (safe period 4 s) with the tests' 250 ms heartbeat:
	// with one heartbeat in two failing, a scheduler made late by a busy
	// machine must not put the lock in danger; what is tested is that
	// the unread stderr does not.
	args := append([]string{"--lease", "6s", "--heartbeat", testHeartbeat.String(), "job", "--"}, writerCommand(t, "A", lines, writerEvery, count)...)
	cmd := exec.Command(binPath, f.args("run", args...)...)
	cmd.Env = env
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})

	// Fail one heartbeat in two, never two in a row: each failure is a
	// warning on stderr, and none can put the lock in danger (four
	// heartbeats fit in the safe period).
	failed := 0
	var read bytes.Buffer
	readDone := make(chan struct{})
	// Someone reads stderr at last: what was queued must come out.
	startReading := sync.OnceFunc(func() {
		go func() {
			_, _ = io.Copy(&read, pr)
			close(readDone)
		}()
	})
	for ended := false; !ended; {
		fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem", Count: 1})
		before := proxy.Counts().ByOp["UpdateItem"]
		for !ended && (fault.Injected() == 0 || proxy.Counts().ByOp["UpdateItem"] < before+2) {
			select {
			case <-done:
				ended = true
			case <-time.After(10 * time.Millisecond):
			}
		}
		fault.Remove()
		failed += int(fault.Injected())
		if failed >= 4 {
			startReading()
		}
	}
	startReading()
	if !cmd.ProcessState.Success() {
		t.Errorf("ddblock run with an unread stderr: %v (want exit 0: the lock kept, the command run to its end)", cmd.ProcessState)
	}
	if failed < 4 {
		t.Fatalf("only %d heartbeats failed: the test did not make ddblock log", failed)
	}
	if n := len(linesOf(readWriterLines(t, lines), "A")); n != count {
		t.Errorf("the command wrote %d lines of %d: it was stopped", n, count)
	}
	<-readDone
	out := read.String()
	if len(out) < filled {
		t.Fatalf("read back %d bytes of stderr, less than the %d put in", len(out), filled)
	}
	said := out[filled:]
	if !strings.Contains(said, "heartbeat failed") {
		t.Errorf("the queued warnings did not come out once stderr was read:\n%s", said)
	}
	t.Logf("%d heartbeats failed while stderr was full; ddblock said, once read:\n%s", failed, said)
}

// fillPipe writes to w until the pipe is full, and returns how much it
// took.
func fillPipe(t *testing.T, w *os.File) int {
	t.Helper()
	raw, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var werr error
	err = raw.Control(func(fd uintptr) {
		if werr = syscall.SetNonblock(int(fd), true); werr != nil {
			return
		}
		buf := bytes.Repeat([]byte("x"), 4096)
		for {
			m, err := syscall.Write(int(fd), buf)
			if m > 0 {
				n += m
			}
			if errors.Is(err, syscall.EAGAIN) {
				break
			}
			if err != nil {
				werr = err
				return
			}
		}
		// Back to blocking, as a pipe nobody reads is to its writer.
		werr = syscall.SetNonblock(int(fd), false)
	})
	if err != nil || werr != nil {
		t.Fatalf("filling the pipe: %v %v", err, werr)
	}
	return n
}

// A DynamoDB failure on the first try does not end a run that may wait:
// it says so and tries again within --wait. With --wait 0 it ends at
// once, exit 69.
func TestRunRetriesTransientFailure(t *testing.T) {
	f, proxy := newProxiedFixture(t)
	f.env = append(f.env, "AWS_MAX_ATTEMPTS=1")

	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "PutItem", Count: 1})
	r := f.run("run", append(slices.Clone(timingFlags), "--wait", "0", "job", "--", "true")...)
	if r.code != exitUnavailable || fault.Injected() != 1 || !strings.Contains(r.stderr, "InternalServerError") {
		t.Errorf("--wait 0 with a failing first try: want exit %d naming the error: %v", exitUnavailable, r)
	}
	fault.Remove()

	fault = proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "PutItem", Count: 1})
	r = f.run("run", append(slices.Clone(timingFlags), "--wait", "10s", "job", "--", "true")...)
	if r.code != 0 || fault.Injected() != 1 || !strings.Contains(r.stderr, `could not take lock "job"/"-" yet`) ||
		!strings.Contains(r.stderr, "trying again for up to 10s") || !strings.Contains(r.stderr, "acquired lock") {
		t.Errorf("--wait 10s with a failing first try: want the run to try again and succeed: %v", r)
	}
}

// A --session run whose session's heartbeats stop landing while it waits
// puts no lock on the session (the library refuses to, LOCK_IN_DANGER)
// and, when --wait runs out so, exits 69, DynamoDB unavailable, naming
// the session: not 70, which says ddblock itself went wrong.
func TestRunSessionInDangerWhileWaiting(t *testing.T) {
	f, proxy := newProxiedFixture(t)
	f.env = append(f.env, "AWS_MAX_ATTEMPTS=1")

	// Every heartbeat of a run's session (an UpdateItem of its
	// ddblock_session# item) fails, so 600 ms (the safe period) after
	// the session is made it is in danger for good.
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem", BodyContains: "ddblock_session#"})
	// A held lock keeps the run waiting until its session is in danger:
	// an attempt that finds the lock held goes no further. Released
	// then, the lock is free, and every attempt after is refused for
	// the session. A machine so slow that the wait ran out before the
	// release tries again with a longer wait.
	for wait := 4 * time.Second; ; wait *= 2 {
		holder := f.acquire("holder", "job")
		failedBefore := fault.Injected()
		began := time.Now()
		p := f.start("run", "--session", "--lease", "900ms", "--heartbeat", "100ms", "--wait", wait.String(), "job", "--", "true")
		// A tenth failed heartbeat comes at least nine periods (900 ms)
		// after the session was made.
		p.eventuallyWhileRunning("the run's session to be in danger", func() bool { return fault.Injected()-failedBefore >= 10 })
		if err := holder.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		released := time.Since(began)
		r := p.wait()
		if r.code == exitBusy && released > wait-time.Second && wait < time.Minute {
			t.Logf("released %v into a %v wait: too late to be sure of an attempt after it; again with a longer wait", released, wait)
			continue
		}
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "LOCK_IN_DANGER") || !strings.Contains(r.stderr, "session") {
			t.Errorf("want exit %d naming the session in danger: %v", exitUnavailable, r)
		}
		if info := f.lookup("job", "-"); info != nil {
			t.Errorf("the run put a lock on a session in danger: %+v", info)
		}
		return
	}
}

// The guard judges its first deadline only after reading what ddblock
// sent while it started: a guard slow to start (a loaded machine) whose
// given deadline has passed still starts the command if a newer one is
// in its pipe, and refuses to if none comes.
func TestGuardStartDeadline(t *testing.T) {
	start := func(t *testing.T, startWait ...time.Duration) *guardProc {
		t.Helper()
		spec := guardSpec{
			self: binPath, path: "/bin/sh", argv: []string{"sh", "-c", "exit 7"}, env: baseEnv(),
			grace: 100 * time.Millisecond, deadline: machineNow() - int64(time.Second),
			stdout: io.Discard, stderr: io.Discard,
		}
		if len(startWait) > 0 {
			spec.startWait = startWait[0]
		}
		g, err := startGuard(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			g.close()
			select {
			case <-g.exited:
			case <-time.After(time.Minute):
				_ = g.cmd.Process.Kill()
				t.Error("the guard did not end")
			}
		})
		return g
	}
	events := func(g *guardProc) string {
		var kinds []string
		for ev := range g.events {
			kinds = append(kinds, strings.TrimSpace(ev.kind+" "+ev.arg))
		}
		return strings.Join(kinds, ",")
	}
	t.Run("newer deadline", func(t *testing.T) {
		g := start(t)
		g.extend(machineNow() + int64(time.Minute))
		got := events(g)
		if !strings.HasPrefix(got, "P ") || !strings.HasSuffix(got, ",X 7") {
			t.Errorf("guard events %q: want the command started (P) and its status (X 7)", got)
		}
	})
	t.Run("newer deadline after 2s, within its start wait", func(t *testing.T) {
		// ddblock passes the lease as the start wait: a heartbeat period
		// over 2 s must not make the guard give up before the next
		// heartbeat's deadline comes.
		g := start(t, time.Minute)
		time.Sleep(2500 * time.Millisecond)
		g.extend(machineNow() + int64(time.Minute))
		got := events(g)
		if !strings.HasPrefix(got, "P ") || !strings.HasSuffix(got, ",X 7") {
			t.Errorf("guard events %q: want the command started (P) and its status (X 7)", got)
		}
	})
	t.Run("no newer deadline", func(t *testing.T) {
		g := start(t)
		if got := events(g); got != "N" {
			t.Errorf("guard events %q: want N, the command not started", got)
		}
	})
	t.Run("asked to stop", func(t *testing.T) {
		g := start(t)
		g.terminate()
		if got := events(g); got != "N" {
			t.Errorf("guard events %q: want N, the command not started", got)
		}
	})
}

// A guard that starts after its deadline waits for a newer one for as
// long as ddblock told it (-start-wait, the lease), and refuses to start
// the command once that wait is over without one.
func TestGuardAwaitStartWaitsStartWait(t *testing.T) {
	for _, tc := range []struct {
		startWait time.Duration
		want      bool
	}{
		{startWait: 50 * time.Millisecond, want: false}, // the newer deadline comes too late
		{startWait: time.Minute, want: true},
	} {
		// In a bubble, the timers are fake and fire in order whatever the
		// machine's load: the start wait's before the message's, or after.
		synctest.Test(t, func(t *testing.T) {
			g := &guard{deadline: machineNow() - int64(time.Second), startWait: tc.startWait}
			msgs := make(chan guardMsg, 1)
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				time.Sleep(time.Second)
				msgs <- guardMsg{line: "D " + strconv.FormatInt(machineNow()+int64(time.Minute), 10)}
			}()
			_, ok := g.awaitStart(msgs)
			if ok != tc.want {
				t.Errorf("start wait %v, a newer deadline 1s later: started %v, want %v", tc.startWait, ok, tc.want)
			}
			<-sent
		})
	}
}
