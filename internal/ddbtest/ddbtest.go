// Package ddbtest gives ddblock's tests a DynamoDB-compatible server: one
// dynalite (see package dynalite) per test binary, started by Main and
// shared by its tests, each on a table of its own.
package ddbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/dynalite"
)

// EndpointEnv names the variable that points the tests at a server of
// the user's choosing.
const EndpointEnv = dynalite.EndpointEnv

// Server is a running DynamoDB-compatible server.
type Server = dynalite.Server

// Start starts a server; see dynalite.Start.
func Start() (*Server, error) { return dynalite.Start() }

// NewClient returns an SDK client for endpoint; see dynalite.NewClient.
func NewClient(endpoint string, external bool, retryMaxAttempts int) *dynamodb.Client {
	return dynalite.NewClient(endpoint, external, retryMaxAttempts)
}

var (
	shared     *Server
	tableCount atomic.Int64
)

// Main runs a test binary's tests against one server started for it, and
// stops the server afterwards. When the server cannot start, every test
// fails: the binary exits non-zero with the reason.
func Main(m *testing.M) {
	s, err := Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the local DynamoDB-compatible server could not start: %v\n", err)
		os.Exit(1)
	}
	shared = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// SharedServer returns the server Main started, or nil.
func SharedServer() *Server { return shared }

// Shared returns the server Main started.
func Shared(t testing.TB) *Server {
	t.Helper()
	if shared == nil {
		t.Fatal("ddbtest: no server; call ddbtest.Main from TestMain")
	}
	return shared
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
// cannot. A server without UpdateTimeToLive (dynalite) is fine: the table
// is created and usable all the same.
func CreateTable(t testing.TB, ddb ddblock.TableAPI, name string, opts ...ddblock.TableOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append([]ddblock.TableOption{
		ddblock.WithTableNames(ddblock.Options{
			TableName:        name,
			PartitionKeyName: ddblock.DefaultPartitionKeyName,
			SortKeyName:      ddblock.DefaultSortKeyName,
			TTLAttributeName: ddblock.DefaultTTLAttributeName,
		}),
		ddblock.WithOnDemand(), ddblock.WithPollInterval(10 * time.Millisecond),
	}, opts...)
	if err := ddblock.CreateTable(ctx, ddb, all...); err != nil && !errors.Is(err, ddblock.ErrTTLUnsupported) {
		t.Fatalf("CreateTable(%s): %v", name, err)
	}
}
