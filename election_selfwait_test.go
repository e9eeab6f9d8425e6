package ddblock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
)

// A leadership whose context ended while its lock went into danger, and
// whose lock then recovered, is still this client's lock: a Campaign of
// the same Election answers at once that this client holds it, instead
// of waiting on itself while Leader reports it leads.
func TestCampaignNeverWaitsOnItself(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	proxy, ddb := e.proxied()
	clk := fakeClock()
	c := e.clientOn(ddb, ddblock.WithClock(clk))
	el, err := c.NewElection("leader")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := el.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Monotonic()
	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.ServerError, Op: "UpdateItem"})
	drive(t, clk, c, start+25*time.Second) // past the safe period, heartbeats failing
	if lead.Context().Err() == nil {
		t.Fatal("the leadership's context did not end in danger")
	}
	fault.Remove()
	drive(t, clk, c, start+31*time.Second)
	waitFor(t, "recovery", func() bool { return lead.Status() == ddblock.StatusLocked })

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	before := clk.Monotonic()
	_, err = el.Campaign(cctx, "me again")
	if !errors.Is(err, ddblock.CodeAlreadyHeld) {
		t.Fatalf("Campaign while this client's lock is held: %v; want ALREADY_HELD", err)
	}
	if clk.Monotonic() != before {
		t.Errorf("Campaign waited %v of fake time; want an answer at once", clk.Monotonic()-before)
	}
	info, err := el.Leader(ctx)
	if err != nil || info.Value != "me" {
		t.Errorf("Leader = %+v, %v; want the first leadership's value", info, err)
	}
}
