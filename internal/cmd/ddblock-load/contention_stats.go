package main

import (
	"cmp"
	"slices"
	"time"
)

// The contention scenario's figures, computed in the parent from what
// its worker processes reported. Everything here is pure: times are
// nanoseconds on CLOCK_MONOTONIC (monoNow), which every process of the
// machine shares, so that events of different processes can be put in
// one order.

// acqEvent is one acquisition by one contender.
type acqEvent struct {
	WaitStart    int64 `json:"w"` // AcquireLock called
	Acquired     int64 `json:"a"` // AcquireLock returned the lock
	ReleaseStart int64 `json:"r"` // Release called, after the hold
	ReleaseDone  int64 `json:"d"` // Release returned
}

// wireCounts are the DynamoDB calls a contender's client sent for one
// key inside the measured window, failed ones included.
type wireCounts struct {
	Get    int64 `json:"get"`
	Put    int64 `json:"put"`
	Update int64 `json:"update"`
	Delete int64 `json:"delete"`
}

func (w wireCounts) writes() int64 { return w.Put + w.Update + w.Delete }

// contenderReport is what one contender did in the window.
type contenderReport struct {
	ID   int    `json:"id"`
	Proc int    `json:"proc"`
	Key  string `json:"key"`
	// Acquisitions are those whose AcquireLock returned inside the
	// window, in the order they happened.
	Acquisitions []acqEvent `json:"acq"`
	// OpenWait is when the wait that the window's end cut short began
	// (0: the contender was not waiting at the end). An AcquireLock that
	// returned the lock only after the end counts here too.
	OpenWait int64 `json:"open_wait,omitempty"`
	// Calls are counted per key (a contender touches only its own).
	Calls         map[string]wireCounts `json:"calls"`
	AcquireErrors int                   `json:"acquire_errors"`
	ReleaseErrors int                   `json:"release_errors"`
	FirstError    string                `json:"first_error,omitempty"`
}

// keyStats are one key's figures.
type keyStats struct {
	key           string
	contenders    int
	acquisitions  int
	readsPerS     float64 // GetItem calls per second, all its contenders together
	writesPerS    float64 // PutItem, UpdateItem and DeleteItem calls per second
	streak        int     // the longest run of acquisitions by one contender
	streakBy      int     // that contender's ID
	handoffs      durations
	handoffsOther durations // those to another contender than the releaser
	handoffToSelf int       // handoffs where the releaser took the key again
	overlaps      int       // the next holder had it before the previous called Release
	// overtaken is the most acquisitions of the key by others inside one
	// wait (completed or cut short by the window's end): K−1 at most
	// when waiters are served in arrival order, whatever the machine's
	// speed.
	overtaken int
}

// contentionStats are the scenario's figures.
type contentionStats struct {
	window       time.Duration
	contenders   []int // IDs, ascending
	perContender []int // acquisitions, in the order of contenders
	total        int
	minAcq       int
	maxAcq       int
	jain         float64
	waits        durations // completed waits: AcquireLock called → lock returned
	openWaits    durations // waits still open at the window's end, up to the end
	waitMax      time.Duration
	holds        durations // AcquireLock returned → Release called
	// steadyWaits are the completed waits begun after every contender
	// had its first acquisition: without the start, where all come at
	// once to a server not yet warm.
	steadyWaits durations
	// firstAcquired is how long after the window opened the first
	// acquisition of any key came: with every contender starting at
	// once, the whole first round waits for it.
	firstAcquired time.Duration
	overtaken     int // the most over the keys (keyStats.overtaken)
	streak        int // the longest over the keys
	streakBy      int
	streakKey     string
	handoffs      durations // every key's
	handoffOther  durations // every key's, to another contender than the releaser
	handoffSelf   int
	overlaps      int
	keys          []keyStats // by key name

	acquireErrors, releaseErrors int
	firstError                   string
}

// mostContenders is the most contenders of one key.
func (s contentionStats) mostContenders() int {
	most := 0
	for _, k := range s.keys {
		most = max(most, k.contenders)
	}
	return most
}

// jainIndex is Jain's fairness index of xs: (Σx)² / (n·Σx²). It is 1
// when every x is equal and 1/n when one takes everything; 0 for no
// sample or when every x is 0 (nothing to be fair about).
func jainIndex(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		f := float64(x)
		sum += f
		sq += f * f
	}
	if len(xs) == 0 || sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// longestStreak is the longest run of equal values in seq and that
// value; 0 and -1 for an empty seq. The first of equally long runs wins.
func longestStreak(seq []int) (length, who int) {
	who = -1
	run := 0
	for i, x := range seq {
		if i > 0 && x == seq[i-1] {
			run++
		} else {
			run = 1
		}
		if run > length {
			length, who = run, x
		}
	}
	return length, who
}

// keyedEvent is an acquisition with its contender.
type keyedEvent struct {
	acqEvent
	who int
}

// handoffsOf takes one key's acquisitions in the order they were made
// (by Acquired) and returns, for each one after the first, the time from
// the previous holder's call to Release to this AcquireLock's return;
// those of them that went to another contender than the releaser (a
// waiter's handoff, which a releaser asking again at once does not
// show); how many went back to the releaser; and how many came before
// the previous holder had called Release at all (an overlap: two holders
// at once as far as the clock can tell, which mutual exclusion forbids).
// Overlapping pairs are left out of the handoffs.
func handoffsOf(events []keyedEvent) (hs, others durations, toSelf, overlaps int) {
	for i := 1; i < len(events); i++ {
		prev, next := events[i-1], events[i]
		d := next.Acquired - prev.ReleaseStart
		if d < 0 {
			overlaps++
			continue
		}
		hs = append(hs, time.Duration(d))
		if next.who == prev.who {
			toSelf++
		} else {
			others = append(others, time.Duration(d))
		}
	}
	return hs, others, toSelf, overlaps
}

// overtakenIn takes one key's acquisitions in the order they were made
// (by Acquired) and the starts of the waits the window's end cut short,
// and returns the most acquisitions made inside one wait: after the
// wait began, before it ended. A contender does not acquire while it
// waits, so all of them are by others.
func overtakenIn(events []keyedEvent, openWaits []int64) int {
	// after is how many acquisitions come after time t.
	after := func(t int64) int {
		i, _ := slices.BinarySearchFunc(events, t, func(e keyedEvent, t int64) int {
			if e.Acquired <= t {
				return -1
			}
			return 1
		})
		return len(events) - i
	}
	most := 0
	for i, e := range events {
		most = max(most, after(e.WaitStart)-(len(events)-i))
	}
	for _, w := range openWaits {
		most = max(most, after(w))
	}
	return most
}

// aggregate computes the figures of the window [start, end) from every
// contender's report. Acquisitions outside the window are ignored; a
// contender with none still counts (as 0) in the fairness index.
func aggregate(reports []contenderReport, start, end int64) contentionStats {
	s := contentionStats{window: time.Duration(end - start)}
	reports = slices.Clone(reports)
	slices.SortFunc(reports, func(a, b contenderReport) int { return cmp.Compare(a.ID, b.ID) })
	byKey := map[string][]keyedEvent{}
	contendersOf := map[string]int{}
	calls := map[string]wireCounts{}
	openWaitsOf := map[string][]int64{}
	for _, r := range reports {
		n := 0
		for _, e := range r.Acquisitions {
			if e.Acquired < start || e.Acquired >= end {
				continue
			}
			n++
			s.waits = append(s.waits, time.Duration(e.Acquired-e.WaitStart))
			if e.ReleaseStart > e.Acquired {
				s.holds = append(s.holds, time.Duration(e.ReleaseStart-e.Acquired))
			}
			byKey[r.Key] = append(byKey[r.Key], keyedEvent{e, r.ID})
		}
		if r.OpenWait != 0 && r.OpenWait < end {
			s.openWaits = append(s.openWaits, time.Duration(end-max(r.OpenWait, start)))
			openWaitsOf[r.Key] = append(openWaitsOf[r.Key], r.OpenWait)
		}
		s.contenders = append(s.contenders, r.ID)
		s.perContender = append(s.perContender, n)
		s.total += n
		contendersOf[r.Key]++
		for k, c := range r.Calls {
			t := calls[k]
			t.Get += c.Get
			t.Put += c.Put
			t.Update += c.Update
			t.Delete += c.Delete
			calls[k] = t
		}
		s.acquireErrors += r.AcquireErrors
		s.releaseErrors += r.ReleaseErrors
		if s.firstError == "" {
			s.firstError = r.FirstError
		}
	}
	if len(s.perContender) > 0 {
		s.minAcq, s.maxAcq = slices.Min(s.perContender), slices.Max(s.perContender)
	}
	s.jain = jainIndex(s.perContender)
	firstAny := int64(0)
	for _, r := range reports {
		for _, e := range r.Acquisitions {
			if e.Acquired >= start && e.Acquired < end && (firstAny == 0 || e.Acquired < firstAny) {
				firstAny = e.Acquired
			}
		}
	}
	if firstAny != 0 {
		s.firstAcquired = time.Duration(firstAny - start)
	}
	var firstRound int64 // when the last contender to be served was served first
	for _, r := range reports {
		first := int64(0)
		for _, e := range r.Acquisitions {
			if e.Acquired >= start && e.Acquired < end {
				first = e.Acquired
				break
			}
		}
		if first == 0 {
			firstRound = end // someone never served: no steady state
			break
		}
		firstRound = max(firstRound, first)
	}
	for _, r := range reports {
		for _, e := range r.Acquisitions {
			if e.Acquired >= start && e.Acquired < end && e.WaitStart >= firstRound {
				s.steadyWaits = append(s.steadyWaits, time.Duration(e.Acquired-e.WaitStart))
			}
		}
	}
	s.waitMax = max(slicesMax(s.waits), slicesMax(s.openWaits))

	keys := make([]string, 0, len(contendersOf))
	for k := range contendersOf {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	secs := s.window.Seconds()
	for _, k := range keys {
		ev := byKey[k]
		slices.SortStableFunc(ev, func(a, b keyedEvent) int { return cmp.Compare(a.Acquired, b.Acquired) })
		who := make([]int, len(ev))
		for i, e := range ev {
			who[i] = e.who
		}
		ks := keyStats{key: k, contenders: contendersOf[k], acquisitions: len(ev)}
		ks.streak, ks.streakBy = longestStreak(who)
		ks.handoffs, ks.handoffsOther, ks.handoffToSelf, ks.overlaps = handoffsOf(ev)
		ks.overtaken = overtakenIn(ev, openWaitsOf[k])
		s.overtaken = max(s.overtaken, ks.overtaken)
		if secs > 0 {
			ks.readsPerS = float64(calls[k].Get) / secs
			ks.writesPerS = float64(calls[k].writes()) / secs
		}
		if ks.streak > s.streak {
			s.streak, s.streakBy, s.streakKey = ks.streak, ks.streakBy, k
		}
		s.handoffs = append(s.handoffs, ks.handoffs...)
		s.handoffOther = append(s.handoffOther, ks.handoffsOther...)
		s.handoffSelf += ks.handoffToSelf
		s.overlaps += ks.overlaps
		s.keys = append(s.keys, ks)
	}
	return s
}
