package reliability

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// workerProc is a worker process position: one incarnation at a time,
// started, killed, paused and stopped by the test, which reports as a
// problem any exit it did not cause. The checker's workers (workerSlot)
// and the lost-update run's (counterWorker) both are one.
type workerProc struct {
	name    string
	problem func(format string, args ...any)

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   *bytes.Buffer
	stderr   *bytes.Buffer
	exited   chan struct{}
	expected *atomic.Bool // set before we end the process on purpose
	tail     *eventTail
}

// launchLocked starts cmd as incarnation id, following its event log
// with tail; w.mu is held.
func (w *workerProc) launchLocked(id string, cmd *exec.Cmd, tail *eventTail) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.problem("worker %s: %v", id, err)
		return
	}
	stdout, stderr := &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		w.problem("starting worker %s: %v", id, err)
		return
	}
	exited := make(chan struct{})
	expected := new(atomic.Bool)
	w.cmd, w.stdin, w.stdout, w.stderr, w.exited, w.expected, w.tail = cmd, stdin, stdout, stderr, exited, expected, tail
	go func() {
		err := cmd.Wait()
		if !expected.Load() {
			w.problem("worker %s exited on its own: %v\n%s", id, err, stderr.String())
		}
		close(exited)
	}()
}

// waitOpen follows the current incarnation's event log until it shows
// something open (a tenure, a write under way: see eventTail), for at
// most limit; false when nothing showed.
func (w *workerProc) waitOpen(ctx context.Context, limit time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return false
	}
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if w.tail.anyOpen() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// kill sends SIGKILL and waits for the process to go.
func (w *workerProc) kill() {
	w.mu.Lock()
	cmd, exited, expected := w.cmd, w.exited, w.expected
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	expected.Store(true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// pause stops the process for d, then lets it go on.
func (w *workerProc) pause(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return
	}
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		w.problem("SIGSTOP %s: %v", w.name, err)
		return
	}
	time.Sleep(d)
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		w.problem("SIGCONT %s: %v", w.name, err)
	}
}

// finish asks the worker to end (by closing its stdin) and waits for it,
// for at most grace; it returns what the worker printed, and false (with
// the problem reported) when it did not end cleanly.
func (w *workerProc) finish(grace time.Duration) ([]byte, bool) {
	w.mu.Lock()
	cmd, stdin, exited, expected, stdout, stderr := w.cmd, w.stdin, w.exited, w.expected, w.stdout, w.stderr
	w.mu.Unlock()
	if cmd == nil {
		return nil, false
	}
	expected.Store(true)
	_ = stdin.Close()
	select {
	case <-exited:
	case <-time.After(grace):
		w.problem("worker %s did not stop within %v of its stdin closing", w.name, grace)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return nil, false
	}
	if !cmd.ProcessState.Success() {
		w.problem("worker %s stopped with %v: %s", w.name, cmd.ProcessState, stderr.String())
		return nil, false
	}
	return stdout.Bytes(), true
}

// killNow is the test's last resort: no worker outlives it.
func (w *workerProc) killNow() {
	w.mu.Lock()
	cmd, exited, expected := w.cmd, w.exited, w.expected
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	expected.Store(true)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// eventTail reads a growing event log and keeps the set of things open
// in it, as track says which event opens or closes which key: tenures
// (acquired, not yet ended) for the checker, writes under way (logged,
// no outcome yet) for the lost-update run.
type eventTail struct {
	path    string
	offset  int64
	partial []byte
	open    map[string]bool
	track   func(ev mutexcheck.Event) (key string, opens, closes bool)
}

func newEventTail(path string, track func(ev mutexcheck.Event) (key string, opens, closes bool)) *eventTail {
	return &eventTail{path: path, open: map[string]bool{}, track: track}
}

// tenures tracks the tenures in progress.
func tenures(ev mutexcheck.Event) (string, bool, bool) {
	return ev.Tenure, ev.Kind == mutexcheck.Acquired, ev.Kind == mutexcheck.Ended
}

// writesUnderWay tracks the counter writes sent and not yet answered.
func writesUnderWay(ev mutexcheck.Event) (string, bool, bool) {
	return ev.Note, ev.Kind == mutexcheck.Write, ev.Kind == mutexcheck.Incremented || ev.Kind == mutexcheck.NotApplied
}

func (t *eventTail) anyOpen() bool {
	f, err := os.Open(t.path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, _ := f.ReadAt(buf, t.offset)
		if n == 0 {
			break
		}
		t.offset += int64(n)
		t.partial = append(t.partial, buf[:n]...)
	}
	if last := bytes.LastIndexByte(t.partial, '\n'); last >= 0 {
		events, _ := mutexcheck.Parse(bytes.NewReader(t.partial[:last+1]))
		t.partial = append([]byte(nil), t.partial[last+1:]...)
		for _, ev := range events {
			switch key, opens, closes := t.track(ev); {
			case opens:
				t.open[key] = true
			case closes:
				delete(t.open, key)
			}
		}
	}
	return len(t.open) > 0
}
