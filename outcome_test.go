package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	wirepkg "github.com/ddblock/ddblock/internal/wire"
)

// closedPort returns the address of a loopback port nothing listens on:
// a connection to it is refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// A write may have landed unless the request never left: real failures,
// from the SDK, decide which.
func TestOutcomeUnknown(t *testing.T) {
	e := newEnv(t)
	proxy, viaProxy := e.proxied()
	put := func(ddb ddblock.DynamoDBAPI, ctx context.Context) error {
		_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(e.table),
			Item: map[string]types.AttributeValue{
				"lock_key": &types.AttributeValueMemberS{Value: "k"},
				"sort_key": &types.AttributeValueMemberS{Value: "-"},
			},
			ConditionExpression: aws.String("attribute_not_exists(lock_key)"),
		})
		if err == nil {
			t.Fatal("the write succeeded")
		}
		return err
	}
	refused := ddbtest.Shared(t).ClientFor(closedPort(t), 1)
	for _, tc := range []struct {
		name  string
		fault faultproxy.Kind
		call  func() error
		want  bool
	}{
		{"connection refused", "", func() error { return put(refused, context.Background()) }, false},
		{"connection dropped after the request", faultproxy.Drop, nil, true},
		{"reply lost", faultproxy.DropReply, nil, true},
		{"server error", faultproxy.ServerError, nil, true},
		{"throttled", faultproxy.Throttling, nil, false},
		{"no reply before the deadline", faultproxy.BlackHole, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			return put(viaProxy, ctx)
		}, true},
		{"condition failed", "", func() error {
			if _, err := e.ddb.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(e.table), Item: map[string]types.AttributeValue{
				"lock_key": &types.AttributeValueMemberS{Value: "k"},
				"sort_key": &types.AttributeValueMemberS{Value: "-"},
			}}); err != nil {
				t.Fatal(err)
			}
			return put(e.ddb, context.Background()) // refused: the item is there
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != "" {
				f := proxy.MustInject(faultproxy.Rule{Kind: tc.fault, Op: "PutItem"})
				defer f.Remove()
			}
			if tc.call == nil {
				tc.call = func() error { return put(viaProxy, context.Background()) }
			}
			err := tc.call()
			if got := wirepkg.OutcomeUnknown(err); got != tc.want {
				t.Errorf("OutcomeUnknown(%v) = %v; want %v", err, got, tc.want)
			}
		})
	}
}

// A name that does not resolve never reaches a server either; built by
// hand, since the tests reach no resolver.
func TestOutcomeUnknownDNS(t *testing.T) {
	dnsErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "dynamodb.invalid", IsNotFound: true}}
	err := fmt.Errorf("operation error DynamoDB: PutItem: %w", &url.Error{Op: "Post", URL: "https://dynamodb.invalid/", Err: dnsErr})
	if wirepkg.OutcomeUnknown(err) {
		t.Errorf("a DNS failure counted as a write that may have landed")
	}
}

// With nothing listening on the endpoint, a failed acquire neither
// attempts nor warns about removing an abandoned acquire: its write
// never left. A write whose connection dropped after it was sent may
// have landed, and is cleaned up.
func TestAcquireCleansUpOnlyWritesThatMayHaveLanded(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		ddb     func() ddblock.DynamoDBAPI
		deletes int
	}{
		{"nothing listening", func() ddblock.DynamoDBAPI { return ddbtest.Shared(t).ClientFor(closedPort(t), 1) }, 0},
		{"connection dropped", func() ddblock.DynamoDBAPI {
			proxy, ddb := e.proxied()
			proxy.MustInject(faultproxy.Rule{Kind: faultproxy.Drop, Op: "PutItem"})
			return ddb
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			calls := newCounting(tc.ddb())
			c := e.clientOn(calls, ddblock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			_, err := c.AcquireLock(context.Background(), "k-"+strings.ReplaceAll(tc.name, " ", "-"), ddblock.WithRetryTimeout(0))
			if !errors.Is(err, ddblock.CodeUnknown) {
				t.Fatalf("acquire: %v; want UNKNOWN", err)
			}
			if got := calls.snapshot()["DeleteItem"]; got != tc.deletes {
				t.Errorf("clean-up deletes: %d; want %d", got, tc.deletes)
			}
			if strings.Contains(logs.String(), "abandoned acquire") {
				t.Errorf("warned about an abandoned acquire:\n%s", logs.String())
			}
		})
	}
}
