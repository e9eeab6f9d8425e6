package ddblock

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
)

// heartbeater is the client's one heartbeat scheduler. It works in
// rounds: each round takes the held locks, the one whose last successful
// write is oldest first, and sends each one heartbeat, either spread
// evenly over the heartbeat period (adaptive, the default: lock i of n goes at
// start + period·(i+1)/n) or paced by a rate limiter (explicit TPS).
//
// Sends run on at most HeartbeatConcurrency sender goroutines, started
// as needed and kept until the client closes, each call bounded by
// HeartbeatTimeout, so one slow call never holds up the other locks. A
// lock whose previous heartbeat is still in flight is passed over for the
// round. When the server cannot keep up, a round overruns its period: the
// next starts at once, every lock is still refreshed in turn, and the
// overrun is logged and counted (Stats.LateRounds).
type heartbeater struct {
	c       *Client
	wake    chan struct{}
	limiter *rate.Limiter // nil in adaptive mode
	// The senders take jobs from an unbuffered channel, so that dispatch
	// waits for a free one. They live as long as the scheduler: a fresh
	// goroutine per heartbeat would grow its stack, by copying, through
	// the SDK's deep call chain on every send.
	senders  errgroup.Group
	jobs     chan func()
	nSenders int // started so far; only run's goroutine touches it
}

func newHeartbeater(c *Client) *heartbeater {
	h := &heartbeater{c: c, wake: make(chan struct{}, 1)}
	if c.opts.HeartbeatTPS > 0 {
		h.limiter = rate.NewLimiter(rate.Limit(c.opts.HeartbeatTPS), 1)
	}
	h.jobs = make(chan func())
	return h
}

// poke starts a round now if the scheduler is idle for want of locks.
func (h *heartbeater) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *heartbeater) run(ctx context.Context) {
	defer func() {
		close(h.jobs)
		_ = h.senders.Wait()
	}()
	for {
		locks := h.c.heldLocks()
		if len(locks) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.wake:
				continue
			}
		}
		oldestFirst(locks)
		if !h.round(ctx, locks) {
			return
		}
	}
}

// oldestFirst orders locks by their last successful heartbeat (or
// acquire), oldest first, then by acquisition. In steady state that is
// the previous round's order; a lock acquired during the previous round
// takes the place its acquire time gives it, rather than waiting behind
// every older lock for a whole further round; and under overload the
// lock that has waited longest goes first.
func oldestFirst(locks []*Lock) {
	type entry struct {
		l    *Lock
		last time.Duration
	}
	es := make([]entry, len(locks))
	for i, l := range locks {
		l.mu.Lock()
		es[i] = entry{l, l.lastHeartbeat}
		l.mu.Unlock()
	}
	slices.SortFunc(es, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.last, b.last), cmp.Compare(a.l.seq, b.l.seq))
	})
	for i, e := range es {
		locks[i] = e.l
	}
}

// round sends one heartbeat to each lock; false when the client closed.
func (h *heartbeater) round(ctx context.Context, locks []*Lock) bool {
	clk := h.c.clock
	period := h.c.opts.HeartbeatPeriod
	start := clk.Monotonic()
	h.c.stats.rounds.Add(1)
	n := time.Duration(len(locks))
	for i, l := range locks {
		var due time.Duration
		if h.limiter == nil {
			due = start + period*time.Duration(i+1)/n
		} else {
			now := clk.Monotonic()
			due = now + h.limiter.ReserveN(monoTime(now), 1).DelayFrom(monoTime(now))
		}
		if !h.sleepUntil(ctx, due) {
			return false
		}
		h.dispatch(ctx, l)
	}
	end := start + period
	if over := clk.Monotonic() - end; over > period/10 {
		h.c.stats.lateRounds.Add(1)
		h.c.opts.Metrics.HeartbeatRoundLate(over, len(locks))
		h.c.log.Warn("ddblock: heartbeat round overran its period",
			"locks", len(locks), "period", period, "overrun", over)
		return ctx.Err() == nil
	}
	return h.sleepUntil(ctx, end)
}

// monoTime turns a monotonic reading into the time.Time a rate.Limiter
// takes, so that the limiter runs on the client's clock.
func monoTime(d time.Duration) time.Time { return time.Unix(0, 0).Add(d) }

func (h *heartbeater) sleepUntil(ctx context.Context, due time.Duration) bool {
	d := due - h.c.clock.Monotonic()
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := h.c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatch starts l's heartbeat, waiting for a free sender if need be.
func (h *heartbeater) dispatch(ctx context.Context, l *Lock) {
	l.mu.Lock()
	if !l.heldLocked() {
		l.mu.Unlock()
		return
	}
	if l.hbDone != nil {
		l.mu.Unlock()
		h.c.stats.heartbeatsSkipped.Add(1)
		return
	}
	done := make(chan struct{})
	l.hbDone = done
	oldRVN, unknown := l.rvn, slices.Clone(l.unknownRVNs)
	l.mu.Unlock()
	h.c.stats.heartbeatsInFlight.Add(1)
	job := func() {
		defer h.c.stats.heartbeatsInFlight.Add(-1)
		defer close(done)
		h.c.heartbeat(ctx, l, oldRVN, unknown)
	}
	select {
	case h.jobs <- job: // an idle sender took it
		return
	default:
	}
	if h.nSenders < h.c.opts.HeartbeatConcurrency {
		h.nSenders++
		h.senders.Go(func() error {
			job()
			for next := range h.jobs {
				next()
			}
			return nil
		})
		return
	}
	h.jobs <- job // every sender is busy: wait for one
}

// heartbeat is Python's: a conditional UpdateItem of the record version
// number and the expiry time, which leaves every other attribute alone.
// unknown lists version numbers written by earlier heartbeats whose
// outcome is unknown (a timeout, a dropped connection): any of them may
// be in the table.
func (c *Client) heartbeat(ctx context.Context, l *Lock, oldRVN string, unknown []string) {
	// The send outlives Close's cancel: Close waits for it instead, so
	// that the lock's version number is known when Close returns.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	hb, err := c.sendHeartbeat(ctx, l, oldRVN)
	stolen := false
	if err != nil && isConditionFailed(err) {
		// Someone took the lock, or a write of ours landed without our
		// hearing of it: this one (its reply lost and the SDK's retry
		// failing the condition), or an earlier one. Only a read can tell.
		info, rerr := c.readItem(ctx, l.pk, l.sk)
		switch {
		case rerr != nil:
			// Unknown: treat as a failed heartbeat and try again next round.
		case info != nil && info.RecordVersionNumber == hb.rvn:
			err = nil
		case info != nil && slices.Contains(unknown, info.RecordVersionNumber):
			// An earlier heartbeat landed: carry on from its version.
			hb, err = c.sendHeartbeat(ctx, l, info.RecordVersionNumber)
			stolen = err != nil && isConditionFailed(err) // taken since that read
		default:
			stolen = true
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hbDone = nil
	c.opts.Metrics.HeartbeatFinished(hb.sent-l.lastHeartbeat, l.lease, err)
	switch {
	case err == nil:
		c.stats.heartbeatsSent.Add(1)
		l.rvn, l.expiry, l.lastHeartbeat = hb.rvn, hb.expiry, hb.sent
		l.unknownRVNs = l.unknownRVNs[:0]
		if l.status == StatusInDanger {
			l.status = StatusLocked
			c.stats.recovered.Add(1)
			c.opts.Metrics.LockRecovered()
			c.callbacks.enqueue(l, CodeLockRecovered)
			c.log.Info("ddblock: lock recovered from danger", "key", l.pk, "sort_key", l.sk)
		}
	case stolen:
		c.stats.heartbeatsFailed.Add(1)
		if !l.heldLocked() {
			return // released meanwhile; the release reports it
		}
		l.status = StatusInvalid
		l.finishLocked(l.lockError(CodeLockStolen, "another client took the lock", err))
		c.unregister(l)
		c.stats.stolen.Add(1)
		c.opts.Metrics.LockStolen()
		c.callbacks.enqueue(l, CodeLockStolen)
		c.log.Warn("ddblock: lock stolen", "key", l.pk, "sort_key", l.sk)
	default:
		c.stats.heartbeatsFailed.Add(1)
		if outcomeUnknown(err) {
			// The write may have landed: remember its version number.
			if len(l.unknownRVNs) == maxUnknownHeartbeats {
				l.unknownRVNs = append(l.unknownRVNs[:0], l.unknownRVNs[1:]...)
			}
			l.unknownRVNs = append(l.unknownRVNs, hb.rvn)
		}
		c.log.Warn("ddblock: heartbeat failed", "key", l.pk, "sort_key", l.sk, "err", err)
	}
}

// maxUnknownHeartbeats bounds the remembered version numbers of
// heartbeats whose outcome is unknown; a lock goes into danger long
// before more of them pile up.
const maxUnknownHeartbeats = 8

// sentHeartbeat is what one heartbeat call wrote.
type sentHeartbeat struct {
	rvn    string
	expiry time.Time
	sent   time.Duration // monotonic
}

func (c *Client) sendHeartbeat(ctx context.Context, l *Lock, oldRVN string) (sentHeartbeat, error) {
	now := c.clock.Now()
	hb := sentHeartbeat{rvn: newRecordVersionNumber(), expiry: now.Add(c.opts.ExpiryPeriod)}
	update := "SET " + nameRVN + " = " + valueNew + ", " + nameTTL + " = " + valueTTL
	names := map[string]string{nameRVN: attrRVN, nameTTL: c.opts.TTLAttributeName}
	values := map[string]types.AttributeValue{
		valueRVN: &types.AttributeValueMemberS{Value: oldRVN},
		valueNew: &types.AttributeValueMemberS{Value: hb.rvn},
		valueTTL: &types.AttributeValueMemberN{Value: formatEpoch(hb.expiry)},
	}
	if c.opts.MaxClockSkew > 0 {
		update += ", " + nameStamp + " = " + valueStamp
		names[nameStamp] = attrHeartbeatTime
		values[valueStamp] = &types.AttributeValueMemberN{Value: formatEpochMillis(now)}
	}
	hb.sent = c.clock.Monotonic()
	_, err := c.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.opts.TableName),
		Key:                       c.codec.key(l.pk, l.sk),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(condOwned),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, c.throttleWatch("UpdateItem")...)
	return hb, err
}
