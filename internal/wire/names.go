// Package wire owns every request ddblock sends to DynamoDB: the
// attribute names of a lock item, the expression placeholders and
// condition expressions, one builder per request, and the classification
// of a failed call's error. The library, its tests and the load tool
// build their requests here, so that what goes on the wire is written
// once.
//
// The hot-path conditions are hand-written strings rather than the SDK's
// expression builder, which costs more than the request itself (see
// "Facts measured" in the design notes).
package wire

import (
	"strconv"
	"time"
)

// The attribute names python_dynamodb_lock writes; the key and TTL names
// are settings of the client.
const (
	AttrOwnerName     = "owner_name"
	AttrLeaseDuration = "lease_duration"
	AttrRVN           = "record_version_number"
)

// ddblock's own attributes, written only by the opt-in features that need
// them; python_dynamodb_lock keeps them through its heartbeats and drops
// them when it overwrites the item (see doc/migrating-from-python.md).
// They carry a "ddblock_" prefix so that no Python application's
// additional attribute is mistaken for one: Python gives every other name
// to the application.
const (
	// AttrFencingToken: the number of acquisitions of this key (N).
	AttrFencingToken = "ddblock_fencing_token"
	// AttrReleased: true on an item kept after its release (BOOL).
	AttrReleased = "ddblock_released"
	// AttrHeartbeatTime: the holder's wall clock at its last write, in
	// epoch milliseconds (N).
	AttrHeartbeatTime = "ddblock_heartbeat_ms"
	// AttrSession, on a lock attached to a session: the session item's
	// partition key (S).
	AttrSession = "ddblock_session"
	// AttrSessionLease, on a lock attached to a session: the session's
	// lease in seconds (N), for a waiter that finds the session gone.
	AttrSessionLease = "ddblock_session_lease"
	// AttrIsSession: true on a session item (BOOL). An item at a session
	// key without it was overwritten by someone else, and stands for no
	// session.
	AttrIsSession = "ddblock_is_session"
	// AttrTenure: a random identifier written at each acquisition and
	// kept by every heartbeat, so that it names one tenure of one holder
	// (S). A guarded write is conditioned on it.
	AttrTenure = "ddblock_tenure"
	// AttrLeaderValue holds a leader's value in its election's lock item
	// (S). It is an attribute like an application's own
	// (python_dynamodb_lock keeps it through its heartbeats), with
	// ddblock's prefix so that no application attribute is taken for it.
	AttrLeaderValue = "ddblock_leader"
)

// The attributes of the items that are not lock items: a semaphore's
// metadata item and a fair-waiting line.
const (
	// AttrSemaphoreSlots holds N in a semaphore's metadata item (N).
	AttrSemaphoreSlots = "ddblock_semaphore_slots"
	// AttrSemaphoreResizes counts the resizes of a semaphore, absent
	// until the first (N): the version a resize is conditioned on.
	AttrSemaphoreResizes = "ddblock_semaphore_resizes"
	// AttrSemaphoreSpan is how many slot indexes may be held while a
	// shrink drains (N); absent otherwise.
	AttrSemaphoreSpan = "ddblock_semaphore_span"
	// LineKeyPrefix starts every line counter's partition key (the lock's
	// partition key follows), TicketKeyPrefix every ticket's (the line's
	// generation, the number and the lock's partition key follow).
	LineKeyPrefix   = "ddblock_line#"
	TicketKeyPrefix = "ddblock_wait#"
	// A line's counter item: its generation (S, fresh at each creation),
	// the last number handed out and the number whose turn it is (N).
	AttrLineGen     = "ddblock_line_gen"
	AttrLineNext    = "ddblock_line_next"
	AttrLineServing = "ddblock_line_serving"
	// A ticket item: the waiter's id, owner name, arrival (Unix ms, shown
	// only), grace (ms) and the partition key of its client's session;
	// a set's ticket (AcquireLocks) also how long the set may wait in the
	// lines of its later keys (ms), which readers that do not know it
	// ignore.
	AttrTicketID      = "ddblock_ticket_id"
	AttrTicketOwner   = "ddblock_ticket_owner"
	AttrTicketSince   = "ddblock_ticket_since_ms"
	AttrTicketGrace   = "ddblock_ticket_grace_ms"
	AttrTicketSession = "ddblock_ticket_session"
	AttrTicketSetWait = "ddblock_ticket_set_wait_ms"
)

// IsLockAttribute reports whether name is one of the lock item's own
// attributes (the key and TTL names aside).
func IsLockAttribute(name string) bool {
	switch name {
	case AttrOwnerName, AttrLeaseDuration, AttrRVN, AttrFencingToken, AttrReleased, AttrHeartbeatTime,
		AttrSession, AttrSessionLease, AttrIsSession, AttrTenure:
		return true
	}
	return false
}

// Expression attribute names and values shared by every request, so that
// no user setting can collide with a DynamoDB reserved word.
const (
	NamePK     = "#pk"
	NameSK     = "#sk"
	NameRVN    = "#rvn"
	NameTTL    = "#ttl"
	ValueRVN   = ":rvn"
	ValueNew   = ":new"
	ValueTTL   = ":ttl"
	NameStamp  = "#hbt"
	ValueStamp = ":hbt"
	NameRel    = "#rel"
	ValueRel   = ":rel"
)

// The conditions of the hot path, written out by hand.
const (
	// CondNew: no item at the key.
	CondNew = "attribute_not_exists(" + NamePK + ")"
	// CondOwned: the item still carries the version number in ValueRVN.
	CondOwned = NameRVN + " = " + ValueRVN
	// CondGuard: the item names this owner and this tenure, and was not
	// kept after a release.
	CondGuard = "#own = :own AND #ten = :ten AND attribute_not_exists(#rel)"
)

// Epoch writes t as whole epoch seconds, the TTL attribute's form.
func Epoch(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// EpochMillis writes t as epoch milliseconds, AttrHeartbeatTime's form.
func EpochMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
