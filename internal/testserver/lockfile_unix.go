//go:build unix

package testserver

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on the file at path, waiting for it,
// so that only one process installs a server at a time. The lock goes
// with the process, should it die holding it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the file releases the lock
}
