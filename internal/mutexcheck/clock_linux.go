//go:build linux

package mutexcheck

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is Linux's CLOCK_MONOTONIC: one clock for the whole
// machine, never set back, and the clock Go's runtime times its own
// monotonic readings on. The standard library does not expose its
// absolute value, so it is read with the system call itself.
const clockMonotonic = 1

// ClockName says which clock Now reads, for reports.
const ClockName = "CLOCK_MONOTONIC (shared by every process on the machine)"

// Now returns the machine's monotonic clock in nanoseconds. Readings from
// different processes on one machine are comparable.
func Now() int64 {
	var ts syscall.Timespec
	_, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		// CLOCK_MONOTONIC exists on every Linux Go supports; failing to
		// read it leaves the checker without a clock.
		panic("mutexcheck: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
