package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ddblock/ddblock"
)

// waitMode is how the contenders of the contention scenario wait for
// their key (--wait-mode): "unfair", the library's polling, and "fair",
// waiting in the key's line (ddblock.WithFairWaiting). A new mode is one
// more type and one more entry in waitModes; the scenario, the workers
// and the report take it from there.
type waitMode interface {
	// clientOptions are the options a contender's client needs for the
	// mode, on top of the scenario's own (table, timings, logger).
	clientOptions() []ddblock.Option
	// acquire waits for key, reading it every retry period, and takes
	// it. It returns when it holds the lock, when ctx ends (the window's
	// end), or on an error.
	acquire(ctx context.Context, c *ddblock.Client, key string, retry, timeout time.Duration) (*ddblock.Lock, error)
	// release gives the lock back, reporting any failure.
	release(ctx context.Context, l *ddblock.Lock) error
}

// waitModes are the modes --wait-mode can name.
var waitModes = map[string]waitMode{
	"unfair":        pollingWait{},
	"unfair-shared": sharedPollingWait{},
	"fair":          fairWait{},
}

// waitModeNames lists the modes, for flag help and errors.
func waitModeNames() string {
	names := make([]string, 0, len(waitModes))
	for n := range waitModes {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func lookupWaitMode(name string) (waitMode, error) {
	m, ok := waitModes[name]
	if !ok {
		return nil, fmt.Errorf("--wait-mode %q: want one of %s", name, waitModeNames())
	}
	return m, nil
}

// pollingWait is today's waiting: AcquireLock reads the key every retry
// period and puts its lock when it finds the key free; whichever waiter
// looks first after a release wins, and a releaser that asks again at
// once usually beats every waiter asleep in its poll.
type pollingWait struct{}

func (pollingWait) clientOptions() []ddblock.Option { return nil }

func (pollingWait) acquire(ctx context.Context, c *ddblock.Client, key string, retry, timeout time.Duration) (*ddblock.Lock, error) {
	return c.AcquireLock(ctx, key, ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(timeout))
}

func (pollingWait) release(ctx context.Context, l *ddblock.Lock) error {
	return l.Release(ctx, ddblock.WithBestEffort(false))
}

// fairWait waits in the key's line of fair waiters: only the first in
// line tries the lock, so the lock goes round in the order the
// contenders came back for it.
type fairWait struct{}

func (fairWait) clientOptions() []ddblock.Option { return nil }

func (fairWait) acquire(ctx context.Context, c *ddblock.Client, key string, retry, timeout time.Duration) (*ddblock.Lock, error) {
	return c.AcquireLock(ctx, key, ddblock.WithFairWaiting(), ddblock.WithRetryPeriod(retry), ddblock.WithRetryTimeout(timeout))
}

func (fairWait) release(ctx context.Context, l *ddblock.Lock) error {
	return l.Release(ctx, ddblock.WithBestEffort(false))
}
