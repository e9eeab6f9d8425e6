//go:build !unix

package testserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// lockFile takes an exclusive lock at path where there is no flock: by
// creating the file exclusively, waiting while another process has it.
// A lock file left by a process that died is taken after staleLock, long
// enough for any install to finish.
func lockFile(path string) (unlock func(), err error) {
	const staleLock = 10 * time.Minute
	deadline := time.Now().Add(staleLock + time.Minute)
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if st, serr := os.Stat(path); serr == nil && time.Since(st.ModTime()) > staleLock {
			os.Remove(path)
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is held by another process", path)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
