package reliability

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/ddbtest"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/hooks"
	"github.com/ddblock/ddblock/internal/mutexcheck"
	"github.com/ddblock/ddblock/internal/wire"
)

// fairChaos is the semaphore set-up (locks, slots, elections, WithLock,
// direct slot keys, every flavour) with half the holders waiting fairly:
// the even in-process slots and the workers' even clients, each in its
// flavour, and crowds of fair waiters for one key's lock: twenty of one
// in-process client, and three more clients in each worker. Fair
// waiters are killed in bunches while in line (a worker with the first
// two tickets of a line, or two in one, is SIGKILLed), paused while
// first in line (a worker's SIGSTOP, from well under the lease to well
// over it), cancelled twenty at once, closed while waiting (the crowd's
// client closed under them, and the abandoned in-process clients), and
// meet lost replies to their coming into line and leaving it (the fault
// proxy's drop-reply on every operation) and garbage written into their
// lines. A fair waiter waits up to FairTimeout, well over its progress
// bound, so that the progress check sees a line that jams.
func fairChaos(d time.Duration) chaosConfig {
	cfg := semaphoreChaos(d)
	cfg.Fair = true
	grace := mutexcheck.FairGrace(cfg.RetryPeriod, cfg.Heartbeat)
	bound, _ := mutexcheck.FairProgressBound(cfg.RetryPeriod, cfg.Heartbeat, grace)
	cfg.FairTimeout = 2*bound + time.Second
	w := defaultWorkers(2, 4)
	w.Crowd = 3
	cfg.Mix = []kind{defaultInProcess(8), w, fairCrowd{N: 20, Every: 3 * time.Second}}
	cfg.GarbleEvery = 400 * time.Millisecond
	return cfg
}

// TestMutualExclusionWithFairWaiters: the line decides who tries, never
// who holds; mutual exclusion and the slot limit hold with fair waiters
// mixed among every other kind of holder, under faults, kills, pauses,
// cancellations and garbled lines; and no fair waiter leaves its lock
// free longer than the line's bound (runChaos fails the test on a fair
// waiter's progress violation as on any other's).
func TestMutualExclusionWithFairWaiters(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	runChaosShowing(t, 20*time.Second, fairChaos, fairRunShortfalls, func(res chaosResult) { fairAcquiresEndedByGarbage(t, res) })
}

// fairRunShortfalls are what a fair chaos run failed to show: each kind
// of trouble striking, the kinds of holder mixed, and contention.
func fairRunShortfalls(res chaosResult) []string {
	var short []string
	rep := res.Report
	if s := everyTrouble(res, "kill", "pause", "abandon"); s != "" {
		short = append(short, s)
	}
	fair, unfair, fairKinds, crowd := 0, 0, 0, 0
	for kind, n := range rep.ByKind {
		if strings.Contains(kind, "-fair") {
			fair += n
			fairKinds++
		} else {
			unfair += n
		}
		if strings.HasPrefix(kind, "crowd-") {
			crowd += n
		}
	}
	// Fair waiters of at least two flavours, among the others. Which
	// flavours get their turns is luck, and the crowds' most of all:
	// polling waiters take a freed lock ahead of the line
	// (doc/waiting.md, Limits), and a crowd can go a whole run without a
	// turn, its waiters struck or timed out while in line (what the
	// crowds are for, checked below). A crowd waiter's turns in one
	// client are TestFairWaitersInOneClientCostOneReader's business.
	if fair == 0 || unfair == 0 || fairKinds < 2 {
		short = append(short, fmt.Sprintf("working tenures of fair waiters %d in %d flavours (of the crowds %d), of others %d (%v): the run must mix them", fair, fairKinds, crowd, unfair, rep.ByKind))
	}
	if rep.Handoffs < 50 || rep.Takeovers == 0 {
		short = append(short, fmt.Sprintf("handoffs %d, takeovers %d: too little contention to show anything", rep.Handoffs, rep.Takeovers))
	}
	f := res.Fair
	if f.BunchKills == 0 || f.HeadPauses == 0 || f.CrowdCancels == 0 || f.CrowdCloses == 0 || f.CrowdMostInLine < 2 {
		short = append(short, fmt.Sprintf("fair waiters killed in bunches %d, paused first in line %d, crowds cancelled %d and closed %d (most in line at once %d): every kind of trouble must strike them",
			f.BunchKills, f.HeadPauses, f.CrowdCancels, f.CrowdCloses, f.CrowdMostInLine))
	}
	if f.Garbles["ticket-without-id-at-serving"]+f.Garbles["ticket-without-id-ahead"] == 0 {
		short = append(short, fmt.Sprintf("no ticket without an id written into a line (%v)", f.Garbles))
	}
	if f.Garbles["ticket-wrong-types"] == 0 {
		short = append(short, fmt.Sprintf("no ticket-wrong-types written into a line (%v)", f.Garbles))
	}
	if f.Garbles["counter-wrong-types"]+f.Garbles["counter-out-of-range"]+f.Garbles["counter-without-generation"] == 0 {
		short = append(short, fmt.Sprintf("no counter garbled (%v)", f.Garbles))
	}
	if rep.Progress == nil || len(rep.FairProgressViolations) > 0 {
		return short
	}
	checked := 0
	for kind, p := range rep.Progress {
		if strings.Contains(kind, "-fair") {
			checked += p.Timeouts + p.OtherFailures
		}
	}
	if checked == 0 {
		short = append(short, fmt.Sprintf("no failed wait of a fair waiter was checked for progress (%v)", rep.Progress))
	}
	return short
}

// fairAcquiresEndedByGarbage checks that garbage in a line, another
// writer's business and not the waiter's, never ended an acquire: a
// fair waiter skips garbled tickets and resets a garbled counter, and
// waits on.
func fairAcquiresEndedByGarbage(t *testing.T, res chaosResult) {
	t.Helper()
	for _, code := range []ddblock.Code{ddblock.CodeInvalidItem, ddblock.CodeInvalidArgument, ddblock.CodeTableMismatch} {
		if n := res.Report.Failures["acquire "+string(code)] + res.Report.Failures["withlock "+string(code)]; n > 0 {
			t.Errorf("%d acquires ended with %s, as for the garbage written into their lines: they must reset it and wait on", n, code)
		}
	}
}

// TestFairSoak is the long run with fair waiters, recorded in
// doc/reliability.md:
//
//	go test ./reliability_test -run TestFairSoak -soak=5m -v -timeout 0
func TestFairSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("set -soak=5m to run the soak")
	}
	res := runChaos(t, fairChaos(*soakFor))
	fmt.Printf("\n=== ddblock reliability soak with fair waiters ===\n%s\n", res.Summary())
}

// fairCounts counts what befell the fair waiters, as it happens.
type fairCounts struct {
	mu sync.Mutex
	fairTrouble
}

// fairTrouble is what befell the fair waiters of a run, besides the
// faults, kills, pauses and abandons that strike every kind.
type fairTrouble struct {
	// BunchKills are kills of a worker with at least two fair waiters
	// in one line, HeadSecondKills of those the first two in line.
	BunchKills, HeadSecondKills int
	// HeadPauses are pauses of a worker whose fair waiter was first in
	// line, LongHeadPauses of those longer than the lease.
	HeadPauses, LongHeadPauses int
	// CrowdCancels and CrowdCloses are the crowds of in-process fair
	// waiters cancelled, or their client closed, all at once; CrowdInLine
	// adds up, and CrowdMostInLine is the most of, their tickets in line
	// at those moments.
	CrowdCancels, CrowdCloses, CrowdInLine, CrowdMostInLine int
	// Garbles count the garbage written into lines, by kind.
	Garbles map[string]int
}

func (f *fairCounts) add(fn func(t *fairTrouble)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Garbles == nil {
		f.Garbles = map[string]int{}
	}
	fn(&f.fairTrouble)
}

func (f *fairCounts) snapshot() fairTrouble {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.fairTrouble
	t.Garbles = maps.Clone(f.Garbles)
	return t
}

func (t fairTrouble) garbles() int {
	n := 0
	for _, v := range t.Garbles {
		n += v
	}
	return n
}

func (t fairTrouble) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fair waiters: kills of a worker with 2+ fair waiters in one line %d (the first two in line %d), pauses of a worker first in line %d (%d longer than the lease)\n",
		t.BunchKills, t.HeadSecondKills, t.HeadPauses, t.LongHeadPauses)
	fmt.Fprintf(&b, "fair crowds of one client: cancelled at once %d, client closed while waiting %d; their tickets in line at those moments %d, most at once %d\n",
		t.CrowdCancels, t.CrowdCloses, t.CrowdInLine, t.CrowdMostInLine)
	kinds := slices.Sorted(maps.Keys(t.Garbles))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, t.Garbles[k]))
	}
	fmt.Fprintf(&b, "garbage written into lines %d: %s\n", t.garbles(), strings.Join(parts, ", "))
	return b.String()
}

// lineKeys are the keys of the lines the run's fair waiters wait in: each
// key's lock's, and with semaphores each semaphore's (its metadata item,
// sort key "slots").
func (c *chaos) lineKeys() [][2]string {
	var out [][2]string
	for _, key := range c.keys {
		out = append(out, [2]string{key, ddblock.DefaultSortKey})
		if c.cfg.SemaphoreSlots > 0 {
			out = append(out, [2]string{key, "slots"})
		}
	}
	return out
}

// huntFront looks at the keys' lines for a worker to strike: for a
// kill, one with the first two tickets of a line (else, seen last, one
// with two tickets in one line); for a pause, one with the first. It
// looks for a second and a half, or for a kill up to four seconds; and
// until the run's first strike of the kind, up to six for a pause and
// twelve for a kill (the strike is what the run must show, and a line
// read can take a second on a busy machine, or meet a counter the
// garbler just spoiled). It returns nil when none was seen.
func (p *workersParty) huntFront(ctx context.Context, kill bool) (w *workerSlot, headSecond bool) {
	c := p.c
	lines := c.lineKeys()
	look, struck := 1500*time.Millisecond, c.fair.snapshot()
	if !kill && struck.HeadPauses == 0 {
		look = 6 * time.Second
	}
	if kill {
		lines = lines[:1] // the workers' crowds wait for the first key's lock
		look = 4 * time.Second
		if struck.BunchKills == 0 {
			look = 12 * time.Second
		}
	}
	var bunch *workerSlot
	deadline := time.Now().Add(look)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, lk := range lines {
			lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			info, err := hooks.Line(lctx, c.lines, lk[0], lk[1])
			cancel()
			if err != nil || len(info.Tickets) == 0 {
				continue
			}
			for _, cand := range p.slots {
				prefix := cand.id() + "/"
				if !kill {
					if strings.HasPrefix(info.Tickets[0].OwnerName, prefix) {
						return cand, false
					}
					continue
				}
				if len(info.Tickets) >= 2 && strings.HasPrefix(info.Tickets[0].OwnerName, prefix) && strings.HasPrefix(info.Tickets[1].OwnerName, prefix) {
					return cand, true
				}
				n := 0
				for _, tk := range info.Tickets {
					if strings.HasPrefix(tk.OwnerName, prefix) {
						n++
					}
				}
				if n >= 2 {
					bunch = cand
				}
			}
			if bunch != nil && time.Until(deadline) < look/2 {
				return bunch, false
			}
		}
		if !sleep(ctx, 100*time.Millisecond) {
			break
		}
	}
	return bunch, false
}

// fairCrowd is a crowd of N in-process fair waiters ("x1", "x2", ...)
// of one client for one key's lock (its goroutines wait on one another's
// locks, WithWaitOnOwn), struck all at once about every Every: in turn,
// their contexts are cancelled, or their client is closed under them.
// Each strike is followed by a new client, of the next flavour, for the
// next key. The chaos lasts until the crowd was struck both ways, up to
// half a minute more: on a slow machine a crowd's generation (line up,
// strike, wind down) can take most of ten seconds.
type fairCrowd struct {
	N     int
	Every time.Duration
}

func (k fairCrowd) describe() string { return fmt.Sprintf("a crowd of %d fair waiters", k.N) }

func (k fairCrowd) start(c *chaos, ctx context.Context) party {
	proxy := c.proxy("x*")
	struckBoth := make(chan struct{})
	c.extend = append(c.extend, struckBoth)
	c.running.Go(func() { k.run(c, ctx, proxy, struckBoth) })
	return calm{}
}

// run runs the crowd until ctx ends.
func (k fairCrowd) run(c *chaos, ctx context.Context, p *faultproxy.Proxy, crowdStruckBoth chan struct{}) {
	sdk := ddbtest.SharedServer().ClientFor(p.URL(), c.cfg.Attempts)
	flavours := mutexcheck.Flavours(c.cfg.MaxClockSkew)
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 5))
	struckBoth := false
	for gen := 1; ctx.Err() == nil; gen++ {
		fl := mutexcheck.Fair(flavours[gen%len(flavours)])
		name := fmt.Sprintf("x%d-crowd-%s", gen, fl.Name)
		key := c.keys[gen%len(c.keys)]
		opts := append(slices.Clone(c.opts), ddblock.WithOwnerName(name))
		ddb := &mutexcheck.Recorder{API: sdk, Client: name, Log: c.log}
		client, err := ddblock.New(ddb, append(opts, fl.Options...)...)
		if err != nil {
			c.problem("ddblock.New: %v", err)
			return
		}
		timeout := c.cfg.FairTimeout
		if timeout <= 0 {
			timeout = 3 * time.Second
		}
		acquireOpts := append([]ddblock.AcquireOption{ddblock.WithRetryPeriod(c.cfg.RetryPeriod), ddblock.WithWaitOnOwn(),
			ddblock.WithRetryTimeout(timeout)}, fl.Acquire...)
		gctx, cancel := context.WithCancel(ctx)
		var running sync.WaitGroup
		for g := range k.N {
			id := fmt.Sprintf("x%d.t%d-crowd-%s", gen, g, fl.Name)
			h := &mutexcheck.Holder{
				ID: id, Client: client, Keys: []string{key}, Log: c.log,
				HoldMin: c.cfg.HoldMin, HoldMax: c.cfg.HoldMax, StepEvery: c.cfg.Step,
				LongShare: c.cfg.LongShare, LongMin: c.cfg.LongMin, LongMax: c.cfg.LongMax,
				AcquireTimeout: timeout,
				AcquireOptions: acquireOpts,
				Seed:           c.cfg.Seed + uint64(gen)<<20 + uint64(g),
				CallsRecorded:  true,
			}
			running.Go(func() {
				if err := h.Run(gctx); err != nil {
					c.problem("holder %s: %v", id, err)
				}
			})
		}
		closeUnder := gen%2 == 0
		if sleep(ctx, around(rng, k.Every)) {
			// Strike once the crowd stands in line (two of its tickets
			// at least), looking for up to five seconds: on a slow
			// server, or with a read lost to a fault, one look may see
			// none of them yet.
			inLine := 0
			lookUntil := time.Now().Add(5 * time.Second)
			for look := 0; inLine < 2 && time.Now().Before(lookUntil) && ctx.Err() == nil; look++ {
				if look > 0 {
					sleep(ctx, 200*time.Millisecond)
				}
				inLine = 0
				lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
				if info, err := hooks.Line(lctx, c.lines, key, ""); err == nil {
					for _, tk := range info.Tickets {
						if tk.OwnerName == name {
							inLine++
						}
					}
				}
				lcancel()
			}
			now := mutexcheck.Now()
			if closeUnder {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				if err := client.Close(cctx, false); err != nil && ctx.Err() == nil {
					c.problem("closing the crowd's client %s: %v", name, err)
				}
				ccancel()
				c.log.Trouble(name, now, now, "abandon", 0)
			} else {
				cancel()
			}
			c.fair.add(func(t *fairTrouble) {
				if closeUnder {
					t.CrowdCloses++
				} else {
					t.CrowdCancels++
				}
				t.CrowdInLine += inLine
				t.CrowdMostInLine = max(t.CrowdMostInLine, inLine)
				if t.CrowdCancels > 0 && t.CrowdCloses > 0 && !struckBoth {
					struckBoth = true
					close(crowdStruckBoth)
				}
			})
		}
		cancel()
		running.Wait()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := client.Close(cctx, true); err != nil && !closeUnder {
			c.problem("closing %s: %v", name, err)
		}
		ccancel()
		now := mutexcheck.Now()
		c.log.Trouble(name, now, now, "closed", 0)
		c.addStats(client.Stats())
	}
}

// garbleLines writes, every GarbleEvery or so, garbage into one of the
// keys' lines, as another writer might: a ticket with no id at the
// number being served, a ticket whose attributes have the wrong types
// among the numbers waiting (or the next to be handed out), or a
// counter that does not read (a number of the wrong type, no
// generation, numbers out of any sane range). It writes straight to
// the table, and never a lock item: only keys starting with
// "ddblock_line#" or "ddblock_wait#". Tickets are written only where
// none is (a waiter writes its own over garbage at its number).
func (c *chaos) garbleLines(ctx context.Context) {
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 6))
	lines := c.lineKeys()
	ddb := c.env.direct
	pkName, skName := ddblock.DefaultPartitionKeyName, ddblock.DefaultSortKeyName
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	n := func(v int64) types.AttributeValue { return &types.AttributeValueMemberN{Value: fmt.Sprint(v)} }
	put := func(what string, item map[string]types.AttributeValue, onlyIfAbsent bool) bool {
		pk := item[pkName].(*types.AttributeValueMemberS).Value
		if !strings.HasPrefix(pk, "ddblock_line#") && !strings.HasPrefix(pk, "ddblock_wait#") {
			c.problem("the garbler was about to write %q, not a line's item", pk)
			return false
		}
		in := &dynamodb.PutItemInput{TableName: aws.String(c.env.table), Item: item}
		if onlyIfAbsent {
			in.ConditionExpression = aws.String("attribute_not_exists(#pk)")
			in.ExpressionAttributeNames = map[string]string{"#pk": pkName}
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := ddb.PutItem(pctx, in)
		timedOut := pctx.Err() != nil
		cancel()
		var cond *types.ConditionalCheckFailedException
		switch {
		// A put that ran out of time on a starved machine may have
		// landed or not: garbage either way, which the waiters must
		// cope with; it is not counted.
		case errors.As(err, &cond), ctx.Err() != nil, err != nil && timedOut:
			return false
		case err != nil:
			c.problem("garbler: %v", err)
			return false
		}
		now := mutexcheck.Now()
		c.log.Trouble("garbler", now, now, "garble-"+what, 0)
		c.fair.add(func(t *fairTrouble) { t.Garbles[what]++ })
		return true
	}
	for i := 0; sleep(ctx, around(rng, c.cfg.GarbleEvery)); i++ {
		lk := lines[rng.IntN(len(lines))]
		key, sk := lk[0], lk[1]
		counterPK := "ddblock_line#" + key
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		out, err := ddb.GetItem(gctx, &dynamodb.GetItemInput{TableName: aws.String(c.env.table), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{pkName: s(counterPK), skName: s(sk)}})
		cancel()
		if err != nil {
			continue
		}
		gen, _ := out.Item[wire.AttrLineGen].(*types.AttributeValueMemberS)
		servingAV, _ := out.Item[wire.AttrLineServing].(*types.AttributeValueMemberN)
		nextAV, _ := out.Item[wire.AttrLineNext].(*types.AttributeValueMemberN)
		if gen == nil || servingAV == nil || nextAV == nil {
			continue // no line now (or garbled already)
		}
		var serving, next int64
		if _, err := fmt.Sscan(servingAV.Value, &serving); err != nil {
			continue
		}
		if _, err := fmt.Sscan(nextAV.Value, &next); err != nil {
			continue
		}
		ticket := func(num int64) string { return fmt.Sprintf("ddblock_wait#%s#%d#%s", gen.Value, num, key) }
		switch i % 6 {
		case 0, 3: // a ticket with no id where the head's would be, or else at the next number to come
			noID := func(num int64) map[string]types.AttributeValue {
				return map[string]types.AttributeValue{
					pkName: s(ticket(num)), skName: s(sk),
					wire.AttrTicketOwner: s("garbler"), wire.AttrTicketGrace: n(1000), wire.AttrTicketSince: n(time.Now().UnixMilli()),
				}
			}
			if !put("ticket-without-id-at-serving", noID(serving), true) {
				put("ticket-without-id-ahead", noID(next+1), true)
			}
		case 1, 4: // a ticket of the wrong types among the waiting, or next
			num := serving + 1 + rng.Int64N(max(next-serving, 0)+1)
			put("ticket-wrong-types", map[string]types.AttributeValue{
				pkName: s(ticket(num)), skName: s(sk),
				wire.AttrTicketID: n(42), wire.AttrTicketOwner: &types.AttributeValueMemberBOOL{Value: true},
				wire.AttrTicketGrace: s("soon"), wire.AttrTicketSince: s("yesterday"), wire.AttrTicketSession: n(7),
			}, true)
		case 2: // a counter of the wrong types
			put("counter-wrong-types", map[string]types.AttributeValue{
				pkName: s(counterPK), skName: s(sk),
				wire.AttrLineGen: n(1), wire.AttrLineNext: s("many"), wire.AttrLineServing: &types.AttributeValueMemberBOOL{Value: false},
			}, false)
		default: // a counter out of any sane range, or with no generation
			item := map[string]types.AttributeValue{pkName: s(counterPK), skName: s(sk),
				wire.AttrLineGen: s(gen.Value), wire.AttrLineServing: n(serving), wire.AttrLineNext: n(serving + 1<<40)}
			what := "counter-out-of-range"
			if rng.IntN(2) == 0 {
				delete(item, wire.AttrLineGen)
				item[wire.AttrLineNext] = n(next)
				what = "counter-without-generation"
			}
			put(what, item, false)
		}
	}
}
