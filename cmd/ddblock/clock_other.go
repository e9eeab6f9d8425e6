//go:build !linux

package main

import "time"

// machineNow returns the wall clock in nanoseconds since the Unix epoch.
// Outside Linux the standard library offers no monotonic clock that two
// processes read alike; the wall clock serves, as long as nobody sets it
// while a command runs (a clock set back would delay the guard's stop).
func machineNow() int64 { return time.Now().UnixNano() }
