package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock/internal/ddbtest"
)

// doc/cli.md's guarded-write recipe, run as the page shows it: the two
// shell blocks of "Guarded writes from a script" are read from the page
// when the test runs (the script, and the `ddblock run` line that runs
// it), and the script runs as the command of a real `ddblock run`, with
// each major version of the AWS CLI. The only thing the test adds is the
// endpoint: a stand-in `aws` first on PATH runs the real one with
// --endpoint-url, as a user of a local server would.

// cliDoc is the page, from the package's directory.
const cliDoc = "../../doc/cli.md"

// recipeSection is the heading of the recipe's section.
const recipeSection = "### Guarded writes from a script"

// recipeLost is the status the page says the script exits with when the
// guard failed: ddblock's own for a lost lock.
const recipeLost = exitLockLost

// recipeFailed is the status the page says the script exits with on any
// other failure.
const recipeFailed = 1

// docRecipe is what the test takes from the page.
type docRecipe struct {
	script  string   // the script, count.sh
	runArgs []string // the `ddblock run` line's arguments after "run"
	section string   // the section's text
}

// readDocRecipe reads the recipe from doc/cli.md, failing the test if
// the page no longer has it in the expected shape.
func readDocRecipe(t *testing.T) docRecipe {
	t.Helper()
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "\n"+recipeSection+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", cliDoc, recipeSection)
	}
	section := page[start+1:]
	if end := regexp.MustCompile(`\n##+ `).FindStringIndex(section[len(recipeSection):]); end != nil {
		section = section[:len(recipeSection)+end[0]+1]
	}
	blocks := fencedBlocks(section, "sh")
	if len(blocks) < 2 {
		t.Fatalf("%s, %q: %d ```sh blocks; want the script and the line that runs it", cliDoc, recipeSection, len(blocks))
	}
	r := docRecipe{script: blocks[0], section: section}
	if !strings.HasPrefix(r.script, "#!/bin/sh\n") || !strings.Contains(r.script, "aws dynamodb transact-write-items") ||
		!strings.Contains(r.script, "$DDBLOCK_GUARD_CHECK") {
		t.Fatalf("the first ```sh block of %q is not the script (#!/bin/sh, aws dynamodb transact-write-items with $DDBLOCK_GUARD_CHECK):\n%s", recipeSection, r.script)
	}
	run := strings.Fields(blocks[1])
	if len(run) < 5 || run[0] != "ddblock" || run[1] != "run" || run[len(run)-2] != "--" || run[len(run)-1] != "./count.sh" {
		t.Fatalf("the second ```sh block of %q is not `ddblock run ... -- ./count.sh`:\n%s", recipeSection, blocks[1])
	}
	r.runArgs = run[2:]
	return r
}

// fencedBlocks returns the contents of the text's fenced blocks of the
// given language, in order.
func fencedBlocks(text, lang string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !in && line == "```"+lang:
			in, cur = true, nil
		case in && line == "```":
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
			in = false
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// awsCLI is one installed AWS CLI.
type awsCLI struct {
	path, version string // version: what --version says
}

// findAWSCLIs finds the AWS CLIs installed, by major version, from what
// each `aws` on PATH or in the usual places says its version is.
func findAWSCLIs(t *testing.T) map[int]awsCLI {
	t.Helper()
	dirs := filepath.SplitList(os.Getenv("PATH"))
	dirs = append(dirs, "/usr/bin", "/usr/local/bin")
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "bin"), filepath.Join(home, ".pyenv", "shims"))
	}
	versionRE := regexp.MustCompile(`aws-cli/(\d+)\.\S+`)
	found := map[int]awsCLI{}
	seen := map[string]bool{}
	for _, dir := range dirs {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		path := filepath.Join(dir, "aws")
		st, err := os.Stat(path)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			continue
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil || seen[real] {
			continue
		}
		seen[real] = true
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
		cancel()
		m := versionRE.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			t.Logf("%s --version: %v: %s", path, err, out)
			continue
		}
		major, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		if _, ok := found[major]; !ok {
			found[major] = awsCLI{path: path, version: m[0]}
		}
	}
	return found
}

// needAWSCLI returns the installed AWS CLI of the major version; a
// missing one fails the test in CI and skips it elsewhere.
func needAWSCLI(t *testing.T, clis map[int]awsCLI, major int) awsCLI {
	t.Helper()
	if c, ok := clis[major]; ok {
		t.Logf("AWS CLI version %d: %s (%s)", major, c.path, c.version)
		return c
	}
	install := map[int]string{
		1: "pip install awscli (version 1 is on PyPI as awscli)",
		2: "apt-get install awscli (Debian's package is version 2; .ci/run installs it)",
	}[major]
	msg := fmt.Sprintf("AWS CLI version %d is not installed (no `aws` on PATH or in /usr/bin, /usr/local/bin, ~/.local/bin, ~/.pyenv/shims says aws-cli/%d.x); install it: %s", major, major, install)
	if os.Getenv("CI") == "true" {
		t.Fatal("FAIL: " + msg)
	}
	t.Skip(msg)
	return awsCLI{}
}

// recipeRun is the recipe set up against one server with one AWS CLI.
type recipeRun struct {
	f       *fixture
	recipe  docRecipe
	script  string // the script's path
	ddb     *dynamodb.Client
	counter map[string]types.AttributeValue
}

// setUpRecipe writes the script and a stand-in `aws` that runs cli
// against the server at endpoint, and makes the lock table there.
func setUpRecipe(t *testing.T, recipe docRecipe, cli awsCLI, srv *ddbtest.Server) *recipeRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{cli.path, srv.Endpoint} {
		if strings.ContainsAny(s, `'\`) {
			t.Fatalf("%q: a quote or backslash the stand-in aws cannot carry", s)
		}
	}
	standIn := fmt.Sprintf("#!/bin/sh\nexec '%s' --endpoint-url '%s' \"$@\"\n", cli.path, srv.Endpoint)
	if err := os.WriteFile(filepath.Join(bin, "aws"), []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "count.sh")
	if err := os.WriteFile(script, []byte(recipe.script), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, table: ddbtest.TableName(t), endpoint: srv.Endpoint, env: baseEnv()}
	for i, kv := range f.env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			f.env[i] = "PATH=" + bin + string(os.PathListSeparator) + v
		}
	}
	if !slices.ContainsFunc(f.env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		f.env = append(f.env, "PATH="+bin+":/usr/bin:/bin")
	}
	if r := f.run("create-table", "--on-demand", "--poll-interval", "10ms"); r.code != 0 {
		t.Fatalf("create-table on %s: %v", srv.Name(), r)
	}
	return &recipeRun{
		f: f, recipe: recipe, script: script, ddb: srv.Client(0),
		counter: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "nightly"}},
	}
}

// runArgs is the page's `ddblock run` line with the fixture's connection
// flags and the script's path.
func (rr *recipeRun) runArgs(extra ...string) []string {
	args := slices.Clone(rr.recipe.runArgs)
	args[len(args)-1] = rr.script
	return rr.f.args("run", append(slices.Clone(extra), args...)...)
}

// count is the counter item's n; "" when it has none.
func (rr *recipeRun) count(t *testing.T) string {
	t.Helper()
	out, err := rr.ddb.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String("counters"), Key: rr.counter, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatalf("reading the counter: %v", err)
	}
	if n, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// needCounters makes the recipe's table, counters, keyed by id, on the
// server, unless it is there.
func needCounters(t *testing.T, srv *ddbtest.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ddb := srv.Client(0)
	_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("counters"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		t.Fatalf("creating the table counters on %s: %v", srv.Name(), err)
	}
	if err := dynamodb.NewTableExistsWaiter(ddb, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 20*time.Millisecond, 200*time.Millisecond
	}).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("counters")}, time.Minute); err != nil {
		t.Fatalf("the table counters on %s: %v", srv.Name(), err)
	}
}

// plusOne is n+1 for the counter's value ("" being 0).
func plusOne(t *testing.T, n string) string {
	t.Helper()
	var v int
	if n != "" {
		if _, err := fmt.Sscan(n, &v); err != nil {
			t.Fatalf("counter %q: %v", n, err)
		}
	}
	return fmt.Sprint(v + 1)
}

// TestDocRecipeGuardedWrite: with AWS CLI version 1 and version 2, the
// page's script, run by the page's `ddblock run` line against a server
// with transactions (DynamoDB Local, started for this when the suite
// runs against dynalite), commits its write while the run holds the
// lock; when the lock was forced away and taken by another owner while
// the first run's ddblock was paused, it writes nothing and exits with
// the status the page gives for a lost lock, as the run then does. On a
// server without transactions, it writes nothing and exits with the
// page's status for any other failure, the server's refusal on stderr.
func TestDocRecipeGuardedWrite(t *testing.T) {
	recipe := readDocRecipe(t)
	prose := strings.Join(strings.Fields(recipe.section), " ")
	for _, want := range []string{
		fmt.Sprintf("the script then exits %d", recipeLost),
		fmt.Sprintf("Any other failure makes the script exit %d", recipeFailed),
		fmt.Sprintf("(`An error occurred (UnknownOperationException)`, and the script exits %d)", recipeFailed),
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("%s, %q, does not say %q: the statuses this test asserts", cliDoc, recipeSection, want)
		}
	}
	clis := findAWSCLIs(t)
	needServer(t)
	txServer := server
	if !server.HasTransactions() {
		var err error
		if txServer, err = ddbtest.Transactional(); err != nil {
			t.Fatalf("%s has no transactions, and DynamoDB Local could not start for the recipe: %v", server.Name(), err)
		}
	}
	needCounters(t, txServer)

	for _, major := range []int{1, 2} {
		t.Run(fmt.Sprintf("AWS CLI version %d", major), func(t *testing.T) {
			cli := needAWSCLI(t, clis, major)
			rr := setUpRecipe(t, recipe, cli, txServer)

			// While the run holds the lock, the write commits, and the
			// run exits with the script's status, 0.
			before := rr.count(t)
			r := rr.f.runRaw(rr.runArgs(heldTiming...)...)
			if r.code != 0 {
				t.Fatalf("the page's recipe with %s against %s: %v", cli.version, txServer.Name(), r)
			}
			if got := rr.count(t); got != plusOne(t, before) {
				t.Fatalf("counter %q after the recipe committed, %q before; want one more", got, before)
			}

			// The lock lost while the script runs: the script writes
			// nothing and exits recipeLost.
			lost := rr.lostRun(t)
			if lost.status != recipeLost {
				t.Errorf("the recipe after the lock was taken: exit %d, want %d; the run's output:\n%v", lost.status, recipeLost, lost.run)
			}
			for _, want := range []string{"(TransactionCanceledException)", "[ConditionalCheckFailed, None]"} {
				if !strings.Contains(lost.run.stderr, want) {
					t.Errorf("the recipe after the lock was taken: stderr does not say %q:\n%s", want, lost.run.stderr)
				}
			}
			if got := rr.count(t); got != plusOne(t, before) {
				t.Errorf("counter %q after the recipe ran without the lock; want %q, unchanged", got, plusOne(t, before))
			}
			if lost.run.code != exitLockLost {
				t.Errorf("the run whose lock was taken: %v; want exit %d", lost.run, exitLockLost)
			}

			// A server without transactions refuses the call.
			if server.HasTransactions() {
				return
			}
			needCounters(t, server)
			plain := setUpRecipe(t, recipe, cli, server)
			before = plain.count(t)
			r = plain.f.runRaw(plain.runArgs(heldTiming...)...)
			if r.code != recipeFailed || !strings.Contains(r.stderr, "(UnknownOperationException)") {
				t.Errorf("the recipe against %s, which has no transactions: %v; want exit %d and UnknownOperationException", server.Name(), r, recipeFailed)
			}
			if got := plain.count(t); got != before {
				t.Errorf("counter %q on %s after the refused call, %q before; want it unchanged", got, server.Name(), before)
			}
		})
	}
}

// lostResult is how the script and its run ended when the lock was lost.
type lostResult struct {
	status int    // the script's
	run    result // the run's
}

// lostRun runs the page's `ddblock run` line with a command that waits,
// then runs the script with the environment the run gave it. Meanwhile
// the test pauses the run's ddblock (SIGSTOP: it cannot heartbeat, nor
// see the loss and stop the command), forces the lock away and has
// another owner's run take it; then the script runs, and ddblock is let
// go on.
func (rr *recipeRun) lostRun(t *testing.T) lostResult {
	t.Helper()
	f := rr.f
	dir := t.TempDir()
	ready, goOn, status, stop := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "status"), filepath.Join(dir, "stop")
	const wrapper = `: > "$1"; while [ ! -e "$2" ]; do sleep 0.05; done
"$3"; echo $? > "$4.tmp" && mv "$4.tmp" "$4"
while [ ! -e "$5" ]; do sleep 0.05; done`
	args := rr.runArgs(heldTiming...)
	args = append(args[:len(args)-1], "sh", "-c", wrapper, "sh", ready, goOn, rr.script, status, stop)
	p := f.startRaw(args...)
	t.Cleanup(func() {
		_ = os.WriteFile(stop, nil, 0o600)
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	})
	p.eventuallyWhileRunning("the command to start", func() bool { return fileExists(ready) })

	p.signal(syscall.SIGSTOP)
	key := rr.recipe.runArgs[len(rr.recipe.runArgs)-3]
	if r := f.run("release", "--force", key); r.code != 0 {
		p.signal(syscall.SIGCONT)
		t.Fatalf("release --force %s: %v", key, r)
	}
	taker := f.startHeld(key, "--owner", "other")
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the script to end", func() bool { return readFile(t, status) != "" })
	var res lostResult
	if _, err := fmt.Sscan(readFile(t, status), &res.status); err != nil {
		t.Fatalf("the script's status %q: %v", readFile(t, status), err)
	}
	p.signal(syscall.SIGCONT)
	res.run = p.wait()
	if r := taker.end(t); r.code != 0 {
		t.Errorf("the other owner's run: %v", r)
	}
	return res
}
