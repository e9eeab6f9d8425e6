package clock

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Fake is a clock that moves only when a test says so. Its wall clock
// follows the monotonic one, plus an offset that JumpWall changes, so a
// test can step the wall clock (an NTP correction, skew between hosts)
// without moving the time that leases are measured on.
type Fake struct {
	mu       sync.Mutex
	mono     time.Duration
	wallBase time.Time
	wallSkew time.Duration
	timers   []*fakeTimer
	changed  chan struct{} // closed and replaced whenever timers change
}

// NewFake returns a fake clock whose wall time starts at wall. Its
// monotonic reading starts at one hour, not zero, so that code which
// subtracts from it never needs a reading before the origin.
func NewFake(wall time.Time) *Fake {
	const monoStart = time.Hour
	return &Fake{wallBase: wall.Add(-monoStart), changed: make(chan struct{}), mono: monoStart}
}

// Now returns the fake wall time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wallBase.Add(f.mono + f.wallSkew)
}

// Monotonic returns the fake monotonic reading.
func (f *Fake) Monotonic() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// NewTimer returns a timer that fires when Advance passes its deadline.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.mono + d, c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.wallBase.Add(f.mono + f.wallSkew)
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// Advance moves both clocks forward by d, firing every timer whose
// deadline it passes, earliest first.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mono += d
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at < f.timers[j].at })
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.at <= f.mono {
			t.c <- f.wallBase.Add(t.at + f.wallSkew)
			continue
		}
		kept = append(kept, t)
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notifyLocked()
}

// JumpWall steps the wall clock by d (which may be negative) and leaves
// the monotonic clock alone.
func (f *Fake) JumpWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wallSkew += d
}

// Timers returns how many timers are waiting to fire.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns how far the earliest pending timer is from now,
// and false when no timer is pending.
func (f *Fake) NextDeadline() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return 0, false
	}
	next := f.timers[0].at
	for _, t := range f.timers[1:] {
		next = min(next, t.at)
	}
	return next - f.mono, true
}

// WaitForTimers blocks until at least n timers are pending, or fails
// after the real-time limit, so a test never hangs.
func (f *Fake) WaitForTimers(n int, limit time.Duration) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		have, changed := len(f.timers), f.changed
		f.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("fake clock: %d timers pending after %v, want %d", have, limit, n)
		}
	}
}

// AdvanceToNext moves the clock to the earliest pending timer's deadline
// and fires it; it reports false when no timer is pending.
func (f *Fake) AdvanceToNext() bool {
	d, ok := f.NextDeadline()
	if ok {
		f.Advance(max(d, 0))
	}
	return ok
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f  *Fake
	at time.Duration
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, p := range t.f.timers {
		if p == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			t.f.notifyLocked()
			return true
		}
	}
	return false
}
