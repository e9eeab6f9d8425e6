// Command testserver starts the DynamoDB-compatible server the
// environment picks (package testserver: DDBLOCK_TEST_SERVER, or the
// server DDBLOCK_TEST_ENDPOINT names), for the tests of a module nested
// in this repository, which cannot import its internal packages (the
// OpenTelemetry module in otel/). It prints one line of JSON on its
// standard output once the server answers:
//
//	{"endpoint":"http://127.0.0.1:40123","kind":"dynalite","external":false,"transactions":false}
//
// and stops the server when its standard input closes, so that a test
// process that dies takes the server with it. Errors go to standard
// error, and the exit status is 1.
//
//	go build -o /tmp/testserver ./internal/cmd/testserver
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ddblock/ddblock/internal/testserver"
)

// ready is the line printed once the server answers.
type ready struct {
	Endpoint     string `json:"endpoint"`
	Kind         string `json:"kind"`
	External     bool   `json:"external"`
	Transactions bool   `json:"transactions"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testserver:", err)
		os.Exit(1)
	}
}

func run() error {
	s, err := testserver.StartFromEnv()
	if err != nil {
		return err
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := s.Probe(ctx)
	if err != nil {
		return err
	}
	line, err := json.Marshal(ready{Endpoint: s.Endpoint, Kind: string(s.Kind), External: s.External, Transactions: f.Transactions})
	if err != nil {
		return err
	}
	if _, err := fmt.Println(string(line)); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	return nil
}
