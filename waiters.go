package ddblock

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ddblock/ddblock/internal/wire"
)

// waitRoom is where the goroutines of one client that wait for the same
// key (AcquireLock and TryAcquireLock of one partition and sort key) meet,
// so that between them they cost what one waiter costs:
//
//   - one call for the key at a time: a waiter that finds a read or a put
//     of another waiter in flight waits for its outcome instead of making
//     its own;
//   - one read per retry period: a look at the item that another waiter
//     made, new to this one (made since it came, and since its own last
//     look) and no older than its retry period, is used as this waiter's
//     own (so the key is read at about the shortest retry period among
//     its waiters);
//   - one put per free or expired look: the waiter that made the look (or
//     the first to use it) puts, the others wait for what its put found;
//   - a release by this client hands the key to its waiters at once
//     ([waitRoom.released]): they are woken and one of them puts;
//   - reads that are throttled make every waiter of the key back off
//     together, with jitter, until a read goes through again.
//
// Each waiter keeps its own retry period, timeout, context and session:
// the room decides only which of them calls the table, and when. Who
// takes the lock next is the acquisition's question to the room; a
// queue with places in it (fair waiting) would answer it here.
//
// The takeover rule is the acquisition's, unchanged: a look carries the
// monotonic time at which it was made and the time its version number
// was first seen by this client, and a waiter that uses another's look
// judges the lock expired as of that look, never as of its own now.
type waitRoom struct {
	mu   sync.Mutex
	keys map[string]*keyWait
}

// keyWait is the meeting of the waiters of one key.
type keyWait struct {
	waiters int
	// calls counts the calls for the key that waiters started, and the
	// handoffs; a look is numbered by the call that made it.
	calls uint64
	// busy is closed when the call in flight ends; nil when none is.
	busy chan struct{}
	last *look // the latest look, nil before the first
	// claimed is the number of the latest look that a put was made on.
	claimed uint64
	// changed is closed (and replaced) when a release hands the key over.
	changed chan struct{}
	// Backing off: consecutive throttled reads, the read not to be made
	// before notBefore (monotonic), and the throttle to report meanwhile.
	throttled int
	notBefore time.Duration
	throttle  error
}

// look is what one look at the key showed: a read of the item (and of
// its session), the item a failed put found, or a release by this client.
type look struct {
	call            uint64
	info            *LockInfo     // nil: no item
	seenAt          time.Duration // when info's version was first seen by this client
	at              time.Duration // when the look was made (monotonic, after the reply)
	wall            time.Time     // the wall clock then
	sessionReadWall time.Time     // when the lock's session was last read (wall)
}

// Backing off on throttled reads: the next read of the key comes a retry
// period plus a random part of up to the period doubled per throttled
// read in a row, at most backoffCap periods (full jitter).
const backoffCap = 16

func newWaitRoom() *waitRoom { return &waitRoom{keys: make(map[string]*keyWait)} }

// join registers a waiter of key id and returns the key's meeting and
// the number of the latest call that ended before the waiter came (looks
// made by calls up to it are not this waiter's to use).
func (r *waitRoom) join(id string) (*keyWait, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kw := r.keys[id]
	if kw == nil {
		kw = &keyWait{changed: make(chan struct{})}
		r.keys[id] = kw
	}
	kw.waiters++
	if kw.busy != nil {
		// The call in flight ends after this waiter came: what it finds
		// is as good as a call of its own.
		return kw, kw.calls - 1
	}
	return kw, kw.calls
}

// leave unregisters a waiter of key id.
func (r *waitRoom) leave(id string, kw *keyWait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kw.waiters--
	if kw.waiters == 0 && r.keys[id] == kw {
		delete(r.keys, id)
	}
}

// released tells the waiters of key id that this client gave the key
// back: the item is gone (kept nil) or kept, marked released (kept). It
// wakes them, and the first to come puts its lock at once.
func (r *waitRoom) released(id string, kept *LockInfo, now time.Duration, wall time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kw := r.keys[id]
	if kw == nil {
		return
	}
	kw.calls++
	kw.last = &look{call: kw.calls, info: kept, seenAt: now, at: now, wall: wall}
	close(kw.changed)
	kw.changed = make(chan struct{})
}

// handOff tells the waiters of l's key, if any, that this client has
// just given l back with the item at version rvn: deleted, or kept
// marked released when the client keeps released items or counts
// fencing tokens (see giveBack). Should the guess be wrong, the waiter's
// put, conditioned on it, fails and the waiter reads the item.
func (c *Client) handOff(l *Lock, rvn string) {
	var kept *LockInfo
	if c.opts.KeepReleasedItems || l.token > 0 {
		kept = &LockInfo{PartitionKey: l.pk, SortKey: l.sk, OwnerName: l.owner, LeaseDuration: l.lease,
			RecordVersionNumber: rvn, FencingToken: l.token, Released: true}
	}
	c.waiters.released(l.id, kept, c.clock.Monotonic(), c.clock.Now())
}

// step is what a waiter is to do next.
type step int

const (
	stepOwn     step = iota // this client holds the key
	stepWait                // another waiter's call is in flight: wait for its end
	stepHeld                // the latest look shows the lock held: sleep
	stepBackoff             // reads are backing off: sleep
	stepRead                // read the item (and then put, if it is free)
	stepPut                 // put, on the look adopted
)

// next decides a's next step and, when a is to call the table, marks the
// call in flight (a must then end it with done). It sets the channels
// that end a's sleep early: the key's handoff, and the end of the call
// in flight for stepWait.
func (r *waitRoom) next(a *acquisition) step {
	r.mu.Lock()
	defer r.mu.Unlock()
	kw := a.kw
	a.handoff, a.callEnd = kw.changed, nil
	if a.c.holds(a.id) {
		return stepOwn
	}
	if kw.busy != nil {
		a.callEnd = kw.busy
		return stepWait
	}
	now := a.c.clock.Monotonic()
	if l := kw.last; l != nil && l.call > a.lastCall && now-l.at <= a.opts.RetryPeriod {
		// A look that is new to a, made by another waiter no more than
		// a's retry period ago: as good as one of a's own.
		a.lastCall = l.call
		a.adopt(l)
		if !a.mayWrite() {
			return stepHeld
		}
		if kw.claimed < l.call {
			kw.claimed = l.call
			r.startLocked(kw, a)
			return stepPut
		}
		// A put was made on this look and failed: try afresh below.
	}
	if a.seen == nil || a.seen.Released {
		// Nothing held when last seen: put at once, as a lone waiter does.
		r.startLocked(kw, a)
		kw.claimed = a.call
		return stepPut
	}
	if now < kw.notBefore {
		a.backoffErr = kw.throttle
		return stepBackoff
	}
	r.startLocked(kw, a)
	return stepRead
}

// startLocked marks a's call in flight, numbered.
func (r *waitRoom) startLocked(kw *keyWait, a *acquisition) {
	kw.calls++
	a.call = kw.calls
	kw.busy = make(chan struct{})
}

// done ends a's call. With publish, what a saw last becomes the key's
// latest look; after a put, nobody puts on it again (the put made on the
// look before found it, and retried when it could). After a read (read
// set), the backoff is brought up to date: readErr is the read's
// failure (nil when it went through), classified the failure to report.
func (r *waitRoom) done(a *acquisition, publish, put, read bool, readErr, classified error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kw := a.kw
	a.lastCall = a.call
	// A release by this client during the call (numbered after it) is
	// newer news than what the call found.
	if publish && (kw.last == nil || kw.last.call < a.call) {
		l := &look{call: a.call, info: a.seen, seenAt: a.seenAt, at: a.lookAt, wall: a.lookWall, sessionReadWall: a.sessionReadWall}
		kw.last = l
		if put {
			kw.claimed = l.call
		}
	}
	if read {
		switch {
		case readErr == nil:
			kw.throttled, kw.notBefore, kw.throttle = 0, 0, nil
		case wire.Throttled(readErr):
			kw.throttled++
			limit := min(a.opts.RetryPeriod<<min(kw.throttled, 8), backoffCap*a.opts.RetryPeriod)
			kw.notBefore = a.readSent + a.opts.RetryPeriod + rand.N(limit)
			kw.throttle = classified
		}
	}
	close(kw.busy)
	kw.busy = nil
}

// backingOff is the outcome of an attempt that made no read because the
// key's reads are backing off after a throttle: the retry loop counts
// the throttle as the attempt's failure, without logging it again.
type backingOff struct{ err error }

func (b *backingOff) Error() string { return b.err.Error() }
func (b *backingOff) Unwrap() error { return b.err }

// WithWaitOnOwn makes AcquireLock wait for a lock that this client
// holds, as for anyone else's, instead of answering ALREADY_HELD: for
// goroutines of one client that take turns with a key. When the client
// releases it, one waiter takes it within one call, without waiting for
// its next attempt. Locks are still not reentrant: a goroutine that
// waits for a lock it holds itself waits until its timeout.
func WithWaitOnOwn() AcquireOption {
	return func(o *acquireOptions) { o.WaitOnOwn = true }
}

// wakeups: a waiter is woken when this client releases the key, and when
// the call of another waiter that it found in flight ends.
func (a *acquisition) wakeups() (a1, b <-chan struct{}) { return a.handoff, a.callEnd }
