package main

// The end-to-end tests build the ddblock binary once, and run it as an
// operator would against one local DynamoDB-compatible server (through
// internal/ddbtest: dynalite or DynamoDB Local, as DDBLOCK_TEST_SERVER
// picks), started when the first test needs it (newFixture, needServer):
// the unit tests run without Node.js or Java.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/testserver"
)

var (
	// binPath is the ddblock binary under test.
	binPath string

	// server and sdk are set by needServer, which a test calls before it
	// reads them (newFixture does).
	server     *ddbtest.Server
	sdk        *dynamodb.Client // talks to the server directly, for setting up and checking
	serverOnce sync.Once
)

func TestMain(m *testing.M) { ddbtest.Main(runTests{m}) }

// runTests builds the binary before the tests run, and removes it after,
// inside ddbtest.Main, which stops the shared server and exits.
type runTests struct{ m *testing.M }

func (r runTests) Run() int {
	dir, err := os.MkdirTemp("", "ddblock-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "ddblock")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		// The binary runs under the race detector too when the tests do.
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: building ddblock: %v\n%s", err, out)
		return 1
	}
	return r.m.Run()
}

// needServer starts the tests' server if no test has yet, and sets server
// and sdk; it fails the test, saying why, when the server cannot start.
func needServer(t *testing.T) {
	t.Helper()
	s := ddbtest.Shared(t)
	serverOnce.Do(func() { server, sdk = s, s.Client(0) })
}

// Real lock timing for the binary, long enough that a busy machine
// cannot eat it: a holder whose process, or the server, stalls for a
// second or two still heartbeats within its safe period (over 3 s), so a
// waiter never takes its lock while the test expects it held. A dead
// holder is taken over within seconds. Tests assert the order of events,
// never how long they took.
const (
	testLease     = 5 * time.Second
	testHeartbeat = 250 * time.Millisecond
	testSafe      = testLease * 2 / 3 // what ddblock run derives
)

var timingFlags = []string{"--lease", testLease.String(), "--heartbeat", testHeartbeat.String()}

// baseEnv is the environment of every ddblock the tests start: nothing of
// the developer's DDBLOCK_ settings, and the credentials and region the
// test server expects (ddbtest decides them, so that the binary sees the
// tables the tests create).
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DDBLOCK_") {
			env = append(env, kv)
		}
	}
	// A race-enabled binary stops at the first race, and does not sleep
	// the race detector's default second before a successful exit.
	env = append(env, "GORACE=halt_on_error=1 atexit_sleep_ms=0")
	return testserver.ChildEnv(env)
}

// fixture is one test's lock table.
type fixture struct {
	t        *testing.T
	table    string
	endpoint string
	env      []string
}

// newFixture creates a table of the test's own.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	needServer(t)
	f := &fixture{t: t, table: ddbtest.TableName(t), endpoint: server.Endpoint, env: baseEnv()}
	ddbtest.CreateTable(t, sdk, f.table)
	return f
}

// args puts the connection flags after the subcommand.
// newProxiedFixture is a fixture whose ddblock processes reach the
// server through a fault proxy; the test's own clients (holder, lookup)
// still talk to the server directly.
func newProxiedFixture(t *testing.T) (*fixture, *faultproxy.Proxy) {
	t.Helper()
	needServer(t)
	if server.External {
		t.Skip("the fault proxy speaks plain HTTP to a local server")
	}
	f := newFixture(t)
	proxy, err := faultproxy.Start(server.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	f.endpoint = proxy.URL()
	return f, proxy
}

func (f *fixture) args(sub string, rest ...string) []string {
	return append([]string{sub, "--endpoint", f.endpoint, "--table", f.table}, rest...)
}

// result is how a ddblock process ended.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// run runs ddblock SUB with the fixture's table to completion.
func (f *fixture) run(sub string, rest ...string) result {
	f.t.Helper()
	return f.start(sub, rest...).wait()
}

// runRaw runs ddblock with exactly args.
func (f *fixture) runRaw(args ...string) result {
	f.t.Helper()
	return f.startRaw(args...).wait()
}

func (f *fixture) start(sub string, rest ...string) *proc {
	f.t.Helper()
	return f.startRaw(f.args(sub, rest...)...)
}

// proc is a ddblock process started in the background; it is killed if
// the test ends before it does.
type proc struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	res            result
}

func (f *fixture) startRaw(args ...string) *proc {
	f.t.Helper()
	p := &proc{t: f.t, done: make(chan struct{})}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Env = f.env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		f.t.Fatalf("starting ddblock: %v", err)
	}
	go func() {
		err := p.cmd.Wait()
		p.res = result{code: p.cmd.ProcessState.ExitCode(), stdout: p.stdout.String(), stderr: p.stderr.String()}
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.res.stderr += "\n(wait: " + err.Error() + ")"
		}
		if strings.Contains(p.res.stderr, "WARNING: DATA RACE") {
			p.t.Errorf("ddblock %s had a data race:\n%s", strings.Join(p.cmd.Args[1:], " "), p.res.stderr)
		}
		close(p.done)
	}()
	f.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the process to end, a minute at most.
func (p *proc) wait() result {
	p.t.Helper()
	select {
	case <-p.done:
		return p.res
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("ddblock %s did not end within a minute:\n%v", strings.Join(p.cmd.Args[1:], " "), p.res)
		return result{}
	}
}

// signal sends sig to the ddblock process.
func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signalling ddblock: %v", err)
	}
}

// syncBuffer is a bytes.Buffer that a process may write while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// eventually polls cond until it holds, failing the test after 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ddbtest.Eventually(t, 20*time.Second, what, cond)
}

// eventuallyWhileRunning is eventually, for a condition that p must bring
// about: if p ends first, the test fails at once, with what p said.
func (p *proc) eventuallyWhileRunning(what string, cond func() bool) {
	p.t.Helper()
	eventually(p.t, what, func() bool {
		if cond() {
			return true
		}
		select {
		case <-p.done:
			if !cond() {
				p.t.Fatalf("ddblock %s ended before %s: %v", strings.Join(p.cmd.Args[1:], " "), what, p.res)
			}
			return true
		default:
			return false
		}
	})
}

// readFile returns a file's content, "" while it does not exist.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// oneLineOn checks that a failure said one line on stderr, containing want.
func oneLineOn(t *testing.T, r result, want string) {
	t.Helper()
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Errorf("want exactly one line on stderr, got:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not contain %q", r.stderr, want)
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// inProcess is an in-process client on the fixture's table, talking to
// the server directly, closed (releasing what it holds) when the test
// ends.
func (f *fixture) inProcess(owner string, opts ...ddblock.Option) *ddblock.Client {
	f.t.Helper()
	c, err := ddblock.New(sdk, append([]ddblock.Option{ddblock.WithTableName(f.table), ddblock.WithOwnerName(owner),
		ddblock.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		f.t.Fatalf("New: %v", err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx, true)
	})
	return c
}

// holder is an in-process lock client on the fixture's table, with
// timings long enough that it does not heartbeat during a test.
func (f *fixture) holder(owner string) *ddblock.Client {
	f.t.Helper()
	return f.inProcess(owner, ddblock.WithHeartbeatPeriod(time.Minute),
		ddblock.WithSafePeriod(2*time.Minute), ddblock.WithLeaseDuration(3*time.Minute))
}

// acquire takes a lock with an in-process holder.
func (f *fixture) acquire(owner, key string, opts ...ddblock.AcquireOption) *ddblock.Lock {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := f.holder(owner).AcquireLock(ctx, key, opts...)
	if err != nil {
		f.t.Fatalf("AcquireLock(%q): %v", key, err)
	}
	return l
}

// lookup reads a lock straight from the table; nil when there is none.
func (f *fixture) lookup(key, sortKey string) *ddblock.LockInfo {
	f.t.Helper()
	c, err := ddblock.New(sdk, ddblock.WithTableName(f.table), ddblock.WithLogger(quietLog))
	if err != nil {
		f.t.Fatal(err)
	}
	defer closeClient(c)
	info, err := c.GetLock(context.Background(), key, sortKey)
	if errors.Is(err, ddblock.CodeLockNotFound) {
		return nil
	}
	if err != nil {
		f.t.Fatalf("GetLock(%q): %v", key, err)
	}
	return info
}

// processGone reports whether pid has ended (a zombie counts: it runs
// nothing, and containers do not always reap orphans).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name in parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] == 'Z'
	}
	return false
}

// cutProxy forwards TCP connections to the server until it is cut; then
// it drops every connection and refuses new ones: a network failure in
// front of the real server.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.sever()
		p.wg.Wait()
	})
	return p
}

// endpoint is the proxy's URL.
func (p *cutProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *cutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(up) {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
}

// sever cuts the network: open connections drop, new ones are refused.
func (p *cutProxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}
