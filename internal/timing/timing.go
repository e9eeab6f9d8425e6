// Package timing derives the durations of a lock client that depend on
// one another (heartbeat period, safe period, lease, TTL expiry period)
// from those given, in python_dynamodb_lock's proportions: the rule
// ddblock.New applies, and the ddblock command's run for its --heartbeat
// and --safe.
package timing

import (
	"math"
	"time"
)

// Durations are the four durations that depend on each other.
type Durations struct {
	HeartbeatPeriod time.Duration
	SafePeriod      time.Duration
	LeaseDuration   time.Duration
	ExpiryPeriod    time.Duration
}

// Origin says how a duration got its value, for error messages: its zero
// value means the duration was given.
type Origin struct {
	// How, when the duration was not given: "the default", or how it
	// was derived ("2/3 of LeaseDuration").
	How string
	// From names the setting it was derived from, if any.
	From string
}

// Derived says whether the duration was derived rather than given.
func (o Origin) Derived() bool { return o.How != "" }

// Note is o for the end of a message about the duration's value.
func (o Origin) Note() string {
	if !o.Derived() {
		return ""
	}
	return " (not set: " + o.How + ")"
}

// Origins are the four durations' origins.
type Origins struct {
	Heartbeat, Safe, Lease, Expiry Origin
}

// Derive returns t with each zero duration derived from the others, in
// python_dynamodb_lock's proportions (5 s heartbeat, 20 s safe period,
// 30 s lease: a sixth and two thirds of the lease), never shorter than
// defaultLease (Python's) unless the lease is given, and says how each
// duration it filled was derived:
//
//   - the lease is LeaseDuration if set; otherwise the longest of
//     defaultLease, 3/2 of SafePeriod if that is set, and 6 times
//     HeartbeatPeriod if that is set;
//   - SafePeriod, if zero, is two thirds of the lease;
//   - HeartbeatPeriod, if zero, is a sixth of the lease, or a quarter of
//     the safe period if that is shorter;
//   - ExpiryPeriod, if zero, is defaultExpiry, or twice the lease if that is
//     longer, so that DynamoDB's TTL never deletes an item before its
//     lease has run out.
//
// So a lease given alone yields Python's proportions, none yields
// Python's defaults, and a heartbeat or safe period that Python would run
// with its 30 s lease keeps that lease, as Python does; a longer one
// stretches the lease to fit. Durations given are kept as they are:
// Derive does not check that they fit together. A negative
// duration is kept, and nothing is derived from it.
func Derive(t Durations, defaultLease, defaultExpiry time.Duration) (Durations, Origins) {
	var w Origins
	lease := t.LeaseDuration
	if lease <= 0 {
		lease = defaultLease
		w.Lease = Origin{How: "the default"}
		if t.SafePeriod > 0 && scale(t.SafePeriod, 3, 2) > lease {
			lease = scale(t.SafePeriod, 3, 2)
			w.Lease = Origin{How: "3/2 of SafePeriod", From: "SafePeriod"}
		}
		if t.HeartbeatPeriod > 0 && scale(t.HeartbeatPeriod, 6, 1) > lease {
			lease = scale(t.HeartbeatPeriod, 6, 1)
			w.Lease = Origin{How: "6 × HeartbeatPeriod", From: "HeartbeatPeriod"}
		}
	}
	if t.LeaseDuration == 0 {
		t.LeaseDuration = lease
	} else {
		w.Lease = Origin{}
	}
	if t.SafePeriod == 0 {
		t.SafePeriod = scale(lease, 2, 3)
		w.Safe = Origin{How: "2/3 of LeaseDuration", From: "LeaseDuration"}
	}
	if t.HeartbeatPeriod == 0 {
		t.HeartbeatPeriod = lease / 6
		w.Heartbeat = Origin{How: "1/6 of LeaseDuration", From: "LeaseDuration"}
		if t.SafePeriod > 0 && t.SafePeriod/4 < t.HeartbeatPeriod {
			t.HeartbeatPeriod = t.SafePeriod / 4
			w.Heartbeat = Origin{How: "1/4 of SafePeriod", From: "SafePeriod"}
		}
	}
	if t.ExpiryPeriod == 0 {
		t.ExpiryPeriod = max(defaultExpiry, scale(lease, 2, 1))
		w.Expiry = Origin{How: "1h or 2 × LeaseDuration, the longer", From: "LeaseDuration"}
	}
	return t, w
}

// scale returns d*num/den for a positive d, or the longest duration when
// that would overflow (a value any check then refuses as too long).
func scale(d time.Duration, num, den int64) time.Duration {
	if int64(d) > math.MaxInt64/num {
		return math.MaxInt64
	}
	return d * time.Duration(num) / time.Duration(den)
}
