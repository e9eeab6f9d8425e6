package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// A command guards its own DynamoDB writes with what `ddblock run` put in
// its environment, the way doc/cli.md shows with the AWS CLI: a
// TransactWriteItems whose first action is DDBLOCK_GUARD_CHECK (the same
// as the condition built from the other variables with the documented
// expression) and whose second increments a counter item.

// guardExpression is the guard's condition, as doc/cli.md states it.
const guardExpression = "#own = :own AND #ten = :ten AND attribute_not_exists(#rel)"

// envScript writes the DDBLOCK_ environment to $1 at once (whole, by a
// rename), then waits until the file $2 exists.
const envScript = `env | grep '^DDBLOCK_' > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.05; done`

// heldRun is a `ddblock run` whose command holds the lock until ended.
type heldRun struct {
	p    *proc
	env  map[string]string
	stop string // the file that ends the command
}

// heldTiming gives the runs a lease that a stalled machine cannot eat
// (nothing here waits for one to pass), and heartbeats often enough for
// the guard to be seen to hold across them.
var heldTiming = []string{"--lease", "30s", "--heartbeat", "100ms"}

// startHeld starts `ddblock run ARGS KEY` with a command that records its
// environment and waits.
func (f *fixture) startHeld(key string, args ...string) *heldRun {
	f.t.Helper()
	dir := f.t.TempDir()
	envFile, stop := filepath.Join(dir, "env"), filepath.Join(dir, "stop")
	args = append(append(slices.Clone(args), heldTiming...), key, "--", "sh", "-c", envScript, "sh", envFile, stop)
	p := f.start("run", args...)
	p.eventuallyWhileRunning("the command to record its environment", func() bool { return readFile(f.t, envFile) != "" })
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(readFile(f.t, envFile)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	return &heldRun{p: p, env: env, stop: stop}
}

// end lets the command end and waits for the run.
func (h *heldRun) end(t *testing.T) result {
	t.Helper()
	if err := os.WriteFile(h.stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return h.p.wait()
}

// lost waits for a run whose lock was taken from it to end by itself:
// ddblock stops the command once a heartbeat finds the lock gone. Asking
// the command to finish instead (end) races with that heartbeat: a
// command that ends first leaves a release that finds the lock stolen,
// and the run exits 0.
func (h *heldRun) lost(t *testing.T) result {
	t.Helper()
	return h.p.wait()
}

// cliCheck is DDBLOCK_GUARD_CHECK as the AWS CLI reads it, for string
// attribute values (all a guard has).
type cliCheck struct {
	ConditionCheck struct {
		TableName                           string
		Key                                 map[string]map[string]string
		ConditionExpression                 string
		ExpressionAttributeNames            map[string]string
		ExpressionAttributeValues           map[string]map[string]string
		ReturnValuesOnConditionCheckFailure string
	}
}

// parseGuardCheck reads DDBLOCK_GUARD_CHECK strictly: no field the AWS
// CLI would not take, every value a string attribute.
func parseGuardCheck(t *testing.T, s string) cliCheck {
	t.Helper()
	var c cliCheck
	d := json.NewDecoder(strings.NewReader(s))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		t.Fatalf("DDBLOCK_GUARD_CHECK=%s: %v", s, err)
	}
	for _, m := range []map[string]map[string]string{c.ConditionCheck.Key, c.ConditionCheck.ExpressionAttributeValues} {
		for name, v := range m {
			if _, ok := v["S"]; !ok || len(v) != 1 {
				t.Fatalf("DDBLOCK_GUARD_CHECK: %s is %v, want a string attribute {\"S\": ...}", name, v)
			}
		}
	}
	return c
}

// documentedCheck is the guard built from the other variables, as
// doc/cli.md says to.
func documentedCheck(env map[string]string) cliCheck {
	var c cliCheck
	cc := &c.ConditionCheck
	cc.TableName = env["DDBLOCK_TABLE"]
	cc.Key = map[string]map[string]string{env["DDBLOCK_PARTITION_KEY_NAME"]: {"S": env["DDBLOCK_KEY"]}}
	if name := env["DDBLOCK_SORT_KEY_NAME"]; name != "" {
		cc.Key[name] = map[string]string{"S": env["DDBLOCK_SORT_KEY"]}
	}
	cc.ConditionExpression = guardExpression
	cc.ExpressionAttributeNames = map[string]string{"#own": "owner_name", "#ten": "ddblock_tenure", "#rel": "ddblock_released"}
	cc.ExpressionAttributeValues = map[string]map[string]string{":own": {"S": env["DDBLOCK_OWNER"]}, ":ten": {"S": env["DDBLOCK_TENURE"]}}
	return c
}

func sdkAttrs(m map[string]map[string]string) map[string]types.AttributeValue {
	out := map[string]types.AttributeValue{}
	for k, v := range m {
		out[k] = &types.AttributeValueMemberS{Value: v["S"]}
	}
	return out
}

// guardItem is the guard as an SDK transaction item.
func (c cliCheck) guardItem() types.TransactWriteItem {
	cc := c.ConditionCheck
	return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
		TableName:                 aws.String(cc.TableName),
		Key:                       sdkAttrs(cc.Key),
		ConditionExpression:       aws.String(cc.ConditionExpression),
		ExpressionAttributeNames:  cc.ExpressionAttributeNames,
		ExpressionAttributeValues: sdkAttrs(cc.ExpressionAttributeValues),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailure(
			cc.ReturnValuesOnConditionCheckFailure),
	}}
}

// counter is an item of the fixture's table that guarded writes
// increment.
type counter struct {
	f   *fixture
	key map[string]types.AttributeValue
}

func (f *fixture) counter(pkName, skName string) counter {
	key := map[string]types.AttributeValue{pkName: &types.AttributeValueMemberS{Value: "counter"}}
	if skName != "" {
		key[skName] = &types.AttributeValueMemberS{Value: "-"}
	}
	return counter{f: f, key: key}
}

// increment adds one to the counter, guarded by guard, in one transaction.
func (c counter) increment(guard cliCheck) error {
	_, err := sdk.TransactWriteItems(context.Background(), &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{guard.guardItem(), {Update: &types.Update{
			TableName:                 aws.String(c.f.table),
			Key:                       c.key,
			UpdateExpression:          aws.String("ADD #n :one"),
			ExpressionAttributeNames:  map[string]string{"#n": "n"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}}},
	})
	return err
}

// value is the counter's value; "" when it has none.
func (c counter) value(t *testing.T) string {
	t.Helper()
	out, err := sdk.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(c.f.table), Key: c.key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := out.Item["n"].(*types.AttributeValueMemberN); ok {
		return n.Value
	}
	return ""
}

// guardFailed reports whether err is the cancellation of a transaction
// whose first action, the guard, failed its condition while the second
// did not.
func guardFailed(err error) bool {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != 2 {
		return false
	}
	return aws.ToString(tce.CancellationReasons[0].Code) == "ConditionalCheckFailed" &&
		aws.ToString(tce.CancellationReasons[1].Code) == "None"
}

// The environment a run exports guards the command's writes: the write
// commits while the run holds the lock, also after heartbeats changed
// the record version, and fails on the guard once the lock was released,
// kept released (--fencing-token), taken again by the same owner (a new
// tenure), or forced away and taken by another owner while the run still
// ran. On dynalite, which has no transactions, the write never lands.
func TestRunGuardedWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "plain"},
		{name: "fencing token (released items kept)", args: []string{"--fencing-token"}},
		{name: "partition key only", args: []string{"--partition-key-only"}},
		{name: "session", args: []string{"--session"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if slices.Contains(tc.args, "--partition-key-only") {
				f.table += "_pk_only"
				if r := f.run("create-table", "--partition-key-only", "--on-demand", "--poll-interval", "10ms"); r.code != 0 {
					t.Fatalf("create-table --partition-key-only: %v", r)
				}
			}
			args := append([]string{"--owner", "me"}, tc.args...)
			run := f.startHeld("job", args...)
			env := run.env

			wantSK := "sort_key"
			if slices.Contains(tc.args, "--partition-key-only") {
				wantSK = ""
			}
			if env["DDBLOCK_PARTITION_KEY_NAME"] != "lock_key" || env["DDBLOCK_SORT_KEY_NAME"] != wantSK {
				t.Errorf("DDBLOCK_PARTITION_KEY_NAME=%q DDBLOCK_SORT_KEY_NAME=%q, want lock_key and %q",
					env["DDBLOCK_PARTITION_KEY_NAME"], env["DDBLOCK_SORT_KEY_NAME"], wantSK)
			}
			if tenure := f.itemTenure(env); env["DDBLOCK_TENURE"] == "" || env["DDBLOCK_TENURE"] != tenure {
				t.Errorf("DDBLOCK_TENURE=%q, the lock item's ddblock_tenure %q: want the same, not empty", env["DDBLOCK_TENURE"], tenure)
			}
			guard := parseGuardCheck(t, env["DDBLOCK_GUARD_CHECK"])
			got, want := guard, documentedCheck(env)
			got.ConditionCheck.ReturnValuesOnConditionCheckFailure = "" // not part of the condition
			if !reflect.DeepEqual(got, want) {
				t.Errorf("DDBLOCK_GUARD_CHECK=%s\nwant the documented condition: %+v", env["DDBLOCK_GUARD_CHECK"], want)
			}

			c := f.counter(env["DDBLOCK_PARTITION_KEY_NAME"], env["DDBLOCK_SORT_KEY_NAME"])
			if !server.HasTransactions() {
				err := c.increment(guard)
				if err == nil || c.value(t) != "" {
					t.Fatalf("a guarded write on %s, which has no transactions: err %v, counter %q; want an error and no write", server.Name(), err, c.value(t))
				}
				if !transactionsUnsupported(err) {
					t.Errorf("a guarded write on %s: %v; want the server's refusal of TransactWriteItems", server.Name(), err)
				}
				if r := run.end(t); r.code != 0 {
					t.Errorf("run: %v", r)
				}
				return
			}

			if err := c.increment(guard); err != nil {
				t.Fatalf("a guarded write while the run holds the lock: %v", err)
			}
			// Heartbeats change the record version (with --session, the
			// session item's); the guard holds on.
			beating := env
			if sk := env["DDBLOCK_SESSION_KEY"]; sk != "" {
				beating = maps.Clone(env)
				beating["DDBLOCK_KEY"], beating["DDBLOCK_SORT_KEY"] = sk, "-"
			}
			rvn := f.itemString(beating, "record_version_number")
			eventually(t, "a heartbeat", func() bool { return f.itemString(beating, "record_version_number") != rvn })
			if err := c.increment(guard); err != nil {
				t.Fatalf("a guarded write after a heartbeat: %v", err)
			}
			if r := run.end(t); r.code != 0 {
				t.Fatalf("run: %v", r)
			}
			if err := c.increment(guard); !guardFailed(err) {
				t.Errorf("a guarded write after the run released the lock: %v; want TransactionCanceledException, ConditionalCheckFailed on the guard", err)
			}

			// The same owner takes the lock again: a new tenure, and the
			// old guard still fails.
			again := f.startHeld("job", args...)
			if again.env["DDBLOCK_OWNER"] != env["DDBLOCK_OWNER"] || again.env["DDBLOCK_TENURE"] == env["DDBLOCK_TENURE"] {
				t.Errorf("the second run: owner %q tenure %q, the first's %q %q: want the same owner, another tenure",
					again.env["DDBLOCK_OWNER"], again.env["DDBLOCK_TENURE"], env["DDBLOCK_OWNER"], env["DDBLOCK_TENURE"])
			}
			if err := c.increment(guard); !guardFailed(err) {
				t.Errorf("the first run's guarded write while the same owner holds the lock again: %v; want ConditionalCheckFailed on the guard", err)
			}
			againGuard := parseGuardCheck(t, again.env["DDBLOCK_GUARD_CHECK"])
			if err := c.increment(againGuard); err != nil {
				t.Errorf("the second run's own guarded write: %v", err)
			}

			// An operator forces the lock away and another owner's run
			// takes it while the second run still runs: the second run's
			// guard fails, and it exits 76.
			release := []string{"--force", "job"}
			if slices.Contains(tc.args, "--partition-key-only") {
				release = append(release, "--partition-key-only")
			}
			if slices.Contains(tc.args, "--session") {
				release = append(release, "--with-session")
			}
			// release refuses (75) when a heartbeat lands between its read
			// and its delete: the run is alive and heartbeating.
			var r result
			eventually(t, "release --force to win against the run's heartbeats", func() bool {
				r = f.run("release", release...)
				return r.code != exitBusy
			})
			if r.code != 0 {
				t.Fatalf("release %v: %v", release, r)
			}
			taker := f.startHeld("job", append([]string{"--owner", "other"}, tc.args...)...)
			if err := c.increment(againGuard); !guardFailed(err) {
				t.Errorf("the second run's guarded write after another owner took the lock: %v; want ConditionalCheckFailed on the guard", err)
			}
			if err := c.increment(parseGuardCheck(t, taker.env["DDBLOCK_GUARD_CHECK"])); err != nil {
				t.Errorf("the taker's own guarded write: %v", err)
			}
			if r := again.lost(t); r.code != exitLockLost {
				t.Errorf("the second run, its lock taken: %v; want exit %d", r, exitLockLost)
			}
			if r := taker.end(t); r.code != 0 {
				t.Fatalf("the taker's run: %v", r)
			}
			if got := c.value(t); got != "4" {
				t.Errorf("counter %q, want 4: the four writes made while the lock was held, none of the others", got)
			}
		})
	}
}

// itemTenure reads the lock item's ddblock_tenure attribute.
func (f *fixture) itemTenure(env map[string]string) string {
	return f.itemString(env, "ddblock_tenure")
}

// itemString reads one string attribute of the lock item the run's
// environment names.
func (f *fixture) itemString(env map[string]string, attr string) string {
	f.t.Helper()
	key := sdkAttrs(documentedCheck(env).ConditionCheck.Key)
	out, err := sdk.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(env["DDBLOCK_TABLE"]), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		f.t.Fatal(err)
	}
	if s, ok := out.Item[attr].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// transactionsUnsupported reports whether err is a server's refusal of
// the TransactWriteItems operation itself, as dynalite answers it.
func transactionsUnsupported(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException"
}
