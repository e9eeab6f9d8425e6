package ddblock

import (
	"container/list"
	"sync"
	"time"
)

// observations remembers what this client saw of what others hold, so
// that waiting carries over from one acquire call to the next, and from
// one key to another:
//
//   - per lock held by someone else, the version number last seen and
//     when it was first seen (monotonic);
//   - per session item named by such locks, the session's version number
//     (or its absence) and how long it has been seen unchanged: the
//     observation is the session's, so once a session has been judged
//     dead every lock naming it is free to this client without another
//     wait (see [sessionObservation]).
//
// It holds at most max entries of both kinds together, forgetting the
// least recently used.
type observations struct {
	mu    sync.Mutex
	max   int
	byID  map[string]*list.Element
	order *list.List // front: most recently used
}

type observation struct {
	id     string
	info   *LockInfo
	seenAt time.Duration
	sess   *sessionObservation // a session's entry; info is nil then
}

// sessionObservation is what the client saw of one session item.
//
// The versions a session item's key carries follow one another and
// never come back (a fresh random number at each write, and a session
// key is never used again once its item is gone), so two reads that
// showed the same version saw it standing all the time in between. The
// record therefore keeps, for the version last seen, the reply to the
// first read that showed it (the read ran before that) and the sending
// of the latest read that showed it (that read ran after): the version
// stood at least from firstSeen to lastSent. A session whose version
// stood for its whole lease so is dead: its holder's last landed
// heartbeat was sent before firstSeen, so every lock on it is past its
// safe period, and a heartbeat of it that lands later comes a lease
// after that one and ends the session at its holder (session.go). That
// judgement is final, whatever is read of the session afterwards.
type sessionObservation struct {
	version   string        // the session item's version number; "-": no item
	firstSeen time.Duration // reply to the first read that showed version
	lastSent  time.Duration // sending of the latest read that showed it
	// deadFor is the longest lease the session was judged dead for
	// (zero: not judged dead).
	deadFor time.Duration
	// deleting is set once this client has undertaken to delete the
	// dead session's item.
	deleting bool
}

// absentSession is the version recorded for a session item that is not
// there.
const absentSession = "-"

func newObservations(max int) *observations {
	return &observations{max: max, byID: make(map[string]*list.Element), order: list.New()}
}

func (o *observations) get(id string) (*LockInfo, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.byID[id]
	if !ok {
		return nil, 0
	}
	o.order.MoveToFront(e)
	ob := e.Value.(*observation)
	return ob.info, ob.seenAt
}

func (o *observations) remember(id string, info *LockInfo, seenAt time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.putLocked(&observation{id: id, info: info, seenAt: seenAt})
}

func (o *observations) putLocked(ob *observation) {
	if e, ok := o.byID[ob.id]; ok {
		e.Value = ob
		o.order.MoveToFront(e)
		return
	}
	o.byID[ob.id] = o.order.PushFront(ob)
	for o.order.Len() > o.max {
		oldest := o.order.Back()
		o.order.Remove(oldest)
		delete(o.byID, oldest.Value.(*observation).id)
	}
}

func (o *observations) forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.byID[id]; ok {
		o.order.Remove(e)
		delete(o.byID, id)
	}
}

func (o *observations) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.order.Len()
}

// sessionID is a session's entry's id; no lock's id (item.go's lockID,
// two quoted keys joined by "|") starts with a space.
func sessionID(pk string) string { return " session " + pk }

// sessionLocked returns the session's record, or nil.
func (o *observations) sessionLocked(pk string) *sessionObservation {
	e, ok := o.byID[sessionID(pk)]
	if !ok {
		return nil
	}
	o.order.MoveToFront(e)
	return e.Value.(*observation).sess
}

// seeSession records a read of session pk that was sent at sent, whose
// reply came at reply (monotonic), and that showed version (or
// absentSession). A record already judged dead stays so.
func (o *observations) seeSession(pk, version string, sent, reply time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.sessionLocked(pk)
	switch {
	case s != nil && s.deadFor > 0:
	case s != nil && s.version == version:
		s.lastSent = max(s.lastSent, sent)
	default:
		// A new version, or the first look. Reads whose replies come
		// out of order may make a newer version give way to an older
		// one here: that only starts the watch afresh.
		o.putLocked(&observation{id: sessionID(pk), sess: &sessionObservation{version: version, firstSeen: reply, lastSent: sent}})
	}
}

// sessionDead reports whether session pk has been seen dead for a lease
// of lease, judging it now if its version has stood that long.
func (o *observations) sessionDead(pk string, lease time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.sessionLocked(pk)
	switch {
	case s == nil:
		return false
	case s.deadFor >= lease:
		return true
	case s.lastSent-s.firstSeen >= lease:
		s.deadFor = lease
		return true
	}
	return false
}

// sessionStill returns how long session pk's version has been seen
// standing (its whole lease and more once judged dead), judging nothing:
// the line (line.go) skips the tickets of a session that stood still
// past its waiters' pace, a judgement about turns, never about locks.
func (o *observations) sessionStill(pk string) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.sessionLocked(pk)
	switch {
	case s == nil:
		return 0
	case s.deadFor > 0:
		return maxLease
	}
	return max(s.lastSent-s.firstSeen, 0)
}

// claimSessionDelete returns the version of dead session pk's item that
// the caller is to delete, once per record: false when the session is
// not judged dead, its item was seen gone, or the delete was claimed.
func (o *observations) claimSessionDelete(pk string) (version string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.sessionLocked(pk)
	if s == nil || s.deadFor == 0 || s.deleting || s.version == absentSession {
		return "", false
	}
	s.deleting = true
	return s.version, true
}

// markSessionDead records that session pk, at version, was judged dead
// by its holder's wall-clock stamp (fast takeover, Options.MaxClockSkew):
// its other locks are then taken as a watched dead session's are.
func (o *observations) markSessionDead(pk, version string, lease time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.sessionLocked(pk)
	if s == nil || (s.version != version && s.deadFor == 0) {
		s = &sessionObservation{version: version}
		o.putLocked(&observation{id: sessionID(pk), sess: s})
	}
	s.deadFor = max(s.deadFor, lease)
}
