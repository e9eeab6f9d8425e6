// Package reliability shows, with numbers, how ddblock behaves on a bad
// day: many clients in several processes contend for a few keys while a
// fault proxy in front of the local DynamoDB server misbehaves and
// holders are killed and paused, and a checker asserts that no two
// holders ever worked under one lock at once. See doc/reliability.md.
package reliability

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

var (
	soakFor = flag.Duration("soak", 0, "run TestSoak for this long (such as 10m); 0 skips it")
	logDir  = flag.String("logdir", "", "keep the checker's event logs in this directory")
	// fairProgress makes a fair waiter's progress violation fail the
	// test, as an unfair waiter's does (issue 30); -fair-progress=false
	// only reports them.
	fairProgress = flag.Bool("fair-progress", true, "fail the chaos runs on progress violations of fair waiters too (=false: report them only)")
)

func TestMain(m *testing.M) { ddbtest.Main(m) }

// workerBinary builds ./worker into the test's temp dir, with the race
// detector when this test binary has it, so that the worker processes
// are checked as the in-process clients are. It is built by the tests
// that need it rather than in TestMain because ddbtest.Main ends the
// process, which would leave TestMain no moment to remove the build;
// the Go build cache keeps a second build to a link.
func workerBinary(t *testing.T) string {
	t.Helper()
	return goBuild(t, "./worker", "worker")
}

// goBuild builds the package pkg into the test's temp dir as name, with
// the race detector when this test binary has it.
func goBuild(t *testing.T, pkg, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goTool, append(args, pkg)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out
}

// quiet drops the library's log records: the faults make it warn a lot.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// env is one test's lock table on the shared server.
type env struct {
	t     *testing.T
	table string
	// direct is an SDK client straight to the server, past any proxy.
	direct *dynamodb.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := ddbtest.Shared(t)
	e := &env{t: t, table: ddbtest.TableName(t), direct: srv.Client(0)}
	ddbtest.CreateTable(t, e.direct, e.table)
	return e
}

// proxy starts a fault proxy in front of the server, closed at the end
// of the test.
func (e *env) proxy() *faultproxy.Proxy {
	e.t.Helper()
	p, err := faultproxy.Start(ddbtest.Shared(e.t).Endpoint)
	if err != nil {
		e.t.Fatalf("faultproxy.Start: %v", err)
	}
	e.t.Cleanup(func() { _ = p.Close() })
	return p
}

// client returns a lock client on ddb with the test's table, closed at
// the end of the test.
func (e *env) client(ddb ddblock.DynamoDBAPI, opts ...ddblock.Option) *ddblock.Client {
	e.t.Helper()
	all := append([]ddblock.Option{ddblock.WithTableName(e.table), ddblock.WithLogger(quiet)}, opts...)
	c, err := ddblock.New(ddb, all...)
	if err != nil {
		e.t.Fatalf("ddblock.New: %v", err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx, false)
	})
	return c
}

// times returns the heartbeat, safe and lease options.
func times(heartbeat, safe, lease time.Duration) []ddblock.Option {
	return []ddblock.Option{
		ddblock.WithHeartbeatPeriod(heartbeat),
		ddblock.WithSafePeriod(safe),
		ddblock.WithLeaseDuration(lease),
	}
}

// eventually polls cond until it holds, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	ddbtest.Eventually(t, limit, what, cond)
}
