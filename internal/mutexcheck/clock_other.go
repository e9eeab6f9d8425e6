//go:build !linux

package mutexcheck

import "time"

// ClockName says which clock Now reads, for reports.
const ClockName = "wall clock (time.Now; comparable across processes of one machine unless the clock is set)"

// Now returns the wall clock in nanoseconds. Outside Linux there is no
// portable way to read a monotonic clock shared by processes; the wall
// clock of one machine serves, as long as nobody sets it during a run.
func Now() int64 { return time.Now().UnixNano() }
