package main

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is Linux's CLOCK_MONOTONIC: one clock for the whole
// machine, never set back, and the clock that Go's runtime times its own
// timers and monotonic readings on.
const clockMonotonic = 1

// machineNow returns CLOCK_MONOTONIC in nanoseconds. Every process of
// the machine reads the same value at the same moment, so ddblock and its
// guard can exchange absolute deadlines. The standard library does not
// expose the clock's absolute value, hence the system call.
func machineNow() int64 {
	var ts syscall.Timespec
	_, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		// CLOCK_MONOTONIC exists on every Linux Go supports.
		panic("ddblock: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
