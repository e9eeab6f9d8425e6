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
// rounds: each round takes the held locks in the order they were
// acquired and sends each one heartbeat, either spread evenly over the
// heartbeat period (adaptive, the default: lock i of n goes at
// start + period·(i+1)/n) or paced by a rate limiter (explicit TPS).
//
// Sends run on at most HeartbeatConcurrency goroutines, each bounded by
// HeartbeatTimeout, so one slow call never holds up the other locks. A
// lock whose previous heartbeat is still in flight is passed over for the
// round. When the server cannot keep up, a round overruns its period: the
// next starts at once, every lock is still refreshed in turn, and the
// overrun is logged and counted (Stats.LateRounds).
type heartbeater struct {
	c       *Client
	wake    chan struct{}
	limiter *rate.Limiter // nil in adaptive mode
	sends   errgroup.Group
}

func newHeartbeater(c *Client) *heartbeater {
	h := &heartbeater{c: c, wake: make(chan struct{}, 1)}
	if c.opts.HeartbeatTPS > 0 {
		h.limiter = rate.NewLimiter(rate.Limit(c.opts.HeartbeatTPS), 1)
	}
	h.sends.SetLimit(c.opts.HeartbeatConcurrency)
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
	defer func() { _ = h.sends.Wait() }()
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
		slices.SortFunc(locks, func(a, b *Lock) int { return cmp.Compare(a.seq, b.seq) })
		if !h.round(ctx, locks) {
			return
		}
	}
}

// round sends one heartbeat to each lock; false when the client closed.
func (h *heartbeater) round(ctx context.Context, locks []*Lock) bool {
	clk := h.c.clock
	period := h.c.opts.HeartbeatPeriod
	start := clk.Monotonic()
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
	oldRVN := l.rvn
	l.mu.Unlock()
	h.c.stats.heartbeatsInFlight.Add(1)
	h.sends.Go(func() error {
		defer h.c.stats.heartbeatsInFlight.Add(-1)
		defer close(done)
		h.c.heartbeat(ctx, l, oldRVN)
		return nil
	})
}

// heartbeat is Python's: a conditional UpdateItem of the record version
// number and the expiry time, which leaves every other attribute alone.
func (c *Client) heartbeat(ctx context.Context, l *Lock, oldRVN string) {
	// The send outlives Close's cancel: Close waits for it instead, so
	// that the lock's version number is known when Close returns.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.HeartbeatTimeout)
	defer cancel()
	newRVN := newRecordVersionNumber()
	now := c.clock.Now()
	expiry := now.Add(c.opts.ExpiryPeriod)
	update := "SET " + nameRVN + " = " + valueNew + ", " + nameTTL + " = " + valueTTL
	names := map[string]string{nameRVN: attrRVN, nameTTL: c.opts.TTLAttributeName}
	values := map[string]types.AttributeValue{
		valueRVN: &types.AttributeValueMemberS{Value: oldRVN},
		valueNew: &types.AttributeValueMemberS{Value: newRVN},
		valueTTL: &types.AttributeValueMemberN{Value: formatEpoch(expiry)},
	}
	if c.opts.MaxClockSkew > 0 {
		update += ", " + nameStamp + " = " + valueStamp
		names[nameStamp] = attrHeartbeatTime
		values[valueStamp] = &types.AttributeValueMemberN{Value: formatEpochMillis(now)}
	}
	sent := c.clock.Monotonic()
	_, err := c.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.opts.TableName),
		Key:                       c.codec.key(l.pk, l.sk),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       aws.String(condOwned),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
	}, c.throttleWatch("UpdateItem")...)
	stolen := false
	if err != nil && isConditionFailed(err) {
		// Either someone took the lock, or this very write landed and its
		// reply was lost, so that the SDK's retry failed the condition.
		// Only a read can tell.
		info, rerr := c.readItem(ctx, l.pk, l.sk)
		switch {
		case rerr != nil:
			// Unknown: treat as a failed heartbeat and try again next round.
		case info != nil && info.RecordVersionNumber == newRVN:
			err = nil
		default:
			stolen = true
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.hbDone = nil
	c.opts.Metrics.HeartbeatFinished(sent-l.lastHeartbeat, l.lease, err)
	switch {
	case err == nil:
		c.stats.heartbeatsSent.Add(1)
		l.rvn, l.expiry, l.lastHeartbeat = newRVN, expiry, sent
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
		c.log.Warn("ddblock: heartbeat failed", "key", l.pk, "sort_key", l.sk, "err", err)
	}
}
