package ddblock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The write gate: guarded writes pass freely until a heartbeat holds it;
// then new ones wait until it lets go, and the heartbeat hears when those
// already in flight have finished.
func TestWriteGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g writeGate
		ctx := context.Background()
		for range 2 {
			if waited, err := g.enter(ctx); waited || err != nil {
				t.Fatalf("enter on an open gate: waited %v, err %v", waited, err)
			}
		}
		drained, release := g.hold()
		select {
		case <-drained:
			t.Fatal("drained with two writes in flight")
		default:
		}
		entered := make(chan bool)
		go func() {
			waited, err := g.enter(ctx)
			if err != nil {
				t.Errorf("enter: %v", err)
			}
			entered <- waited
		}()
		// A write that gives up while the gate is held says so.
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := g.enter(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("enter with a context that ends while held: %v", err)
		}
		g.leave()
		synctest.Wait()
		select {
		case <-drained:
			t.Fatal("drained with one write still in flight")
		default:
		}
		g.leave()
		synctest.Wait()
		select {
		case <-drained:
		default:
			t.Fatal("not drained once the writes in flight finished")
		}
		select {
		case <-entered:
			t.Fatal("a write entered while the heartbeat held the gate")
		default:
		}
		release()
		if waited := <-entered; !waited {
			t.Error("the held-back write did not say it waited")
		}
		g.leave()
		// Drained at once when nothing is in flight.
		drained, release = g.hold()
		select {
		case <-drained:
		default:
			t.Fatal("an idle gate is not drained at once")
		}
		release()
		if g.writes != 0 || g.held != nil || g.drained != nil {
			t.Errorf("gate not back to rest: %d writes, held %v, drained %v", g.writes, g.held != nil, g.drained != nil)
		}
	})
}
