//go:build unix && !linux

package main

import (
	"errors"
	"os"
	"syscall"
)

// commandSysProcAttr puts the command in a process group of its own, so
// that the guard can stop it and everything it started. Only Linux can
// also have the command killed when the guard dies; elsewhere ddblock
// kills the group when it sees the guard gone.
func commandSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// guardSysProcAttr puts the guard in a process group of its own: a
// signal aimed at ddblock's group must not stop the process that stops
// the command.
func guardSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// selfPath is the ddblock binary, for starting the guard.
func selfPath() (string, error) { return os.Executable() }

// groupAlive reports whether any process of group pgid still exists
// (zombies included: there is no portable way to tell them apart).
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}
