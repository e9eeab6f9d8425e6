package ddblockotel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ddblock/ddblock"
)

// server is the DynamoDB-compatible server the tests share: the one the
// root module's internal/cmd/testserver starts as DDBLOCK_TEST_SERVER
// (dynalite or dynamodb-local) picks, or the one DDBLOCK_TEST_ENDPOINT
// names, as for the root module's tests. This module cannot import the
// root's internal packages, so TestMain builds that command and runs it;
// closing its standard input stops the server, which a test process that
// dies does too.
var server struct {
	Endpoint     string `json:"endpoint"`
	Kind         string `json:"kind"`
	External     bool   `json:"external"`
	Transactions bool   `json:"transactions"`
}

func TestMain(m *testing.M) {
	stop, err := startServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the DynamoDB-compatible server for the tests could not start: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "ddblockotel: testing against %s at %s (transactions: %v)\n", server.Kind, server.Endpoint, server.Transactions)
	code := m.Run()
	stop()
	os.Exit(code)
}

// startServer builds and runs internal/cmd/testserver from the root
// module, reads the line that says where the server listens, and returns
// the function that stops it.
func startServer() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "ddblockotel-test")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "testserver")
	build := exec.Command("go", "build", "-o", bin, "./internal/cmd/testserver")
	build.Dir = ".." // the root module
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("building ../internal/cmd/testserver: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill() // ours: started above
			<-done
		}
		os.RemoveAll(dir)
	}
	line := make(chan []byte, 1)
	go func() {
		r := bufio.NewReader(stdout)
		b, _ := r.ReadBytes('\n')
		line <- b
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case b := <-line:
		if err := json.Unmarshal(b, &server); err != nil || server.Endpoint == "" {
			stop()
			return nil, fmt.Errorf("testserver said %q, not where the server listens (its errors are above)", b)
		}
	case <-time.After(4 * time.Minute):
		stop()
		return nil, fmt.Errorf("testserver said nothing in 4 minutes")
	}
	return stop, nil
}

// sdkClient returns an SDK client of the test server; optFns change its
// options (a tracer provider, say). A started server takes the fixed
// credentials of the root's internal/testserver; an external one the
// SDK's default chain.
func sdkClient(t testing.TB, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	optFns = append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(server.Endpoint)
		o.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}}, optFns...)
	if server.External {
		cfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return dynamodb.NewFromConfig(cfg, optFns...)
	}
	return dynamodb.New(dynamodb.Options{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("ddblock", "ddblock", ""),
	}, optFns...)
}

var tables atomic.Int64

// newTable creates a lock table of the test's own, with the default
// attribute names, and returns its name.
func newTable(t testing.TB) string {
	t.Helper()
	name, err := makeTable(sdkClient(t))
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func makeTable(ddb ddblock.TableAPI) (string, error) {
	name := fmt.Sprintf("ddblockotel_%d_%d", os.Getpid(), tables.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := ddblock.EnsureTable(ctx, ddb, ddblock.WithNamesFromOptions(ddblock.Options{TableName: name}),
		ddblock.WithPollInterval(20*time.Millisecond)); err != nil {
		return "", fmt.Errorf("creating table %s: %w", name, err)
	}
	return name, nil
}

// exampleConfig is the AWS configuration of the examples: the test
// server's endpoint and credentials, where a program would load its own
// (config.LoadDefaultConfig).
func exampleConfig() aws.Config {
	if server.External {
		cfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			panic(err)
		}
		cfg.BaseEndpoint = aws.String(server.Endpoint)
		return cfg
	}
	return aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("ddblock", "ddblock", ""),
		BaseEndpoint: aws.String(server.Endpoint),
	}
}

// exampleTable creates a lock table for an example.
func exampleTable(cfg aws.Config) string {
	name, err := makeTable(dynamodb.NewFromConfig(cfg))
	if err != nil {
		panic(err)
	}
	return name
}
