package main

import (
	"context"
	"time"

	"github.com/ddblock/ddblock"
)

// sharedPollingWait ("unfair-shared") is the library's polling with the
// contenders of one worker process sharing one client, as the goroutines
// of one program would: they wait for one another's locks
// (ddblock.WithWaitOnOwn), the client reads a key once per retry period
// for all its waiters of it, and a release by the client hands the key
// to one of them at once. Between processes it is as unfair as
// "unfair".
type sharedPollingWait struct{}

func (sharedPollingWait) clientOptions() []ddblock.Option { return nil }

// sharedClient: the contenders of a process share one client.
func (sharedPollingWait) sharedClient() bool { return true }

func (sharedPollingWait) acquire(ctx context.Context, c *ddblock.Client, key string, retry, timeout time.Duration) (*ddblock.Lock, error) {
	return c.AcquireLock(ctx, key, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(timeout), ddblock.WithWaitOnOwn())
}

func (sharedPollingWait) release(ctx context.Context, l *ddblock.Lock) error {
	return l.Release(ctx, ddblock.WithBestEffort(false))
}
