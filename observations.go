package ddblock

import (
	"container/list"
	"sync"
	"time"
)

// observations remembers, per lock held by someone else, the version
// number this client last saw and when it first saw it (monotonic), so
// that waiting on a lock carries over from one acquire call to the next.
// It holds at most max entries, forgetting the least recently used.
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
}

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
	if e, ok := o.byID[id]; ok {
		e.Value = &observation{id, info, seenAt}
		o.order.MoveToFront(e)
		return
	}
	o.byID[id] = o.order.PushFront(&observation{id, info, seenAt})
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
