package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/permdoc"
)

// doc/permissions.md gives the IAM policy each command needs.
// TestPermissionsCLI runs each command, as an operator would, through a
// fault proxy that injects nothing and counts every request by its
// DynamoDB operation (the X-Amz-Target header), and checks the
// operations against the command's policy both ways, as the library's
// TestPermissions does (permissions_test.go at the root says why an
// action the policy allows but the command never sent is an error too).
//
// Everything a flow prepares (holders, sessions, waiters in line) talks
// to the server directly, so that the proxy counts the commands alone.
// Every request of a command is on the table it is given, the page's
// TABLE. A TransactWriteItems (run with several keys) has no IAM action
// of its own: each of its actions counts as the call it stands for, on
// its table, which must be the lock table (the test fails otherwise).

// cliPermUse is one command, or a group of commands with one policy,
// and the flows that run them on a fixture of their own.
type cliPermUse struct {
	name     string
	commands []string // the names in commands() that these flows run
	policy   string
	run      func(t *testing.T, f *fixture, sent func(op string) int64)
}

var cliPermUses = []cliPermUse{
	{"run", []string{"run"}, "plain-locks", permRun},
	{"run-slots", []string{"run"}, "semaphores", permRunSlots},
	{"ls", []string{"ls"}, "inspection", permLs},
	{"get", []string{"get"}, "cli-get", permGet},
	{"leader", []string{"leader"}, "cli-leader", permLeader},
	{"release", []string{"release"}, "cli-release", permRelease},
	{"resize", []string{"resize"}, "semaphores", permResize},
	{"table-setup", []string{"create-table", "ensure-table"}, "table-setup", permTableSetup},
}

// cliNoAWS are the commands that need no permission, and why.
var cliNoAWS = map[string]string{
	"demo": "it starts a local server of its own and talks to nothing else",
}

func TestPermissionsCLI(t *testing.T) {
	policies, err := permdoc.ParseFile("../../doc/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	// A new command must come with flows here, and so with a policy on
	// the page, or with a reason why it needs none.
	covered := map[string]bool{}
	for _, u := range cliPermUses {
		for _, c := range u.commands {
			covered[c] = true
		}
	}
	for _, c := range commands() {
		if !covered[c.name] && cliNoAWS[c.name] == "" {
			t.Errorf("ddblock %s is not run by TestPermissionsCLI: give it flows and a policy in doc/permissions.md", c.name)
		}
	}
	for _, u := range cliPermUses {
		t.Run(u.name, func(t *testing.T) {
			policy := policies[u.policy]
			if policy == nil {
				t.Fatalf("doc/permissions.md has no policy %q (a line <!-- policy: %s --> before its ```json block)", u.policy, u.policy)
			}
			f, proxy := newProxiedFixture(t)
			u.run(t, f, func(op string) int64 { return proxy.Counts().ByOp[op] })
			if t.Failed() {
				return
			}
			permCheckCLI(t, policy, proxy.Counts(), f.table)
		})
	}
}

// permCheckCLI compares the operations the proxy counted with what the
// policy allows on the lock table.
func permCheckCLI(t *testing.T, p *permdoc.Policy, c faultproxy.Counts, table string) {
	t.Helper()
	t.Logf("policy %q: operations sent: %v; in transactions: %v", p.Name, c.ByOp, c.TransactActions)
	var sent []permdoc.Grant
	for action := range c.TransactActions {
		call, on, _ := strings.Cut(action, " ")
		if on != table {
			t.Errorf("the command sent a transaction whose action %s is on table %q, not the lock table", call, on)
			continue
		}
		sent = append(sent, permdoc.Grant{Action: "dynamodb:" + call, Resource: permdoc.TableARN("TABLE")})
	}
	for op := range c.ByOp {
		if op == "TransactWriteItems" {
			continue // its actions, above
		}
		if op == "" || strings.HasPrefix(op, "Transact") || strings.HasPrefix(op, "Batch") {
			t.Errorf("the command sent %d requests of operation %q, whose actions and tables the proxy cannot tell", c.ByOp[op], op)
			continue
		}
		sent = append(sent, permdoc.Grant{Action: "dynamodb:" + op, Resource: permdoc.TableARN("TABLE")})
	}
	denied, unused := p.Compare(sent)
	for _, g := range denied {
		t.Errorf("sent %s on %s, which policy %q of doc/permissions.md (line %d) does not allow", g.Action, g.Resource, p.Name, p.Line)
	}
	for _, g := range unused {
		t.Errorf("policy %q of doc/permissions.md (line %d) allows %s on %s, which these commands never sent: remove it from the policy, or make the test run the path that needs it", p.Name, p.Line, g.Action, g.Resource)
	}
}

// permDying are timings of a one-second lease: a holder that dies with
// them is taken over a second later.
var permDying = []ddblock.Option{ddblock.WithHeartbeatPeriod(100 * time.Millisecond), ddblock.WithSafePeriod(600 * time.Millisecond), ddblock.WithLeaseDuration(time.Second)}

// permDie closes c without releasing its locks: they stay in the table,
// heartbeated no more, as a crashed holder's do.
func permDie(t *testing.T, c *ddblock.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
}

// permWaitInLine starts an in-process fair waiter for key, and returns
// once its ticket is in the table; it stops waiting when the test ends.
func permWaitInLine(t *testing.T, f *fixture, owner, key string) {
	t.Helper()
	waiter := f.holder(owner)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = waiter.AcquireLock(ctx, key, ddblock.WithFairWaiting(), ddblock.WithRetryTimeout(time.Hour))
	}()
	// Before the waiter's client is closed: cleanups run last first.
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, owner+" in line for "+key, func() bool {
		return slices.Contains(slices.Collect(maps.Values(tickets(t, f, key))), owner)
	})
}

// permUntilFile is a command that waits until the file path exists.
func permUntilFile(path string) []string {
	return []string{"sh", "-c", `until [ -e "$0" ]; do sleep 0.02; done`, path}
}

func permTouch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func permWantExit(t *testing.T, what string, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit %d: %v", what, code, r)
	}
}

func permRunArgs(extra ...string) []string { return append(slices.Clone(timingFlags), extra...) }

// run: a run that heartbeats while its command works; one that waits
// (reading) for a held lock; one that takes over a dead holder's lock;
// runs with fencing tokens (released by marking the item), on a session
// and with fast takeover; and two fair runs that wait in line.
func permRun(t *testing.T, f *fixture, sent func(string) int64) {
	ctx := context.Background()
	done := filepath.Join(t.TempDir(), "done")
	p := f.start("run", permRunArgs(append([]string{"job", "--"}, permUntilFile(done)...)...)...)
	p.eventuallyWhileRunning("a heartbeat", func() bool { return sent("UpdateItem") > 0 })
	permTouch(t, done)
	permWantExit(t, "run", p.wait(), 0)

	held := f.acquire("holder", "busy")
	reads := sent("GetItem")
	p = f.start("run", permRunArgs("--wait", "30s", "busy", "--", "true")...)
	p.eventuallyWhileRunning("the run to read the held lock", func() bool { return sent("GetItem") > reads })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	permWantExit(t, "run once the lock was released", p.wait(), 0)

	dying := f.inProcess("dying", permDying...)
	if _, err := dying.AcquireLock(ctx, "crash"); err != nil {
		t.Fatal(err)
	}
	permDie(t, dying)
	permWantExit(t, "run over a dead holder", f.run("run", permRunArgs("--wait", "30s", "crash", "--", "true")...), 0)

	for _, flags := range [][]string{{"--fencing-token"}, {"--session"}, {"--max-clock-skew", "1s"}} {
		permWantExit(t, "run "+strings.Join(flags, " "), f.run("run", permRunArgs(append(flags, "opt", "--", "true")...)...), 0)
	}

	// Several keys: one transaction of puts on the lock table (refused by
	// a server without transactions, after the same reads).
	want := 0
	if !server.HasTransactions() {
		want = exitUnavailable
	}
	permWantExit(t, "run --key", f.run("run", permRunArgs("--key", "set-b", "set-a", "--", "true")...), want)

	held = f.acquire("holder", "fair")
	var waiters []*proc
	for i, owner := range []string{"fair-1", "fair-2"} {
		waiters = append(waiters, f.start("run", permRunArgs("--fair", "--owner", owner, "--wait", "30s", "fair", "--", "true")...))
		waiters[i].eventuallyWhileRunning(owner+" in line", func() bool { return len(tickets(t, f, "fair")) == i+1 })
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range waiters {
		permWantExit(t, "run --fair", w.wait(), 0)
	}
}

// run --slots: a fair run that waits in the semaphore's line (looking at
// the slots, a Query each time) while both slots are held, gets the slot
// released, and heartbeats it while its command works.
func permRunSlots(t *testing.T, f *fixture, sent func(string) int64) {
	ctx := context.Background()
	locks := holdSlots(t, f, "pool", 2)
	done := filepath.Join(t.TempDir(), "done")
	looks := sent("Query")
	p := f.start("run", permRunArgs(append([]string{"--slots", "2", "--fair", "--owner", "runner", "--wait", "30s", "pool", "--"}, permUntilFile(done)...)...)...)
	p.eventuallyWhileRunning("the run to look at the slots twice", func() bool { return sent("Query") > looks+1 })
	if err := locks[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.eventuallyWhileRunning("the run to hold slot 0", func() bool {
		info := f.lookup("pool", "slot-0")
		return info != nil && info.OwnerName == "runner"
	})
	writes := sent("UpdateItem")
	p.eventuallyWhileRunning("a heartbeat of the slot", func() bool { return sent("UpdateItem") > writes })
	permTouch(t, done)
	permWantExit(t, "run --slots", p.wait(), 0)
}

// ls: of a table with a lock, a lock on a session, a semaphore and a
// line of fair waiters; as a table, as JSON, by --key, and with --watch.
func permLs(t *testing.T, f *fixture, _ func(string) int64) {
	f.acquire("holder", "held")
	f.acquireWith(f.sessionHolder("session", 30*time.Second, 5*time.Second), "on-session")
	holdSlots(t, f, "pool", 1)
	permWaitInLine(t, f, "waiter", "held")
	for _, args := range [][]string{{}, {"--json"}, {"--key", "pool"}, {"--key", "held", "--json"}, {"--watch", "100ms"}} {
		r := f.run("ls", args...)
		permWantExit(t, "ls "+strings.Join(args, " "), r, 0)
		if !strings.Contains(r.stdout, "pool") && !strings.Contains(r.stdout, "held") {
			t.Fatalf("ls %s lists nothing:\n%v", strings.Join(args, " "), r)
		}
	}
}

// get: of a lock, a lock on a session, a semaphore's metadata item, a
// line, a ticket, and a lock that is not there.
func permGet(t *testing.T, f *fixture, _ func(string) int64) {
	f.acquire("holder", "held")
	f.acquireWith(f.sessionHolder("session", 30*time.Second, 5*time.Second), "on-session")
	holdSlots(t, f, "pool", 1)
	permWaitInLine(t, f, "waiter", "held")
	ticket := ticketKeys(t, f, "held")[0]
	for _, args := range [][]string{{"held"}, {"--json", "on-session"}, {"--sort-key", "slots", "pool"}, {lineKeyPrefix + "held"}, {ticket}} {
		permWantExit(t, "get "+strings.Join(args, " "), f.run("get", args...), 0)
	}
	permWantExit(t, "get of a lock that is not there", f.run("get", "missing"), exitNotFound)
}

// leader: once, and with --watch until interrupted.
func permLeader(t *testing.T, f *fixture, _ func(string) int64) {
	election, err := f.holder("host-a").NewElection("svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := election.Campaign(context.Background(), "10.0.0.7:8080"); err != nil {
		t.Fatal(err)
	}
	permWantExit(t, "leader", f.run("leader", "svc"), 0)
	w := f.start("leader", "--watch", "--every", "20ms", "svc")
	w.eventuallyWhileRunning("--watch to print the leader", func() bool { return strings.Contains(w.stdout.String(), "(owner host-a)") })
	w.signal(syscall.SIGINT)
	permWantExit(t, "leader --watch", w.wait(), 0)
}

// release --force: of a lock, of a lock with a fencing token (marked
// released), of a lock on a session with its session item, and of a line
// of fair waiters; and the refusal of a semaphore's metadata item.
func permRelease(t *testing.T, f *fixture, _ func(string) int64) {
	f.acquire("holder", "stuck")
	// Timings of f.holder's: no heartbeat changes the version that
	// release reads and then deletes.
	counting := f.inProcess("counting", ddblock.WithFencingTokens(), ddblock.WithHeartbeatPeriod(time.Minute),
		ddblock.WithSafePeriod(2*time.Minute), ddblock.WithLeaseDuration(3*time.Minute))
	if _, err := counting.AcquireLock(context.Background(), "counted"); err != nil {
		t.Fatal(err)
	}
	f.acquireWith(f.sessionHolder("session", 30*time.Second, 5*time.Second), "on-session")
	f.acquire("holder", "queue")
	permWaitInLine(t, f, "waiter", "queue")
	holdSlots(t, f, "pool", 1)
	for _, args := range [][]string{{"stuck"}, {"counted"}, {"--with-session", "on-session"}, {lineKeyPrefix + "queue"}} {
		permWantExit(t, "release --force "+strings.Join(args, " "), f.run("release", append([]string{"--force"}, args...)...), 0)
	}
	if f.lookup("counted", "") != nil {
		t.Fatal("the lock with a fencing token is still listed after its release")
	}
	permWantExit(t, "release of a semaphore's metadata item", f.run("release", "--force", "--sort-key", "slots", "pool"), exitUsage)
}

// resize: a shrink that waits for the holder of the slot above the new
// number, which holds it on a session (the resize reads its session
// item), and ends when it releases; and a shrink that removes the slot
// of a holder that died.
func permResize(t *testing.T, f *fixture, sent func(string) int64) {
	ctx := context.Background()
	// bothSlots takes both slots of the 2-slot semaphore name with c, and
	// returns the lock of slot 1.
	bothSlots := func(c *ddblock.Client, name string) *ddblock.Lock {
		t.Helper()
		s, err := c.NewSemaphore(name, 2)
		if err != nil {
			t.Fatal(err)
		}
		var one *ddblock.Lock
		for range 2 {
			l, err := s.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if slot, _ := s.SlotOf(l); slot == 1 {
				one = l
			}
		}
		return one
	}
	above := bothSlots(f.sessionHolder("session", 30*time.Second, 5*time.Second), "pool")
	reads := sent("GetItem")
	p := f.start("resize", "--every", "50ms", "pool", "1")
	// Its look at slot 1 reads the slot's session item: the resize is
	// waiting.
	p.eventuallyWhileRunning("resize to read the session item of slot 1", func() bool { return sent("GetItem") > reads })
	if err := above.Release(ctx); err != nil {
		t.Fatal(err)
	}
	permWantExit(t, "resize once slot 1 was released", p.wait(), 0)

	dying := f.inProcess("dying", permDying...)
	bothSlots(dying, "corpse")
	permDie(t, dying)
	deletes := sent("DeleteItem")
	permWantExit(t, "resize over a dead holder", f.run("resize", "--every", "50ms", "corpse", "1"), 0)
	if sent("DeleteItem") == deletes {
		t.Fatal("resize did not remove the dead holder's slot")
	}
}

// create-table and ensure-table: each of a new table and of an existing
// one.
func permTableSetup(t *testing.T, f *fixture, _ func(string) int64) {
	on := func(table string, args ...string) []string {
		return append([]string{"--endpoint", f.endpoint, "--table", table, "--poll-interval", "10ms"}, args...)
	}
	created, ensured := f.table+"_created", f.table+"_ensured"
	permWantExit(t, "create-table", f.runRaw(append([]string{"create-table"}, on(created, "--on-demand")...)...), 0)
	permWantExit(t, "ensure-table of a new table", f.runRaw(append([]string{"ensure-table"}, on(ensured)...)...), 0)
	permWantExit(t, "create-table --if-not-exists", f.runRaw(append([]string{"create-table"}, on(f.table, "--if-not-exists")...)...), 0)
	permWantExit(t, "ensure-table of an existing table", f.runRaw(append([]string{"ensure-table"}, on(f.table)...)...), 0)
}
