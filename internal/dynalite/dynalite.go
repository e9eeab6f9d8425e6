// Package dynalite runs the DynamoDB-compatible server that ddblock's
// tests and demo talk to: dynalite, pinned by the package-lock.json in
// testdata/dynalite, started on a free loopback port and stopped after.
// It does not import package testing, so the ddblock command can use it.
//
// Set DDBLOCK_TEST_ENDPOINT to point the tests at another server instead
// (DynamoDB Local, or real DynamoDB with the SDK's usual credentials).
package dynalite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// EndpointEnv names the variable that points the tests at a server of
// the user's choosing.
const EndpointEnv = "DDBLOCK_TEST_ENDPOINT"

// Server is a running DynamoDB-compatible server.
type Server struct {
	// Endpoint is the server's URL, such as http://127.0.0.1:40123.
	Endpoint string
	// External is true when the server came from DDBLOCK_TEST_ENDPOINT
	// and is not ours to stop.
	External bool

	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error
}

// Dir returns the folder holding the pinned dynalite package.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "dynalite")
}

// Start starts dynalite (installing it from the lockfile first if need
// be), or returns the server named by DDBLOCK_TEST_ENDPOINT. The error
// says what is missing when the server cannot start.
func Start() (*Server, error) {
	if ep := os.Getenv(EndpointEnv); ep != "" {
		return &Server{Endpoint: ep, External: true}, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("dynalite: node is not on PATH; the tests need Node.js to run dynalite (or set " + EndpointEnv + ")")
	}
	dir := Dir()
	if err := install(dir); err != nil {
		return nil, err
	}
	cmd := exec.Command(node, "start.js")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dynalite: starting dynalite: %w", err)
	}
	s := &Server{cmd: cmd, stdin: stdin, exit: make(chan error, 1)}
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				port <- p
			}
		}
		close(port)
	}()
	go func() { s.exit <- cmd.Wait() }()
	select {
	case p, ok := <-port:
		if !ok {
			s.Stop()
			return nil, errors.New("dynalite: dynalite exited before it listened (see its output above)")
		}
		s.Endpoint = "http://127.0.0.1:" + p
	case <-time.After(60 * time.Second):
		s.Stop()
		return nil, errors.New("dynalite: dynalite did not start listening within 60s")
	}
	return s, nil
}

// install runs `npm ci` in dir unless dynalite is there already. Test
// binaries start in parallel, so a file lock keeps the installs apart.
func install(dir string) error {
	marker := filepath.Join(dir, "node_modules", "dynalite", "package.json")
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "ddblock-dynalite-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("dynalite: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("dynalite: locking the install: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("dynalite: dynalite is not installed and npm is not on PATH; run `npm ci` in " + dir)
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("dynalite: npm ci in %s failed: %w\n%s", dir, err, out)
	}
	return nil
}

// Stop stops a server that Start started, and waits for it to exit.
func (s *Server) Stop() {
	if s == nil || s.External || s.cmd == nil {
		return
	}
	_ = s.stdin.Close() // start.js exits when its stdin closes
	select {
	case <-s.exit:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}

// Client returns an SDK client for the server. For dynalite it uses fixed
// dummy credentials and no SDK retries beyond the given attempts (0 keeps
// the SDK's default of 3).
func (s *Server) Client(retryMaxAttempts int) *dynamodb.Client {
	return NewClient(s.Endpoint, s.External, retryMaxAttempts)
}

// NewClient returns an SDK client for endpoint. With external, the SDK's
// default credential and region chain is used.
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
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("ddblock", "ddblock", ""),
		HTTPClient:       httpClient,
		RetryMaxAttempts: retryMaxAttempts,
	})
}
