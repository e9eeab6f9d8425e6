package ddblock

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ddblock/ddblock/internal/wire"
)

// The lock item's attribute names are internal/wire's, which owns every
// request the client sends; these are the package's shorthands for them.
const (
	attrOwnerName     = wire.AttrOwnerName
	attrLeaseDuration = wire.AttrLeaseDuration
	attrRVN           = wire.AttrRVN
	attrFencingToken  = wire.AttrFencingToken
	attrReleased      = wire.AttrReleased
	attrHeartbeatTime = wire.AttrHeartbeatTime
	attrSession       = wire.AttrSession
	attrSessionLease  = wire.AttrSessionLease
	attrIsSession     = wire.AttrIsSession
	attrTenure        = wire.AttrTenure
)

func isLockAttribute(name string) bool { return wire.IsLockAttribute(name) }

// LockInfo is a lock as stored in the table, whoever holds it: what
// Python calls BaseDynamoDBLock.
type LockInfo struct {
	PartitionKey string
	SortKey      string
	// OwnerName identifies the holder.
	OwnerName string
	// LeaseDuration is how long the holder may stay silent before others
	// may take the lock over.
	LeaseDuration time.Duration
	// RecordVersionNumber changes with every acquire and heartbeat.
	RecordVersionNumber string
	// ExpiryTime is the TTL attribute: when DynamoDB may delete the item.
	// It never decides a lease.
	ExpiryTime time.Time
	// AdditionalAttributes are the application's data stored with the lock.
	AdditionalAttributes map[string]types.AttributeValue
	// FencingToken is the number of acquisitions of the key that wrote
	// it, or 0 when the item carries none (see [Options.FencingTokens]).
	FencingToken int64
	// Released is true for an item kept after its release (see
	// [Options.KeepReleasedItems]): nobody holds it.
	Released bool
	// HeartbeatTime is the holder's wall clock at its last write, when
	// the holder stamps it (see [Options.MaxClockSkew]); zero otherwise.
	HeartbeatTime time.Time
	// Session is set on a lock attached to its holder's session (see
	// [Options.SessionLease]): the lock item is written once, and the
	// holder keeps the session item alive instead. Nil otherwise.
	Session *SessionInfo
	// IsSession is true for a session item itself: the item a client
	// with [Options.SessionLease] heartbeats for all its locks.
	IsSession bool
	// Tenure identifies one acquisition: ddblock writes a new random
	// value each time it takes the lock and keeps it through the
	// holder's heartbeats, unlike RecordVersionNumber. Empty on items
	// written by python_dynamodb_lock. A guarded write (see
	// [Lock.GuardedWrite]) is conditioned on it.
	Tenure string
}

// SessionInfo is the session a lock is attached to.
type SessionInfo struct {
	// PartitionKey is the session item's partition key
	// ("ddblock_session#" and a random identifier); its sort key is
	// [DefaultSortKey], or none on a table keyed by the partition key
	// alone.
	PartitionKey string
	// LeaseDuration is the session's lease: how long others must see the
	// session item unchanged (or gone) before taking its locks over.
	LeaseDuration time.Duration
	// Item is the session item as read with the lock by [Client.GetLock]
	// and [Client.ListLocks]; nil when the session item is gone (ended,
	// removed, or overwritten by someone else), and then the lock is free
	// to take once a waiter has seen it so for LeaseDuration. Its
	// RecordVersionNumber changes at every heartbeat of the holder, and
	// its HeartbeatTime, when stamped, says when the last one was
	// written. Always nil in the lock's own [Lock.Info].
	Item *LockInfo
}

// ID returns Python's unique identifier of a lock:
// quote(partition key) + "|" + quote(sort key).
func (i *LockInfo) ID() string {
	if i == nil {
		return ""
	}
	return lockID(i.PartitionKey, i.SortKey)
}

func lockID(pk, sk string) string { return pyQuote(pk) + "|" + pyQuote(sk) }

// pyQuote is Python's urllib.parse.quote with its default safe set: it
// keeps letters, digits, "_.-~" and "/", and escapes every other byte of
// the UTF-8 form as %XX.
func pyQuote(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '.', c == '-', c == '~', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

// formatLease writes a lease in seconds: whole seconds as an integer
// ("30"), as Python does; fractions in the shortest decimal that reads
// back as the same float64 ("0.1"). Python writes the float's full binary
// expansion there; both read back as the same number.
func formatLease(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// parseLease reads a lease written by anyone: any DynamoDB number of
// seconds, from "30" to "0.1000000000000000055511151231257827021181583404541015625".
func parseLease(s string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxLease.Seconds() {
		return 0, false
	}
	return time.Duration(math.Round(f * float64(time.Second))), true
}

// parseEpochSeconds reads the TTL attribute: a number of epoch seconds,
// whole as Python writes it, fractional if someone else wrote it.
func parseEpochSeconds(s string) (time.Time, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > 1e11 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}

// itemCodec turns lock items into LockInfo and back, under the client's
// attribute names.
type itemCodec struct {
	pk, sk, ttl string
}

func (c itemCodec) reserved(name string) bool {
	return name == c.pk || (name == c.sk && c.sk != "") || name == c.ttl || isLockAttribute(name)
}

// key returns the item's primary key; a codec with no sort key name is
// for a table keyed by the partition key alone.
func (c itemCodec) key(pk, sk string) map[string]types.AttributeValue {
	return c.table("").Key(pk, sk)
}

// table returns the codec's names on the wire, for the table called name.
func (c itemCodec) table(name string) wire.Table {
	return wire.Table{Name: name, PK: c.pk, SK: c.sk, TTL: c.ttl}
}

// wire returns the client's table and names, to build its requests with.
func (c *Client) wire() wire.Table { return c.codec.table(c.opts.TableName) }

// encode returns the item for a lock taken with the given version number
// and expiry. Additional attributes go in first so that they can never
// overwrite the lock's own (they are refused earlier anyway).
func (c itemCodec) encode(info *LockInfo) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(info.AdditionalAttributes)+6)
	for k, v := range info.AdditionalAttributes {
		item[k] = v
	}
	for k, v := range c.key(info.PartitionKey, info.SortKey) {
		item[k] = v
	}
	item[attrOwnerName] = &types.AttributeValueMemberS{Value: info.OwnerName}
	item[attrLeaseDuration] = &types.AttributeValueMemberN{Value: formatLease(info.LeaseDuration)}
	item[attrRVN] = &types.AttributeValueMemberS{Value: info.RecordVersionNumber}
	item[c.ttl] = &types.AttributeValueMemberN{Value: formatEpoch(info.ExpiryTime)}
	if info.FencingToken > 0 {
		item[attrFencingToken] = &types.AttributeValueMemberN{Value: strconv.FormatInt(info.FencingToken, 10)}
	}
	if !info.HeartbeatTime.IsZero() {
		item[attrHeartbeatTime] = &types.AttributeValueMemberN{Value: formatEpochMillis(info.HeartbeatTime)}
	}
	if info.Session != nil {
		item[attrSession] = &types.AttributeValueMemberS{Value: info.Session.PartitionKey}
		item[attrSessionLease] = &types.AttributeValueMemberN{Value: formatLease(info.Session.LeaseDuration)}
	}
	if info.IsSession {
		item[attrIsSession] = &types.AttributeValueMemberBOOL{Value: true}
	}
	if info.Tenure != "" {
		item[attrTenure] = &types.AttributeValueMemberS{Value: info.Tenure}
	}
	return item
}

// decode reads a lock item written by any client. A missing or mistyped
// attribute gives an INVALID_ITEM error naming it; nothing panics.
func (c itemCodec) decode(item map[string]types.AttributeValue) (*LockInfo, error) {
	info := &LockInfo{}
	str := func(name string, dst *string) error {
		v, ok := item[name].(*types.AttributeValueMemberS)
		if !ok {
			return c.invalid(item, name, "missing, or not a string")
		}
		*dst = v.Value
		return nil
	}
	num := func(name string) (string, error) {
		v, ok := item[name].(*types.AttributeValueMemberN)
		if !ok {
			return "", c.invalid(item, name, "missing, or not a number")
		}
		return v.Value, nil
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{
		{c.pk, &info.PartitionKey},
		{c.sk, &info.SortKey},
		{attrOwnerName, &info.OwnerName},
		{attrRVN, &info.RecordVersionNumber},
	} {
		if f.name == "" {
			continue // no sort key
		}
		if err := str(f.name, f.dst); err != nil {
			return nil, err
		}
	}
	lease, err := num(attrLeaseDuration)
	if err != nil {
		return nil, err
	}
	var ok bool
	if info.LeaseDuration, ok = parseLease(lease); !ok {
		return nil, c.invalid(item, attrLeaseDuration, "not a lease in seconds between 0 and one year: "+truncate(lease, 64))
	}
	// The TTL attribute is only for DynamoDB's clean-up: a lock without
	// one is still a lock.
	if _, present := item[c.ttl]; present {
		expiry, err := num(c.ttl)
		if err != nil {
			return nil, err
		}
		if info.ExpiryTime, ok = parseEpochSeconds(expiry); !ok {
			return nil, c.invalid(item, c.ttl, "not epoch seconds: "+truncate(expiry, 64))
		}
	}
	if _, present := item[attrFencingToken]; present {
		token, err := num(attrFencingToken)
		if err != nil {
			return nil, err
		}
		if info.FencingToken, err = strconv.ParseInt(strings.TrimSpace(token), 10, 64); err != nil || info.FencingToken < 0 {
			return nil, c.invalid(item, attrFencingToken, "not a whole number of acquisitions: "+truncate(token, 64))
		}
	}
	if v, present := item[attrReleased]; present {
		b, ok := v.(*types.AttributeValueMemberBOOL)
		if !ok {
			return nil, c.invalid(item, attrReleased, "not a boolean")
		}
		info.Released = b.Value
	}
	if _, present := item[attrHeartbeatTime]; present {
		ms, err := num(attrHeartbeatTime)
		if err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(ms), 10, 64)
		if err != nil || n < 0 || n > 1e14 {
			return nil, c.invalid(item, attrHeartbeatTime, "not epoch milliseconds: "+truncate(ms, 64))
		}
		info.HeartbeatTime = time.UnixMilli(n)
	}
	if _, present := item[attrSession]; present {
		info.Session = &SessionInfo{}
		if err := str(attrSession, &info.Session.PartitionKey); err != nil {
			return nil, err
		}
		if !isSessionKey(info.Session.PartitionKey) {
			return nil, c.invalid(item, attrSession, "does not name a session: "+truncate(info.Session.PartitionKey, 64))
		}
		lease, err := num(attrSessionLease)
		if err != nil {
			return nil, err
		}
		if info.Session.LeaseDuration, ok = parseLease(lease); !ok {
			return nil, c.invalid(item, attrSessionLease, "not a lease in seconds between 0 and one year: "+truncate(lease, 64))
		}
	}
	if _, present := item[attrTenure]; present {
		if err := str(attrTenure, &info.Tenure); err != nil {
			return nil, err
		}
	}
	if v, present := item[attrIsSession]; present {
		b, ok := v.(*types.AttributeValueMemberBOOL)
		if !ok {
			return nil, c.invalid(item, attrIsSession, "not a boolean")
		}
		info.IsSession = b.Value
	}
	for k, v := range item {
		if c.reserved(k) {
			continue
		}
		if info.AdditionalAttributes == nil {
			info.AdditionalAttributes = make(map[string]types.AttributeValue)
		}
		info.AdditionalAttributes[k] = v
	}
	return info, nil
}

func (c itemCodec) invalid(item map[string]types.AttributeValue, attr, msg string) *Error {
	e := &Error{Code: CodeInvalidItem, Message: "attribute " + strconv.Quote(attr) + " " + msg}
	if v, ok := item[c.pk].(*types.AttributeValueMemberS); ok {
		e.PartitionKey = v.Value
	}
	if v, ok := item[c.sk].(*types.AttributeValueMemberS); ok {
		e.SortKey = v.Value
	}
	return e
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func formatEpoch(t time.Time) string { return wire.Epoch(t) }

func formatEpochMillis(t time.Time) string { return wire.EpochMillis(t) }

// readItem reads a lock item with a strongly consistent GetItem; nil
// when there is none.
func (c *Client) readItem(ctx context.Context, pk, sk string) (*LockInfo, error) {
	out, err := c.ddb.GetItem(ctx, c.wire().Get(pk, sk), c.callOpts("GetItem")...)
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return c.codec.decode(out.Item)
}
