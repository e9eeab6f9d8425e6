package main

import (
	"fmt"
	"time"

	"github.com/ddblock/ddblock"
)

// A lock item says who wrote it last, not whether that holder is alive.
// ls and get tell a live holder from a presumably dead one in one of two
// ways, and say which:
//
//   - by the heartbeat stamp (ddblock_heartbeat_ms), which holders with
//     fast takeover (--max-clock-skew, Options.MaxClockSkew) write at
//     every heartbeat: a stamp younger than the lease means a live
//     holder. It compares the holder's wall clock with this host's.
//   - by watching (ls --watch D): the table is read twice, D apart; a
//     live holder changes the record version number at every heartbeat.
//     This needs no clock, and works for every holder, Python's too, as
//     long as D is longer than the holders' heartbeat period.
//
// A lock attached to a session is never rewritten: its holder is judged
// by its session item instead, and presumed dead when that is gone. A
// session item itself is judged as its client's: a dead session's locks
// are free to waiters, all at once.

// The holder states.
const (
	holderLive         = "live"
	holderPresumedDead = "presumed-dead"
	holderUnknown      = "unknown"
)

// What a holder state rests on.
const (
	evidenceStamp = "heartbeat-stamp"
	evidenceWatch = "watch"
	// evidenceSession: a session's lock whose session item is gone.
	evidenceSession = "session-item-gone"
)

// holderJSON is what ls and get say about a lock's holder.
type holderJSON struct {
	// State is "live", "presumed-dead" or "unknown".
	State string `json:"state"`
	// Evidence is "heartbeat-stamp" or "watch"; absent when unknown.
	Evidence string `json:"evidence,omitempty"`
	// Detail says it for people.
	Detail string `json:"detail"`
}

// text is the holder state as one table cell.
func (h holderJSON) text() string {
	state := h.State
	if state == holderPresumedDead {
		state = "presumed dead"
	}
	return state + " (" + h.Detail + ")"
}

// sessionGone is the holder of a lock whose session item is gone.
func sessionGone(evidence string) holderJSON {
	return holderJSON{State: holderPresumedDead, Evidence: evidence, Detail: "its session item is gone"}
}

// holderByStamp judges the holder by its heartbeat stamp (a session's
// lock by its session item's), as of now on this host's wall clock.
func holderByStamp(info *ddblock.LockInfo, now time.Time) holderJSON {
	if info.IsSession {
		h := holderByStamp(&ddblock.LockInfo{HeartbeatTime: info.HeartbeatTime, LeaseDuration: info.LeaseDuration}, now)
		switch h.State {
		case holderUnknown:
		case holderPresumedDead:
			h.Detail = "session " + h.Detail + ": waiters may take its locks over"
		default:
			h.Detail = "session " + h.Detail
		}
		return h
	}
	if info.Session != nil {
		if info.Session.Item == nil {
			// Known from the read itself, with no clock.
			return sessionGone(evidenceSession)
		}
		h := holderByStamp(info.Session.Item, now)
		h.Detail = "session: " + h.Detail
		return h
	}
	if info.HeartbeatTime.IsZero() {
		return holderJSON{State: holderUnknown, Detail: "no heartbeat stamp; ls --watch tells"}
	}
	age := now.Sub(info.HeartbeatTime)
	switch {
	case age < 0:
		// The holder's clock is ahead of ours: it stamped just now.
		return holderJSON{State: holderLive, Evidence: evidenceStamp,
			Detail: fmt.Sprintf("heartbeat stamped %v ahead of this host's clock", roundAge(-age))}
	case age <= info.LeaseDuration:
		return holderJSON{State: holderLive, Evidence: evidenceStamp,
			Detail: fmt.Sprintf("heartbeat stamped %v ago, lease %v", roundAge(age), info.LeaseDuration)}
	default:
		return holderJSON{State: holderPresumedDead, Evidence: evidenceStamp,
			Detail: fmt.Sprintf("heartbeat stamped %v ago, more than its lease of %v", roundAge(age), info.LeaseDuration)}
	}
}

// holderByWatch judges the holder of now by what the table held watch
// earlier (before; nil when the lock was not there).
func holderByWatch(before, now *ddblock.LockInfo, watch time.Duration) holderJSON {
	if now.IsSession {
		return sessionItemByWatch(before, now, watch)
	}
	if now.Session != nil && before != nil && before.OwnerName == now.OwnerName &&
		before.RecordVersionNumber == now.RecordVersionNumber {
		return sessionByWatch(before, now, watch)
	}
	switch {
	case before == nil:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("acquired during the %v watch", watch)}
	case before.OwnerName != now.OwnerName:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("changed hands during the %v watch", watch)}
	case before.RecordVersionNumber != now.RecordVersionNumber:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("heartbeated during the %v watch", watch)}
	default:
		return stoodStill("heartbeat", watch, now.LeaseDuration, "a waiter may take it over")
	}
}

// sessionByWatch judges the holder of a session's lock that was the same
// item at both reads, by its session item at both.
func sessionByWatch(before, now *ddblock.LockInfo, watch time.Duration) holderJSON {
	var was *ddblock.LockInfo
	if before.Session != nil {
		was = before.Session.Item
	}
	is := now.Session.Item
	switch {
	case is == nil:
		return sessionGone(evidenceWatch)
	case was == nil || was.RecordVersionNumber != is.RecordVersionNumber:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("session heartbeated during the %v watch", watch)}
	default:
		return stoodStill("session heartbeat", watch, now.Session.LeaseDuration, "a waiter may take it over")
	}
}

// sessionItemByWatch judges the client of a session item by the item at
// both reads (before is nil when it was not there).
func sessionItemByWatch(before, now *ddblock.LockInfo, watch time.Duration) holderJSON {
	switch {
	case before == nil:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("session started during the %v watch", watch)}
	case before.RecordVersionNumber != now.RecordVersionNumber:
		return holderJSON{State: holderLive, Evidence: evidenceWatch,
			Detail: fmt.Sprintf("session heartbeated during the %v watch", watch)}
	default:
		return stoodStill("session heartbeat", watch, now.LeaseDuration, "waiters may take its locks over")
	}
}

// stoodStill judges a holder whose item (or session item) stood unchanged
// through the watch: presumed dead, and free to take once the watch
// covered its whole lease.
func stoodStill(what string, watch, lease time.Duration, takeover string) holderJSON {
	detail := fmt.Sprintf("no %s in %v", what, watch)
	if watch >= lease {
		detail += ", its whole lease: " + takeover
	}
	return holderJSON{State: holderPresumedDead, Evidence: evidenceWatch, Detail: detail}
}

// roundAge keeps an age readable.
func roundAge(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(10 * time.Millisecond)
	}
}
