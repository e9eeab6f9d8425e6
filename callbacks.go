package ddblock

import (
	"runtime/debug"
	"sync"
	"time"
)

// maxPendingEvents bounds the undelivered events of one lock. A lock has
// few meaningful events (in danger, recovered, stolen); when its queue is
// full, the oldest event is dropped and counted, so the newest, which
// matches the lock's status, is always delivered.
const maxPendingEvents = 4

// pendingEvent is an event waiting for delivery, with the monotonic time
// it was queued.
type pendingEvent struct {
	code   Code
	queued time.Duration
}

// callbackPool runs application callbacks on a fixed number of workers.
//
// Producers (the heartbeater, the monitor) never wait: an event is
// appended to its lock's own short queue, and the lock is put on a ready
// list if it is not already there. Delivery is round-robin across locks:
// a worker takes the lock at the head of the list, delivers ONE event,
// and puts the lock back at the tail if it has more. A lock is on the
// list or in one worker's hands, never both, so its events arrive in
// order and never concurrently; and a lock whose callbacks are slow
// holds up at most the workers it occupies, never the events of other
// locks queued behind its backlog. Memory is bounded by maxPendingEvents
// per held lock. An event that waited longer than the safe period before
// its delivery started is logged and counted (Metrics.CallbackLate): by
// then the application heard of the lock's trouble later than the lock
// itself allows. A panicking callback is recovered, logged and counted.
type callbackPool struct {
	c         *Client
	mu        sync.Mutex
	cond      *sync.Cond
	ready     []*Lock
	inHand    map[*Lock]struct{} // locks whose callback is running
	running   int                // callbacks being run now
	closing   bool               // no new events; workers stop once the list is empty
	abandoned bool               // nothing more is delivered, queued or not

	workers *doneGroup // closed when every worker has returned
}

func newCallbackPool(c *Client, workers int) *callbackPool {
	p := &callbackPool{c: c, workers: newDoneGroup(workers), inHand: map[*Lock]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// enqueue queues code for l's callback, if it has one. Events that come
// once the pool is closing are not delivered: the client is closed.
func (p *callbackPool) enqueue(l *Lock, code Code) {
	if l.callback == nil {
		return
	}
	now := p.c.clock.Monotonic()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return
	}
	if len(l.pending) == maxPendingEvents {
		l.pending = append(l.pending[:0], l.pending[1:]...)
		p.c.stats.callbacksDropped.Add(1)
	}
	l.pending = append(l.pending, pendingEvent{code: code, queued: now})
	if !l.scheduled {
		l.scheduled = true
		p.ready = append(p.ready, l)
		p.cond.Signal()
	}
}

// close lets the workers deliver what is queued and then stop.
func (p *callbackPool) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

// abandon stops delivery now: queued events are dropped and counted, no
// further callback starts, and the workers stop as soon as the callbacks
// they are running return. It returns how many callbacks were running
// and how many events it dropped.
func (p *callbackPool) abandon() (running, dropped int) {
	p.mu.Lock()
	p.closing, p.abandoned = true, true
	for i, l := range p.ready {
		dropped += len(l.pending)
		l.pending = nil
		l.scheduled = false
		p.ready[i] = nil
	}
	p.ready = p.ready[:0]
	for l := range p.inHand {
		dropped += len(l.pending)
		l.pending = nil
	}
	running = p.running
	p.mu.Unlock()
	p.c.stats.callbacksDropped.Add(uint64(dropped))
	p.cond.Broadcast()
	return running, dropped
}

// runningNow returns the number of callbacks being run (none without a
// pool: a client assembled by a test of the scheduler alone has none).
func (p *callbackPool) runningNow() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// work is one worker's loop; it returns when the pool is closing and
// nothing is left to deliver (close), or at once when delivery was
// abandoned (abandon): a context would add nothing.
func (p *callbackPool) work() {
	defer p.workers.finish()
	for {
		p.mu.Lock()
		for len(p.ready) == 0 && !p.closing {
			p.cond.Wait()
		}
		if len(p.ready) == 0 {
			p.mu.Unlock()
			return
		}
		l := p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
		ev := l.pending[0]
		l.pending = l.pending[1:]
		p.running++
		p.inHand[l] = struct{}{}
		p.mu.Unlock()

		p.call(l, ev)

		p.mu.Lock()
		p.running--
		delete(p.inHand, l)
		switch {
		case p.abandoned:
			l.pending, l.scheduled = nil, false // counted by abandon
		case len(l.pending) > 0:
			p.ready = append(p.ready, l) // its turn again, after the others
			p.cond.Signal()
		default:
			l.scheduled = false
		}
		p.mu.Unlock()
	}
}

func (p *callbackPool) call(l *Lock, ev pendingEvent) {
	c := p.c
	if waited := c.clock.Monotonic() - ev.queued; waited > c.opts.SafePeriod {
		c.stats.callbacksLate.Add(1)
		c.opts.Metrics.CallbackLate(waited)
		c.log.Warn("ddblock: a callback event waited longer than the safe period; callbacks are too slow for CallbackWorkers",
			"key", l.pk, "sort_key", l.sk, "code", string(ev.code), "waited", waited,
			"safe_period", c.opts.SafePeriod, "callback_workers", c.opts.CallbackWorkers)
	}
	defer func() {
		if r := recover(); r != nil {
			c.stats.callbackPanics.Add(1)
			c.log.Error("ddblock: callback panicked", "key", l.pk, "sort_key", l.sk,
				"code", string(ev.code), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	l.callback(ev.code, l)
	c.stats.callbacksDelivered.Add(1)
}
