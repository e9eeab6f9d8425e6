// Package ddbtest gives ddblock's tests a DynamoDB-compatible server: one
// per test binary (see package testserver: dynalite or DynamoDB Local, as
// DDBLOCK_TEST_SERVER picks, or the server DDBLOCK_TEST_ENDPOINT names),
// shared by its tests, each on a table of its own.
//
// The server starts when a test first asks for it ([Shared]), not before:
// the pure and fuzz tests of a binary run without Node.js or Java. Main
// stops it after the last test.
//
// Where the servers legitimately differ (the old item returned on a
// failed conditional write, TTL), a test asks the server what it does
// ([Server.ReturnsOldItem], [Server.HasTTL]) and asserts the exact
// behaviour for that case.
//
// A server with transactions that this package starts is put behind a
// [faultproxy.Proxy] that emulates DynamoDB's transaction conflicts,
// which DynamoDB Local never raises: the Server's Endpoint is the
// proxy's, so that every client of the tests (child processes included)
// meets the conflicts real DynamoDB would give it. [Emulator] returns
// that proxy, [DirectEndpoint] the server's own address, and
// DDBLOCK_TEST_CONFLICTS ([ConflictsEnv]) tunes or disables it.
package ddbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/testserver"
)

// EndpointEnv names the variable that points the tests at a server of
// the user's choosing; it wins over ServerEnv.
const EndpointEnv = testserver.EndpointEnv

// ServerEnv names the variable that picks the server the tests start:
// dynalite (the default) or dynamodb-local.
const ServerEnv = testserver.ServerEnv

// ConflictsEnv names the variable that tunes the transaction conflict
// emulation in front of a server with transactions: unset, the
// emulation holds each transaction for faultproxy's default duration; a
// Go duration ("50ms") sets that duration; "off" puts no proxy in front
// of the server.
const ConflictsEnv = "DDBLOCK_TEST_CONFLICTS"

// Server is a running DynamoDB-compatible server.
type Server = testserver.Server

// front is the conflict-emulating proxy in front of a server.
type front struct {
	proxy  *faultproxy.Proxy
	direct string // the server's own endpoint
}

var (
	frontsMu sync.Mutex
	fronts   = map[*Server]*front{}
)

// conflictOptions reads ConflictsEnv: whether to emulate, and how.
func conflictOptions() (bool, []faultproxy.Option, error) {
	switch v := strings.TrimSpace(os.Getenv(ConflictsEnv)); v {
	case "":
		return true, nil, nil
	case "off":
		return false, nil, nil
	default:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return false, nil, fmt.Errorf("%s=%q: want off or a duration such as 20ms", ConflictsEnv, v)
		}
		return true, []faultproxy.Option{faultproxy.WithTransactionDuration(d)}, nil
	}
}

// putFront puts a conflict-emulating proxy in front of a probed server
// that has transactions, unless ConflictsEnv says off or the server is
// not reached over plain HTTP (real DynamoDB raises its own conflicts),
// and points s.Endpoint at it.
func putFront(s *Server) error {
	if !s.HasTransactions() || !strings.HasPrefix(s.Endpoint, "http://") {
		return nil
	}
	on, opts, err := conflictOptions()
	if err != nil || !on {
		return err
	}
	p, err := faultproxy.Start(s.Endpoint, opts...)
	if err != nil {
		return fmt.Errorf("starting the transaction conflict emulator: %w", err)
	}
	frontsMu.Lock()
	fronts[s] = &front{proxy: p, direct: s.Endpoint}
	frontsMu.Unlock()
	s.Endpoint = p.URL()
	return nil
}

// removeFront closes the proxy in front of s, if any, and gives s its own
// endpoint back.
func removeFront(s *Server) {
	frontsMu.Lock()
	f := fronts[s]
	delete(fronts, s)
	frontsMu.Unlock()
	if f != nil {
		_ = f.proxy.Close()
		s.Endpoint = f.direct
	}
}

// Emulator returns the proxy that emulates transaction conflicts in front
// of s (a server this package started), or nil when there is none: the
// server has no transactions, or ConflictsEnv is off. A test can read its
// Counts to see the conflicts it met.
func Emulator(s *Server) *faultproxy.Proxy {
	frontsMu.Lock()
	defer frontsMu.Unlock()
	if f := fronts[s]; f != nil {
		return f.proxy
	}
	return nil
}

// DirectEndpoint returns the server's own endpoint, past the conflict
// emulator when there is one: for a test that must not meet emulated
// conflicts.
func DirectEndpoint(s *Server) string {
	frontsMu.Lock()
	defer frontsMu.Unlock()
	if f := fronts[s]; f != nil {
		return f.direct
	}
	return s.Endpoint
}

// Start starts a server the environment asks for (see package
// testserver) and probes what it does; the error says why when it cannot.
// A server with transactions is put behind a conflict-emulating proxy
// (see [Emulator]). The caller stops it with [Stop]. Tests share one with
// [Shared] instead.
func Start() (*Server, error) {
	s, err := testserver.StartFromEnv()
	if err != nil {
		return nil, err
	}
	return probeAndFront(s)
}

// probeAndFront probes a server just started and puts the conflict
// emulator in front of it when it has transactions; it stops the server
// on failure.
func probeAndFront(s *Server) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := s.Probe(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	if err := putFront(s); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop closes the conflict emulator in front of a server that [Start]
// started, if any, and stops the server. A nil server is ignored.
func Stop(s *Server) {
	if s == nil {
		return
	}
	removeFront(s)
	s.Stop()
}

// Describe is one line that says which server the tests run against and
// what it does, for a test binary's log.
func Describe(s *Server) string {
	yes := map[bool]string{true: "yes", false: "no"}
	conflicts := "none (no transactions)"
	if p := Emulator(s); p != nil {
		conflicts = fmt.Sprintf("emulated by faultproxy at %s, %v a transaction", s.Endpoint, p.TransactionDuration())
	} else if s.HasTransactions() {
		conflicts = "the server's own"
		if !s.External {
			conflicts = "not emulated (" + ConflictsEnv + "=off)"
		}
	}
	name := fmt.Sprintf("%s at %s", s.Kind, DirectEndpoint(s))
	if s.External {
		name = "the external server at " + DirectEndpoint(s)
	}
	return fmt.Sprintf("ddbtest: testing against %s (returns the old item on a failed condition: %s; TTL: %s; transactions: %s; transaction conflicts: %s)",
		name, yes[s.ReturnsOldItem()], yes[s.HasTTL()], yes[s.HasTransactions()], conflicts)
}

// NewClient returns an SDK client for endpoint; see testserver.NewClient.
// Prefer Server.Client, or Server.ClientFor for a proxy in front of the
// server: they sign as the server expects.
func NewClient(endpoint string, external bool, retryMaxAttempts int) *dynamodb.Client {
	return testserver.NewClient(endpoint, external, retryMaxAttempts)
}

var (
	sharedMu sync.Mutex
	tried    bool // the shared server was started, or failed to start
	shared   *Server
	startErr error

	tableCount atomic.Int64
)

// startFailed is how a test fails when the server cannot start.
const startFailed = "the DynamoDB-compatible server for the tests could not start"

// Get returns the server the binary's tests share, starting it the first
// time it is asked for. A server that fails to start is not tried again:
// every later call returns the same error.
func Get() (*Server, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if !tried {
		tried = true
		shared, startErr = Start()
		if startErr != nil {
			startErr = fmt.Errorf("%s: %w", startFailed, startErr)
		} else {
			fmt.Fprintln(os.Stderr, Describe(shared))
		}
	}
	return shared, startErr
}

// Main runs a test binary's tests (m is its *testing.M, or something
// that wraps its Run), and afterwards says what the conflict emulators
// did and stops the shared server if a test started it. A test that
// needs the server and finds that it cannot start fails with the reason
// ([Shared]); the others run.
func Main(m interface{ Run() int }) {
	code := m.Run()
	sharedMu.Lock()
	s := shared
	sharedMu.Unlock()
	for _, srv := range []*Server{s, transactional} {
		if line := conflictReport(srv); line != "" {
			fmt.Fprintln(os.Stderr, line)
		}
	}
	stopTransactional(s)
	Stop(s)
	os.Exit(code)
}

// conflictReport is one line that says what the conflict emulator in
// front of s did, or "" when there is none.
func conflictReport(s *Server) string {
	if s == nil {
		return ""
	}
	p := Emulator(s)
	if p == nil {
		return ""
	}
	c := p.Counts()
	ops := make([]string, 0, len(c.Conflicts))
	for op := range c.Conflicts {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	refused := "none"
	if len(ops) > 0 {
		parts := make([]string, len(ops))
		for i, op := range ops {
			parts[i] = fmt.Sprintf("%s %d", op, c.Conflicts[op])
		}
		refused = strings.Join(parts, ", ")
	}
	return fmt.Sprintf("ddbtest: the conflict emulator in front of %s held %d transactions; conflicts: %s; in progress: %d",
		s.Kind, c.Transactions, refused, c.InProgress)
}

// SharedServer is [Shared] for code without a testing.TB, such as an
// Example: it panics with the reason when the server cannot start.
func SharedServer() *Server {
	s, err := Get()
	if err != nil {
		panic("ddbtest: " + err.Error())
	}
	return s
}

// Shared returns the server the binary's tests share, starting it if need
// be; it fails the test, saying why, when the server cannot start.
func Shared(t testing.TB) *Server {
	t.Helper()
	s, err := Get()
	if err != nil {
		t.Fatalf("ddbtest: %v", err)
	}
	return s
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// TableName returns a table name of its own for the test.
func TableName(t testing.TB) string {
	name := unsafeName.ReplaceAllString(t.Name(), "_")
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s_%d_%d", name, os.Getpid(), tableCount.Add(1))
}

// CreateTable creates a lock table for a test, on demand, with ddblock's
// default attribute names changed by opts, and fails the test if it
// cannot. It also checks the TTL outcome exactly:
// TTL enabled where the server has TTL, TTL_UNSUPPORTED where it has not.
func CreateTable(t testing.TB, ddb ddblock.TableAPI, name string, opts ...ddblock.TableOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append([]ddblock.TableOption{
		ddblock.WithNamesFromOptions(ddblock.Options{
			TableName:        name,
			PartitionKeyName: ddblock.DefaultPartitionKeyName,
			SortKeyName:      ddblock.DefaultSortKeyName,
			TTLAttributeName: ddblock.DefaultTTLAttributeName,
		}),
		ddblock.WithOnDemand(), ddblock.WithPollInterval(10 * time.Millisecond),
	}, opts...)
	srv := Shared(t)
	err := ddblock.CreateTable(ctx, ddb, all...)
	switch {
	case srv.HasTTL():
		if err != nil {
			t.Fatalf("CreateTable(%s) on %s, which has TTL: %v", name, srv.Name(), err)
		}
	case !errors.Is(err, ddblock.CodeTTLUnsupported):
		t.Fatalf("CreateTable(%s) on %s, which has no TTL: %v; want TTL_UNSUPPORTED", name, srv.Name(), err)
	}
}

var (
	transactionalOnce sync.Once
	transactional     *Server
	transactionalErr  error
)

// Transactional returns a server with transactions: the shared one where
// it has them, else a DynamoDB Local started once for the binary and
// stopped by Main, behind a conflict emulator like the shared one. The
// runnable examples of guarded writes use it, so that their output is
// the same in every pass of the suite.
func Transactional() (*Server, error) {
	if s, err := Get(); err == nil && s.HasTransactions() {
		return s, nil
	}
	transactionalOnce.Do(func() {
		s, err := testserver.Start(testserver.DynamoDBLocal)
		if err == nil {
			s, err = probeAndFront(s)
		}
		if err == nil {
			fmt.Fprintln(os.Stderr, Describe(s))
		}
		transactional, transactionalErr = s, err
	})
	return transactional, transactionalErr
}

// stopTransactional stops the server Transactional started, if any and
// if it is not the shared one.
func stopTransactional(shared *Server) {
	if transactional != nil && transactional != shared {
		Stop(transactional)
	}
}
