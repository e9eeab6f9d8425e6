package compat_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/ddblock/ddblock"
)

// TestMixedFleetContention has Go clients and Python peers fight over one
// lock on the real server, round after round, in both orders:
//
//   - release: one side holds the lock while the other waits; the holder
//     releases, the waiter takes the lock;
//   - heartbeat: the holder keeps the lock for twice its lease, kept alive
//     only by its heartbeats; the waiter must wait it out;
//   - abandon: the holder stops heartbeating without releasing (its
//     process died); the waiter takes over, no sooner than the lease the
//     holder wrote after the holder's last write;
//   - race: both sides ask for a free lock at the same moment; one wins,
//     the other waits for its release.
//
// Every hold is recorded as an interval, from the moment the winning put
// was sent to the moment the holder stopped working (it released, died,
// or was told its lock was lost); no two intervals may overlap. In every
// round the side that does not hold the lock reads the holder's item and
// must see its owner and additional attributes.
//
// The leases are real and short, and differ on purpose: Go writes 800 ms
// ("0.8", which Python can read but could not have written), Python 500
// ms ("0.5"); each waiter must time the lease written in the item.
func TestMixedFleetContention(t *testing.T) {
	ddb := server(t)
	for _, cfg := range []struct {
		name    string
		names   func(*testing.T) names
		sortKey string
	}{
		{"default names", defaultNames, "-"},
		{"custom names", customNames, "shard-7"},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			t.Parallel()
			n := cfg.names(t)
			createTable(t, ddb, n)
			f := &fleet{t: t, ddb: ddb, n: n, pk: "nightly-settlement", sk: cfg.sortKey, heldThroughHeartbeats: map[side]int{}}
			f.readers = map[side]reader{goSide: goReader{newGoClient(t, ddb, n)}, pySide: pyReader{newPyClient(ddb, pyDefaults(n))}}
			t.Cleanup(func() { f.readers[pySide].(pyReader).c.close(false) })

			round := 0
			for range 2 {
				for _, kind := range []string{"release", "heartbeat", "abandon", "race"} {
					for _, holder := range []side{goSide, pySide} {
						round++
						f.run(round, kind, holder)
						f.checkNoOverlap()
						if t.Failed() {
							t.FailNow()
						}
					}
				}
			}
			for _, s := range []side{goSide, pySide} {
				if f.heldThroughHeartbeats[s] == 0 {
					t.Errorf("no heartbeat round in which %s kept the lock past its lease", s)
				}
			}
		})
	}
}

// side is who plays a part in a round.
type side string

const (
	goSide side = "go"
	pySide side = "python"
)

func (s side) other() side {
	if s == goSide {
		return pySide
	}
	return goSide
}

// Each side's timing: heartbeat period < safe period < lease. Go's safe
// period leaves its heartbeats (each bounded by half of it) room for a
// server that answers in tens of milliseconds and stalls now and then:
// DynamoDB Local, a JVM, on a busy machine, and cold on its first calls.
var (
	goTiming = []ddblock.Option{
		ddblock.WithHeartbeatPeriod(100 * time.Millisecond),
		ddblock.WithSafePeriod(400 * time.Millisecond),
		ddblock.WithLeaseDuration(800 * time.Millisecond),
	}
	pyTiming = func(n names) pyConfig {
		c := pyDefaults(n)
		c.HeartbeatPeriod, c.SafePeriod, c.LeaseDuration = 50*time.Millisecond, 250*time.Millisecond, 500*time.Millisecond
		return c
	}
	// waitLimit bounds every wait for a lock: far longer than any round
	// needs, so that reaching it means the lock was never handed over.
	waitLimit = 15 * time.Second
)

// fleet is one table's contention test.
type fleet struct {
	t       *testing.T
	ddb     *dynamodb.Client
	n       names
	pk, sk  string
	readers map[side]reader

	holds                 []hold
	heldThroughHeartbeats map[side]int
}

// hold is one interval during which a client believed it held the lock.
type hold struct {
	who        string
	start, end time.Time
}

func (f *fleet) record(who string, start, end time.Time) {
	f.holds = append(f.holds, hold{who, start, end})
}

// checkNoOverlap fails the test if two clients ever held the lock at once.
func (f *fleet) checkNoOverlap() {
	f.t.Helper()
	hs := append([]hold(nil), f.holds...)
	sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
	for i := 1; i < len(hs); i++ {
		if prev := hs[i-1]; hs[i].start.Before(prev.end) {
			f.t.Errorf("%s held the lock from %v while %s held it until %v (%v overlap)",
				hs[i].who, hs[i].start.Format("15:04:05.000"), prev.who, prev.end.Format("15:04:05.000"), prev.end.Sub(hs[i].start))
		}
	}
	if len(hs) == 0 {
		f.t.Error("no holds recorded")
	}
}

// run plays one round.
func (f *fleet) run(round int, kind string, holderSide side) {
	t := f.t
	t.Helper()
	ctx := context.Background()
	if kind == "race" {
		f.race(round, holderSide)
		return
	}
	h, w := f.contender(holderSide), f.contender(holderSide.other())
	hName, wName := fmt.Sprintf("round %d %s %s holder", round, kind, h.side()), fmt.Sprintf("round %d %s %s waiter", round, kind, w.side())

	hAttrs := roundAttrs(h.side(), round, kind)
	hl, err := h.acquire(ctx, f.pk, f.sk, hAttrs)
	if err != nil {
		t.Fatalf("%s: acquire: %v", hName, err)
	}
	hStart := h.acquiredAt()
	f.checkRead(w.side(), h.owner(), hAttrs, hName)

	wAttrs := roundAttrs(w.side(), round, kind)
	wres := make(chan acquired, 1)
	go func() {
		l, err := w.acquire(ctx, f.pk, f.sk, wAttrs)
		wres <- acquired{lock: l, err: err}
	}()

	var holdFor time.Duration
	switch kind {
	case "release":
		holdFor = 150 * time.Millisecond
	case "heartbeat":
		holdFor = 2 * h.lease()
	case "abandon":
		holdFor = 100 * time.Millisecond
	}
	beatsBefore := h.heartbeats()
	hEnd, lost := work(hl, holdFor)
	f.record(hName, hStart, hEnd)
	if kind == "abandon" {
		h.abandon()
	} else if err := hl.release(ctx); err != nil && !lost {
		t.Errorf("%s: release: %v", hName, err)
	}

	var got acquired
	select {
	case got = <-wres:
	case <-time.After(waitLimit):
		t.Fatalf("%s: not acquired within %v", wName, waitLimit)
	}
	if got.err != nil {
		t.Fatalf("%s: acquire: %v", wName, got.err)
	}
	switch {
	case kind == "heartbeat" && lost:
		t.Logf("%s: lost the lock while holding it (machine overloaded?); round inconclusive", hName)
	case kind == "heartbeat":
		if beats := h.heartbeats() - beatsBefore; beats == 0 {
			t.Errorf("%s: held the lock %v, twice its lease, without a heartbeat", hName, holdFor)
		}
		f.heldThroughHeartbeats[h.side()]++
	case kind == "abandon":
		if waited := w.acquiredAt().Sub(h.lastWrite()); waited < h.lease() {
			t.Errorf("%s took over %v after %s's last write; its lease is %v", wName, waited, hName, h.lease())
		}
	}
	f.checkRead(h.side(), w.owner(), wAttrs, wName)
	wEnd, wLost := work(got.lock, 30*time.Millisecond)
	f.record(wName, w.acquiredAt(), wEnd)
	if err := got.lock.release(ctx); err != nil && !wLost {
		t.Errorf("%s: release: %v", wName, err)
	}
	h.abandon() // close what is left of the round's clients
	w.abandon()
}

// race has both sides ask for the free lock at once.
func (f *fleet) race(round int, first side) {
	t := f.t
	t.Helper()
	ctx := context.Background()
	cs := []contender{f.contender(first), f.contender(first.other())}
	res := make(chan acquired, 2)
	ready := make(chan struct{})
	for i, c := range cs {
		go func() {
			<-ready
			l, err := c.acquire(ctx, f.pk, f.sk, roundAttrs(c.side(), round, "race"))
			res <- acquired{lock: l, err: err, who: i}
		}()
	}
	close(ready)
	for n := range 2 {
		var got acquired
		select {
		case got = <-res:
		case <-time.After(waitLimit):
			t.Fatalf("round %d race: only %d of 2 acquired within %v", round, n, waitLimit)
		}
		c := cs[got.who]
		name := fmt.Sprintf("round %d race %s (%s)", round, c.side(), []string{"winner", "loser"}[n])
		if got.err != nil {
			t.Fatalf("%s: acquire: %v", name, got.err)
		}
		f.checkRead(c.side().other(), c.owner(), roundAttrs(c.side(), round, "race"), name)
		end, lost := work(got.lock, 100*time.Millisecond)
		f.record(name, c.acquiredAt(), end)
		if err := got.lock.release(ctx); err != nil && !lost {
			t.Errorf("%s: release: %v", name, err)
		}
	}
	for _, c := range cs {
		c.abandon()
	}
}

// acquired is a finished acquire.
type acquired struct {
	lock holding
	err  error
	who  int
}

// work holds the lock for d, or until the lock reports it is lost, and
// returns when the holder stopped working under it.
func work(l holding, d time.Duration) (end time.Time, lost bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return time.Now(), false
	case <-l.lost():
		return time.Now(), true
	}
}

// checkRead has side s read the lock as its clients do, and compares the
// owner and the additional attributes with what the holder wrote.
func (f *fleet) checkRead(s side, owner string, attrs map[string]types.AttributeValue, holderName string) {
	f.t.Helper()
	gotOwner, gotAttrs, err := f.readers[s].read(context.Background(), f.pk, f.sk)
	if err != nil {
		f.t.Fatalf("%s reading %s's lock: %v", s, holderName, err)
	}
	if gotOwner != owner {
		f.t.Errorf("%s reads %s's lock as owned by %q, want %q", s, holderName, gotOwner, owner)
	}
	if s == pySide {
		// Each side reads the other's lock: Python reads ddblock's
		// ddblock_tenure as one more additional attribute.
		if v, ok := gotAttrs["ddblock_tenure"].(*types.AttributeValueMemberS); !ok || v.Value == "" {
			f.t.Errorf("%s reads %s's ddblock_tenure as %v; want the tenure, a string", s, holderName, gotAttrs["ddblock_tenure"])
		}
		delete(gotAttrs, "ddblock_tenure")
	}
	if diff := cmp.Diff(attrs, gotAttrs, attrOpts); diff != "" {
		f.t.Errorf("%s reads %s's additional attributes (-written +read):\n%s", s, holderName, diff)
	}
}

// roundAttrs are the additional attributes a side writes in a round:
// several types, values that change every round.
func roundAttrs(s side, round int, kind string) map[string]types.AttributeValue {
	r := strconv.Itoa(round)
	return map[string]types.AttributeValue{
		"written_by": &types.AttributeValueMemberS{Value: string(s)},
		"round":      &types.AttributeValueMemberN{Value: r},
		"ratio":      &types.AttributeValueMemberN{Value: r + ".25"},
		"payload":    &types.AttributeValueMemberB{Value: []byte{byte(round), 0, 0xff}},
		"job": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
			"kind":    &types.AttributeValueMemberS{Value: kind},
			"dry_run": &types.AttributeValueMemberBOOL{Value: round%2 == 0},
			"parent":  &types.AttributeValueMemberNULL{Value: true},
			"steps":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberS{Value: "a"}, &types.AttributeValueMemberN{Value: r}}},
		}},
		"tags":   &types.AttributeValueMemberSS{Value: []string{string(s), "round-" + r}},
		"shards": &types.AttributeValueMemberNS{Value: []string{"0.5", r}},
	}
}

// contender is one side's client in a round.
type contender interface {
	side() side
	acquire(ctx context.Context, pk, sk string, attrs map[string]types.AttributeValue) (holding, error)
	// abandon stops the client without releasing: a process that died.
	abandon()
	owner() string
	lease() time.Duration
	// lastWrite is when the client sent its last write that may have
	// landed (anything but a failed condition).
	lastWrite() time.Time
	// acquiredAt is when the client sent the put that won the lock.
	acquiredAt() time.Time
	// heartbeats counts successful heartbeats.
	heartbeats() int
}

// holding is a held lock.
type holding interface {
	lost() <-chan struct{}
	release(ctx context.Context) error
}

// reader reads a lock as one side's clients read it.
type reader interface {
	read(ctx context.Context, pk, sk string) (owner string, attrs map[string]types.AttributeValue, err error)
}

func (f *fleet) contender(s side) contender {
	tap := &writeTap{DynamoDBAPI: f.ddb}
	if s == goSide {
		c := newGoClient(f.t, tap, f.n, goTiming...)
		return &goContender{c: c, tap: tap}
	}
	c := newPyClient(tap, pyTiming(f.n))
	f.t.Cleanup(func() { c.close(false) })
	return &pyContender{c: c, tap: tap}
}

// writeTap records a client's writes.
type writeTap struct {
	ddblock.DynamoDBAPI
	mu      sync.Mutex
	last    time.Time // sent: the last write that may have landed
	putOK   time.Time // sent: the last put that succeeded
	updates int
}

func (w *writeTap) wrote(sent time.Time, err error, update bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !isCCF(err) && sent.After(w.last) {
		w.last = sent
	}
	if err == nil && update {
		w.updates++
	}
	if err == nil && !update {
		w.putOK = sent
	}
}

// acquiredAt is when the put that won the lock was sent: the earliest
// moment the client can have held it, so that hold intervals and takeover
// delays measured from it are as strict as they can be.
func (w *writeTap) acquiredAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.putOK
}

func (w *writeTap) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	sent := time.Now()
	out, err := w.DynamoDBAPI.PutItem(ctx, in, o...)
	w.wrote(sent, err, false)
	return out, err
}

func (w *writeTap) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	sent := time.Now()
	out, err := w.DynamoDBAPI.UpdateItem(ctx, in, o...)
	w.wrote(sent, err, true)
	return out, err
}

func (w *writeTap) lastWrite() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *writeTap) heartbeats() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.updates
}

// goContender is a ddblock client.
type goContender struct {
	c   *ddblock.Client
	tap *writeTap
}

func (g *goContender) side() side            { return goSide }
func (g *goContender) owner() string         { return g.c.Options().OwnerName }
func (g *goContender) lease() time.Duration  { return g.c.Options().LeaseDuration }
func (g *goContender) lastWrite() time.Time  { return g.tap.lastWrite() }
func (g *goContender) acquiredAt() time.Time { return g.tap.acquiredAt() }
func (g *goContender) heartbeats() int       { return g.tap.heartbeats() }

func (g *goContender) acquire(ctx context.Context, pk, sk string, attrs map[string]types.AttributeValue) (holding, error) {
	l, err := g.c.AcquireLock(ctx, pk, ddblock.WithSortKeyValue(sk), ddblock.WithAdditionalAttributes(attrs), ddblock.WithRetryTimeout(waitLimit))
	if err != nil {
		return nil, err
	}
	return goHolding{l}, nil
}

func (g *goContender) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.c.Close(ctx, false)
}

type goHolding struct{ l *ddblock.Lock }

func (h goHolding) lost() <-chan struct{} { return h.l.Done() }
func (h goHolding) release(ctx context.Context) error {
	return h.l.Release(ctx, ddblock.WithBestEffort(false))
}

// pyContender is a Python peer.
type pyContender struct {
	c   *pyClient
	tap *writeTap
}

func (p *pyContender) side() side            { return pySide }
func (p *pyContender) owner() string         { return p.c.owner }
func (p *pyContender) lease() time.Duration  { return p.c.cfg.LeaseDuration }
func (p *pyContender) lastWrite() time.Time  { return p.tap.lastWrite() }
func (p *pyContender) acquiredAt() time.Time { return p.tap.acquiredAt() }
func (p *pyContender) heartbeats() int       { return p.tap.heartbeats() }
func (p *pyContender) abandon()              { p.c.close(false) }

func (p *pyContender) acquire(ctx context.Context, pk, sk string, attrs map[string]types.AttributeValue) (holding, error) {
	h := &pyHolding{c: p.c, lostCh: make(chan struct{})}
	var once sync.Once
	l, err := p.c.acquireLock(ctx, pk, pyAcquireOptions{
		SortKey:              sk,
		RetryTimeout:         waitLimit,
		AdditionalAttributes: attrs,
		// Python's app_callback: LOCK_IN_DANGER or LOCK_STOLEN mean stop.
		AppCallback: func(string, *pyLock) { once.Do(func() { close(h.lostCh) }) },
	})
	if err != nil {
		return nil, err
	}
	h.l = l
	return h, nil
}

type pyHolding struct {
	c      *pyClient
	l      *pyLock
	lostCh chan struct{}
}

func (h *pyHolding) lost() <-chan struct{} { return h.lostCh }
func (h *pyHolding) release(ctx context.Context) error {
	return h.c.releaseLock(ctx, h.l, false)
}

// goReader reads with Client.GetLock.
type goReader struct{ c *ddblock.Client }

func (g goReader) read(ctx context.Context, pk, sk string) (string, map[string]types.AttributeValue, error) {
	info, err := g.c.GetLock(ctx, pk, sk)
	if err != nil {
		return "", nil, err
	}
	return info.OwnerName, info.AdditionalAttributes, nil
}

// pyReader reads as Python's _get_lock_from_dynamodb does.
type pyReader struct{ c *pyClient }

func (p pyReader) read(ctx context.Context, pk, sk string) (string, map[string]types.AttributeValue, error) {
	l, err := p.c.getLockFromDynamoDB(ctx, pk, sk)
	if err != nil {
		return "", nil, err
	}
	if l == nil {
		return "", nil, errors.New("no lock item")
	}
	return l.OwnerName, l.AdditionalAttributes, nil
}
