// Package mutexcheck checks that a lock never had two working holders at
// once. Holders (goroutines, or worker processes) write what they did to
// a [Log]; [Check] reads every log of a run and looks for overlaps.
//
// # What a holder records
//
// A holder works in small steps. Each step reads the clock ([Now]) and
// then checks Lock.Err() == nil; only when the check passes is the step
// recorded, with the time read before the check. A recorded step
// therefore marks a moment at which the holder had verified, at that
// moment or later, that its lock was safe. A holder that was paused
// (SIGSTOP) records nothing while stopped, and its first step after
// SIGCONT goes through the same check, so its tenure ends at the last
// moment it verified the lock, not at the moment it noticed the loss.
//
// # What is checked
//
// A tenure is one holder's holding of one lock, from its first recorded
// step to its last. On every key the tenures must be disjoint: no step of
// one tenure may fall within [first step, last step] of another. [Check]
// reports every pair that breaks this, with both tenures' records.
//
// Where tenures carry fencing tokens, the tokens of one key must grow
// strictly from one tenure to the next, in the order the tenures worked.
//
// Keys of the form "GROUP/slot-I" are the slots of a counting semaphore
// GROUP. When a log declares a limit N for GROUP ([Log.Limit]), at no
// moment may more than N tenures of its slots be working: the working
// intervals [first step, last step] of the group's tenures are swept in
// time order, and every stretch with more than N of them open is
// reported. The per-key rule still holds for each slot.
//
// A group may be resized during the run ([Log.Resize]); the limit is then
// the one in force at each moment, by the rule that ddblock's
// Semaphore.Resize documents: from a resize's "begin" to its "done" the
// larger of the old and the new number; from its "done" on, the new
// number alone (the holders above a shrunk number have released before a
// resize is done). A resize that failed may have written its number: the
// larger of the two stays in force until a later resize is done. At the
// moment a limit falls, the tenures still working count as if they began
// then. A group's resizes are taken to run one at a time.
//
// # Progress
//
// Where holders log their acquire attempts ([Log.Attempting],
// [Log.Attempted]) and the settings of their waits ([Log.Params]), their
// clients' calls ([Recorder]) and what struck them ([Log.Trouble],
// [WatchStalls]), Check also asks of every attempt that ended without
// the lock whether its key stood free, the waiter able to look, for
// longer than [ProgressBound]: see [Report.ProgressViolations], and
// liveness.go for what counts as occupied and as blind.
//
// Timestamps come from CLOCK_MONOTONIC on Linux, which every process of a
// machine shares, so logs from several processes can be compared.
package mutexcheck

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Tenure is one holding of one lock, as its holder recorded it.
type Tenure struct {
	ID  string
	Key string
	// RVN is the record version number written by the acquire, and
	// Token its fencing token (0: none).
	RVN   string
	Token int64
	// TakenFrom is the owner of the held item the acquire took over, or
	// empty when the key was free or released.
	TakenFrom string
	// Acquired is when AcquireLock returned; First and Last are the first
	// and last verified steps (zero when there were none).
	Acquired, First, Last int64
	Steps                 int
	// End is when the holder stopped, and EndReason why; both are empty
	// when the holder's process was killed before it could say.
	End       int64
	EndReason string
	// Released is how the release ended ("ok", an error code,
	// "unknown"); empty when there is no record of one. ReleasedAt is
	// when that was logged.
	Released   string
	ReleasedAt int64
}

// String describes the tenure on one line, for violation reports.
func (t Tenure) String() string {
	end := "no end record (killed)"
	if t.EndReason != "" {
		end = fmt.Sprintf("ended %d (%s), release %q", t.End, t.EndReason, t.Released)
	}
	from := ""
	if t.TakenFrom != "" {
		from = " from " + t.TakenFrom
	}
	return fmt.Sprintf("%s on %q rvn %s token %d: acquired %d%s, %d steps %d..%d (%v), %s",
		t.ID, t.Key, t.RVN, t.Token, t.Acquired, from, t.Steps, t.First, t.Last, time.Duration(t.Last-t.First), end)
}

// Violation is two tenures of one key whose working intervals overlap.
type Violation struct {
	Key string
	// A began working first; B's first step fell within A's interval.
	A, B Tenure
	// Overlap is how long both worked at once.
	Overlap time.Duration
}

// String describes both tenures of the violation.
func (v Violation) String() string {
	return fmt.Sprintf("key %q: overlap of %v\n  A: %s\n  B: %s", v.Key, v.Overlap, v.A, v.B)
}

// Report is what Check found.
type Report struct {
	// Keys is the number of keys that were held at least once.
	Keys int
	// Acquisitions counts successful acquires; Tenures those that did at
	// least one verified step; Steps all verified steps.
	Acquisitions, Tenures, Steps int
	// Handoffs counts the times a key passed from one tenure to the next.
	Handoffs int
	// Takeovers counts working tenures whose acquire took over an item
	// that was still held (by a holder killed, paused, cut off, or whose
	// release failed): the acquirer waited out the lease, or judged it
	// passed by the holder's wall-clock stamp.
	Takeovers int
	// MinTakeoverGap is the shortest time, over takeovers, between the
	// previous working tenure's last step and the taker's first: the
	// closest a takeover came to an overlap.
	MinTakeoverGap time.Duration
	// Closest is that closest takeover: the previous tenure, then the
	// next.
	Closest [2]Tenure
	// Ends counts tenures by how they ended; "killed" when there is no
	// end record.
	Ends map[string]int
	// Failures counts failed calls by "op CODE".
	Failures map[string]int
	// StolenAfterDone counts releases that said LOCK_STOLEN right after a
	// tenure that ended by choice: its last step had just verified the
	// lock, so unless the process was paused between that step and the
	// release, nobody can have taken it (a takeover needs a lease), and
	// the release's own delete must have landed.
	StolenAfterDone int
	// Unclear lists failures that were not a *ddblock.Error with a known
	// code: every fault must end in a clear error.
	Unclear []Event
	// Violations lists every overlap found; it must be empty.
	Violations []Violation
	// Fenced counts the working tenures that had a fencing token, and
	// FencingViolations lists the pairs of consecutive fenced tenures of
	// a key whose tokens did not grow; it must be empty.
	Fenced            int
	FencingViolations []Violation
	// MaxToken is the greatest fencing token seen per key.
	MaxToken map[string]int64
	// Limits is the most holders allowed at once per semaphore group,
	// PeakHolders the most that worked at once, and LimitViolations
	// every stretch with more than the limit working; it must be empty.
	// SlotTenures counts the working tenures of limited groups' slots.
	Limits      map[string]int
	PeakHolders map[string]int
	SlotTenures int
	// Resizes counts the resizes of groups that were done
	// (acknowledged), by group; nil when there were none.
	Resizes map[string]int
	// ByKind counts working tenures by the kind of client that held
	// them: the flavour named in the holder's ID ("g3.1-session#4" is a
	// "session" holder's), so a run shows that every kind took part.
	ByKind          map[string]int
	LimitViolations []LimitViolation
	// Problems lists inconsistent records (a step outside its tenure, an
	// unknown tenure), which point at a harness bug.
	Problems []string

	// Progress counts the acquire attempts on record by kind of client
	// (see kindOf; "ddblock-run:KIND" for `ddblock run`), how they
	// ended, and the longest free stretch of a failed wait (see
	// checkProgress). ProgressChecked counts the failed waits measured.
	Progress        map[string]KindProgress
	ProgressChecked int
	// ProgressViolations lists the failed waits of unfair waiters during
	// which the key stood free, the waiter able to look, for longer than
	// its bound; it must be empty. FairProgressViolations lists those of
	// fair waiters, apart.
	ProgressViolations, FairProgressViolations []ProgressViolation
	// MaxHeld is the longest a fault of the run held a request before
	// forwarding it: a write sent may land that much later.
	MaxHeld time.Duration
}

// LimitViolation is a moment at which more tenures of a semaphore group
// worked than its limit allows.
type LimitViolation struct {
	Group string
	Limit int
	// At is the first step that went over the limit; Working are the
	// tenures working at that moment, that step's included.
	At      int64
	Working []Tenure
}

// String describes the violation and every tenure in it.
func (v LimitViolation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "group %q: %d holders at %d, limit %d", v.Group, len(v.Working), v.At, v.Limit)
	for _, t := range v.Working {
		fmt.Fprintf(&b, "\n  %s", t)
	}
	return b.String()
}

// SlotGroup returns the semaphore group of a key "GROUP/slot-I", and
// whether the key is a slot.
func SlotGroup(key string) (string, bool) {
	i := strings.LastIndex(key, "/slot-")
	if i <= 0 {
		return "", false
	}
	return key[:i], true
}

// Check reads the events of every log of a run and checks mutual
// exclusion per key, and the limit of every semaphore group.
func Check(events []Event) Report {
	r := Report{Ends: map[string]int{}, Failures: map[string]int{}, MaxToken: map[string]int64{}, MinTakeoverGap: -1,
		Limits: map[string]int{}, PeakHolders: map[string]int{}}
	tenures := map[string]*Tenure{}
	resizes := map[string][]Event{}
	for _, ev := range events {
		switch ev.Kind {
		case Acquired:
			if tenures[ev.Tenure] != nil {
				r.Problems = append(r.Problems, "tenure "+ev.Tenure+" acquired twice")
				continue
			}
			tenures[ev.Tenure] = &Tenure{ID: ev.Tenure, Key: ev.Key, RVN: ev.Note, Token: ev.Token, TakenFrom: ev.Detail, Acquired: ev.T}
			r.MaxToken[ev.Key] = max(r.MaxToken[ev.Key], ev.Token)
			r.Acquisitions++
		case Step:
			t := tenures[ev.Tenure]
			if t == nil {
				r.Problems = append(r.Problems, "step of unknown tenure "+ev.Tenure)
				continue
			}
			if t.Steps == 0 || ev.T < t.First {
				t.First = ev.T
			}
			if t.Steps == 0 || ev.T > t.Last {
				t.Last = ev.T
			}
			t.Steps++
			r.Steps++
		case Ended:
			t := tenures[ev.Tenure]
			if t == nil {
				r.Problems = append(r.Problems, "end of unknown tenure "+ev.Tenure)
				continue
			}
			t.End, t.EndReason = ev.T, ev.Note
		case Released:
			t := tenures[ev.Tenure]
			if t == nil {
				r.Problems = append(r.Problems, "release of unknown tenure "+ev.Tenure)
				continue
			}
			t.Released, t.ReleasedAt = ev.Note, ev.T
		case Limit:
			if n, ok := r.Limits[ev.Key]; ok && n != int(ev.Token) {
				r.Problems = append(r.Problems, fmt.Sprintf("group %s declared with limits %d and %d", ev.Key, n, ev.Token))
			}
			r.Limits[ev.Key] = int(ev.Token)
		case Resize:
			resizes[ev.Key] = append(resizes[ev.Key], ev)
			if ev.Note == "done" {
				if r.Resizes == nil {
					r.Resizes = map[string]int{}
				}
				r.Resizes[ev.Key]++
			}
		case Failure:
			r.Failures[ev.Key+" "+ev.Note]++
			if ev.Note == CodeUnclear {
				r.Unclear = append(r.Unclear, ev)
			}
		}
	}

	byKey := map[string][]*Tenure{}
	for _, t := range tenures {
		reason := t.EndReason
		if reason == "" {
			reason = "killed"
		}
		r.Ends[reason]++
		if t.Steps > 0 && t.First < t.Acquired {
			r.Problems = append(r.Problems, "tenure "+t.ID+" stepped before it acquired")
		}
		if t.Steps > 0 && t.EndReason != "" && t.Last > t.End {
			r.Problems = append(r.Problems, "tenure "+t.ID+" stepped after it ended")
		}
		if t.EndReason == "done" && t.Released == "LOCK_STOLEN" {
			r.StolenAfterDone++
		}
		byKey[t.Key] = append(byKey[t.Key], t)
	}
	r.Keys = len(byKey)

	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ts := byKey[key]
		// Every acquisition is a holding, stepped or not, for counting
		// handoffs; only stepped tenures can overlap.
		slices.SortFunc(ts, func(a, b *Tenure) int { return cmp.Compare(a.Acquired, b.Acquired) })
		r.Handoffs += len(ts) - 1
		worked := slices.DeleteFunc(slices.Clone(ts), func(t *Tenure) bool { return t.Steps == 0 })
		r.Tenures += len(worked)
		for _, t := range worked {
			if r.ByKind == nil {
				r.ByKind = map[string]int{}
			}
			r.ByKind[kindOf(t.ID)]++
		}
		slices.SortFunc(worked, func(a, b *Tenure) int { return cmp.Compare(a.First, b.First) })
		var reach *Tenure      // the tenure whose last step is latest so far
		var lastFenced *Tenure // the latest tenure with a token so far
		for _, t := range worked {
			if t.Token > 0 {
				r.Fenced++
				if lastFenced != nil && t.Token <= lastFenced.Token {
					r.FencingViolations = append(r.FencingViolations, Violation{Key: key, A: *lastFenced, B: *t})
				}
				lastFenced = t
			}
			if reach != nil {
				if t.First <= reach.Last {
					r.Violations = append(r.Violations, Violation{
						Key: key, A: *reach, B: *t,
						Overlap: time.Duration(min(reach.Last, t.Last) - t.First),
					})
				} else if t.TakenFrom != "" {
					r.Takeovers++
					if gap := time.Duration(t.First - reach.Last); r.MinTakeoverGap < 0 || gap < r.MinTakeoverGap {
						r.MinTakeoverGap = gap
						r.Closest = [2]Tenure{*reach, *t}
					}
				}
			}
			if reach == nil || t.Last > reach.Last {
				reach = t
			}
		}
	}
	r.checkLimits(byKey, resizes)
	r.checkProgress(events, tenures, resizes)
	return r
}

// checkLimits sweeps each limited group's working intervals in time
// order, with the group's limit as resizes change it, and reports every
// stretch with more holders than the limit in force.
func (r *Report) checkLimits(byKey map[string][]*Tenure, resizes map[string][]Event) {
	type edge struct {
		t     int64
		kind  int // edgeStart, edgeLimit, edgeEnd: the order at equal times
		ten   *Tenure
		limit int // edgeLimit: the limit from then on
	}
	const (
		edgeStart = iota
		edgeLimit
		edgeEnd
	)
	edges := map[string][]edge{}
	for key, ts := range byKey {
		group, ok := SlotGroup(key)
		if !ok {
			continue
		}
		if _, limited := r.Limits[group]; !limited {
			continue
		}
		for _, t := range ts {
			if t.Steps > 0 {
				r.SlotTenures++
				edges[group] = append(edges[group], edge{t: t.First, kind: edgeStart, ten: t}, edge{t: t.Last, kind: edgeEnd, ten: t})
			}
		}
	}
	for group, evs := range resizes {
		if _, limited := r.Limits[group]; !limited {
			continue
		}
		for _, ch := range limitChanges(r.Limits[group], evs) {
			edges[group] = append(edges[group], edge{t: ch.t, kind: edgeLimit, limit: ch.limit})
		}
	}
	for _, group := range slices.Sorted(maps.Keys(edges)) {
		es := edges[group]
		// Intervals are closed: at equal times a start comes before an
		// end, so that touching intervals count as overlapping; a limit
		// that changes at that time applies to both.
		slices.SortStableFunc(es, func(a, b edge) int {
			return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.kind, b.kind))
		})
		limit := r.Limits[group]
		open := map[*Tenure]bool{}
		over := false
		report := func(t int64) {
			if len(open) > limit && !over {
				over = true
				v := LimitViolation{Group: group, Limit: limit, At: t}
				for t := range open {
					v.Working = append(v.Working, *t)
				}
				slices.SortFunc(v.Working, func(a, b Tenure) int { return cmp.Compare(a.First, b.First) })
				r.LimitViolations = append(r.LimitViolations, v)
			}
		}
		for _, e := range es {
			switch e.kind {
			case edgeEnd:
				delete(open, e.ten)
				if len(open) <= limit {
					over = false
				}
			case edgeLimit:
				limit = e.limit
				if len(open) <= limit {
					over = false
				}
				report(e.t)
			case edgeStart:
				open[e.ten] = true
				r.PeakHolders[group] = max(r.PeakHolders[group], len(open))
				report(e.t)
			}
		}
	}
}

// limitChange is the limit of a group from t on.
type limitChange struct {
	t     int64
	limit int
}

// limitChanges turns a group's resize events into the limit in force
// from each of them on, starting from the declared limit: a resize in
// flight (begun, or failed) allows the larger of its number and the
// number of the last resize done; a resize done allows its number, and
// ends every resize in flight that began before it.
func limitChanges(declared int, evs []Event) []limitChange {
	return limitsInForce(declared, evs, func(a, b int) int { return max(a, b) })
}

// limitsInForce is the limit from each resize event on: a resize done
// sets the base; pick combines the base with the number of each resize
// in flight (begun, or failed).
func limitsInForce(declared int, evs []Event, pick func(a, b int) int) []limitChange {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	base := declared
	inFlight := map[string]Event{} // by resize name: its begin
	var out []limitChange
	for _, ev := range evs {
		switch ev.Note {
		case "begin":
			inFlight[ev.Tenure] = ev
		case "done":
			began, ok := inFlight[ev.Tenure]
			for name, other := range inFlight {
				if !ok || other.T <= began.T {
					delete(inFlight, name)
				}
			}
			base = int(ev.Token)
		case "failed":
			// Stays in flight: its number may have been written.
		}
		limit := base
		for _, f := range inFlight {
			limit = pick(limit, int(f.Token))
		}
		out = append(out, limitChange{ev.T, limit})
	}
	return out
}

// CodeUnclear is the code a holder logs for a failure that is not a
// *ddblock.Error with a code it knows.
const CodeUnclear = "UNCLEAR"

// Summary formats the report's figures, one per line.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "keys %d, acquisitions %d, working tenures %d, verified steps %d\n", r.Keys, r.Acquisitions, r.Tenures, r.Steps)
	if len(r.ByKind) > 0 {
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(r.ByKind)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, r.ByKind[k]))
		}
		fmt.Fprintf(&b, "working tenures by kind of client: %s\n", strings.Join(kinds, ", "))
	}
	fmt.Fprintf(&b, "handoffs %d, of which %d took over a lock still held (its holder killed, paused, cut off, or its release failed)", r.Handoffs, r.Takeovers)
	if r.MinTakeoverGap >= 0 {
		fmt.Fprintf(&b, "; closest: %v from the previous holder's last verified step to the taker's first", r.MinTakeoverGap)
	}
	b.WriteString("\n")
	if r.MinTakeoverGap >= 0 {
		fmt.Fprintf(&b, "  closest takeover, before: %s\n  closest takeover, after:  %s\n", r.Closest[0], r.Closest[1])
	}
	fmt.Fprintf(&b, "tenure ends: %s\n", formatCounts(r.Ends))
	fmt.Fprintf(&b, "failed calls: %s\n", formatCounts(r.Failures))
	fmt.Fprintf(&b, "releases that said LOCK_STOLEN right after a tenure ended by choice: %d\n", r.StolenAfterDone)
	fmt.Fprintf(&b, "tenures with a fencing token %d, tokens out of order %d\n", r.Fenced, len(r.FencingViolations))
	if len(r.Limits) > 0 {
		parts := make([]string, 0, len(r.Limits))
		for _, g := range slices.Sorted(maps.Keys(r.Limits)) {
			if r.Resizes[g] > 0 {
				parts = append(parts, fmt.Sprintf("%s %d (declared limit %d, then resized)", g, r.PeakHolders[g], r.Limits[g]))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %d of %d", g, r.PeakHolders[g], r.Limits[g]))
		}
		fmt.Fprintf(&b, "semaphores: %d working tenures of their slots; most holders at once: %s; OVER THE LIMIT %d\n",
			r.SlotTenures, strings.Join(parts, ", "), len(r.LimitViolations))
		if len(r.Resizes) > 0 {
			parts = parts[:0]
			for _, g := range slices.Sorted(maps.Keys(r.Resizes)) {
				parts = append(parts, fmt.Sprintf("%s %d", g, r.Resizes[g]))
			}
			fmt.Fprintf(&b, "semaphore resizes done (the limit checked is the one in force at each moment): %s\n", strings.Join(parts, ", "))
		}
	}
	if len(r.Progress) > 0 {
		fmt.Fprintf(&b, "acquire attempts by kind of client (acquired, timed out, other failures; the longest a failed wait saw its lock free, against that wait's bound):\n")
		for _, k := range slices.Sorted(maps.Keys(r.Progress)) {
			p := r.Progress[k]
			fmt.Fprintf(&b, "  %-26s %6d attempts: %6d acquired, %5d timed out, %5d other; longest free %v", k, p.Attempts, p.Acquired, p.Timeouts, p.OtherFailures, p.LongestFree.Round(time.Microsecond))
			if p.Bound > 0 {
				fmt.Fprintf(&b, " (bound %v)", p.Bound)
			}
			if p.Violations > 0 {
				fmt.Fprintf(&b, "; OVER THE BOUND %d", p.Violations)
			}
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "failed waits checked for progress %d; longest hold of a request by a fault %v; PROGRESS VIOLATIONS %d, of fair waiters %d\n",
			r.ProgressChecked, r.MaxHeld, len(r.ProgressViolations), len(r.FairProgressViolations))
	}
	fmt.Fprintf(&b, "unclear errors %d, harness problems %d, VIOLATIONS %d\n", len(r.Unclear), len(r.Problems), len(r.Violations))
	return b.String()
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// kindOf is the client kind in a holder's ID: what follows the first "-"
// up to the "#" of the tenure ("w0.1/c1-session-fast#3": "session-fast");
// "other" when the ID does not name one.
func kindOf(id string) string {
	id, _, _ = strings.Cut(id, "#")
	if _, kind, ok := strings.Cut(id, "-"); ok && kind != "" {
		return kind
	}
	return "other"
}
