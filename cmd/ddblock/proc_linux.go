package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// commandSysProcAttr puts the command in a process group of its own, so
// that the guard can stop it and everything it started, and has the
// kernel kill it (SIGKILL) if the guard dies, since nothing would then
// keep it to its lock's safe period. The guard starts the command from
// a goroutine locked to its thread for the guard's whole life, because
// the kernel sends this signal when the creating thread ends.
func commandSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// guardSysProcAttr puts the guard in a process group of its own: a
// signal aimed at ddblock's group (Ctrl-C, Ctrl-Z, kill -STOP -PGID) must
// not stop the process that stops the command.
func guardSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// selfPath is the ddblock binary, for starting the guard. /proc/self/exe
// reaches it even if the file was replaced or removed since ddblock
// started (a package upgrade during a long run).
func selfPath() (string, error) { return "/proc/self/exe", nil }

// groupAlive reports whether any process of group pgid still runs. A
// zombie runs nothing; it counts as gone, since the parent that would
// reap it may be gone too (the guard) and orphans are not always reaped
// at once.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return true
	}
	for _, name := range stats {
		b, err := os.ReadFile(name)
		if err != nil {
			continue // gone meanwhile
		}
		// After the command name in parentheses: state ppid pgrp ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" || string(f[0]) == "X" {
			continue
		}
		if pg, err := strconv.Atoi(string(f[2])); err == nil && pg == pgid {
			return true
		}
	}
	return false
}
