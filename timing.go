package ddblock

import (
	"math"
	"time"
)

// Timing holds the four durations of [Options] that depend on each other.
// [New] fills those that no option set with [Timing.Derive]; the ddblock
// command's run uses the same rule for its --heartbeat and --safe.
type Timing struct {
	HeartbeatPeriod time.Duration
	SafePeriod      time.Duration
	LeaseDuration   time.Duration
	ExpiryPeriod    time.Duration
}

// Derive returns t with each zero duration derived from the others, in
// python_dynamodb_lock's proportions (5 s heartbeat, 20 s safe period,
// 30 s lease: a sixth and two thirds of the lease), never shorter than
// Python's default lease unless the lease is given:
//
//   - the lease is LeaseDuration if set; otherwise the longest of 30 s
//     (Python's default), 3/2 of SafePeriod if that is set, and 6 times
//     HeartbeatPeriod if that is set;
//   - SafePeriod, if zero, is two thirds of the lease;
//   - HeartbeatPeriod, if zero, is a sixth of the lease, or a quarter of
//     the safe period if that is shorter;
//   - ExpiryPeriod, if zero, is 1 h, or twice the lease if that is
//     longer, so that DynamoDB's TTL never deletes an item before its
//     lease has run out.
//
// So a lease given alone yields Python's proportions, none yields
// Python's defaults, and a heartbeat or safe period that Python would run
// with its 30 s lease keeps that lease, as Python does; a longer one
// stretches the lease to fit. Durations given are kept as they are:
// Derive does not check that they fit together (New does). A negative
// duration is kept, and nothing is derived from it.
func (t Timing) Derive() Timing {
	d, _ := deriveTiming(t)
	return d
}

// timingOrigin says how a duration got its value, for error messages: its
// zero value means the duration was given.
type timingOrigin struct {
	// how, when the duration was not given: "the default", or how it
	// was derived ("2/3 of LeaseDuration").
	how string
	// from names the setting it was derived from, if any.
	from string
}

func (w timingOrigin) derived() bool { return w.how != "" }

// note is w for the end of a message about the duration's value.
func (w timingOrigin) note() string {
	if !w.derived() {
		return ""
	}
	return " (not set: " + w.how + ")"
}

type timingOrigins struct {
	heartbeat, safe, lease, expiry timingOrigin
}

// deriveTiming is [Timing.Derive], also saying how each duration it
// filled was derived.
func deriveTiming(t Timing) (Timing, timingOrigins) {
	var w timingOrigins
	lease := t.LeaseDuration
	if lease <= 0 {
		lease = DefaultLeaseDuration
		w.lease = timingOrigin{how: "the default"}
		if t.SafePeriod > 0 && scale(t.SafePeriod, 3, 2) > lease {
			lease = scale(t.SafePeriod, 3, 2)
			w.lease = timingOrigin{how: "3/2 of SafePeriod", from: "SafePeriod"}
		}
		if t.HeartbeatPeriod > 0 && scale(t.HeartbeatPeriod, 6, 1) > lease {
			lease = scale(t.HeartbeatPeriod, 6, 1)
			w.lease = timingOrigin{how: "6 × HeartbeatPeriod", from: "HeartbeatPeriod"}
		}
	}
	if t.LeaseDuration == 0 {
		t.LeaseDuration = lease
	} else {
		w.lease = timingOrigin{}
	}
	if t.SafePeriod == 0 {
		t.SafePeriod = scale(lease, 2, 3)
		w.safe = timingOrigin{how: "2/3 of LeaseDuration", from: "LeaseDuration"}
	}
	if t.HeartbeatPeriod == 0 {
		t.HeartbeatPeriod = lease / 6
		w.heartbeat = timingOrigin{how: "1/6 of LeaseDuration", from: "LeaseDuration"}
		if t.SafePeriod > 0 && t.SafePeriod/4 < t.HeartbeatPeriod {
			t.HeartbeatPeriod = t.SafePeriod / 4
			w.heartbeat = timingOrigin{how: "1/4 of SafePeriod", from: "SafePeriod"}
		}
	}
	if t.ExpiryPeriod == 0 {
		t.ExpiryPeriod = max(DefaultExpiryPeriod, scale(lease, 2, 1))
		w.expiry = timingOrigin{how: "1h or 2 × LeaseDuration, the longer", from: "LeaseDuration"}
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
