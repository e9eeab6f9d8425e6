package ddblock

import (
	"context"
	"iter"
	"time"

	"github.com/ddblock/ddblock/internal/hooks"
)

// Test-only views of unexported values, for the external tests.
var (
	FairGraceForTest = fairGrace
	LineBoundForTest = lineBound
)

// WithClock sets a client's clock, for the external tests (the ddblock
// command reaches it through internal/hooks).
var WithClock = withClock

// LastHeartbeat is a lock's last heartbeat on its client's clock.
func (l *Lock) LastHeartbeat() time.Duration { return l.lastRefresh() }

// Line and ListLines read lines of fair waiters; Semaphore.Line a
// semaphore's.
func (c *Client) Line(ctx context.Context, pk, sk string) (*LineInfo, error) {
	return c.readLine(ctx, pk, sk)
}

func (c *Client) ListLines(ctx context.Context) iter.Seq2[*LineInfo, error] { return c.listLines(ctx) }

func (s *Semaphore) Line(ctx context.Context) (*LineInfo, error) { return s.readLine(ctx) }

// LineInfo and Ticket are the views of a line.
type (
	LineInfo = hooks.LineInfo
	Ticket   = hooks.Ticket
)

// AppliedForTest is what opts write, before New resolves them.
func AppliedForTest(opts ...Option) Options {
	var s settings
	for _, opt := range opts {
		opt(&s)
	}
	return s.Options
}

// TableOptionsAppliedForTest is what opts write over the zero
// TableOptions.
func TableOptionsAppliedForTest(opts ...TableOption) TableOptions {
	var t tableSettings
	for _, opt := range opts {
		opt(&t)
	}
	return t.tableOptions
}

// TableOptions are the settings the table options write.
type TableOptions = tableOptions

// TableOptionForTest is a TableOption that edits the TableOptions as f
// does, for tests that set fields no With function sets alone.
func TableOptionForTest(f func(*TableOptions)) TableOption {
	return func(t *tableSettings) { f(&t.tableOptions) }
}

// Slot is SemaphoreInfo's slot mapper, which the ddblock command reaches
// through internal/hooks.
func (i *SemaphoreInfo) Slot(pk, sk string) (int, bool) { return i.slot(pk, sk) }

// SemaphoreNameOf is the client's reading of a metadata item's key.
func (c *Client) SemaphoreNameOf(pk, sk string) (string, bool) { return c.semaphoreNameOf(pk, sk) }
