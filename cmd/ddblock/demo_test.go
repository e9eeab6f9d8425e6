package main

import (
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The demo tells its whole story and stops the server it started.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo starts a server of its own and takes several seconds")
	}
	f := &fixture{t: t, env: baseEnv()}
	r := f.runRaw("demo")
	if r.code != 0 {
		t.Fatalf("demo: %v", r)
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
