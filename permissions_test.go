package ddblock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/permdoc"
)

// doc/permissions.md gives an IAM policy for each use of the library.
// TestPermissions runs each use's flows against the test server through
// a recorder of every DynamoDB call, and checks what was sent against
// the page, both ways:
//
//   - an action sent on a table that the use's policy does not allow is
//     an error: a user who copied the policy would meet ACCESS_DENIED;
//   - an action the policy allows that the flows never sent is an error
//     too: either the page grants more than the use needs, which is what
//     the page promises not to do, or the flows miss a path of the use,
//     which then goes unchecked. Both want fixing, so neither is a mere
//     log line. The flows send every action on both test servers:
//     dynalite refuses the TTL calls, but they are sent all the same.
//
// Each use runs on a table of its own, with clients of its own, so that
// no other use's calls are counted in.

// The page's placeholders for the tables a use touches.
const (
	lockTablePlaceholder = "TABLE"      // the lock table
	dataTablePlaceholder = "DATA_TABLE" // a table of the user's that guarded writes change
)

// permRecorder is the DynamoDB API the uses run on: it forwards every
// call to the server and notes the IAM action it needs on which table.
// A call is noted before it is sent: a call that fails needs its
// permission all the same (on AWS it would fail for want of it).
type permRecorder struct {
	api *dynamodb.Client

	mu    sync.Mutex
	roles map[string]string     // table name → the page's placeholder
	sent  map[permdoc.Grant]int // the action on the ARN as the page writes it
	ops   map[string]int        // API operations, by name, for the log
}

func newPermRecorder(api *dynamodb.Client) *permRecorder {
	return &permRecorder{api: api, roles: map[string]string{}, sent: map[permdoc.Grant]int{}, ops: map[string]int{}}
}

// role says which placeholder of the page stands for table.
func (r *permRecorder) role(table, placeholder string) {
	r.mu.Lock()
	r.roles[table] = placeholder
	r.mu.Unlock()
}

// note records that operation op needs action on table. A table the
// test did not name keeps its own name, which no policy of the page
// names: such a call fails the check.
func (r *permRecorder) note(op, action string, table *string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := aws.ToString(table)
	if p, ok := r.roles[name]; ok {
		name = p
	}
	r.ops[op]++
	r.sent[permdoc.Grant{Action: "dynamodb:" + action, Resource: permdoc.TableARN(name)}]++
}

// count is how many calls needed action on the lock table.
func (r *permRecorder) count(action string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[permdoc.Grant{Action: "dynamodb:" + action, Resource: permdoc.TableARN(lockTablePlaceholder)}]
}

// waitCount waits until more than n calls needed action on the lock
// table: the sign that a background loop (a heartbeat, a waiter's poll)
// has run.
func (r *permRecorder) waitCount(t *testing.T, action string, n int) {
	t.Helper()
	permEventually(t, fmt.Sprintf("more than %d %s calls", n, action), func() bool { return r.count(action) > n })
}

func (r *permRecorder) snapshot() (map[permdoc.Grant]int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sent, ops := make(map[permdoc.Grant]int, len(r.sent)), make(map[string]int, len(r.ops))
	for g, n := range r.sent {
		sent[g] = n
	}
	for op, n := range r.ops {
		ops[op] = n
	}
	return sent, ops
}

func (r *permRecorder) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	r.note("GetItem", "GetItem", in.TableName)
	return r.api.GetItem(ctx, in, o...)
}

func (r *permRecorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	r.note("PutItem", "PutItem", in.TableName)
	return r.api.PutItem(ctx, in, o...)
}

func (r *permRecorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	r.note("UpdateItem", "UpdateItem", in.TableName)
	return r.api.UpdateItem(ctx, in, o...)
}

func (r *permRecorder) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	r.note("DeleteItem", "DeleteItem", in.TableName)
	return r.api.DeleteItem(ctx, in, o...)
}

func (r *permRecorder) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	r.note("Query", "Query", in.TableName)
	return r.api.Query(ctx, in, o...)
}

func (r *permRecorder) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	r.note("Scan", "Scan", in.TableName)
	return r.api.Scan(ctx, in, o...)
}

// TransactWriteItems has no IAM action of its own: DynamoDB authorizes
// each of its actions, on that action's table, as the call it stands
// for (a Put as PutItem, …) and a ConditionCheck as ConditionCheckItem.
func (r *permRecorder) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	for _, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			r.note("TransactWriteItems", "PutItem", it.Put.TableName)
		case it.Update != nil:
			r.note("TransactWriteItems", "UpdateItem", it.Update.TableName)
		case it.Delete != nil:
			r.note("TransactWriteItems", "DeleteItem", it.Delete.TableName)
		case it.ConditionCheck != nil:
			r.note("TransactWriteItems", "ConditionCheckItem", it.ConditionCheck.TableName)
		}
	}
	return r.api.TransactWriteItems(ctx, in, o...)
}

func (r *permRecorder) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	r.note("CreateTable", "CreateTable", in.TableName)
	return r.api.CreateTable(ctx, in, o...)
}

func (r *permRecorder) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	r.note("DescribeTable", "DescribeTable", in.TableName)
	return r.api.DescribeTable(ctx, in, o...)
}

func (r *permRecorder) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	r.note("UpdateTimeToLive", "UpdateTimeToLive", in.TableName)
	return r.api.UpdateTimeToLive(ctx, in, o...)
}

func (r *permRecorder) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	r.note("DescribeTimeToLive", "DescribeTimeToLive", in.TableName)
	return r.api.DescribeTimeToLive(ctx, in, o...)
}

// The recorder serves every interface the library looks for.
var (
	_ ddblock.DynamoDBAPI = (*permRecorder)(nil)
	_ ddblock.TableAPI    = (*permRecorder)(nil)
)

// permUse is one use of the library: the policy of the page that covers
// it, and its flows, which run on a table of their own.
type permUse struct {
	policy string
	run    func(t *testing.T, u *permRun)
}

// permRun is one use's table, recorder and clients.
type permRun struct {
	e   *env
	rec *permRecorder
}

// client is a client of the use, whose calls are recorded.
func (u *permRun) client(opts ...ddblock.Option) *ddblock.Client {
	u.e.t.Helper()
	return u.e.clientOn(u.rec, opts...)
}

// setup is a client whose calls are not recorded: it prepares what a
// use looks at, and watches for the conditions the flows wait for.
func (u *permRun) setup(opts ...ddblock.Option) *ddblock.Client {
	u.e.t.Helper()
	return u.e.client(opts...)
}

// Timings: heartbeats every 50 ms, so that the flows see them at once,
// and a safe period and lease long enough that a busy machine does not
// cost a holder its lock. A "dying" holder writes a short lease instead,
// so that a waiter takes its lock over within a second.
var (
	permFast   = []ddblock.Option{ddblock.WithHeartbeatPeriod(50 * time.Millisecond), ddblock.WithSafePeriod(10 * time.Second), ddblock.WithLeaseDuration(20 * time.Second)}
	permDying  = []ddblock.Option{ddblock.WithHeartbeatPeriod(100 * time.Millisecond), ddblock.WithSafePeriod(400 * time.Millisecond), ddblock.WithLeaseDuration(600 * time.Millisecond)}
	permStill  = []ddblock.Option{ddblock.WithHeartbeatPeriod(time.Minute), ddblock.WithSafePeriod(2 * time.Minute), ddblock.WithLeaseDuration(3 * time.Minute)}
	permWaitOn = []ddblock.AcquireOption{ddblock.WithRetryPeriod(20 * time.Millisecond), ddblock.WithRetryTimeout(time.Minute)}
)

func permOwner(name string, opts ...ddblock.Option) []ddblock.Option {
	return append([]ddblock.Option{ddblock.WithOwnerName(name)}, opts...)
}

// permEventually polls cond until it holds, failing the test after 30 s.
func permEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ddbtest.Eventually(t, 30*time.Second, what, cond)
}

// permWaitHeartbeat waits until a heartbeat changed the lock's version.
func permWaitHeartbeat(t *testing.T, l *ddblock.Lock) {
	t.Helper()
	first := l.RecordVersionNumber()
	permEventually(t, "a heartbeat of "+l.PartitionKey(), func() bool { return l.RecordVersionNumber() != first })
}

// permAcquireAsync acquires in the background; the channel gives the lock,
// and the test fails if the acquire does.
func permAcquireAsync(t *testing.T, acquire func() (*ddblock.Lock, error)) <-chan *ddblock.Lock {
	got := make(chan *ddblock.Lock, 1)
	go func() {
		l, err := acquire()
		if err != nil {
			t.Errorf("acquire in the background: %v", err)
		}
		got <- l
	}()
	return got
}

// permReceived waits for the background acquire's lock.
func permReceived(t *testing.T, ch <-chan *ddblock.Lock) *ddblock.Lock {
	t.Helper()
	select {
	case l := <-ch:
		if l == nil {
			t.FailNow()
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("the background acquire did not end within a minute")
		return nil
	}
}

func permMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func permCloseAll(t *testing.T, release bool, clients ...*ddblock.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range clients {
		permMust(t, c.Close(ctx, release))
	}
}

var permUses = []permUse{
	{"plain-locks", permPlainLocks},
	{"sessions", permSessions},
	{"elections", permElections},
	{"semaphores", permSemaphores},
	{"fair-waiting", permFairWaiting},
	{"guarded-writes", permGuardedWrites},
	{"inspection", permInspection},
	{"force-release", permForceRelease},
	{"table-setup", permTableSetup},
	{"table-check", permTableCheck},
}

func TestPermissions(t *testing.T) {
	policies, err := permdoc.ParseFile("doc/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, use := range permUses {
		t.Run(use.policy, func(t *testing.T) {
			policy := policies[use.policy]
			if policy == nil {
				t.Fatalf("doc/permissions.md has no policy %q (a line <!-- policy: %s --> before its ```json block)", use.policy, use.policy)
			}
			e := newEnv(t)
			u := &permRun{e: e, rec: newPermRecorder(e.ddb)}
			u.rec.role(e.table, lockTablePlaceholder)
			use.run(t, u)
			if t.Failed() {
				return
			}
			sent, ops := u.rec.snapshot()
			permCheck(t, policy, sent, ops)
		})
	}
}

// permCheck compares what a use sent with what its policy allows; see
// the comment at the top of this file.
func permCheck(t *testing.T, p *permdoc.Policy, sent map[permdoc.Grant]int, ops map[string]int) {
	t.Helper()
	t.Logf("policy %q: operations sent: %v", p.Name, ops)
	grants := make([]permdoc.Grant, 0, len(sent))
	for g := range sent {
		grants = append(grants, g)
	}
	denied, unused := p.Compare(grants)
	for _, g := range denied {
		t.Errorf("sent %s on %s (%d times), which policy %q of doc/permissions.md (line %d) does not allow", g.Action, g.Resource, sent[g], p.Name, p.Line)
	}
	for _, g := range unused {
		t.Errorf("policy %q of doc/permissions.md (line %d) allows %s on %s, which this use never sent: remove it from the policy, or make the test run the path that needs it", p.Name, p.Line, g.Action, g.Resource)
	}
}

// Plain locks: an acquire that waits (reads) for a held lock, heartbeats,
// a release, the takeover of a lock whose holder died, a try that finds
// the lock held, WithLock with fencing tokens (whose release marks the
// item instead of deleting it), and Close releasing what is held.
func permPlainLocks(t *testing.T, u *permRun) {
	ctx := context.Background()
	a := u.client(permOwner("a", permFast...)...)
	b := u.client(permOwner("b", permFast...)...)
	held, err := a.AcquireLock(ctx, "job")
	permMust(t, err)
	permWaitHeartbeat(t, held)

	reads := u.rec.count("GetItem")
	got := permAcquireAsync(t, func() (*ddblock.Lock, error) { return b.AcquireLock(ctx, "job", permWaitOn...) })
	u.rec.waitCount(t, "GetItem", reads) // b waits, reading
	permMust(t, held.Release(ctx, ddblock.WithBestEffort(false)))
	permReceived(t, got)

	if _, err := b.TryAcquireLock(ctx, "job"); !errors.Is(err, ddblock.CodeAlreadyHeld) {
		t.Fatalf("TryAcquireLock of a lock the client holds: %v; want ALREADY_HELD", err)
	}
	if _, err := a.TryAcquireLock(ctx, "job"); !errors.Is(err, ddblock.CodeLockHeld) {
		t.Fatalf("TryAcquireLock of another's lock: %v; want LOCK_HELD", err)
	}

	dying := u.client(permOwner("dying", permDying...)...)
	_, err = dying.AcquireLock(ctx, "crash")
	permMust(t, err)
	permCloseAll(t, false, dying) // keeps the lock, heartbeats no more
	_, err = b.AcquireLock(ctx, "crash", permWaitOn...)
	permMust(t, err)

	fenced := u.client(permOwner("fenced", append(permFast, ddblock.WithFencingTokens())...)...)
	permMust(t, fenced.WithLock(ctx, "fenced", func(ctx context.Context, l *ddblock.Lock) error {
		permWaitHeartbeat(t, l)
		return nil
	}))

	// A set of keys: its transaction's puts are PutItem actions to IAM.
	set, err := a.AcquireLocks(ctx, []string{"set-1", "set-2"})
	if ddbtest.Shared(t).HasTransactions() {
		permMust(t, err)
		permWaitHeartbeat(t, set.Locks()[0])
		permMust(t, set.Release(ctx, ddblock.WithBestEffort(false)))
	} else if !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
		t.Fatalf("AcquireLocks without transactions: %v; want TRANSACTIONS_UNSUPPORTED", err)
	}
	permCloseAll(t, true, a, b, fenced)
}

// Sessions: two clients whose locks hang on session items; one waits
// for the other's lock (reading the lock and its session item) while the
// session heartbeats, takes it once released, and takes over the lock of
// a session that died (deleting its session item); Close releases the
// rest and deletes the session items.
func permSessions(t *testing.T, u *permRun) {
	ctx := context.Background()
	sess := append([]ddblock.Option{ddblock.WithSessionLease()}, permFast...)
	a := u.client(permOwner("a", sess...)...)
	b := u.client(permOwner("b", sess...)...)
	held, err := a.AcquireLock(ctx, "s1")
	permMust(t, err)
	_, err = a.AcquireLock(ctx, "s2")
	permMust(t, err)
	u.rec.waitCount(t, "UpdateItem", 0) // a session heartbeat

	reads := u.rec.count("GetItem")
	got := permAcquireAsync(t, func() (*ddblock.Lock, error) { return b.AcquireLock(ctx, "s1", permWaitOn...) })
	u.rec.waitCount(t, "GetItem", reads+1) // the lock and its session item, at least
	permMust(t, held.Release(ctx, ddblock.WithBestEffort(false)))
	permReceived(t, got)

	dying := u.client(permOwner("dying", append([]ddblock.Option{ddblock.WithSessionLease()}, permDying...)...)...)
	_, err = dying.AcquireLock(ctx, "s3")
	permMust(t, err)
	permCloseAll(t, false, dying) // a session client closed without release keeps its session item
	_, err = b.AcquireLock(ctx, "s3", permWaitOn...)
	permMust(t, err)
	permCloseAll(t, true, a, b)
}

// Elections: a leader campaigns, proclaims a new value and heartbeats;
// a second candidate campaigns and waits; an observer watches; the
// leader resigns and the second candidate leads, then resigns too.
func permElections(t *testing.T, u *permRun) {
	ctx := context.Background()
	a := u.client(permOwner("a", permFast...)...)
	b := u.client(permOwner("b", permFast...)...)
	watcher := u.client(permOwner("watcher", permFast...)...)
	ea, err := a.NewElection("scheduler", ddblock.WithElectionRetryPeriod(20*time.Millisecond))
	permMust(t, err)
	eb, err := b.NewElection("scheduler", ddblock.WithElectionRetryPeriod(20*time.Millisecond))
	permMust(t, err)
	ew, err := watcher.NewElection("scheduler")
	permMust(t, err)

	lead, err := ea.Campaign(ctx, "a:1")
	permMust(t, err)
	permMust(t, lead.Proclaim(ctx, "a:2"))
	permWaitHeartbeat(t, lead.Lock)

	reads := u.rec.count("GetItem")
	campaigned := make(chan *ddblock.Leadership, 1)
	go func() {
		l, err := eb.Campaign(ctx, "b:1")
		if err != nil {
			t.Errorf("the second Campaign: %v", err)
		}
		campaigned <- l
	}()
	u.rec.waitCount(t, "GetItem", reads) // b waits, reading

	octx, stop := context.WithCancel(ctx)
	for info, err := range ew.Observe(octx, 20*time.Millisecond) {
		permMust(t, err)
		if info != nil && info.Value == "a:2" {
			break
		}
	}
	stop()
	permMust(t, ea.Resign(ctx))
	var leadB *ddblock.Leadership
	select {
	case leadB = <-campaigned:
	case <-time.After(time.Minute):
		t.Fatal("the second candidate did not lead within a minute")
	}
	if leadB == nil {
		t.FailNow()
	}
	info, err := ew.Leader(ctx)
	permMust(t, err)
	if info.Value != "b:1" {
		t.Fatalf("Leader: %+v; want b:1", info)
	}
	permMust(t, eb.Resign(ctx))
	permCloseAll(t, true, a, b, watcher)
}

// Semaphores: two clients take both slots; a third acquire waits (a
// Query per look) and gets the slot one releases; Holders lists them
// (ListSemaphores scans: it belongs to inspection); a resize to fewer slots waits for the holder
// above and then narrows the semaphore; and on a table keyed by the
// partition key alone, where slots are read one by one (GetItem), a slot
// is taken and released.
func permSemaphores(t *testing.T, u *permRun) {
	ctx := context.Background()
	a := u.client(permOwner("a", permFast...)...)
	b := u.client(permOwner("b", permFast...)...)
	sa, err := a.NewSemaphore("pool", 2)
	permMust(t, err)
	sb, err := b.NewSemaphore("pool", 2)
	permMust(t, err)
	first, err := sa.Acquire(ctx)
	permMust(t, err)
	second, err := sb.TryAcquire(ctx)
	permMust(t, err)
	permWaitHeartbeat(t, first)

	looks := u.rec.count("Query")
	got := permAcquireAsync(t, func() (*ddblock.Lock, error) { return sb.Acquire(ctx, permWaitOn...) })
	u.rec.waitCount(t, "Query", looks+1) // at least two looks: it waits
	holders, err := sa.Holders(ctx)
	permMust(t, err)
	if len(holders) != 2 {
		t.Fatalf("Holders: %d; want 2", len(holders))
	}
	permMust(t, first.Release(ctx, ddblock.WithBestEffort(false)))
	third := permReceived(t, got)

	// Shrink to one slot: both are held, so the resize waits for the
	// holder of slot 1, then narrows the metadata item.
	resized := make(chan error, 1)
	go func() { resized <- sa.Resize(ctx, 1) }()
	permEventually(t, "the new number in force", func() bool {
		info, err := u.setup().GetSemaphore(ctx, "pool")
		return err == nil && info.Slots == 1
	})
	for _, l := range []*ddblock.Lock{second, third} {
		if slot, _ := sb.SlotOf(l); slot == 1 {
			permMust(t, l.Release(ctx, ddblock.WithBestEffort(false)))
		}
	}
	select {
	case err := <-resized:
		permMust(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Resize did not end within a minute")
	}

	pkTable := pkOnlyTable(t, u.e.ddb)
	u.rec.role(pkTable, lockTablePlaceholder)
	pk, err := ddblock.New(u.rec, append([]ddblock.Option{ddblock.WithLogger(quiet), ddblock.WithTableName(pkTable),
		ddblock.WithPartitionKeyName("id"), ddblock.WithPartitionKeyOnly(), ddblock.WithOwnerName("pk")}, permFast...)...)
	permMust(t, err)
	sp, err := pk.NewSemaphore("pk-pool", 2)
	permMust(t, err)
	slot, err := sp.Acquire(ctx)
	permMust(t, err)
	permMust(t, slot.Release(ctx, ddblock.WithBestEffort(false)))
	permCloseAll(t, true, a, b, pk)
}

// Fair waiting: two fair waiters line up behind a holder, and take the
// lock in turn, each from the one before.
func permFairWaiting(t *testing.T, u *permRun) {
	ctx := context.Background()
	holder := u.client(permOwner("holder", permFast...)...)
	w1 := u.client(permOwner("w1", permFast...)...)
	w2 := u.client(permOwner("w2", permFast...)...)
	watch := u.setup()
	held, err := holder.AcquireLock(ctx, "fair")
	permMust(t, err)
	inLine := func(n int) func() bool {
		return func() bool {
			line, err := watch.Line(ctx, "fair", "")
			return err == nil && len(line.Tickets) == n
		}
	}
	fair := append([]ddblock.AcquireOption{ddblock.WithFairWaiting()}, permWaitOn...)
	got1 := permAcquireAsync(t, func() (*ddblock.Lock, error) { return w1.AcquireLock(ctx, "fair", fair...) })
	permEventually(t, "w1 in line", inLine(1))
	got2 := permAcquireAsync(t, func() (*ddblock.Lock, error) { return w2.AcquireLock(ctx, "fair", fair...) })
	permEventually(t, "w2 in line", inLine(2))

	permMust(t, held.Release(ctx, ddblock.WithBestEffort(false)))
	l1 := permReceived(t, got1)
	if l1.OwnerName() != "w1" {
		t.Fatalf("first to get the lock: %s; want w1", l1.OwnerName())
	}
	permMust(t, l1.Release(ctx, ddblock.WithBestEffort(false)))
	l2 := permReceived(t, got2)
	permMust(t, l2.Release(ctx, ddblock.WithBestEffort(false)))
	permCloseAll(t, true, holder, w1, w2)
}

// Guarded writes: a held, heartbeated lock guards writes of every kind
// to a table of the user's own (put, update, condition check, delete),
// while another client waits for the lock; then it is released. On a
// server without transactions the calls are refused, but they were sent,
// and they name the actions they would need on DynamoDB.
func permGuardedWrites(t *testing.T, u *permRun) {
	ctx := context.Background()
	e := u.e
	data := e.dataTable()
	u.rec.role(data, dataTablePlaceholder)
	a := u.client(permOwner("a", permFast...)...)
	b := u.client(permOwner("b", permFast...)...)
	l, err := a.AcquireLock(ctx, "guarded")
	permMust(t, err)
	permWaitHeartbeat(t, l)

	reads := u.rec.count("GetItem")
	got := permAcquireAsync(t, func() (*ddblock.Lock, error) { return b.AcquireLock(ctx, "guarded", permWaitOn...) })
	u.rec.waitCount(t, "GetItem", reads)

	transactions := ddbtest.Shared(t).HasTransactions()
	write := func(items ...types.TransactWriteItem) {
		t.Helper()
		_, err := l.GuardedWrite(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if transactions {
			permMust(t, err)
		} else if !errors.Is(err, ddblock.CodeTransactionsUnsupported) {
			t.Fatalf("GuardedWrite without transactions: %v; want TRANSACTIONS_UNSUPPORTED", err)
		}
	}
	write(
		types.TransactWriteItem{Put: &types.Put{TableName: aws.String(data), Item: e.dataKey("put")}},
		e.incr("counter"),
	)
	write(
		types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: aws.String(data), Key: e.dataKey("counter"),
			ConditionExpression: aws.String("attribute_exists(#n)"), ExpressionAttributeNames: map[string]string{"#n": "n"}}},
		types.TransactWriteItem{Delete: &types.Delete{TableName: aws.String(data), Key: e.dataKey("put")}},
	)
	permMust(t, l.Release(ctx, ddblock.WithBestEffort(false)))
	permReceived(t, got)
	permCloseAll(t, true, a, b)
}

// Inspection: reading, without writing, a lock, a lock on a session, a
// semaphore and a line of fair waiters, one by one and by listing.
func permInspection(t *testing.T, u *permRun) {
	ctx := context.Background()
	holder := u.setup(permOwner("holder", permStill...)...)
	sessions := u.setup(permOwner("session", append([]ddblock.Option{ddblock.WithSessionLease()}, permStill...)...)...)
	waiter := u.setup(permOwner("waiter", permStill...)...)
	held, err := holder.AcquireLock(ctx, "held")
	permMust(t, err)
	_, err = sessions.AcquireLock(ctx, "on-session")
	permMust(t, err)
	sem, err := holder.NewSemaphore("pool", 2)
	permMust(t, err)
	_, err = sem.Acquire(ctx)
	permMust(t, err)
	got := permAcquireAsync(t, func() (*ddblock.Lock, error) {
		return waiter.AcquireLock(ctx, "held", append([]ddblock.AcquireOption{ddblock.WithFairWaiting()}, permWaitOn...)...)
	})
	permEventually(t, "a waiter in line", func() bool {
		line, err := holder.Line(ctx, "held", "")
		return err == nil && len(line.Tickets) == 1
	})

	r := u.client()
	if _, err := r.GetLock(ctx, "held", ""); err != nil {
		t.Fatal(err)
	}
	info, err := r.GetLock(ctx, "on-session", "")
	permMust(t, err)
	if info.Session == nil || info.Session.Item == nil {
		t.Fatalf("GetLock of a session's lock: %+v; want its session item read", info)
	}
	for _, err := range r.ListLocks(ctx) {
		permMust(t, err)
	}
	for _, err := range r.ListLocksByPartitionKey(ctx, "held") {
		permMust(t, err)
	}
	_, err = r.GetSemaphore(ctx, "pool")
	permMust(t, err)
	for _, err := range r.ListSemaphores(ctx) {
		permMust(t, err)
	}
	line, err := r.Line(ctx, "held", "")
	permMust(t, err)
	if len(line.Tickets) != 1 {
		t.Fatalf("Line: %d tickets; want 1", len(line.Tickets))
	}
	for _, err := range r.ListLines(ctx) {
		permMust(t, err)
	}
	permCloseAll(t, false, r)
	permMust(t, held.Release(ctx, ddblock.WithBestEffort(false)))
	permReceived(t, got)
}

// Forced release: an operator removes a stuck lock, a lock that counts
// fencing tokens (marked released rather than deleted), and a line of
// fair waiters.
func permForceRelease(t *testing.T, u *permRun) {
	ctx := context.Background()
	holder := u.setup(permOwner("holder", permStill...)...)
	counting := u.setup(permOwner("counting", append([]ddblock.Option{ddblock.WithFencingTokens()}, permStill...)...)...)
	waiter := u.setup(permOwner("waiter", permStill...)...)
	stuck, err := holder.AcquireLock(ctx, "stuck")
	permMust(t, err)
	counted, err := counting.AcquireLock(ctx, "counted")
	permMust(t, err)
	_, err = holder.AcquireLock(ctx, "queue")
	permMust(t, err)
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireLock(wctx, "queue", append([]ddblock.AcquireOption{ddblock.WithFairWaiting()}, permWaitOn...)...)
		waited <- err
	}()
	permEventually(t, "a waiter in line", func() bool {
		line, err := holder.Line(ctx, "queue", "")
		return err == nil && len(line.Tickets) == 1
	})

	op := u.client(permOwner("operator")...)
	permMust(t, op.ForceRelease(ctx, "stuck", "", stuck.RecordVersionNumber()))
	permMust(t, op.ForceRelease(ctx, "counted", "", counted.RecordVersionNumber()))
	cleared, err := op.ClearLine(ctx, "queue", "")
	permMust(t, err)
	if cleared != 1 {
		t.Fatalf("ClearLine deleted %d tickets; want 1", cleared)
	}
	permCloseAll(t, false, op)
	stopWaiting()
	if err := <-waited; !errors.Is(err, ddblock.CodeCanceled) {
		t.Fatalf("the waiter whose line was cleared: %v; want it waiting until cancelled", err)
	}
}

// Table helpers: CreateTable, EnsureTable of a missing table, and
// EnsureTable of an existing one.
func permTableSetup(t *testing.T, u *permRun) {
	ctx := context.Background()
	created, ensured := ddbtest.TableName(t), ddbtest.TableName(t)
	u.rec.role(created, lockTablePlaceholder)
	u.rec.role(ensured, lockTablePlaceholder)
	poll := ddblock.WithPollInterval(10 * time.Millisecond)
	named := func(name string) ddblock.TableOption {
		return ddblock.TableOptionForTest(func(o *ddblock.TableOptions) { o.TableName = name })
	}
	ttl := ddbtest.Shared(t).HasTTL()
	if err := ddblock.CreateTable(ctx, u.rec, named(created), ddblock.WithOnDemand(), poll); err != nil && (ttl || !errors.Is(err, ddblock.CodeTTLUnsupported)) {
		t.Fatalf("CreateTable: %v", err)
	}
	for _, name := range []string{ensured, created} {
		if _, err := ddblock.EnsureTable(ctx, u.rec, named(name), poll); err != nil {
			t.Fatalf("EnsureTable(%s): %v", name, err)
		}
	}
}

// Table check: a client's CheckTable, which only reads.
func permTableCheck(t *testing.T, u *permRun) {
	c := u.client()
	if _, err := c.CheckTable(context.Background(), u.rec); err != nil {
		t.Fatal(err)
	}
	permCloseAll(t, false, c)
}
