// Package clock is ddblock's source of time: the system clock in
// production, a fake one in tests, so that leases, heartbeats and danger
// are tested without sleeping through them.
package clock

import "time"

// Clock gives the two kinds of time a lock client needs.
//
// Monotonic time times everything that decides a lease: when a record
// version number was first seen, when a lock was last heartbeated. Wall
// time is used only for what is written for others to read: the TTL
// expiry attribute and, opt-in, a wall-clock stamp.
type Clock interface {
	// Now returns the wall-clock time.
	Now() time.Time
	// Monotonic returns a reading of a clock that never jumps: the time
	// elapsed since an arbitrary fixed origin.
	Monotonic() time.Duration
	// NewTimer returns a timer that fires once, d from now on the
	// monotonic clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// System is the real clock.
type System struct{ origin time.Time }

// NewSystem returns the real clock, its monotonic origin set to now.
func NewSystem() *System { return &System{origin: time.Now()} }

// Now returns time.Now().
func (s *System) Now() time.Time { return time.Now() }

// Monotonic returns the time since the clock was made, read from the
// monotonic clock that time.Now carries.
func (s *System) Monotonic() time.Duration { return time.Since(s.origin) }

// NewTimer wraps time.NewTimer.
func (s *System) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }
