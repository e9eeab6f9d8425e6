package main

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is CLOCK_MONOTONIC's id for clock_gettime(2).
const clockMonotonic = 1

// monoNow reads CLOCK_MONOTONIC, in nanoseconds. Unlike the monotonic
// reading inside a time.Time, which counts from each process's own
// start, it is one clock for every process of the machine: the
// contention scenario's workers stamp their events with it, and the
// parent puts the events of all of them in one order.
func monoNow() int64 {
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
