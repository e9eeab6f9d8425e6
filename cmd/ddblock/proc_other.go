//go:build unix && !linux

package main

import "syscall"

// childSysProcAttr puts the command in a process group of its own, so
// that ddblock can stop it and everything it started. Only Linux can
// also have the command killed when ddblock dies.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
