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
package ddbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/testserver"
)

// EndpointEnv names the variable that points the tests at a server of
// the user's choosing; it wins over ServerEnv.
const EndpointEnv = testserver.EndpointEnv

// ServerEnv names the variable that picks the server the tests start:
// dynalite (the default) or dynamodb-local.
const ServerEnv = testserver.ServerEnv

// Server is a running DynamoDB-compatible server.
type Server = testserver.Server

// Start starts a server the environment asks for (see package
// testserver) and probes what it does; the error says why when it cannot.
// The caller stops it. Tests share one with [Shared] instead.
func Start() (*Server, error) {
	s, err := testserver.StartFromEnv()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := s.Probe(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Describe is one line that says which server the tests run against and
// what it does, for a test binary's log.
func Describe(s *Server) string {
	yes := map[bool]string{true: "yes", false: "no"}
	return fmt.Sprintf("ddbtest: testing against %s (returns the old item on a failed condition: %s; TTL: %s; transactions: %s)",
		s, yes[s.ReturnsOldItem()], yes[s.HasTTL()], yes[s.HasTransactions()])
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
// that wraps its Run), and afterwards stops the shared server
// if a test started it. A test that needs the server and finds that it
// cannot start fails with the reason ([Shared]); the others run.
func Main(m interface{ Run() int }) {
	code := m.Run()
	sharedMu.Lock()
	s := shared
	sharedMu.Unlock()
	stopTransactional(s)
	s.Stop()
	os.Exit(code)
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
	case !errors.Is(err, ddblock.ErrTTLUnsupported):
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
// stopped by Main. The runnable examples of guarded writes use it, so
// that their output is the same in every pass of the suite.
func Transactional() (*Server, error) {
	if s, err := Get(); err == nil && s.HasTransactions() {
		return s, nil
	}
	transactionalOnce.Do(func() {
		s, err := testserver.Start(testserver.DynamoDBLocal)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if _, err = s.Probe(ctx); err != nil {
				s.Stop()
			}
		}
		transactional, transactionalErr = s, err
	})
	return transactional, transactionalErr
}

// stopTransactional stops the server Transactional started, if any and
// if it is not the shared one.
func stopTransactional(shared *Server) {
	if transactional != nil && transactional != shared {
		transactional.Stop()
	}
}
