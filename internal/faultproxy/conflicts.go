package faultproxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultTransactionDuration is how long the conflict emulation holds a
// transaction in flight before forwarding it, unless
// WithTransactionDuration says otherwise.
//
// Why 20 ms: DynamoDB serves a single-item write in single-digit
// milliseconds, and a transaction costs at least two of them per item (a
// prepare and a commit, as the Developer Guide's capacity section
// explains), coordinated across the items' partitions; a few tens of
// milliseconds is the order of a small transaction's life on the real
// service. 20 ms is inside that order, short enough not to slow the
// suite, and long enough that a heartbeat racing a guarded write meets
// the conflict in tests, not only in production.
const DefaultTransactionDuration = 20 * time.Millisecond

// WithTransactionDuration sets how long the conflict emulation holds each
// TransactWriteItems and TransactGetItems in flight, before forwarding
// it, besides the time the server takes. Zero holds nothing: a
// transaction is then in flight only while the server works on it.
// Negative durations count as zero.
func WithTransactionDuration(d time.Duration) Option {
	return func(p *Proxy) { p.txDuration = max(d, 0) }
}

// WithoutConflicts switches the transaction conflict emulation off: the
// proxy then forwards every request the faults let through, as it is.
func WithoutConflicts() Option {
	return func(p *Proxy) { p.emulate = false }
}

// EmulatesConflicts reports whether the proxy emulates DynamoDB's
// transaction conflicts (the default; see WithoutConflicts).
func (p *Proxy) EmulatesConflicts() bool { return p.emulate }

// TransactionDuration returns how long the proxy holds a transaction in
// flight before forwarding it (see WithTransactionDuration).
func (p *Proxy) TransactionDuration() time.Duration { return p.txDuration }

// flightKind is what an in-flight request is, for the conflict rules.
type flightKind int

const (
	// plainWrite is a PutItem, UpdateItem or DeleteItem.
	plainWrite flightKind = iota
	// batchWrite is a BatchWriteItem.
	batchWrite
	// txWrite is a TransactWriteItems.
	txWrite
	// txGet is a TransactGetItems.
	txGet
)

// flight is a request the emulation let through and that is in flight:
// admitted, and its reply not yet back from the server.
type flight struct {
	kind flightKind
	// actions is the number of actions of a transaction, for its
	// cancellation reasons.
	actions int
	// token is a TransactWriteItems' ClientRequestToken.
	token string
	// items maps the identity of each item the request touches to the
	// index of its action (0 for plain and batch writes).
	items map[string]int
	// spoiled are the actions of an in-flight TransactGetItems on which a
	// write was admitted meanwhile: the get is then answered as cancelled.
	// Guarded by Proxy.mu.
	spoiled map[int]bool
}

// conflictsWith reports whether an in-flight request of kind held makes a
// new request of kind comer conflict, by the Developer Guide's rules.
func conflictsWith(comer, held flightKind) bool {
	switch comer {
	case plainWrite:
		return held == txWrite
	case txWrite:
		return held == txWrite
	case txGet:
		return held != txGet
	}
	return false // BatchWriteItem: the guide names no conflict for it
}

// parseFlight reads what a request would write or read transactionally,
// or returns nil for requests the conflict rules do not concern (reads,
// table operations, bodies that are not what they should be: the server
// answers those). Items whose identity cannot be learnt are left out.
func (p *Proxy) parseFlight(r *http.Request, op string, body []byte) *flight {
	type keyed struct {
		TableName string
		Key       map[string]json.RawMessage
		Item      map[string]json.RawMessage
	}
	fl := &flight{items: map[string]int{}}
	add := func(i int, k *keyed, put bool) {
		if k == nil {
			return
		}
		var id string
		if put {
			id = p.itemIdentity(r, k.TableName, k.Item)
		} else {
			id = keyIdentity(k.TableName, k.Key, nil)
		}
		if _, dup := fl.items[id]; id != "" && !dup {
			fl.items[id] = i
		}
	}
	switch op {
	case "PutItem", "UpdateItem", "DeleteItem":
		var k keyed
		if json.Unmarshal(body, &k) != nil {
			return nil
		}
		fl.kind, fl.actions = plainWrite, 1
		add(0, &k, op == "PutItem")
	case "BatchWriteItem":
		var req struct {
			RequestItems map[string][]struct {
				PutRequest    *keyed
				DeleteRequest *keyed
			}
		}
		if json.Unmarshal(body, &req) != nil {
			return nil
		}
		fl.kind = batchWrite
		for table, writes := range req.RequestItems {
			for _, w := range writes {
				if w.PutRequest != nil {
					w.PutRequest.TableName = table
				}
				if w.DeleteRequest != nil {
					w.DeleteRequest.TableName = table
				}
				add(0, w.PutRequest, true)
				add(0, w.DeleteRequest, false)
			}
		}
	case "TransactWriteItems":
		var req struct {
			ClientRequestToken string
			TransactItems      []struct{ Put, Update, Delete, ConditionCheck *keyed }
		}
		if json.Unmarshal(body, &req) != nil {
			return nil
		}
		fl.kind, fl.actions, fl.token = txWrite, len(req.TransactItems), req.ClientRequestToken
		for i, a := range req.TransactItems {
			add(i, a.Put, true)
			add(i, a.Update, false)
			add(i, a.Delete, false)
			add(i, a.ConditionCheck, false)
		}
	case "TransactGetItems":
		var req struct{ TransactItems []struct{ Get *keyed } }
		if json.Unmarshal(body, &req) != nil {
			return nil
		}
		fl.kind, fl.actions = txGet, len(req.TransactItems)
		for i, a := range req.TransactItems {
			add(i, a.Get, false)
		}
	default:
		return nil
	}
	return fl
}

// itemIdentity is the identity of a whole item (a Put's), found through
// its table's key schema; "" when the schema cannot be learnt.
func (p *Proxy) itemIdentity(r *http.Request, table string, item map[string]json.RawMessage) string {
	names, err := p.keySchema(r, table)
	if err != nil {
		return ""
	}
	return keyIdentity(table, item, names)
}

// keyIdentity is the identity of an item: its table and the canonical
// values of its key attributes, the attributes named by names (every
// attribute of attrs when names is nil). Equal keys give equal
// identities however their values were spelt ("1" and "1.0" are one
// number). "" when an attribute of the key is missing.
func keyIdentity(table string, attrs map[string]json.RawMessage, names []string) string {
	if table == "" || len(attrs) == 0 {
		return ""
	}
	if names == nil {
		for n := range attrs {
			names = append(names, n)
		}
	}
	names = slices.Clone(names)
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(strconv.Quote(table))
	for _, n := range names {
		v, ok := attrs[n]
		if !ok {
			return ""
		}
		b.WriteString(" " + strconv.Quote(n) + "=" + canonicalValue(v))
	}
	return b.String()
}

// canonicalValue spells an attribute value so that equal key values are
// spelt alike: numbers are normalised, binaries decoded and re-encoded.
// Other types, which cannot be keys, keep their compacted JSON.
func canonicalValue(raw json.RawMessage) string {
	var v map[string]json.RawMessage
	if json.Unmarshal(raw, &v) == nil && len(v) == 1 {
		for typ, val := range v {
			var s string
			if json.Unmarshal(val, &s) != nil {
				break
			}
			switch typ {
			case "S":
				return "S:" + strconv.Quote(s)
			case "N":
				if n, ok := new(big.Rat).SetString(strings.TrimSpace(s)); ok {
					return "N:" + n.RatString()
				}
			case "B":
				if d, err := base64.StdEncoding.DecodeString(s); err == nil {
					return "B:" + base64.StdEncoding.EncodeToString(d)
				}
			}
		}
	}
	var c bytes.Buffer
	if json.Compact(&c, raw) != nil {
		return strconv.Quote(string(raw))
	}
	return c.String()
}

// keySchema returns the names of a table's key attributes, learnt with a
// DescribeTable the proxy sends to the server itself (with the headers
// of the request r, which the local servers need the shape of) and
// cached. Failures are not cached.
func (p *Proxy) keySchema(r *http.Request, table string) ([]string, error) {
	p.mu.Lock()
	names, ok := p.schemas[table]
	p.mu.Unlock()
	if ok {
		return names, nil
	}
	in, _ := json.Marshal(map[string]string{"TableName": table})
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	u := *p.target
	u.Path = r.URL.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(in))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Accept-Encoding":
			continue
		}
		if !isHopByHop(k) {
			req.Header[k] = slices.Clone(vs)
		}
	}
	req.Header.Set("X-Amz-Target", targetPrefix+"DescribeTable")
	req.Host = r.Host
	resp, err := p.transport.RoundTrip(req)
	p.mu.Lock()
	p.schemaLookups++
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("faultproxy: DescribeTable %s: HTTP %d: %s", table, resp.StatusCode, out)
	}
	var desc struct {
		Table struct {
			KeySchema []struct{ AttributeName string }
		}
	}
	if err := json.Unmarshal(out, &desc); err != nil {
		return nil, err
	}
	for _, k := range desc.Table.KeySchema {
		names = append(names, k.AttributeName)
	}
	if len(names) == 0 {
		return nil, errors.New("faultproxy: DescribeTable " + table + " gave no key schema")
	}
	p.mu.Lock()
	p.schemas[table] = names
	p.mu.Unlock()
	return names, nil
}

// forgetSchema drops a table's cached key schema when a request that
// creates or deletes the table passes, so that a table made again under
// the same name is described again.
func (p *Proxy) forgetSchema(op string, body []byte) {
	if op != "CreateTable" && op != "DeleteTable" {
		return
	}
	var req struct{ TableName string }
	if json.Unmarshal(body, &req) == nil {
		p.mu.Lock()
		delete(p.schemas, req.TableName)
		p.mu.Unlock()
	}
}

// admit applies the conflict rules to a request about to be forwarded:
// it returns the indexes of the request's conflicting actions (nil: none,
// and the request is now in flight). An admitted write spoils the
// overlapping actions of the TransactGetItems in flight. A
// TransactWriteItems whose ClientRequestToken is that of one in flight
// (the same transaction, sent again) is refused with inProgress set.
func (p *Proxy) admit(fl *flight, op string) (conflicting map[int]bool, inProgress bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fl.token != "" {
		for other := range p.flights {
			if other.kind == txWrite && other.token == fl.token {
				p.inProgress++
				return nil, true
			}
		}
	}
	for other := range p.flights {
		if !conflictsWith(fl.kind, other.kind) {
			continue
		}
		for id, i := range fl.items {
			if _, ok := other.items[id]; ok {
				if conflicting == nil {
					conflicting = map[int]bool{}
				}
				conflicting[i] = true
			}
		}
	}
	if conflicting != nil {
		p.conflicts[op]++
		return conflicting, false
	}
	if fl.kind != txGet {
		for other := range p.flights {
			if other.kind != txGet {
				continue
			}
			for id := range fl.items {
				if i, ok := other.items[id]; ok {
					other.spoiled[i] = true
				}
			}
		}
	}
	fl.spoiled = map[int]bool{}
	p.flights[fl] = struct{}{}
	if fl.kind == txWrite || fl.kind == txGet {
		p.transactions++
	}
	return nil, false
}

// land takes a request out of flight and returns the actions a write
// spoiled meanwhile (for a TransactGetItems).
func (p *Proxy) land(fl *flight) map[int]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.flights, fl)
	return fl.spoiled
}

// exchange is the server's side of a request the faults let through: the
// conflict emulation (when on) and the forward. A nil reply with a nil
// error never happens; an error means no answer can be given.
func (p *Proxy) exchange(r *http.Request, op string, body []byte) (*reply, error) {
	if !p.emulate {
		return p.roundTrip(r, body)
	}
	p.forgetSchema(op, body)
	fl := p.parseFlight(r, op, body)
	if fl == nil || len(fl.items) == 0 {
		return p.roundTrip(r, body)
	}
	conflicting, inProgress := p.admit(fl, op)
	if inProgress {
		return errorReply(http.StatusBadRequest, "TransactionInProgressException", "The transaction with the given request token is already in progress"), nil
	}
	if conflicting != nil {
		if fl.kind == plainWrite {
			return errorReply(http.StatusBadRequest, "TransactionConflictException", "Transaction is ongoing for the item"), nil
		}
		return canceledReply(fl.actions, conflicting, ""), nil
	}
	landed := false
	defer func() {
		if !landed {
			p.land(fl)
		}
	}()
	if (fl.kind == txWrite || fl.kind == txGet) && p.txDuration > 0 {
		t := time.NewTimer(p.txDuration)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return nil, p.ctx.Err()
		}
	}
	rep, err := p.roundTrip(r, body)
	spoiled := p.land(fl)
	landed = true
	if err != nil {
		return nil, err
	}
	if fl.kind == txGet && len(spoiled) > 0 && rep.status == http.StatusOK {
		p.mu.Lock()
		p.conflicts[op]++
		p.mu.Unlock()
		return canceledReply(fl.actions, spoiled, ""), nil
	}
	return rep, nil
}

// canceledReply is DynamoDB's TransactionCanceledException for a
// transaction of n actions cancelled by conflicts on the actions in
// conflicting: a reason per action, TransactionConflict or None, in the
// order of the request's actions. note is added to the conflicts'
// messages.
func canceledReply(n int, conflicting map[int]bool, note string) *reply {
	type reason struct {
		Code    string
		Message string `json:",omitempty"`
	}
	reasons := make([]reason, max(n, 1))
	codes := make([]string, len(reasons))
	for i := range reasons {
		reasons[i] = reason{Code: "None"}
		if conflicting[i] {
			reasons[i] = reason{Code: "TransactionConflict", Message: "Transaction is ongoing for the item" + note}
		}
		codes[i] = reasons[i].Code
	}
	out, _ := json.Marshal(map[string]any{
		"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
		"CancellationReasons": reasons,
	})
	return jsonReply(http.StatusBadRequest, out)
}

// errorReply is DynamoDB's JSON error shape, which the AWS SDK decodes by
// its __type.
func errorReply(status int, code, msg string) *reply {
	body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":%q}`, code, msg)
	return jsonReply(status, []byte(body))
}

func jsonReply(status int, body []byte) *reply {
	h := http.Header{}
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", "faultproxy")
	return &reply{status: status, header: h, body: body}
}
