package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The demo tells its whole story and stops the server it started. It runs
// as from a binary installed with `go install`: in an empty directory,
// with an empty cache, so that it must install its server (from the
// files embedded in the binary) where it can find it, and nothing of the
// source tree helps.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo starts a server of its own and takes several seconds")
	}
	cache := t.TempDir()
	r := runDemo(t, append(baseEnv(), "XDG_CACHE_HOME="+cache))
	if r.code != 0 {
		t.Fatalf("demo: %v", r)
	}
	installed, err := filepath.Glob(filepath.Join(cache, "ddblock", "dynalite-*", "node_modules", "dynalite", "package.json"))
	if err != nil || len(installed) != 1 {
		t.Errorf("want dynalite installed once under the user's cache %s: %v %v", cache, installed, err)
	}
	if want := "installing dynalite into " + filepath.Join(cache, "ddblock", "dynalite-"); !strings.Contains(r.stdout, want) {
		t.Errorf("the demo did not say %q before installing:\n%s", want, r.stdout)
	}
	// The story, in order.
	story := []string{
		`worker-a  acquired "nightly-report"`,
		`worker-b  wants "nightly-report": held by worker-a`,
		`worker-a  CRASHES`,
		`worker-b  acquired "nightly-report" after waiting`,
		`worker-b  finished its work and released`,
		`worker-c  acquired "db-migration"`,
		`network   worker-c's heartbeats start failing`,
		`worker-c  callback: LOCK_IN_DANGER`,
		`worker-d  acquired "db-migration" after waiting`,
		`worker-c  callback: LOCK_STOLEN`,
		`The server is stopped`,
	}
	rest := r.stdout
	for _, line := range story {
		i := strings.Index(rest, line)
		if i < 0 {
			t.Fatalf("the demo's output lacks %q after what came before:\n%s", line, r.stdout)
		}
		rest = rest[i+len(line):]
	}
	// worker-c's Done channel closes when the lock goes into danger:
	// before the lease runs out and worker-d takes over.
	if !regexp.MustCompile(`worker-c  lock.Done\(\) closed, lock.Err\(\) is LOCK_IN_DANGER(.|\n)*worker-d  acquired "db-migration"`).MatchString(r.stdout) {
		t.Errorf("worker-c was not told to stop before worker-d took over:\n%s", r.stdout)
	}

	m := regexp.MustCompile(`server at http://(127\.0\.0\.1:\d+)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("the demo did not say where its server was:\n%s", r.stdout)
	}
	if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("the demo's server at %s still accepts connections after the demo ended", m[1])
	}
}

// Without Node.js, or without npm for the first install, the demo says in
// one line what it needs.
func TestDemoSaysWhatItNeeds(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the tests need Node.js: %v", err)
	}
	onlyNode := t.TempDir()
	if err := os.Symlink(node, filepath.Join(onlyNode, "node")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path, want string
	}{
		{"no node", t.TempDir(), "ddblock demo: dynalite needs Node.js: node is not on PATH"},
		{"no npm", onlyNode, "ddblock demo: dynalite needs npm, once, to install the dynalite package into "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runDemo(t, append(baseEnv(), "PATH="+tt.path, "XDG_CACHE_HOME="+t.TempDir()))
			if r.code != exitUnavailable {
				t.Errorf("exit %d; want %d", r.code, exitUnavailable)
			}
			oneLineOn(t, r, tt.want)
		})
	}
}

// runDemo runs `ddblock demo` in an empty directory of its own.
func runDemo(t *testing.T, env []string) result {
	t.Helper()
	cmd := exec.Command(binPath, "demo")
	cmd.Dir = t.TempDir()
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running ddblock demo: %v", err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}
