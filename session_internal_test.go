package ddblock

import (
	"testing"
	"time"
)

// A lock on a session is safe for the safe period after the session's
// last landed heartbeat, however recently the lock itself was written
// (waiters judge the session, not the lock), and never once it has been
// held for a year less the session's lease: its year-long lease and TTL
// would then let others in.
func TestSessionLockSafePeriod(t *testing.T) {
	c := &Client{opts: Options{SafePeriod: 20 * time.Second}}
	s := &session{lease: 30 * time.Second}
	l := &Lock{client: c, session: s, lastHeartbeat: time.Hour}
	for _, tc := range []struct {
		lastGood, now time.Duration
		past          bool
	}{
		{0, time.Hour, true}, // the lock's own write does not count
		{time.Hour - time.Second, time.Hour + 19*time.Second, false},                                          // the session's heartbeat before it does
		{2 * time.Hour, 2*time.Hour + 20*time.Second, false},                                                  // the session's heartbeat counts
		{2 * time.Hour, 2*time.Hour + 21*time.Second, true},                                                   // until the safe period after it
		{time.Hour + sessionLockLease - 31*time.Second, time.Hour + sessionLockLease - 30*time.Second, false}, // a year less a lease: still safe
		{time.Hour + sessionLockLease - 30*time.Second, time.Hour + sessionLockLease - 29*time.Second, true},  // past it: in danger, however fresh the session
	} {
		s.lastGood.Store(int64(tc.lastGood))
		if got := l.pastSafePeriodLocked(tc.now); got != tc.past {
			t.Errorf("session heartbeat at %v, now %v: past the safe period = %v; want %v", tc.lastGood, tc.now, got, tc.past)
		}
	}
}
