package ddblock

import (
	"slices"

	"github.com/ddblock/ddblock/internal/wire"
)

// hbState is the heartbeat state that a lock and a session share: the
// version number their item carries, the numbers written by heartbeats
// whose outcome is unknown (a timeout, a dropped connection: any of them
// may be in the table), and the heartbeat in flight. It has no mutex of
// its own: its owner's mutex (Lock.mu, session.mu) guards it, in the
// order locks.go sets down.
type hbState struct {
	rvn     string
	unknown []string      // written by heartbeats whose outcome is unknown
	done    chan struct{} // non-nil while a heartbeat is in flight
}

// maxUnknownHeartbeats bounds the remembered version numbers of
// heartbeats whose outcome is unknown; a lock goes into danger long
// before more of them pile up.
const maxUnknownHeartbeats = 8

// start marks a heartbeat in flight and returns the version number it
// moves the item from, the numbers that may be there instead, and the
// channel closed when it is done (by its owner, see finish).
func (h *hbState) start() (oldRVN string, unknown []string, done chan struct{}) {
	h.done = make(chan struct{})
	return h.rvn, slices.Clone(h.unknown), h.done
}

// finish marks the heartbeat in flight done and returns its channel, for
// the owner to close.
func (h *hbState) finish() chan struct{} {
	done := h.done
	h.done = nil
	return done
}

// inFlight returns the channel of the heartbeat in flight, nil when
// there is none.
func (h *hbState) inFlight() chan struct{} { return h.done }

// landed records a write that is known to have put rvn in the item.
func (h *hbState) landed(rvn string) {
	h.rvn = rvn
	h.unknown = h.unknown[:0]
}

// failed records a heartbeat that would have written rvn and failed with
// err: when its outcome is unknown, rvn may be in the item.
func (h *hbState) failed(rvn string, err error) {
	if !wire.OutcomeUnknown(err) {
		return
	}
	if len(h.unknown) == maxUnknownHeartbeats {
		h.unknown = append(h.unknown[:0], h.unknown[1:]...)
	}
	h.unknown = append(h.unknown, rvn)
}

// versions returns every version number the item may carry: the known
// one first, then those of heartbeats whose outcome is unknown.
func (h *hbState) versions() (rvn string, unknown []string) {
	return h.rvn, slices.Clone(h.unknown)
}
