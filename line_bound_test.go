package ddblock_test

import (
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// The line's bound and grace are stated three times: in line.go, in
// doc/waiting.md ("2 × G + 3 × P"), and in the checker that holds every
// fair waiter of the reliability runs to them. They must be one.
func TestLineBoundIsTheCheckersAndTheDocs(t *testing.T) {
	for _, c := range []struct{ retry, heartbeat time.Duration }{
		{100 * time.Millisecond, time.Second},
		{5 * time.Second, 5 * time.Second},
		{15 * time.Millisecond, 100 * time.Millisecond},
		{time.Second, 200 * time.Millisecond},
	} {
		g := ddblock.FairGraceForTest(c.retry, c.heartbeat)
		if cg := mutexcheck.FairGrace(c.retry, c.heartbeat); g != cg {
			t.Errorf("retry %v, heartbeat %v: grace %v here, %v in the checker", c.retry, c.heartbeat, g, cg)
		}
		if g != max(3*c.retry, 2*c.heartbeat)+time.Second {
			t.Errorf("retry %v, heartbeat %v: grace %v; doc/waiting.md says max(3 retry, 2 heartbeat) + 1 s", c.retry, c.heartbeat, g)
		}
		b := ddblock.LineBoundForTest(g, c.retry)
		if cb := mutexcheck.LineBound(g, c.retry); b != cb {
			t.Errorf("grace %v, retry %v: bound %v here, %v in the checker", g, c.retry, b, cb)
		}
		if b != 2*g+3*c.retry {
			t.Errorf("grace %v, retry %v: bound %v; doc/waiting.md says 2 G + 3 P", g, c.retry, b)
		}
	}
	// The doc's worked figures.
	if g := ddblock.FairGraceForTest(5*time.Second, 5*time.Second); g != 16*time.Second || ddblock.LineBoundForTest(g, 5*time.Second) != 47*time.Second {
		t.Errorf("defaults: grace %v, bound %v; doc/waiting.md says 16 s and 47 s", g, ddblock.LineBoundForTest(g, 5*time.Second))
	}
	if g := ddblock.FairGraceForTest(time.Second, time.Second); g != 4*time.Second || ddblock.LineBoundForTest(g, time.Second) != 11*time.Second {
		t.Errorf("1 s periods: grace %v, bound %v; doc/waiting.md says 4 s and 11 s", g, ddblock.LineBoundForTest(g, time.Second))
	}
}
