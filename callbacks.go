package ddblock

import (
	"context"
	"runtime/debug"
	"sync"
)

// maxPendingEvents bounds the undelivered events of one lock. A lock has
// few meaningful events (in danger, recovered, stolen); when its queue is
// full, the oldest event is dropped and counted, so the newest, which
// matches the lock's status, is always delivered.
const maxPendingEvents = 4

// callbackPool runs application callbacks on a fixed number of workers.
//
// Producers (the heartbeater, the monitor) never wait: an event is
// appended to its lock's own short queue, and the lock is put on a ready
// list if it is not already there. A worker takes a lock off the list and
// delivers its events one by one, so events of one lock arrive in order
// and never run concurrently, while different locks' events run in
// parallel. Memory is bounded by maxPendingEvents per held lock. A slow
// callback only delays other callbacks; a panicking one is recovered,
// logged and counted.
type callbackPool struct {
	c       *Client
	mu      sync.Mutex
	cond    *sync.Cond
	ready   []*Lock
	closing bool
}

func newCallbackPool(c *Client) *callbackPool {
	p := &callbackPool{c: c}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// enqueue queues code for l's callback, if it has one.
func (p *callbackPool) enqueue(l *Lock, code Code) {
	if l.callback == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return
	}
	if len(l.pending) == maxPendingEvents {
		l.pending = append(l.pending[:0], l.pending[1:]...)
		p.c.stats.callbacksDropped.Add(1)
	}
	l.pending = append(l.pending, code)
	if !l.scheduled {
		l.scheduled = true
		p.ready = append(p.ready, l)
		p.cond.Signal()
	}
}

// close lets the workers finish what is queued and then stop.
func (p *callbackPool) close() {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.cond.Broadcast()
}

// work is one worker's loop; it returns when the pool is closed and
// nothing is left to deliver.
func (p *callbackPool) work(context.Context) {
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
		p.mu.Unlock()
		p.deliver(l)
	}
}

// deliver runs l's queued events in order until its queue is empty.
func (p *callbackPool) deliver(l *Lock) {
	for {
		p.mu.Lock()
		if len(l.pending) == 0 {
			l.scheduled = false
			p.mu.Unlock()
			return
		}
		code := l.pending[0]
		l.pending = l.pending[1:]
		p.mu.Unlock()
		p.call(l, code)
	}
}

func (p *callbackPool) call(l *Lock, code Code) {
	defer func() {
		if r := recover(); r != nil {
			p.c.stats.callbackPanics.Add(1)
			p.c.log.Error("ddblock: callback panicked", "key", l.pk, "sort_key", l.sk,
				"code", string(code), "panic", r, "stack", string(debug.Stack()))
		}
	}()
	l.callback(code, l)
	p.c.stats.callbacksDelivered.Add(1)
}
