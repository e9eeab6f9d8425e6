// Package hooks reaches what package ddblock keeps unexported, for the
// ddblock command and the tests of this module only: a client's clock, a
// held lock's last heartbeat, the lines of fair waiters. Package ddblock
// sets the functions when it is initialised; code outside this module
// cannot import this package, so none of it is ddblock's API.
package hooks

import (
	"context"
	"iter"
	"time"

	"github.com/ddblock/ddblock/internal/clock"
)

var (
	// WithClock returns the ddblock.Option that sets a client's clock.
	WithClock func(clock.Clock) any
	// LastHeartbeat returns a held *ddblock.Lock's reading of the
	// client's clock when its last successful write (the acquire, or a
	// heartbeat; for a lock on a session, the session's heartbeat) was
	// sent.
	LastHeartbeat func(lock any) time.Duration
	// Line reads the line of fair waiters of the lock at (pk, sk) with
	// a *ddblock.Client: its first 100 numbers.
	Line func(ctx context.Context, client any, pk, sk string) (*LineInfo, error)
	// SemaphoreLine reads the line of a *ddblock.Semaphore's fair
	// waiters.
	SemaphoreLine func(ctx context.Context, sem any) (*LineInfo, error)
	// AcquireSettings reads the retry period and fair waiting that a
	// []ddblock.AcquireOption sets (zero and false when they set none).
	AcquireSettings func(opts any) (retryPeriod time.Duration, fair bool)
	// SemaphoreSlot is the index of the slot of a *ddblock.SemaphoreInfo
	// whose lock item has the key (pk, sk), and whether it is one.
	SemaphoreSlot func(info any, pk, sk string) (int, bool)
	// SemaphoreNameOf is the name of the semaphore whose metadata item
	// would have the key (pk, sk) on a *ddblock.Client's table, and
	// whether the key is one of a metadata item.
	SemaphoreNameOf func(client any, pk, sk string) (string, bool)
	// ListLines yields every line of fair waiters in the client's table.
	ListLines func(ctx context.Context, client any) iter.Seq2[*LineInfo, error]
)

// Option is WithClock's option, as the caller's type for it (ddblock.Option).
func Option[T any](c clock.Clock) T { return WithClock(c).(T) }

// Ticket is one waiter in a line of fair waiters.
type Ticket struct {
	// ID identifies the waiting call.
	ID string
	// OwnerName is the waiting client's owner name.
	OwnerName string
	// Since is when the waiter came, on its wall clock. It is shown
	// only: nothing is decided by it.
	Since time.Time
	// Grace is how long the waiter may leave a free lock untaken while
	// first in line before those behind it skip it.
	Grace time.Duration
}

// LineInfo is the line of fair waiters of one lock or semaphore.
type LineInfo struct {
	// PartitionKey and SortKey are the lock's key (for a semaphore, the
	// key of its metadata item).
	PartitionKey string
	SortKey      string
	// Tickets are the waiters in their order: the first may try next.
	// Numbers handed out whose ticket is gone are left out.
	Tickets []Ticket
}
