package ddblock

import (
	"fmt"
	"testing"
	"time"
)

func TestObservationsBounded(t *testing.T) {
	o := newObservations(3)
	for i := range 5 {
		o.remember(fmt.Sprint(i), &LockInfo{RecordVersionNumber: fmt.Sprint("v", i)}, time.Duration(i))
	}
	if o.len() != 3 {
		t.Fatalf("%d remembered; want 3", o.len())
	}
	if info, _ := o.get("0"); info != nil {
		t.Error("the oldest was not forgotten")
	}
	// Using an entry keeps it: "2" survives the next addition, "3" does not.
	if info, at := o.get("2"); info == nil || at != 2 {
		t.Fatalf("get(2) = %v, %v", info, at)
	}
	o.remember("5", &LockInfo{}, 5)
	if info, _ := o.get("3"); info != nil {
		t.Error("3 should have been forgotten")
	}
	if info, _ := o.get("2"); info == nil {
		t.Error("2 was used recently and should be kept")
	}
	o.forget("2")
	if info, _ := o.get("2"); info != nil || o.len() != 2 {
		t.Errorf("forget: %v, len %d", info, o.len())
	}
}

// A session is dead once one version stood for the lease, from the reply
// to the first read that showed it to the sending of a later one; a new
// version starts the watch again; the judgement is final; the delete of
// its item is claimed once, and never for an item seen gone.
func TestSessionObservations(t *testing.T) {
	const lease = 10 * time.Second
	s := time.Second
	o := newObservations(10)
	if o.sessionDead("s", lease) {
		t.Fatal("dead before any look")
	}
	o.seeSession("s", "v1", 0, 2*s) // sent at 0, answered at 2 s
	o.seeSession("s", "v1", 11*s, 12*s)
	if o.sessionDead("s", lease) {
		t.Error("dead after 9 s from the first reply to the last sending")
	}
	o.seeSession("s", "v1", 12*s, 13*s)
	if !o.sessionDead("s", lease) {
		t.Error("not dead after 10 s")
	}
	if o.sessionDead("s", 2*lease) {
		t.Error("dead for a longer lease than it was watched for")
	}

	o.seeSession("t", "v1", 0, s)
	o.seeSession("t", "v2", 5*s, 6*s) // a heartbeat landed
	o.seeSession("t", "v2", 15*s, 16*s)
	if o.sessionDead("t", lease) {
		t.Error("t dead 9 s after its new version was first seen")
	}
	// A late reply to an older read makes it start afresh: never dead
	// sooner.
	o.seeSession("t", "v1", 4*s, 17*s)
	o.seeSession("t", "v1", 20*s, 21*s)
	if o.sessionDead("t", lease) {
		t.Error("t dead after an out-of-order reply")
	}

	// Once dead, always dead: whatever is read later.
	o.seeSession("s", absentSession, 30*s, 31*s)
	o.seeSession("s", "v9", 40*s, 41*s)
	if !o.sessionDead("s", lease) {
		t.Error("s no longer dead after later reads")
	}
	if v, ok := o.claimSessionDelete("s"); !ok || v != "v1" {
		t.Errorf("claim = %q, %v; want v1, the judged version", v, ok)
	}
	if _, ok := o.claimSessionDelete("s"); ok {
		t.Error("claimed twice")
	}
	if _, ok := o.claimSessionDelete("t"); ok {
		t.Error("claimed a session not judged dead")
	}

	o.seeSession("gone", absentSession, 0, s)
	o.seeSession("gone", absentSession, 11*s, 12*s)
	if !o.sessionDead("gone", lease) {
		t.Error("a session seen gone for its lease is not dead")
	}
	if _, ok := o.claimSessionDelete("gone"); ok {
		t.Error("claimed the delete of an item seen gone")
	}

	o.markSessionDead("fast", "v3", lease)
	if !o.sessionDead("fast", lease) {
		t.Error("a session judged dead by its stamp is not dead")
	}
	if v, ok := o.claimSessionDelete("fast"); !ok || v != "v3" {
		t.Errorf("claim = %q, %v; want v3", v, ok)
	}
}
