// Package faultproxy is an HTTP proxy that sits between a DynamoDB client
// and a real DynamoDB-compatible server (dynalite or DynamoDB Local in
// ddblock's tests) and misbehaves on demand: it adds latency, answers
// with server errors, throttling or refused permissions, drops
// connections, swallows requests, applies a write and then loses its
// reply, or refuses connections altogether.
//
// Faults are rules switched on and off while a test runs; each rule can
// be limited to one DynamoDB operation (the X-Amz-Target header), to
// requests whose body contains a string (a lock's key), to a probability
// and to a number of injections. The proxy counts what it received,
// forwarded and injected, so a test can assert that a fault really
// happened rather than assume it.
//
// # Transaction conflicts
//
// Real DynamoDB refuses some requests that meet a transaction in flight
// on the same item; DynamoDB Local never does, and dynalite has no
// transactions. Every proxy therefore emulates DynamoDB's rules, as the
// Amazon DynamoDB Developer Guide states them in "Transaction conflict
// handling in DynamoDB", a section of its page "Amazon DynamoDB
// Transactions: How it works"
// (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling):
//
//   - Write against transaction: a PutItem, UpdateItem or DeleteItem of
//     an item that a TransactWriteItems in flight touches (by any of its
//     Put, Update, Delete or ConditionCheck actions) is refused with
//     HTTP 400 and TransactionConflictException.
//   - Transaction against transaction: a TransactWriteItems with an item
//     that another TransactWriteItems in flight touches is cancelled:
//     HTTP 400, TransactionCanceledException, whose cancellation reasons
//     (one per action, in the request's order) say TransactionConflict
//     for each action on such an item and None for the others.
//   - Read transaction against writes: a TransactGetItems with an item
//     that a TransactWriteItems, BatchWriteItem, PutItem, UpdateItem or
//     DeleteItem in flight writes is cancelled the same way. The API
//     reference's TransactionCanceledException adds that it is the
//     TransactGetItems that fails when such a write comes while it is in
//     flight: the write goes through, and the get is answered cancelled
//     (reasons on the actions the write touched) in place of the server's
//     reply.
//   - A TransactWriteItems sent again with the ClientRequestToken of one
//     in flight is the same transaction: it is refused with HTTP 400 and
//     TransactionInProgressException, as the API reference describes
//     that error (the SDK retries it, as a throttle).
//   - A GetItem never conflicts: the guide says both operations can
//     succeed. The guide names no conflict for a BatchWriteItem's own
//     items, so the proxy forwards every BatchWriteItem as it is; its
//     items count only against TransactGetItems.
//
// A refused or cancelled request is not forwarded. The AWS SDK for Go v2
// retries neither TransactionConflictException nor
// TransactionCanceledException: neither code is in its retryable or
// throttle lists (aws/retry's DefaultRetryableErrorCodes and
// DefaultThrottleErrorCodes, which name TransactionInProgressException
// but no conflict), the errors have no RetryableError method, and HTTP
// 400 is not a retryable status.
//
// In flight means: a TransactWriteItems or TransactGetItems is admitted
// when the proxy is about to forward it, held for the transaction
// duration (WithTransactionDuration; DefaultTransactionDuration), then
// forwarded, and is in flight until the server's reply is back or the
// forward failed. A plain or batch write is in flight while it is
// forwarded. An item is its table's name and the values of its key
// attributes, canonicalised so that equal keys compare equal; a Put
// carries the whole item, so the proxy learns the table's key schema
// with a DescribeTable of its own, once per table. WithoutConflicts
// switches the emulation off; Counts.Conflicts says what it refused.
// Proxies stacked one on another each emulate, over the traffic each
// sees, and each holds a transaction for its own duration: a proxy put
// in front of another that already emulates (ddbtest's, in front of
// DynamoDB Local) may take WithoutConflicts, or keep its emulation and
// so lengthen transactions.
//
// Faults come first: a request is admitted (or refused) only after its
// latency, and only if no other fault answers in the server's place. A
// DropReply'd request goes through the emulation like any other: a
// transaction stays in flight until its forward ends, and a request the
// emulation refuses loses that answer instead of the server's. The
// canned TransactionConflict kind is a fault, not the emulation.
//
// # Connections
//
// RefuseConnections makes the proxy's port refuse new connections (and
// closes its clients' connections as soon as they are idle), so that a
// client's next attempt fails at connect; AcceptConnections undoes it. A
// rule's Then hook runs between a fault and the client's learning of it:
// Then: p.RefuseConnections on a DropReply makes every retry of a write
// that landed fail to connect.
//
// A proxy listens on 127.0.0.1 only. Use one per client when a fault must
// hit one client and not the others.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a fault does to a request.
type Kind string

// The kinds of fault.
const (
	// Latency holds the request for Rule.Delay (plus up to Rule.Jitter)
	// before forwarding it. The request is forwarded even if the client
	// gave up meanwhile, as a slow network still delivers what was sent:
	// a write may land after its sender stopped waiting for it. Latency
	// rules add up, and combine with one other fault.
	Latency Kind = "latency"
	// ServerError answers HTTP 500 with DynamoDB's InternalServerError
	// body, without forwarding. The SDK retries it.
	ServerError Kind = "server-error"
	// Throttling answers HTTP 400 with a ThrottlingException body, without
	// forwarding. The SDK recognises it as a throttle and retries it.
	Throttling Kind = "throttling"
	// ThroughputExceeded answers HTTP 400 with a
	// ProvisionedThroughputExceededException body, without forwarding;
	// the SDK decodes it into *types.ProvisionedThroughputExceededException.
	ThroughputExceeded Kind = "throughput-exceeded"
	// Drop closes the client's connection without answering; the request
	// never reaches the server.
	Drop Kind = "drop"
	// BlackHole accepts the request and never answers it: the proxy holds
	// it until the client gives up, the rule is removed, or the proxy is
	// closed, and then closes the connection. The request never reaches
	// the server.
	BlackHole Kind = "black-hole"
	// DropReply forwards the request, lets the server apply it, and then
	// closes the client's connection instead of returning the response:
	// the write happened, but its sender cannot know. The request goes
	// through the conflict emulation first, as every forwarded one does:
	// if the emulation refuses it, that answer is what is lost.
	DropReply Kind = "drop-reply"
	// TransactionConflict answers a TransactWriteItems with HTTP 400 and
	// the TransactionCanceledException DynamoDB sends when another
	// transaction was under way on one of its items: a reason per action,
	// TransactionConflict for the last one and None for the others.
	// Nothing is forwarded. It is a canned answer, given whatever is in
	// flight; the proxy's conflict emulation raises the real ones. Not in
	// Kinds: it applies to transactions only.
	TransactionConflict Kind = "transaction-conflict"
	// AccessDenied answers HTTP 400 with the AccessDeniedException body
	// DynamoDB sends when an IAM policy does not allow the request's
	// action, its message naming the action (dynamodb:PutItem, …) and
	// the table; nothing is forwarded. The SDK does not retry it. Not in
	// Kinds: it is no fault to wait through, and would end every wait.
	AccessDenied Kind = "access-denied"
)

// Kinds lists every kind, in a stable order.
var Kinds = []Kind{Latency, ServerError, Throttling, ThroughputExceeded, Drop, BlackHole, DropReply}

// targetPrefix is the service part of DynamoDB's X-Amz-Target header.
const targetPrefix = "DynamoDB_20120810."

// Rule says which requests a fault hits and what it does to them.
type Rule struct {
	// Kind is what the fault does.
	Kind Kind
	// Op limits the fault to one DynamoDB operation, named as in the
	// X-Amz-Target header with or without its service prefix: "UpdateItem"
	// or "DynamoDB_20120810.UpdateItem". Empty: every operation.
	Op string
	// BodyContains limits the fault to requests whose JSON body contains
	// this string, such as a lock's partition key. Empty: every request.
	BodyContains string
	// Delay is the latency added by a Latency fault.
	Delay time.Duration
	// Jitter adds a uniformly random extra latency in [0, Jitter).
	Jitter time.Duration
	// Probability is the chance that a matching request is hit, in
	// (0, 1]. Zero means 1: every matching request.
	Probability float64
	// Count is how many requests the fault hits at most; zero means no
	// limit. A fault whose count is used up stays in place and does
	// nothing.
	Count int
	// Then, when set, is called once per injection, in the request's
	// handler, after the fault did its work and before the client learns
	// anything: for Latency after the delay (before forwarding), for
	// DropReply after the server's reply was read and before the hang-up,
	// for the other kinds just before the answer or the hang-up.
	Then func()
}

func (r Rule) check() error {
	var errs []error
	known := false
	for _, k := range Kinds {
		known = known || r.Kind == k
	}
	known = known || r.Kind == TransactionConflict || r.Kind == AccessDenied
	if !known {
		errs = append(errs, fmt.Errorf("faultproxy: unknown fault kind %q", r.Kind))
	}
	if r.Kind == Latency && r.Delay <= 0 && r.Jitter <= 0 {
		errs = append(errs, errors.New("faultproxy: a latency fault needs a positive Delay or Jitter"))
	}
	if r.Delay < 0 || r.Jitter < 0 {
		errs = append(errs, errors.New("faultproxy: Delay and Jitter must not be negative"))
	}
	if r.Probability < 0 || r.Probability > 1 {
		errs = append(errs, fmt.Errorf("faultproxy: Probability %v is not in [0, 1]", r.Probability))
	}
	if r.Count < 0 {
		errs = append(errs, fmt.Errorf("faultproxy: Count %d is negative", r.Count))
	}
	return errors.Join(errs...)
}

// matches reports whether the rule applies to a request (before its
// probability and count are considered).
func (r Rule) matches(op string, body []byte) bool {
	if r.Op != "" && strings.TrimPrefix(r.Op, targetPrefix) != op {
		return false
	}
	return r.BodyContains == "" || bytes.Contains(body, []byte(r.BodyContains))
}

// Fault is a rule in force on a proxy. Remove switches it off.
type Fault struct {
	p        *Proxy
	rule     Rule
	off      chan struct{}
	offOnce  sync.Once
	injected atomic.Int64
	left     int // guarded by p.mu; -1 when unlimited
}

// Injected returns how many requests the fault has hit.
func (f *Fault) Injected() int64 { return f.injected.Load() }

// Remove switches the fault off: it hits no more requests, and the
// requests it holds in a black hole are let go (their connections are
// closed, unanswered). Removing twice is harmless.
func (f *Fault) Remove() {
	f.p.mu.Lock()
	for i, g := range f.p.faults {
		if g == f {
			f.p.faults = append(f.p.faults[:i:i], f.p.faults[i+1:]...)
			break
		}
	}
	f.p.mu.Unlock()
	f.offOnce.Do(func() { close(f.off) })
}

// Counts are a proxy's counters since it started.
type Counts struct {
	// Requests counts the requests received, and ByOp the same per
	// operation ("UpdateItem", …; "" for requests without a target).
	Requests int64
	ByOp     map[string]int64
	// TransactActions counts the actions of the TransactWriteItems
	// received, each by the call it stands for (which is also its IAM
	// action) and its table: "PutItem TABLE", "ConditionCheckItem TABLE".
	TransactActions map[string]int64
	// Forwarded counts the requests passed on to the server (DropReply's
	// included), and ForwardErrors those the server could not be reached
	// for.
	Forwarded, ForwardErrors int64
	// Injected counts the faults injected, per kind, and InjectedByOp per
	// operation and kind.
	Injected     map[Kind]int64
	InjectedByOp map[string]map[Kind]int64
	// Conflicts counts, per operation, the requests the transaction
	// conflict emulation refused or cancelled (a TransactGetItems whose
	// reply was replaced included). InProgress counts the
	// TransactWriteItems it refused with TransactionInProgressException,
	// Transactions the TransactWriteItems and TransactGetItems it
	// admitted and held, and SchemaLookups the DescribeTable requests it
	// sent to learn key schemas (they are not in Requests).
	Conflicts     map[string]int64
	InProgress    int64
	Transactions  int64
	SchemaLookups int64
}

// Faults returns the number of faults injected, of every kind.
func (c Counts) Faults() int64 {
	var n int64
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// Proxy is a fault-injecting reverse proxy in front of one server. It is
// safe for concurrent use.
type Proxy struct {
	target    *url.URL
	addr      string
	srv       *http.Server
	transport *http.Transport
	url       string

	// emulate and txDuration configure the conflict emulation; they do
	// not change once the proxy runs.
	emulate    bool
	txDuration time.Duration

	// lnMu guards the listener, which RefuseConnections closes and
	// AcceptConnections replaces.
	lnMu    sync.Mutex
	ln      net.Listener // nil while connections are refused
	lnDone  bool         // Close was called
	serving sync.WaitGroup

	// ctx lives as long as the proxy: forwards run on it rather than on
	// the client's request, so that a request the client gave up on can
	// still land, as it would on a real network.
	ctx    context.Context
	cancel context.CancelFunc
	work   sync.WaitGroup

	mu           sync.Mutex
	closed       bool
	faults       []*Fault
	rng          *rand.Rand
	requests     int64
	byOp         map[string]int64
	txActions    map[string]int64
	forwarded    int64
	forwardErrs  int64
	injected     map[Kind]int64
	injectedByOp map[string]map[Kind]int64

	// The conflict emulation's state.
	flights       map[*flight]struct{}
	schemas       map[string][]string
	conflicts     map[string]int64
	inProgress    int64
	transactions  int64
	schemaLookups int64
}

// Option configures a proxy.
type Option func(*Proxy)

// WithSeed makes the proxy's random choices (probabilities, jitter)
// repeatable.
func WithSeed(seed uint64) Option {
	return func(p *Proxy) { p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
}

// Start starts a proxy for the server at target (such as
// "http://127.0.0.1:8000") on a free port of 127.0.0.1, emulating
// transaction conflicts unless an option says otherwise. Close it when
// done.
func Start(target string, opts ...Option) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("faultproxy: target %q is not an http:// URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}
	p := &Proxy{
		target:       u,
		addr:         ln.Addr().String(),
		transport:    transport,
		url:          "http://" + ln.Addr().String(),
		emulate:      true,
		txDuration:   DefaultTransactionDuration,
		rng:          rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		byOp:         map[string]int64{},
		txActions:    map[string]int64{},
		injected:     map[Kind]int64{},
		injectedByOp: map[string]map[Kind]int64{},
		flights:      map[*flight]struct{}{},
		schemas:      map[string][]string{},
		conflicts:    map[string]int64{},
	}
	for _, opt := range opts {
		if opt != nil {
			opt(p)
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	p.lnMu.Lock()
	p.startServing(ln)
	p.lnMu.Unlock()
	return p, nil
}

// startServing serves ln; p.lnMu is held.
func (p *Proxy) startServing(ln net.Listener) {
	p.ln = &onceCloseListener{Listener: ln}
	p.serving.Add(1)
	go func(l net.Listener) {
		defer p.serving.Done()
		_ = p.srv.Serve(l)
	}(p.ln)
}

// onceCloseListener is a listener whose Close can be called more than
// once: by RefuseConnections, then by the server's Close.
type onceCloseListener struct {
	net.Listener
	once sync.Once
	err  error
}

// Close closes the listener the first time, and returns that error ever
// after.
func (l *onceCloseListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// RefuseConnections makes the proxy's address refuse new connections: it
// stops listening (the address stays the proxy's, for AcceptConnections)
// and closes each client connection as soon as it is idle, so that a
// client's next attempt must dial and is refused (ECONNREFUSED).
// Requests under way finish, and their connections close after them.
// It may be called from a rule's Then. Refusing twice is harmless.
func (p *Proxy) RefuseConnections() {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	if p.ln == nil || p.lnDone {
		return
	}
	// Without keep-alives the server closes its idle connections now, and
	// every other one after its current exchange.
	p.srv.SetKeepAlivesEnabled(false)
	_ = p.ln.Close()
	p.ln = nil
}

// AcceptConnections undoes RefuseConnections: the proxy listens again on
// the same address (Go's listeners set SO_REUSEADDR, so connections the
// proxy closed do not hold the port). It fails if the address was taken
// meanwhile, or if the proxy is closed. Accepting while accepting is
// harmless.
func (p *Proxy) AcceptConnections() error {
	p.lnMu.Lock()
	defer p.lnMu.Unlock()
	if p.lnDone {
		return errors.New("faultproxy: AcceptConnections on a closed proxy")
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("faultproxy: listening again on %s: %w", p.addr, err)
	}
	p.srv.SetKeepAlivesEnabled(true)
	p.startServing(ln)
	return nil
}

// URL returns the proxy's address, for a client's endpoint.
func (p *Proxy) URL() string { return p.url }

// Inject puts a fault in force until it is removed.
func (p *Proxy) Inject(r Rule) (*Fault, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	f := &Fault{p: p, rule: r, off: make(chan struct{}), left: -1}
	if r.Count > 0 {
		f.left = r.Count
	}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	return f, nil
}

// MustInject is Inject for rules known to be valid; it panics on a bad
// rule, which is a bug in the test that wrote it.
func (p *Proxy) MustInject(r Rule) *Fault {
	f, err := p.Inject(r)
	if err != nil {
		panic(err)
	}
	return f
}

// Clear removes every fault.
func (p *Proxy) Clear() {
	p.mu.Lock()
	faults := p.faults
	p.faults = nil
	p.mu.Unlock()
	for _, f := range faults {
		f.offOnce.Do(func() { close(f.off) })
	}
}

// Counts returns a copy of the proxy's counters.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Counts{
		Requests:      p.requests,
		ByOp:          make(map[string]int64, len(p.byOp)),
		Forwarded:     p.forwarded,
		ForwardErrors: p.forwardErrs,
		Injected:      make(map[Kind]int64, len(p.injected)),
		InjectedByOp:  make(map[string]map[Kind]int64, len(p.injectedByOp)),
		Conflicts:     make(map[string]int64, len(p.conflicts)),
		InProgress:    p.inProgress,
		Transactions:  p.transactions,
		SchemaLookups: p.schemaLookups,
	}
	for k, v := range p.conflicts {
		c.Conflicts[k] = v
	}
	for k, v := range p.byOp {
		c.ByOp[k] = v
	}
	c.TransactActions = make(map[string]int64, len(p.txActions))
	for k, v := range p.txActions {
		c.TransactActions[k] = v
	}
	for k, v := range p.injected {
		c.Injected[k] = v
	}
	for op, m := range p.injectedByOp {
		c.InjectedByOp[op] = make(map[Kind]int64, len(m))
		for k, v := range m {
			c.InjectedByOp[op][k] = v
		}
	}
	return c
}

// Close stops the proxy: it stops listening, lets go of the requests it
// holds (transactions held in flight included), abandons forwards in
// progress, and waits for its handlers. It works whether the proxy
// accepts or refuses connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.lnMu.Lock()
	p.lnDone = true
	p.lnMu.Unlock()
	p.Clear()
	p.cancel()
	err := p.srv.Close() // closes the listener and every connection
	p.work.Wait()
	p.serving.Wait()
	p.transport.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// plan is what the proxy decided to do with one request.
type plan struct {
	delay    time.Duration
	latency  []*Fault // the latency faults that fired
	terminal *Fault   // nil: forward normally (after the delay)
}

// decide picks the faults that hit a request: every latency fault that
// fires adds its delay, and the first other fault that fires decides the
// outcome. Counts are consumed only by faults that fire.
func (p *Proxy) decide(op string, body []byte) plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	p.byOp[op]++
	if op == "TransactWriteItems" {
		for _, a := range transactActions(body) {
			p.txActions[a]++
		}
	}
	var pl plan
	for _, f := range p.faults {
		r := f.rule
		if !r.matches(op, body) || f.left == 0 {
			continue
		}
		if r.Kind != Latency && pl.terminal != nil {
			continue
		}
		if r.Probability > 0 && r.Probability < 1 && p.rng.Float64() >= r.Probability {
			continue
		}
		if f.left > 0 {
			f.left--
		}
		f.injected.Add(1)
		p.injected[r.Kind]++
		if p.injectedByOp[op] == nil {
			p.injectedByOp[op] = map[Kind]int64{}
		}
		p.injectedByOp[op][r.Kind]++
		if r.Kind == Latency {
			pl.latency = append(pl.latency, f)
			pl.delay += r.Delay
			if r.Jitter > 0 {
				pl.delay += time.Duration(p.rng.Int64N(int64(r.Jitter)))
			}
			continue
		}
		pl.terminal = f
	}
	return pl
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	// Handlers register under the mutex, so that none starts once Close
	// has begun to wait for them.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		hangUp(w)
		return
	}
	p.work.Add(1)
	p.mu.Unlock()
	defer p.work.Done()
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		hangUp(w)
		return
	}
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	pl := p.decide(op, body)

	if pl.delay > 0 {
		t := time.NewTimer(pl.delay)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			hangUp(w)
			return
		}
	}
	for _, f := range pl.latency {
		f.then()
	}
	f := pl.terminal
	if f == nil || f.rule.Kind == DropReply {
		rep, err := p.exchange(r, op, body)
		if f != nil { // DropReply: the server had its say; the client hears nothing
			f.then()
			hangUp(w)
			return
		}
		if err != nil {
			hangUp(w)
			return
		}
		rep.write(w)
		return
	}
	var rep *reply
	switch f.rule.Kind {
	case ServerError:
		rep = errorReply(http.StatusInternalServerError, "InternalServerError", "The server encountered an internal error trying to fulfill the request (injected by faultproxy).")
	case Throttling:
		rep = errorReply(http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput (injected by faultproxy).")
	case ThroughputExceeded:
		rep = errorReply(http.StatusBadRequest, "ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded (injected by faultproxy).")
	case TransactionConflict:
		rep = cannedConflict(body)
	case AccessDenied:
		rep = accessDenied(op, body)
	case BlackHole:
		select {
		case <-r.Context().Done():
		case <-f.off:
		case <-p.ctx.Done():
		}
	}
	f.then()
	if rep == nil { // Drop, BlackHole
		hangUp(w)
		return
	}
	rep.write(w)
}

// then calls the rule's Then hook, if any.
func (f *Fault) then() {
	if f.rule.Then != nil {
		f.rule.Then()
	}
}

// cannedConflict answers a transaction as cancelled by a conflict on its
// last action, with DynamoDB's JSON shape: one reason per action.
func cannedConflict(body []byte) *reply {
	var req struct{ TransactItems []json.RawMessage }
	_ = json.Unmarshal(body, &req)
	n := max(len(req.TransactItems), 1)
	return canceledReply(n, map[int]bool{n - 1: true}, " (injected by faultproxy)")
}

// accessDenied answers as DynamoDB does a request its caller's IAM
// policy does not allow: the message names the action and the table.
func accessDenied(op string, body []byte) *reply {
	var req struct{ TableName string }
	_ = json.Unmarshal(body, &req)
	if req.TableName == "" {
		req.TableName = "*"
	}
	msg := fmt.Sprintf("User: arn:aws:iam::123456789012:user/test is not authorized to perform: dynamodb:%s on resource: arn:aws:dynamodb:us-east-1:123456789012:table/%s because no identity-based policy allows the dynamodb:%s action (injected by faultproxy)",
		op, req.TableName, op)
	body = fmt.Appendf(nil, `{"__type":"com.amazon.coral.service#AccessDeniedException","message":%q}`, msg)
	return jsonReply(http.StatusBadRequest, body)
}

// reply is a response to give a client: the server's, or one the proxy
// makes up.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (rep *reply) write(w http.ResponseWriter) {
	for k, vs := range rep.header {
		if isHopByHop(k) {
			continue
		}
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

// roundTrip sends the request to the server on the proxy's own context
// and reads the whole response.
func (p *Proxy) roundTrip(r *http.Request, body []byte) (*reply, error) {
	u := *p.target
	u.Path = r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(p.ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		p.countForward(false)
		return nil, err
	}
	for k, vs := range r.Header {
		if isHopByHop(k) {
			continue
		}
		out.Header[k] = append([]string(nil), vs...)
	}
	out.Host = r.Host
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		p.countForward(false)
		return nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	p.countForward(err == nil)
	if err != nil {
		return nil, err
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: respBody}, nil
}

func (p *Proxy) countForward(ok bool) {
	p.mu.Lock()
	p.forwarded++
	if !ok {
		p.forwardErrs++
	}
	p.mu.Unlock()
}

// hangUp closes the client's connection without a response.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func isHopByHop(h string) bool {
	switch http.CanonicalHeaderKey(h) {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// transactActions are a TransactWriteItems body's actions, each as the
// call it stands for and its table; none for a body that is not one.
func transactActions(body []byte) []string {
	type action struct{ TableName string }
	var req struct {
		TransactItems []struct{ Put, Update, Delete, ConditionCheck *action }
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var out []string
	for _, it := range req.TransactItems {
		for call, a := range map[string]*action{"PutItem": it.Put, "UpdateItem": it.Update, "DeleteItem": it.Delete, "ConditionCheckItem": it.ConditionCheck} {
			if a != nil {
				out = append(out, call+" "+a.TableName)
			}
		}
	}
	return out
}
