package main

import (
	"time"

	"github.com/ddblock/ddblock/internal/clock"
)

// machineClock is the lock client's clock in `ddblock run`: the system
// clock, except that its monotonic readings are on the scale of the
// machine's shared clock (machineNow), so that a lock's last heartbeat
// can be handed to the guard process as an absolute moment that both
// processes read alike. A deadline sent that way cannot be stretched by
// the time the message spends in transit, or by ddblock being stopped
// between reading the clock and writing the message.
//
// The readings are the shared clock at creation plus Go's monotonic time
// since, so they never jump even where the shared clock is the wall
// clock. On Linux both are CLOCK_MONOTONIC; the shared clock is read
// first, so the readings trail it by the nanoseconds between the two
// reads, which makes the deadlines derived from them early, never late.
type machineClock struct {
	base  time.Duration
	start time.Time
}

var _ clock.Clock = (*machineClock)(nil)

func newMachineClock() *machineClock {
	base := time.Duration(machineNow())
	return &machineClock{base: base, start: time.Now()}
}

// Now returns the wall-clock time.
func (c *machineClock) Now() time.Time { return time.Now() }

// Monotonic returns a reading on the machine's shared clock.
func (c *machineClock) Monotonic() time.Duration { return c.base + time.Since(c.start) }

// NewTimer is time.NewTimer.
func (c *machineClock) NewTimer(d time.Duration) clock.Timer { return machineTimer{time.NewTimer(d)} }

type machineTimer struct{ t *time.Timer }

func (t machineTimer) C() <-chan time.Time { return t.t.C }
func (t machineTimer) Stop() bool          { return t.t.Stop() }
