package mutexcheck

// # Progress
//
// Besides overlaps, Check asks of every acquire attempt that ended
// without the lock whether the lock stood free, for longer than the
// waiter's bound, while the waiter was waiting and able to look.
//
// A key is occupied (may be held) over each of these stretches, from
// the moment an acquiring write may have landed:
//
//   - a tenure: from the sending of the put that wrote its record
//     version number (its client's calls are on record), else from the
//     start of the attempt that acquired it; until its release was
//     acknowledged ("ok"; for a best-effort release, when its client's
//     last delete of the item, or update marking it released, after the
//     tenure's end returned success). Otherwise its item stands unheartbeated from
//     its holder's last moment of life, and a waiter takes it once it
//     has watched it for the holder's lease: the key is occupied until
//     that moment + the lease, or, for a waiter that came later, until
//     the waiter's start + the lease. The last moment of life is the
//     release's return (the library stops a lock's heartbeats before
//     its release's call), or for a holder with no release on record
//     (killed, abandoned) the death of its client or process as the
//     harness logged it, or for a lock on a session (whose session goes
//     on heartbeating an item it failed to give back) the death of its
//     client; plus the longest a fault of the run held a request before
//     forwarding it (a heartbeat sent before that moment may land that
//     much later). Without a record of death, forever. Either way, no
//     longer than the next tenure of the key began: its put replaced
//     the item;
//   - a put whose outcome is unknown (an error other than a failed
//     condition, or a failed condition on a retry by the SDK: see
//     Recorder.PutItem) and that no tenure accounts for: from its
//     sending, as a lock that stands from its answer (from its client's
//     death, on a session);
//   - a put that succeeded and that no tenure accounts for (the
//     process died before logging it), and an attempt started and never
//     ended (its process was killed): from its start until its client's
//     death, as a lock that stands then;
//   - an attempt of a `ddblock run` (whose calls are not on record) that
//     acquired a lock no tenure accounts for (lost before its command
//     started), failed otherwise than by timing out, or timed out while
//     its fault proxy injected faults: from its start until its end, as
//     a lock that stands then.
//
// A semaphore's group ("GROUP/slot-*") is occupied while at least as
// many of its slots are occupied as the smallest limit that may be in
// force (a resize in flight or failed counts its smaller number).
//
// A set of keys taken at once (SetKey) is occupied while any of its keys
// is; an attempt at a set that may have written occupies each of them.
//
// A waiter cannot see the key while it is blind: while one of its
// client's calls on the key (its line's counter or tickets, a session
// item, or any key) is
// in flight, and, after one that failed, for the retry period and the
// longest back-off of throttled reads (16 retry periods) and a
// heartbeat period (a session in danger waits for its next heartbeat);
// while its process is stalled (WatchStalls) or starting ("startup");
// and, for a waiter whose calls are not on record, while its fault proxy
// injects faults, and that slack after.
//
// For each stretch of the wait during which the key was free, the time
// the waiter was not blind must not exceed [ProgressBound], or for a
// fair waiter [FairProgressBound]: the line's bound behind waiters that
// are dead, gone or garbled, with the longest grace of the run's fair
// waiters and the longest lease of its clients.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Occupancy is a stretch during which a key may have been held.
type Occupancy struct {
	Key         string
	From, Until int64
	// Stands: Until is the holder's last moment of life, after which
	// its item stands until a waiter has watched it for Lease: for a
	// waiter that started at s, until max(Until, s) + Lease.
	Stands bool
	Lease  time.Duration
	// Taken, when not zero, is when a later tenure of the key began (by
	// its occupancy) after this one's write had surely landed: its put
	// replaced the item, which stands no longer.
	Taken int64
	// landed is the latest its write may have landed.
	landed int64
	// Source says what occupied it.
	Source string
}

// EndFor is when the occupancy ends for a waiter that started at start.
func (o Occupancy) EndFor(start int64) int64 {
	if !o.Stands {
		return o.Until
	}
	end := addSat(max(o.Until, start), int64(o.Lease))
	if o.Taken > 0 {
		end = min(end, max(o.Taken, o.From))
	}
	return end
}

func (o Occupancy) String() string {
	until := fmt.Sprint(o.Until)
	if o.Until == math.MaxInt64 {
		until = "never (no record of its end)"
	}
	if o.Stands {
		until = fmt.Sprintf("last life %s, then stands a lease of %v", until, o.Lease)
		if o.Taken > 0 {
			until += fmt.Sprintf(", or until the next tenure's put at %d", o.Taken)
		}
	}
	return fmt.Sprintf("%s on %q: from %d, %s", o.Source, o.Key, o.From, until)
}

// ProgressViolation is a failed acquire attempt during which the lock
// stood free, and the waiter able to look, for longer than its bound.
type ProgressViolation struct {
	Holder, Kind, Key, Outcome string
	Start, End                 int64
	Fair                       bool
	// FreeFrom..FreeTo is the stretch of the wait in which the key
	// stood free; Free is how much of it the waiter was not blind.
	FreeFrom, FreeTo int64
	Free             time.Duration
	Bound            time.Duration
	Terms            string
	// Around are the key's occupancies near the wait.
	Around []Occupancy
}

func (v ProgressViolation) String() string {
	var b strings.Builder
	fair := ""
	if v.Fair {
		fair = " (a fair waiter)"
	}
	fmt.Fprintf(&b, "%s%s waited for %q from %d to %d (%v) and ended %s: the key stood free from %d to %d (%v), %v of it with the waiter able to look; bound %v (%s): over by %v",
		v.Holder, fair, v.Key, v.Start, v.End, time.Duration(v.End-v.Start), v.Outcome,
		v.FreeFrom, v.FreeTo, time.Duration(v.FreeTo-v.FreeFrom), v.Free, v.Bound, v.Terms, v.Free-v.Bound)
	for _, o := range v.Around {
		fmt.Fprintf(&b, "\n    %s", o)
	}
	return b.String()
}

// KindProgress is what the acquire attempts of one kind of client came
// to.
type KindProgress struct {
	Attempts, Acquired, Timeouts, OtherFailures int
	// LongestFree is the longest free stretch (the time the waiter was
	// able to look) within a failed wait, and Bound that wait's bound.
	LongestFree, Bound time.Duration
	Violations         int
}

// ProgressBound is how long a waiter that retries every retry period,
// among clients heartbeating every heartbeat period, may leave a free
// lock untaken while it is able to look, and the terms that make it up:
//
//   - a retry period: a lock that came free is seen at the next look;
//   - a retry period: an unreleased item is watched from the first look
//     after its last heartbeat landed, and taken at the first look a
//     lease after that;
//   - a heartbeat period: a heartbeat may follow the holder's last
//     moment on record by up to a period;
//   - three times StallThreshold: the waiter's goroutine may run late by
//     less than WatchStalls reports, at its wake-up, its read's answer
//     and its put.
//
// The time a request takes, or fails and is retried, is not in it: the
// waiter is blind while its calls are in flight, and after a failed one
// (see the package's progress notes). A fair waiter's bound is
// [FairProgressBound].
func ProgressBound(retry, heartbeat time.Duration) (time.Duration, string) {
	b := 2*retry + heartbeat + 3*StallThreshold
	terms := fmt.Sprintf("2 x retry period %v + heartbeat period %v + 3 x stall threshold %v", retry, heartbeat, StallThreshold)
	return b, terms
}

// FairGrace is the grace of a fair waiter as ddblock sets it (line.go's
// fairGrace): the longer of three retry periods and two heartbeat
// periods of its client, and a second. Those behind a head that leaves
// a free lock untaken, or a waiter whose session stands still, for its
// grace skip it.
func FairGrace(retry, heartbeat time.Duration) time.Duration {
	return max(3*retry, 2*heartbeat) + time.Second
}

// LineBound is ddblock's bound on a fair waiter's wait behind dead,
// gone and garbled waiters, from when the lock stands free (line.go's
// lineBound): two graces (the watch of the head or of the dead sessions,
// and, far back, half a grace between inspections and half a grace
// before the watch starts) and three retry periods of looks. grace is
// the longest grace of the waiters of the line, retry the waiter's
// retry period.
func LineBound(grace, retry time.Duration) time.Duration {
	return 2*grace + 3*retry
}

// FairProgressBound is a fair waiter's bound: ProgressBound, plus
// LineBound for the dead, gone, cancelled and garbled waiters that may
// stand ahead of it in line however many they are (grace: the longest of
// the line's waiters).
func FairProgressBound(retry, heartbeat, grace time.Duration) (time.Duration, string) {
	b, terms := ProgressBound(retry, heartbeat)
	b += LineBound(grace, retry)
	terms += fmt.Sprintf(" + the line's bound behind dead waiters (2 x grace %v + 3 x retry period %v)", grace, retry)
	return b, terms
}

// blindSlack is how long after a failed call a waiter may not look: the
// retry period, the longest back-off of throttled reads (16 periods),
// and a heartbeat period.
func blindSlack(retry, heartbeat time.Duration) int64 {
	return int64(17*retry + heartbeat)
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// interval is [from, to].
type interval struct{ from, to int64 }

// merge sorts and merges intervals.
func merge(iv []interval) []interval {
	slices.SortFunc(iv, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	var out []interval
	for _, x := range iv {
		if x.to <= x.from {
			continue
		}
		if n := len(out); n > 0 && x.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// overlap is the length of [from, to] covered by merged intervals.
func overlap(merged []interval, from, to int64) int64 {
	var n int64
	for _, x := range merged {
		if x.to <= from {
			continue
		}
		if x.from >= to {
			break
		}
		n += min(x.to, to) - max(x.from, from)
	}
	return n
}

// progress is what the progress check reads from a run's events.
type progress struct {
	params   map[string]Event // by holder
	byClient map[string]Event // a holder's params, by its client
	calls    map[string][]Event
	callSpan map[string]int64 // the longest call of a client, slack included
	troubles []Event
	deaths   []Event // the troubles that end a client or process
	maxHeld  int64
	maxLease time.Duration
	// fairGrace is the longest grace of the run's fair waiters.
	fairGrace time.Duration
	occ       map[string][]Occupancy // by key
}

func holderOf(id string) string {
	h, _, _ := strings.Cut(id, "#")
	return h
}

// progressKind is kindOf without what tells apart holders of one kind
// on one client: a goroutine's "-tN", a twin's "+twin".
func progressKind(holder string) string {
	kind := strings.TrimSuffix(kindOf(holder), "+twin")
	if i := strings.LastIndex(kind, "-t"); i > 0 && i+2 < len(kind) && strings.Trim(kind[i+2:], "0123456789") == "" {
		kind = kind[:i]
	}
	return kind
}

func hasFlag(p Event, flag string) bool {
	return slices.Contains(strings.Split(p.Note, ","), flag)
}

// names are the names trouble may strike a holder by.
func (g *progress) names(holder string) []string {
	names := []string{holder}
	if p, ok := g.params[holder]; ok {
		names = append(names, p.Client, p.Proc)
	}
	return names
}

func matches(target string, names []string) bool {
	prefix, isPrefix := strings.CutSuffix(target, "*")
	for _, n := range names {
		if n == target || (isPrefix && strings.HasPrefix(n, prefix)) {
			return true
		}
	}
	return false
}

// death is the first end of a client or process among names on record,
// plus the longest hold of a request; MaxInt64 when there is none.
func (g *progress) death(names []string) int64 {
	d := int64(math.MaxInt64)
	for _, x := range g.deaths {
		if x.T < d && matches(x.Tenure, names) {
			d = x.T
		}
	}
	return addSat(d, g.maxHeld)
}

func (g *progress) lease(p Event, ok bool) time.Duration {
	if ok && p.Lease > 0 {
		return p.Lease
	}
	return g.maxLease
}

// itemKey is the logged key of a lock item.
func itemKey(pk, sk string) string {
	if sk == "-" || sk == "?" || sk == "" {
		return pk
	}
	return pk + "/" + sk
}

// keyItem is the item of a logged key.
func keyItem(key string) (pk, sk string) {
	if group, ok := SlotGroup(key); ok {
		return group, key[len(group)+1:]
	}
	return key, "-"
}

// checkProgress measures, for every acquire attempt that ended without
// the lock, the longest stretch of it during which the key stood free
// and the waiter was able to look, and reports those over the bound.
func (r *Report) checkProgress(events []Event, tenures map[string]*Tenure, resizes map[string][]Event) {
	g := &progress{params: map[string]Event{}, byClient: map[string]Event{}, calls: map[string][]Event{},
		callSpan: map[string]int64{}, occ: map[string][]Occupancy{}}
	var attempts []Event
	started := map[string]Event{} // by holder, key and start
	ended := map[string]bool{}
	putByRVN := map[string]Event{}
	for _, ev := range events {
		switch ev.Kind {
		case Params:
			if _, ok := g.params[ev.Tenure]; !ok {
				g.params[ev.Tenure] = ev
			}
			if _, ok := g.byClient[ev.Client]; !ok {
				g.byClient[ev.Client] = ev
			}
			g.maxLease = max(g.maxLease, ev.Lease)
			if hasFlag(ev, "fair") {
				g.fairGrace = max(g.fairGrace, FairGrace(ev.Retry, ev.Heartbeat))
			}
		case Attempting:
			started[fmt.Sprint(ev.Tenure, " ", ev.Key, " ", ev.T)] = ev
		case Attempted:
			attempts = append(attempts, ev)
			ended[fmt.Sprint(ev.Tenure, " ", ev.Key, " ", ev.T)] = true
		case Call:
			g.calls[ev.Tenure] = append(g.calls[ev.Tenure], ev)
			if ev.Op == "PutItem" && ev.Detail != "" {
				if p, ok := putByRVN[ev.Detail]; !ok || ev.T < p.T {
					putByRVN[ev.Detail] = ev
				}
			}
		case Trouble:
			g.troubles = append(g.troubles, ev)
			switch ev.Note {
			case "kill", "abandon", "closed", "exit":
				g.deaths = append(g.deaths, ev)
			}
			if strings.HasPrefix(ev.Note, "fault-") {
				g.maxHeld = max(g.maxHeld, ev.Token)
			}
		}
	}
	r.MaxHeld = time.Duration(g.maxHeld)
	startsBy := map[string][]int64{}
	for _, a := range started {
		startsBy[a.Tenure] = append(startsBy[a.Tenure], a.T)
	}
	for _, ss := range startsBy {
		slices.Sort(ss)
	}
	if len(attempts) == 0 && len(g.params) == 0 {
		return // a log without attempts on record: nothing to check
	}
	for client, cs := range g.calls {
		slices.SortFunc(cs, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
		p, ok := g.byClient[client]
		var slack int64
		if ok {
			slack = blindSlack(p.Retry, p.Heartbeat)
		}
		for _, c := range cs {
			g.callSpan[client] = max(g.callSpan[client], c.End-c.T+slack)
		}
	}

	// Occupancies of tenures.
	rvns := map[string]bool{}
	for _, t := range tenures {
		rvns[t.RVN] = true
		holder := holderOf(t.ID)
		p, hasParams := g.params[holder]
		names := append(g.names(holder), t.ID)
		from := t.Acquired
		if put, ok := putByRVN[t.RVN]; ok && put.T <= t.Acquired {
			from = put.T
		} else if ss := startsBy[holder]; len(ss) > 0 {
			// The latest attempt of its holder that started before it.
			i, _ := slices.BinarySearch(ss, t.Acquired+1)
			if i > 0 {
				from = min(from, ss[i-1])
			}
		}
		o := Occupancy{Key: t.Key, From: from, Lease: g.lease(p, hasParams), Source: "tenure " + t.ID, landed: t.Acquired}
		switch {
		case t.Released == "ok":
			o.Until = t.ReleasedAt
			o.Source += " (released)"
		case t.Released == "unknown" && hasParams && g.releasedAt(p.Client, t) > 0:
			o.Until = g.releasedAt(p.Client, t)
			o.Source += " (best-effort release seen to succeed)"
		case hasParams && hasFlag(p, "session"):
			o.Stands, o.Until = true, g.death(names)
			o.Source += fmt.Sprintf(" (release %q; a lock on a session: until its client's end)", t.Released)
		case t.Released != "":
			o.Stands, o.Until = true, addSat(t.ReleasedAt, g.maxHeld)
			o.Source += fmt.Sprintf(" (release %q)", t.Released)
		default:
			o.Stands, o.Until = true, g.death(names)
			o.Source += " (no release on record: until its client's end)"
		}
		g.occ[t.Key] = append(g.occ[t.Key], o)
	}
	// Puts that no tenure accounts for.
	for client, cs := range g.calls {
		p, ok := g.byClient[client]
		names := []string{client}
		if ok {
			names = append(names, p.Proc)
		}
		for _, c := range cs {
			if c.Op != "PutItem" || c.Key == "?" || strings.HasPrefix(c.Key, "ddblock_") || rvns[c.Detail] || c.Note == "cond" {
				continue
			}
			o := Occupancy{Key: itemKey(c.Key, c.SortKey), From: c.T, Stands: true, Lease: g.lease(p, ok), landed: c.End}
			switch {
			case c.Note == "ok":
				o.Until = g.death(names)
				o.Source = fmt.Sprintf("a put of %s (rvn %s) that no tenure accounts for", client, c.Detail)
			case ok && hasFlag(p, "session"):
				o.Until = g.death(names)
				o.Source = fmt.Sprintf("a put of %s on a session, its outcome unknown", client)
			default:
				o.Until = addSat(c.End, g.maxHeld)
				o.Source = fmt.Sprintf("a put of %s, its outcome unknown", client)
			}
			if c.Note == "err" {
				o.landed = addSat(c.End, g.maxHeld) // a request held by a fault lands late
			}
			g.occ[o.Key] = append(g.occ[o.Key], o)
		}
	}
	// Attempts never ended, and failed ones of waiters whose calls are
	// not on record while their proxies were faulted.
	for id, a := range started {
		if ended[id] {
			continue
		}
		key := a.Key
		if strings.HasSuffix(key, "/slot-*") {
			key = strings.TrimSuffix(key, "*") + "?" + a.Tenure + fmt.Sprint(a.T)
		}
		p, ok := g.params[a.Tenure]
		death := g.death(g.names(a.Tenure))
		for _, key := range memberKeys(key) { // a set may have written each of its keys
			g.occ[key] = append(g.occ[key], Occupancy{Key: key, From: a.T, Stands: true, Until: death,
				Lease: g.lease(p, ok), Source: "an attempt of " + a.Tenure + " never ended", landed: death})
		}
	}
	acquiredBy := map[string][]int64{} // tenures' acquisitions, by holder
	for _, t := range tenures {
		acquiredBy[holderOf(t.ID)] = append(acquiredBy[holderOf(t.ID)], t.Acquired)
	}
	for _, a := range attempts {
		p, ok := g.params[a.Tenure]
		if !ok || hasFlag(p, "calls") {
			continue
		}
		switch {
		case a.Note == "acquired":
			// Acquired, but no tenure on record (lost before its command
			// started): the lock stood.
			if slices.ContainsFunc(acquiredBy[a.Tenure], func(t int64) bool { return t >= a.T && t <= a.End }) {
				continue
			}
		case a.Note == "ACQUIRE_TIMEOUT":
			// A timed-out wait wrote nothing, unless a put's answer was
			// lost.
			if !g.faulted(a) {
				continue
			}
		}
		key := a.Key
		if strings.HasSuffix(key, "/slot-*") {
			key = strings.TrimSuffix(key, "*") + "?" + a.Tenure + fmt.Sprint(a.T)
		}
		for _, key := range memberKeys(key) {
			g.occ[key] = append(g.occ[key], Occupancy{Key: key, From: a.T, Stands: true, Until: addSat(a.End, g.maxHeld),
				Lease: g.lease(p, ok), Source: fmt.Sprintf("an attempt of %s (%s) that may have written, its calls not on record", a.Tenure, a.Note),
				landed: addSat(a.End, g.maxHeld)})
		}
	}

	// An item stands no longer once a tenure of its key put its own
	// after the item's write had surely landed: that put was
	// conditioned on the item being absent, released, or expired by its
	// lease. (A tenure's occupancy may begin before its write landed:
	// only one that began after counts.)
	for key, occs := range g.occ {
		var starts []int64
		for _, o := range occs {
			if strings.HasPrefix(o.Source, "tenure ") {
				starts = append(starts, o.From)
			}
		}
		slices.Sort(starts)
		for i := range occs {
			if !occs[i].Stands {
				continue
			}
			if j, _ := slices.BinarySearch(starts, max(occs[i].From, occs[i].landed)+1); j < len(starts) && occs[i].landed < math.MaxInt64 {
				occs[i].Taken = starts[j]
			}
		}
		g.occ[key] = occs
	}

	// Every attempt that ended without the lock.
	r.Progress = map[string]KindProgress{}
	slices.SortFunc(attempts, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	for _, a := range attempts {
		p, ok := g.params[a.Tenure]
		kind := progressKind(a.Tenure)
		if ok && hasFlag(p, "cli") {
			kind = "ddblock-run:" + kind
		}
		kp := r.Progress[kind]
		kp.Attempts++
		switch a.Note {
		case "acquired":
			kp.Acquired++
			r.Progress[kind] = kp
			continue
		case "ACQUIRE_TIMEOUT":
			kp.Timeouts++
		default:
			kp.OtherFailures++
		}
		if !ok {
			r.Progress[kind] = kp
			r.Problems = append(r.Problems, "an attempt of "+a.Tenure+", which logged no params")
			continue
		}
		fair := hasFlag(p, "fair")
		bound, terms := ProgressBound(p.Retry, p.Heartbeat)
		if fair {
			bound, terms = FairProgressBound(p.Retry, p.Heartbeat, max(g.fairGrace, FairGrace(p.Retry, p.Heartbeat)))
		}
		covered, around := g.covered(a, r.Limits, resizes)
		blind := g.blind(a, p)
		var best ProgressViolation
		free := func(from, to int64) {
			if to <= from {
				return
			}
			seen := time.Duration(to - from - overlap(blind, from, to))
			if seen > best.Free || best.FreeTo == 0 {
				best.FreeFrom, best.FreeTo, best.Free = from, to, seen
			}
		}
		at := a.T
		for _, c := range covered {
			if c.from > at {
				free(at, min(c.from, a.End))
			}
			at = max(at, c.to)
			if at >= a.End {
				break
			}
		}
		if at < a.End {
			free(at, a.End)
		}
		r.ProgressChecked++
		if best.Free > kp.LongestFree {
			kp.LongestFree, kp.Bound = best.Free, bound
		}
		if best.Free > bound {
			kp.Violations++
			v := best
			v.Holder, v.Kind, v.Key, v.Outcome, v.Start, v.End, v.Fair, v.Bound, v.Terms, v.Around =
				a.Tenure, kind, a.Key, a.Note, a.T, a.End, fair, bound, terms, around
			if fair {
				r.FairProgressViolations = append(r.FairProgressViolations, v)
			} else {
				r.ProgressViolations = append(r.ProgressViolations, v)
			}
		}
		r.Progress[kind] = kp
	}
}

// releasedAt is when the best-effort release of tenure t by client was
// seen to succeed: the client's last release of the item (a delete, or
// an update that marks it released; a heartbeat is neither) sent
// between the tenure's end and its release record, if that returned
// success; 0 when not seen.
func (g *progress) releasedAt(client string, t *Tenure) int64 {
	if t.EndReason == "" || t.ReleasedAt == 0 {
		return 0
	}
	pk, sk := keyItem(t.Key)
	var last *Event
	for i, c := range g.calls[client] {
		if c.Detail == "release" && c.Key == pk && c.SortKey == sk && c.T >= t.End && c.End <= t.ReleasedAt {
			last = &g.calls[client][i]
		}
	}
	if last == nil || last.Note != "ok" {
		return 0
	}
	return last.End
}

// faulted reports whether the fault proxy of an attempt's holder
// injected faults during the attempt.
func (g *progress) faulted(a Event) bool {
	names := g.names(a.Tenure)
	for _, x := range g.troubles {
		if strings.HasPrefix(x.Note, "fault-") && x.T <= a.End && x.End >= a.T && matches(x.Tenure, names) {
			return true
		}
	}
	return false
}

// covered returns the merged stretches of an attempt's wait during which
// its key (or, for a semaphore, enough of its group's slots) was
// occupied, and the occupancies near the wait.
func (g *progress) covered(a Event, limits map[string]int, resizes map[string][]Event) ([]interval, []Occupancy) {
	near := func(o Occupancy) bool {
		return o.From <= a.End+int64(time.Second) && o.EndFor(a.T) >= a.T-int64(time.Second)
	}
	var around []Occupancy
	clip := func(o Occupancy) interval {
		return interval{max(o.From, a.T), min(o.EndFor(a.T), a.End)}
	}
	group, isGroup := strings.CutSuffix(a.Key, "/slot-*")
	if !isGroup {
		// A set stands free only while every one of its keys does.
		var iv []interval
		for _, key := range memberKeys(a.Key) {
			for _, o := range g.occ[key] {
				iv = append(iv, clip(o))
				if near(o) {
					around = append(around, o)
				}
			}
		}
		return merge(iv), sortAround(around)
	}
	// A semaphore: sweep the slots' merged occupancies against the
	// smallest limit in force.
	type edge struct {
		t     int64
		delta int
		limit int // for a limit change, the limit from then on; else 0
	}
	var edges []edge
	for key, occs := range g.occ {
		if grp, ok := SlotGroup(key); !ok || grp != group {
			continue
		}
		var iv []interval
		for _, o := range occs {
			iv = append(iv, clip(o))
			if near(o) {
				around = append(around, o)
			}
		}
		for _, x := range merge(iv) {
			edges = append(edges, edge{t: x.from, delta: 1}, edge{t: x.to, delta: -1})
		}
	}
	limit := limits[group]
	if limit < 1 {
		limit = 1
	}
	for _, ch := range smallestLimits(limit, resizes[group]) {
		edges = append(edges, edge{t: ch.t, limit: ch.limit})
	}
	// At equal times, ends first, then limit changes, then starts: a
	// stretch covered is one with no gap.
	slices.SortStableFunc(edges, func(x, y edge) int {
		return cmp.Or(cmp.Compare(x.t, y.t), cmp.Compare(x.delta, y.delta))
	})
	var out []interval
	n, since := 0, int64(0)
	for _, e := range edges {
		was := n >= limit
		if e.limit > 0 {
			limit = e.limit
		}
		n += e.delta
		switch now := n >= limit; {
		case now && !was:
			since = e.t
		case !now && was:
			out = append(out, interval{since, e.t})
		}
	}
	if n >= limit {
		out = append(out, interval{since, a.End})
	}
	return merge(out), sortAround(around)
}

func sortAround(around []Occupancy) []Occupancy {
	slices.SortFunc(around, func(x, y Occupancy) int { return cmp.Compare(x.From, y.From) })
	if len(around) > 12 {
		around = around[len(around)-12:]
	}
	return around
}

// smallestLimits is limitChanges with, while a resize is in flight or
// failed, the smaller number in force: for progress, a group counts as
// full when it may be.
func smallestLimits(declared int, evs []Event) []limitChange {
	out := limitsInForce(declared, evs, func(a, b int) int { return min(a, b) })
	for i := range out {
		out[i].limit = max(out[i].limit, 1)
	}
	return out
}

// blind returns the merged stretches during which the waiter of attempt
// a could not look: its client's calls on the key in flight, and after
// a failed one; its process stalled; for a waiter whose calls are not on
// record, its proxy's faults.
func (g *progress) blind(a Event, p Event) []interval {
	var iv []interval
	slack := blindSlack(p.Retry, p.Heartbeat)
	pks := []string{strings.TrimSuffix(a.Key, "/slot-*")}
	if !strings.HasSuffix(a.Key, "/slot-*") {
		pks = pks[:0]
		for _, key := range memberKeys(a.Key) {
			pk, _ := keyItem(key)
			pks = append(pks, pk)
		}
	}
	onKey := func(k string) bool {
		for _, pk := range pks {
			if k == pk || k == "ddblock_line#"+pk || isTicketOf(k, pk) {
				return true
			}
		}
		return k == "?" || strings.HasPrefix(k, "ddblock_session#")
	}
	if hasFlag(p, "calls") {
		cs := g.calls[p.Client]
		i, _ := slices.BinarySearchFunc(cs, a.T-g.callSpan[p.Client], func(c Event, t int64) int { return cmp.Compare(c.T, t) })
		for ; i < len(cs) && cs[i].T <= a.End; i++ {
			c := cs[i]
			if !onKey(c.Key) {
				continue
			}
			end := c.End
			if c.Note == "err" {
				end += slack
			}
			iv = append(iv, interval{c.T, end})
		}
	}
	names := g.names(a.Tenure)
	for _, x := range g.troubles {
		if x.End < a.T || x.T > a.End || !matches(x.Tenure, names) {
			continue
		}
		switch {
		case x.Note == "stall" || x.Note == "startup":
			iv = append(iv, interval{x.T, x.End})
		case strings.HasPrefix(x.Note, "fault-") && !hasFlag(p, "calls"):
			iv = append(iv, interval{x.T, x.End + slack})
		}
	}
	return merge(iv)
}

// isTicketOf reports whether item key k is a fair waiter's ticket in the
// line of partition key pk ("ddblock_wait#" GEN "#" NUMBER "#" pk).
func isTicketOf(k, pk string) bool {
	rest, ok := strings.CutPrefix(k, "ddblock_wait#")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, "#") // the generation
	if !ok {
		return false
	}
	_, lock, ok := strings.Cut(rest, "#") // the number
	return ok && lock == pk
}
