package mutexcheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ddblock/ddblock"
)

// Sets of keys taken at once (ddblock.Client.AcquireLocks). An attempt
// at a set is logged under a key of its own, "set:" and its keys joined
// by "+"; each lock of a won set is an ordinary tenure of its own key.
// For progress, a set's key is occupied while any of its keys is, and
// its waiter is blind while a call on any of them is in flight.

// setKeyPrefix starts the logged key of a set.
const setKeyPrefix = "set:"

// SetKey is the logged key of an attempt at the set of keys.
func SetKey(keys []string) string {
	return setKeyPrefix + strings.Join(keys, "+")
}

// setMembers returns the keys of a set's logged key, and false for any
// other key.
func setMembers(key string) ([]string, bool) {
	rest, ok := strings.CutPrefix(key, setKeyPrefix)
	if !ok {
		return nil, false
	}
	return strings.Split(rest, "+"), true
}

// memberKeys is the keys a logged key stands for: a set's keys, or the
// key itself.
func memberKeys(key string) []string {
	if m, ok := setMembers(key); ok {
		return m
	}
	return []string{key}
}

// roundSet is one acquire of a set of 2 to SetSize of the holder's keys
// at once, a tenure on each of them, worked together, and their
// releases; true when the client is closed.
func (h *Holder) roundSet(ctx context.Context, hold time.Duration) bool {
	n := 2 + h.rng.IntN(min(h.SetSize, len(h.Keys))-1)
	keys := slices.Clone(h.Keys)
	h.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:n]
	actx, cancel := context.WithTimeout(ctx, h.AcquireTimeout)
	ended := h.attempting(SetKey(keys))
	set, err := h.Client.AcquireLocks(actx, keys, h.AcquireOptions...)
	ended(err)
	cancel()
	if err != nil {
		return h.failed("acquire", err)
	}
	locks := set.Locks()
	if len(locks) != len(keys) {
		h.Log.Failure(h.ID, "acquire", Now(), CodeUnclear, fmt.Sprintf("AcquireLocks returned %d locks for %d keys", len(locks), len(keys)))
		return false
	}
	tenures := h.workSet(ctx, locks, keys, hold)
	for i, l := range locks {
		h.release(ctx, tenures[i], l)
	}
	return false
}

// workSet is work for the locks of a set: verified steps, each checking
// every lock, until the hold time is up or one lock is not safe any
// more. It returns the tenures' names, one per lock.
func (h *Holder) workSet(ctx context.Context, locks []*ddblock.Lock, keys []string, hold time.Duration) []string {
	start := Now()
	tenures := make([]string, len(locks))
	for i, l := range locks {
		h.tenures++
		tenures[i] = fmt.Sprintf("%s#%d", h.ID, h.tenures)
		from := ""
		if prev := l.TakenOverFrom(); prev != nil {
			from = prev.OwnerName
		}
		h.Log.Acquired(tenures[i], keys[i], start, l.RecordVersionNumber(), l.FencingToken(), from)
	}
	end := func(reason string) []string {
		for _, tn := range tenures {
			h.Log.Ended(tn, Now(), reason)
		}
		return tenures
	}
	deadline := start + int64(hold)
	timer := time.NewTimer(h.StepEvery)
	defer timer.Stop()
	for {
		t := Now()
		if ctx.Err() != nil {
			return end("stopped")
		}
		for _, l := range locks {
			if err := l.Err(); err != nil {
				return end(string(ddblock.CodeOf(err)))
			}
		}
		for _, tn := range tenures {
			h.Log.Step(tn, t)
		}
		if t >= deadline {
			return end("done")
		}
		timer.Reset(h.StepEvery)
		select {
		case <-timer.C:
		case <-locks[0].Done():
		case <-ctx.Done():
		}
	}
}
