package main

import "syscall"

// childSysProcAttr puts the command in a process group of its own, so
// that ddblock can stop it and everything it started, and has the kernel
// kill it if ddblock itself dies (SIGKILL, OOM), since nobody would then
// heartbeat its lock.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
