package mutexcheck

import (
	"testing"
	"time"
)

// A set stands free only while every one of its keys does: a set waiter
// that gave up while one key stood free and another was held made no
// progress it could have made; one that gave up while all stood free
// beyond the bound did.
func TestProgressOfSets(t *testing.T) {
	for _, tc := range []struct {
		name       string
		bHeldUntil int64 // b's holder releases then; a is released at 1000 ms
		want       int
	}{
		{"one key held throughout", -1, 0},
		{"both free beyond the bound", 1000 * ms, 1},
		{"both free within the bound", 3000*ms - int64(bound15) + ms, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := progressOf(t, func(l *Log) {
				held(l, "a", "k1", 0, 1000*ms)
				held(l, "b", "k2", 0, tc.bHeldUntil)
				waited(l, "w", SetKey([]string{"k1", "k2"}), 10*ms, 3000*ms)
			})
			if got := len(r.ProgressViolations); got != tc.want {
				t.Fatalf("%d progress violations, want %d:\n%s", got, tc.want, r.Summary())
			}
			if tc.want == 1 {
				if v := r.ProgressViolations[0]; v.Free != time.Duration(3000*ms-tc.bHeldUntil) {
					t.Errorf("free %v; want %v", v.Free, time.Duration(3000*ms-tc.bHeldUntil))
				}
			}
		})
	}
}

// An attempt at a set that never ended (its process was killed) may have
// written each of its keys: a waiter of one of them is not blamed for
// waiting while that item stands.
func TestProgressSetAttemptNeverEnded(t *testing.T) {
	r := progressOf(t, func(l *Log) {
		l.Params("s", "s", "p-s", 0, lease600, retry15, hb100, "calls")
		l.Attempting("s", SetKey([]string{"k1", "k2"}), 0)
		l.Trouble("p-s", 50*ms, 50*ms, "death", 0)
		waited(l, "w", "k2", 10*ms, 50*ms+int64(lease600))
	})
	if got := len(r.ProgressViolations); got != 0 {
		t.Fatalf("%d progress violations, want 0:\n%s", got, r.Summary())
	}
}
