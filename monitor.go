package ddblock

import (
	"context"
	"time"
)

// monitor is the client's safety watchdog: one goroutine, apart from the
// heartbeater, that marks a LOCKED lock IN_DANGER once its safe period
// has passed since its last successful heartbeat.
//
// Each check looks at every held lock, not at the locks in the order the
// heartbeater sends them, so it cannot trail the heartbeater and see only
// freshly refreshed locks: under overload every lock whose gap passes the
// safe period is reported. It sleeps until the earliest moment a lock
// could enter danger, at most a heartbeat period, so a process that was
// paused (a long GC pause, SIGSTOP, a frozen VM) is checked the moment it
// runs again. Lock.Status and Lock.Err make the same check when called,
// so the application sees the danger even before the monitor wakes.
type monitor struct {
	c *Client
}

func newMonitor(c *Client) *monitor { return &monitor{c: c} }

func (m *monitor) run(ctx context.Context) {
	for {
		t := m.c.clock.NewTimer(m.check())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// check marks the locks in danger and returns how long to sleep. It
// marks every lock before it reports on any (logs, Metrics), so that a
// report stuck in application code holds up no lock's danger.
func (m *monitor) check() time.Duration {
	c := m.c
	wait := c.opts.HeartbeatPeriod
	now := c.clock.Monotonic()
	var batch reportBatch
	for _, l := range c.heldLocks() {
		l.mu.Lock()
		l.checkDangerLocked(now)
		if l.status == StatusLocked {
			wait = min(wait, l.lastRefreshLocked()+c.opts.SafePeriod-now+time.Nanosecond)
		}
		batch.unlock(l)
	}
	batch.deliver()
	// Reporting may have taken a while: wake at the moment planned.
	return max(wait-(c.clock.Monotonic()-now), time.Millisecond)
}
