package main

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
)

// recorder wraps the DynamoDB client given to ddblock.New and notes, per
// lock key, when each successful write (the acquire's PutItem, then each
// heartbeat's UpdateItem) came back. The largest gap between two of them
// is what the lock's safe period has to cover. For the first heartbeat it
// also notes when the calls were sent: the scheduler times a lock from
// the send of its last write, so the gap between sends is what tells its
// lateness apart from the server's slow replies.
//
// Its table of keys is built before the scenario starts and only read
// afterwards, so that it adds nothing to the heap measured per held lock
// and needs no lock of its own.
type recorder struct {
	ddblock.DynamoDBAPI
	pkName string
	base   time.Time
	tracks map[string]*track
	// early is half the heartbeat period: a lock written again sooner
	// than that after its previous successful write is an early repeat.
	early int64
	// holding is set while the measured window runs: gaps that end inside
	// it count as the window's, gaps before it as the acquire phase's.
	holding atomic.Bool

	updatesOK, updatesFailed atomic.Int64
	// lockUpdates counts the successful UpdateItems of lock items, over
	// the whole run: with --session there must be none, the session item
	// taking every heartbeat.
	lockUpdates atomic.Int64
	// The window's heartbeat calls, from send to reply: the longest, and
	// how many took over a tenth of a period (a stalled server, or a
	// client starved of CPU, both stretch the gaps by that much).
	slowAfter             int64
	callMaxHold, slowHold atomic.Int64

	// With --session the locks' own items are written once, and what
	// keeps them alive is their session item's heartbeat: each session
	// item the client makes gets a track of its own, keyed by its
	// partition key, and every successful session write is kept in order
	// (one a period: a few hundred at most), so that each lock's first
	// refresh after its acquire can be found. The client makes its
	// sessions rarely and writes them once a period, so a mutex costs
	// nothing here.
	sessionMu     sync.Mutex
	sessions      map[string]*track
	sessionWrites []sessionWrite
}

// sessionWrite is one successful write of a session item: when its call
// began and when it came back, as track times.
type sessionWrite struct{ sent, landed int64 }

// track is one lock key's record. Times are nanoseconds since base on the
// monotonic clock; 0 means "not yet".
type track struct {
	last     atomic.Int64
	lastSent atomic.Int64 // when the call of the last successful write began
	// beaten is false from the acquire to the first heartbeat: that first
	// gap depends on when the lock joined a round, and is kept apart.
	beaten   atomic.Bool
	firstGap atomic.Int64
	// firstGapSent is the same gap from the acquire's send to the first
	// heartbeat's.
	firstGapSent atomic.Int64
	maxGapAcq    atomic.Int64 // between heartbeats, before the window
	maxGapHold   atomic.Int64 // between heartbeats, in the window
	// maxGapHoldSent is the same from send to send.
	maxGapHoldSent atomic.Int64
	beatsHold      atomic.Int64
	// Heartbeats that came back sooner than half a period after the
	// lock's previous successful write, before and in the window.
	earlyAcq, earlyHold atomic.Int64
}

func newRecorder(ddb ddblock.DynamoDBAPI, pkName string, keys []string, period time.Duration) *recorder {
	r := &recorder{DynamoDBAPI: ddb, pkName: pkName, base: time.Now(), tracks: make(map[string]*track, len(keys)), early: int64(period / 2), slowAfter: int64(period / 10)}
	all := make([]track, len(keys))
	for i, k := range keys {
		r.tracks[k] = &all[i]
	}
	return r
}

func (r *recorder) now() int64 { return int64(time.Since(r.base)) }

// sessionKeyPrefix starts the partition key of every session item
// (ddblock's session.go); lock keys may not start with it.
const sessionKeyPrefix = "ddblock_session#"

// track finds a write's track: a lock key's, made beforehand, or a
// session item's, made at its first write. isSession tells which.
func (r *recorder) track(key map[string]types.AttributeValue) (t *track, isSession bool) {
	v, ok := key[r.pkName].(*types.AttributeValueMemberS)
	if !ok {
		return nil, false
	}
	if !strings.HasPrefix(v.Value, sessionKeyPrefix) {
		return r.tracks[v.Value], false
	}
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	if r.sessions == nil {
		r.sessions = make(map[string]*track)
	}
	t = r.sessions[v.Value]
	if t == nil {
		t = &track{}
		r.sessions[v.Value] = t
	}
	return t, true
}

// sessionTrack is the track of the session item with partition key pk,
// or nil if no write of it was seen.
func (r *recorder) sessionTrack(pk string) *track {
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	return r.sessions[pk]
}

// sessionTracks is every session item's track.
func (r *recorder) sessionTracks() []*track {
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	out := make([]*track, 0, len(r.sessions))
	for _, t := range r.sessions {
		out = append(out, t)
	}
	return out
}

// noteSessionWrite keeps a successful session write in order.
func (r *recorder) noteSessionWrite(sent, landed int64) {
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	r.sessionWrites = append(r.sessionWrites, sessionWrite{sent, landed})
}

// firstSessionRefresh is the first session write sent after sent (a
// lock's acquire): the first that moves that lock's safe period on, for
// the holder counts a lock safe from the later of its own write and its
// session's last landed write, both as sent. ok is false if none came.
func (r *recorder) firstSessionRefresh(sent int64) (w sessionWrite, ok bool) {
	r.sessionMu.Lock()
	defer r.sessionMu.Unlock()
	// Writes are appended as they come back, so sorted by landing; a
	// write sent earlier can land later, so search by landing and scan
	// on for the first sent after.
	i := sort.Search(len(r.sessionWrites), func(i int) bool { return r.sessionWrites[i].landed > sent })
	for ; i < len(r.sessionWrites); i++ {
		if r.sessionWrites[i].sent > sent {
			return r.sessionWrites[i], true
		}
	}
	return sessionWrite{}, false
}

// acquired records an acquire's write, whose call began at sent.
func (r *recorder) acquired(t *track, sent int64) {
	t.beaten.Store(false)
	t.lastSent.Store(sent)
	t.last.Store(r.now())
}

// heartbeat records a heartbeat's write, whose call began at sent.
func (r *recorder) heartbeat(t *track, sent int64) {
	now := r.now()
	prev := t.last.Swap(now)
	prevSent := t.lastSent.Swap(sent)
	holding := r.holding.Load()
	if holding {
		t.beatsHold.Add(1)
	}
	if prev != 0 && now-prev < r.early {
		if holding {
			t.earlyHold.Add(1)
		} else {
			t.earlyAcq.Add(1)
		}
	}
	switch {
	case prev == 0:
	case !t.beaten.Swap(true):
		storeMax(&t.firstGap, now-prev)
		storeMax(&t.firstGapSent, sent-prevSent)
	case holding:
		storeMax(&t.maxGapHold, now-prev)
		storeMax(&t.maxGapHoldSent, sent-prevSent)
	default:
		storeMax(&t.maxGapAcq, now-prev)
	}
}

// startWindow begins the measured window.
func (r *recorder) startWindow() {
	for _, t := range r.allTracks() {
		t.maxGapHold.Store(0)
		t.maxGapHoldSent.Store(0)
		t.beatsHold.Store(0)
		t.earlyHold.Store(0)
	}
	r.callMaxHold.Store(0)
	r.slowHold.Store(0)
	r.holding.Store(true)
}

// endWindow ends it, counting each lock's open gap (from its last write
// to now) too: a lock left waiting at the end has a gap all the same. A
// lock still waiting for its first heartbeat counts there.
func (r *recorder) endWindow() {
	r.holding.Store(false)
	now := r.now()
	for _, t := range r.allTracks() {
		last := t.last.Load()
		switch {
		case last == 0:
		case t.beaten.Load():
			storeMax(&t.maxGapHold, now-last)
			storeMax(&t.maxGapHoldSent, now-t.lastSent.Load())
		default:
			storeMax(&t.firstGap, now-last)
			storeMax(&t.firstGapSent, now-t.lastSent.Load())
		}
	}
}

// allTracks is every lock key's track and every session item's.
func (r *recorder) allTracks() []*track {
	out := r.sessionTracks()
	for _, t := range r.tracks {
		out = append(out, t)
	}
	return out
}

func storeMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// PutItem records the acquire's write.
func (r *recorder) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	sent := r.now()
	out, err := r.DynamoDBAPI.PutItem(ctx, in, o...)
	if err == nil {
		if t, isSession := r.track(in.Item); t != nil {
			r.acquired(t, sent)
			if isSession {
				r.noteSessionWrite(sent, r.now())
			}
		}
	}
	return out, err
}

// UpdateItem records a heartbeat. Every UpdateItem the client sends is
// a heartbeat write, counted whatever its key: a lock's, or with
// --session its session item's.
func (r *recorder) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	sent := r.now()
	out, err := r.DynamoDBAPI.UpdateItem(ctx, in, o...)
	if err != nil {
		r.updatesFailed.Add(1)
		return out, err
	}
	r.updatesOK.Add(1)
	if r.holding.Load() {
		took := r.now() - sent
		storeMax(&r.callMaxHold, took)
		if took > r.slowAfter {
			r.slowHold.Add(1)
		}
	}
	if t, isSession := r.track(in.Key); t != nil {
		r.heartbeat(t, sent)
		if isSession {
			r.noteSessionWrite(sent, r.now())
		} else {
			r.lockUpdates.Add(1)
		}
	}
	return out, err
}
