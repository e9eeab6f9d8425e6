package clock

import (
	"testing"
	"testing/synctest"
	"time"
)

func TestFake(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := NewFake(start)
	if !f.Now().Equal(start) {
		t.Fatalf("Now = %v; want %v", f.Now(), start)
	}
	m0 := f.Monotonic()
	late, early := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	if f.Timers() != 2 {
		t.Fatalf("%d timers", f.Timers())
	}
	if d, ok := f.NextDeadline(); !ok || d != time.Second {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	f.Advance(1500 * time.Millisecond)
	select {
	case at := <-early.C():
		if !at.Equal(start.Add(time.Second)) {
			t.Errorf("fired at %v", at)
		}
	default:
		t.Fatal("the 1s timer did not fire after 1.5s")
	}
	select {
	case <-late.C():
		t.Fatal("the 2s timer fired after 1.5s")
	default:
	}
	if !late.Stop() || late.Stop() || f.Timers() != 0 {
		t.Error("Stop should remove the timer once")
	}
	f.JumpWall(-time.Hour)
	if got := f.Monotonic() - m0; got != 1500*time.Millisecond {
		t.Errorf("monotonic moved %v; a wall jump must not move it", got)
	}
	if want := start.Add(1500*time.Millisecond - time.Hour); !f.Now().Equal(want) {
		t.Errorf("Now after the jump = %v; want %v", f.Now(), want)
	}
	instant := f.NewTimer(0)
	select {
	case <-instant.C():
	default:
		t.Error("a zero timer should fire at once")
	}
}

// WaitForTimers gives up after its limit with no timer pending, and
// wakes for a timer made while it waits. In a bubble its own wait's
// timer is fake, and synctest.Wait says when it is blocked: no real
// time passes, however loaded the machine.
func TestFakeWaitForTimers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		if err := f.WaitForTimers(1, 10*time.Millisecond); err == nil {
			t.Error("WaitForTimers should time out with no timer pending")
		}
		done := make(chan error, 1)
		go func() { done <- f.WaitForTimers(1, 5*time.Second) }()
		synctest.Wait() // it waits
		select {
		case err := <-done:
			t.Fatalf("WaitForTimers returned %v with no timer pending", err)
		default:
		}
		f.NewTimer(time.Minute)
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
