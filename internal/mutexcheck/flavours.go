package mutexcheck

import (
	"time"

	"github.com/ddblock/ddblock"
)

// Flavour is one way of setting up a lock client. The checker mixes
// them, because they take locks over by different rules and must still
// exclude one another.
type Flavour struct {
	Name    string
	Options []ddblock.Option
	// Acquire are options its holders add to every acquire (see Fair).
	Acquire []ddblock.AcquireOption
}

// Fair is fl with fair waiting ([ddblock.WithFairWaiting]) on every
// acquire, named fl's name and "-fair": its holders wait in the keys'
// lines, among holders of every other flavour that do not.
func Fair(fl Flavour) Flavour {
	fl.Name += "-fair"
	fl.Acquire = append(append([]ddblock.AcquireOption(nil), fl.Acquire...), ddblock.WithFairWaiting())
	return fl
}

// Flavours returns the client set-ups a run mixes:
//
//   - "plain": python_dynamodb_lock's behaviour; releases delete the item,
//     and a silent holder is timed out by watching its version number;
//   - "fencing": fencing tokens, which keep released items so that the
//     count lives on;
//   - "fast": fast takeover by wall-clock stamp with maxClockSkew (the
//     processes of one machine share one wall clock), and kept released
//     items;
//   - "session": session leases: the client's locks are written once and
//     kept alive by one session item, taken over only when the session
//     stood still for its lease;
//   - "session-fast": session leases with fast takeover, the stamp on the
//     session item, and fencing tokens.
func Flavours(maxClockSkew time.Duration) []Flavour {
	return []Flavour{
		{Name: "plain"},
		{Name: "fencing", Options: []ddblock.Option{ddblock.WithFencingTokens()}},
		{Name: "fast", Options: []ddblock.Option{ddblock.WithMaxClockSkew(maxClockSkew), ddblock.WithKeepReleasedItems(true)}},
		{Name: "session", Options: []ddblock.Option{ddblock.WithSessionLease()}},
		{Name: "session-fast", Options: []ddblock.Option{ddblock.WithSessionLease(), ddblock.WithMaxClockSkew(maxClockSkew), ddblock.WithFencingTokens()}},
	}
}
