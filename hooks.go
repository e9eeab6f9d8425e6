package ddblock

import (
	"context"
	"iter"
	"time"

	"github.com/ddblock/ddblock/internal/clock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// What the ddblock command and this module's tests reach through
// internal/hooks: none of it is part of the API.
func init() {
	hooks.WithClock = func(c clock.Clock) any { return withClock(c) }
	hooks.LastHeartbeat = func(lock any) time.Duration { return lock.(*Lock).lastRefresh() }
	hooks.Line = func(ctx context.Context, client any, pk, sk string) (*hooks.LineInfo, error) {
		return client.(*Client).readLine(ctx, pk, sk)
	}
	hooks.SemaphoreLine = func(ctx context.Context, sem any) (*hooks.LineInfo, error) {
		return sem.(*Semaphore).readLine(ctx)
	}
	hooks.AcquireSettings = func(opts any) (time.Duration, bool) {
		var o acquireOptions
		for _, opt := range opts.([]AcquireOption) {
			if opt != nil {
				opt(&o)
			}
		}
		return o.RetryPeriod, o.FairWaiting
	}
	hooks.SemaphoreSlot = func(info any, pk, sk string) (int, bool) { return info.(*SemaphoreInfo).slot(pk, sk) }
	hooks.SemaphoreNameOf = func(client any, pk, sk string) (string, bool) {
		return client.(*Client).semaphoreNameOf(pk, sk)
	}
	hooks.ListLines = func(ctx context.Context, client any) iter.Seq2[*hooks.LineInfo, error] {
		return client.(*Client).listLines(ctx)
	}
}
