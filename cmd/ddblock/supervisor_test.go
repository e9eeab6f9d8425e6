package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// The supervisor on its own: a real lock on the test server, and a guard
// that is only its two channels, so that a test says exactly which events
// the guard sends, in which order, and reads the control lines queued
// for it.

// fakeGuard is ddblock's side of a guard with no process behind it.
func fakeGuard() *guardProc {
	return &guardProc{
		cmd:    &exec.Cmd{},
		events: make(chan guardEvent, 16),
		exited: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
	}
}

// queued is what ddblock has queued for the guard so far.
func (g *guardProc) queued() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.pending)
}

// sendEvents sends the guard's events, then ends its pipe and its process.
func (g *guardProc) sendEvents(lines ...string) {
	for _, l := range lines {
		word, arg := parseLine(l)
		g.events <- guardEvent{word, arg}
	}
	close(g.events)
	close(g.exited)
}

// commandGroup starts a process in a group of its own, standing for the
// command, and returns its process group.
func commandGroup(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(reaped)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-reaped
	})
	return cmd.Process.Pid
}

// newSupervisor is a supervisor of lock, with a fake guard.
func newSupervisor(lock *ddblock.Lock, stderr *syncBuffer) *supervisor {
	tm := timing{lease: 3 * time.Minute, heartbeat: time.Minute, safe: 2 * time.Minute, grace: 100 * time.Millisecond}
	r := &runner{env: &environ{stderr: stderr}, key: lock.PartitionKey(), sortKey: lock.SortKey(), keys: []string{lock.PartitionKey()},
		lease: tm.lease, sigs: make(chan os.Signal, 1)}
	return &supervisor{r: r, held: held{locks: []*ddblock.Lock{lock}}, g: fakeGuard(), tm: tm, name: lockName(r.key, r.sortKey),
		subject: "lock " + lockName(r.key, r.sortKey), command: []string{"job"}, status: -1}
}

// exitCode is the status an error from exit makes ddblock end with.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return -1
}

// Each way the guard's events can end a run, and what becomes of the
// lock and the command's group.
func TestSupervisorEvents(t *testing.T) {
	for _, tc := range []struct {
		name     string
		events   func(pgid int) []string
		code     int
		message  string // in exit's error
		stderr   []string
		released bool // the lock item is gone afterwards
		killed   bool // the command's group is gone afterwards
	}{{
		name:     "the command ends",
		events:   func(pgid int) []string { return []string{"P " + strconv.Itoa(pgid), "X 3"} },
		code:     3,
		released: true,
	}, {
		name: "the guard's deadline passes",
		events: func(pgid int) []string {
			return []string{"P " + strconv.Itoa(pgid), "T deadline", "K", "X 137"}
		},
		code:     exitLockLost,
		message:  "was not renewed within the safe period while the command ran",
		stderr:   []string{"not renewed within the safe period", "sending SIGKILL"},
		released: true, killed: true,
	}, {
		name:     "the command never started",
		events:   func(int) []string { return []string{"N"} },
		code:     exitLockLost,
		message:  "the command did not run",
		released: true,
	}, {
		name:     "the command is not found",
		events:   func(int) []string { return []string{"E 127 exec: no such file"} },
		code:     exitCommandNotFound,
		message:  "command not found: job (exec: no such file)",
		released: true,
	}, {
		name:    "the guard dies before the command starts",
		events:  func(int) []string { return nil },
		code:    exitInternal,
		message: "before the command started; lock \"job\"/\"-\" is left to expire",
	}, {
		name:     "the guard dies after the command started",
		events:   func(pgid int) []string { return []string{"P " + strconv.Itoa(pgid)} },
		code:     exitInternal,
		message:  "the command was killed and lock \"job\"/\"-\" released",
		released: true, killed: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			lock := f.acquire("me", "job", ddblock.WithSortKeyValue("-"))
			pgid := commandGroup(t)
			var stderr syncBuffer
			s := newSupervisor(lock, &stderr)
			go s.g.sendEvents(tc.events(pgid)...)
			s.watch()
			err := s.exit()
			if got := exitCode(err); got != tc.code {
				t.Errorf("exit status %d (%v), want %d", got, err, tc.code)
			}
			if err != nil && !strings.Contains(err.Error(), tc.message) {
				t.Errorf("exit says %q, want it to say %q", err, tc.message)
			}
			for _, want := range tc.stderr {
				if n := strings.Count(stderr.String(), want); n != 1 {
					t.Errorf("stderr says %q %d times, want once:\n%s", want, n, stderr.String())
				}
			}
			if released := f.lookup("job", "-") == nil; released != tc.released {
				t.Errorf("lock released: %v, want %v", released, tc.released)
			}
			// A SIGKILL sent is acted on when the process next runs:
			// on a busy machine, after exit returns.
			if tc.killed {
				eventually(t, "the command's group to be killed", func() bool { return processGone(pgid) })
			} else if processGone(pgid) {
				t.Errorf("the command's group was killed, want it left alone")
			}
		})
	}
}

// A signal sent to ddblock goes to the guard as a control line, and each
// heartbeat's deadline follows.
func TestSupervisorForwardsSignalsAndDeadlines(t *testing.T) {
	f := newFixture(t)
	lock := f.acquire("me", "job", ddblock.WithSortKeyValue("-"))
	var stderr syncBuffer
	s := newSupervisor(lock, &stderr)
	s.tm.heartbeat = 20 * time.Millisecond // polls every 5 ms
	done := make(chan error, 1)
	go func() {
		s.watch()
		done <- s.exit()
	}()
	s.r.sigs <- syscall.SIGUSR1
	want := []string{protoLine(ctlSignal, strconv.Itoa(int(syscall.SIGUSR1))), protoLine(ctlDeadline, strconv.FormatInt(s.safeUntil(), 10))}
	eventually(t, "the signal and the deadline queued for the guard", func() bool {
		q := s.g.queued()
		return slices.Contains(q, want[0]) && slices.Contains(q, want[1])
	})
	s.g.sendEvents("X 0")
	if err := <-done; exitCode(err) != 0 {
		t.Errorf("exit %v, want status 0", err)
	}
}

// A lock lost while the command runs: the guard is told to stop it, and
// when the guard does not act (stopped, say), ddblock kills the group
// itself once the grace is over, and exits 76.
func TestSupervisorLockLostGuardSilent(t *testing.T) {
	f := newFixture(t)
	c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithOwnerName("me"), ddblock.WithLogger(quietLog),
		ddblock.WithHeartbeatPeriod(50*time.Millisecond), ddblock.WithSafePeriod(time.Minute), ddblock.WithLeaseDuration(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeClient(c) })
	lock, err := c.AcquireLock(context.Background(), "job", ddblock.WithSortKeyValue("-"))
	if err != nil {
		t.Fatal(err)
	}
	pgid := commandGroup(t)
	var stderr syncBuffer
	s := newSupervisor(lock, &stderr)
	done := make(chan error, 1)
	go func() {
		s.watch()
		done <- s.exit()
	}()
	s.g.events <- guardEvent{evStarted, strconv.Itoa(pgid)}

	// Someone removes the lock: the next heartbeat finds it stolen.
	if _, err := sdk.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{
		TableName: aws.String(f.table),
		Key: map[string]types.AttributeValue{
			"lock_key": &types.AttributeValueMemberS{Value: "job"},
			"sort_key": &types.AttributeValueMemberS{Value: "-"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ddblock to ask the guard to stop the command", func() bool {
		return slices.Contains(s.g.queued(), ctlTerminate)
	})
	eventually(t, "ddblock to kill the command's group itself", func() bool { return processGone(pgid) })
	s.g.sendEvents("X 137")
	err = <-done
	if exitCode(err) != exitLockLost || !strings.Contains(err.Error(), "was lost while the command ran (LOCK_STOLEN)") {
		t.Errorf("exit %v, want status %d saying the lock was stolen", err, exitLockLost)
	}
	for _, want := range []string{"lost (LOCK_STOLEN): sending SIGTERM", "sending SIGKILL"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}
