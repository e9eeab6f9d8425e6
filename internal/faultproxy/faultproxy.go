// Package faultproxy is an HTTP proxy that sits between a DynamoDB client
// and a real DynamoDB-compatible server (dynalite in ddblock's tests) and
// misbehaves on demand: it adds latency, answers with server errors or
// throttling, drops connections, swallows requests, or applies a write and
// then loses its reply.
//
// Faults are rules switched on and off while a test runs; each rule can
// be limited to one DynamoDB operation (the X-Amz-Target header), to
// requests whose body contains a string (a lock's key), to a probability
// and to a number of injections. The proxy counts what it received,
// forwarded and injected, so a test can assert that a fault really
// happened rather than assume it.
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
	// the write happened, but its sender cannot know.
	DropReply Kind = "drop-reply"
	// TransactionConflict answers a TransactWriteItems with HTTP 400 and
	// the TransactionCanceledException DynamoDB sends when another
	// transaction or write was under way on one of its items: a reason
	// per action, TransactionConflict for the last one and None for the
	// others. Nothing is forwarded. DynamoDB Local never raises it by
	// itself. Not in Kinds: it applies to transactions only.
	TransactionConflict Kind = "transaction-conflict"
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
}

func (r Rule) check() error {
	var errs []error
	known := false
	for _, k := range Kinds {
		known = known || r.Kind == k
	}
	known = known || r.Kind == TransactionConflict
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
	// Forwarded counts the requests passed on to the server (DropReply's
	// included), and ForwardErrors those the server could not be reached
	// for.
	Forwarded, ForwardErrors int64
	// Injected counts the faults injected, per kind, and InjectedByOp per
	// operation and kind.
	Injected     map[Kind]int64
	InjectedByOp map[string]map[Kind]int64
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
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	url       string

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
	forwarded    int64
	forwardErrs  int64
	injected     map[Kind]int64
	injectedByOp map[string]map[Kind]int64
}

// Option configures a proxy.
type Option func(*Proxy)

// WithSeed makes the proxy's random choices (probabilities, jitter)
// repeatable.
func WithSeed(seed uint64) Option {
	return func(p *Proxy) { p.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
}

// Start starts a proxy for the server at target (such as
// "http://127.0.0.1:8000") on a free port of 127.0.0.1. Close it when
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
		ln:           ln,
		transport:    transport,
		url:          "http://" + ln.Addr().String(),
		rng:          rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		byOp:         map[string]int64{},
		injected:     map[Kind]int64{},
		injectedByOp: map[string]map[Kind]int64{},
	}
	for _, opt := range opts {
		if opt != nil {
			opt(p)
		}
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
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
	}
	for k, v := range p.byOp {
		c.ByOp[k] = v
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
// holds, abandons forwards in progress, and waits for its handlers.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Clear()
	p.cancel()
	err := p.srv.Close() // closes the listener and every connection
	p.work.Wait()
	p.transport.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// plan is what the proxy decided to do with one request.
type plan struct {
	delay    time.Duration
	terminal *Fault // nil: forward normally (after the delay)
}

// decide picks the faults that hit a request: every latency fault that
// fires adds its delay, and the first other fault that fires decides the
// outcome. Counts are consumed only by faults that fire.
func (p *Proxy) decide(op string, body []byte) plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	p.byOp[op]++
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
	if pl.terminal == nil {
		p.forward(w, r, body, true)
		return
	}
	switch f := pl.terminal; f.rule.Kind {
	case ServerError:
		writeError(w, http.StatusInternalServerError, "InternalServerError", "The server encountered an internal error trying to fulfill the request (injected by faultproxy).")
	case Throttling:
		writeError(w, http.StatusBadRequest, "ThrottlingException", "Rate of requests exceeds the allowed throughput (injected by faultproxy).")
	case ThroughputExceeded:
		writeError(w, http.StatusBadRequest, "ProvisionedThroughputExceededException", "The level of configured provisioned throughput for the table was exceeded (injected by faultproxy).")
	case Drop:
		hangUp(w)
	case BlackHole:
		select {
		case <-r.Context().Done():
		case <-f.off:
		case <-p.ctx.Done():
		}
		hangUp(w)
	case DropReply:
		p.forward(w, r, body, false)
		hangUp(w)
	case TransactionConflict:
		writeConflict(w, body)
	}
}

// writeConflict answers a transaction as cancelled by a conflict on its
// last action, with DynamoDB's JSON shape: one reason per action.
func writeConflict(w http.ResponseWriter, body []byte) {
	var req struct{ TransactItems []json.RawMessage }
	_ = json.Unmarshal(body, &req)
	type reason struct{ Code, Message string }
	reasons := make([]reason, max(len(req.TransactItems), 1))
	codes := make([]string, len(reasons))
	for i := range reasons {
		reasons[i] = reason{Code: "None"}
		if i == len(reasons)-1 {
			reasons[i] = reason{Code: "TransactionConflict", Message: "Transaction is ongoing for the item (injected by faultproxy)"}
		}
		codes[i] = reasons[i].Code
	}
	out, _ := json.Marshal(map[string]any{
		"__type":              "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
		"Message":             "Transaction cancelled, please refer cancellation reasons for specific reasons [" + strings.Join(codes, ", ") + "]",
		"CancellationReasons": reasons,
	})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "faultproxy")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(out)
}

// forward sends the request to the server on the proxy's own context and,
// when reply is set, copies the response back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, reply bool) {
	u := *p.target
	u.Path = r.URL.Path
	u.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(p.ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		p.countForward(false)
		hangUp(w)
		return
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
		hangUp(w)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	p.countForward(err == nil)
	if err != nil || !reply {
		if err != nil {
			hangUp(w)
		}
		return
	}
	for k, vs := range resp.Header {
		if isHopByHop(k) {
			continue
		}
		w.Header()[k] = append([]string(nil), vs...)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

func (p *Proxy) countForward(ok bool) {
	p.mu.Lock()
	p.forwarded++
	if !ok {
		p.forwardErrs++
	}
	p.mu.Unlock()
}

// writeError answers with DynamoDB's JSON error shape, which the AWS SDK
// decodes by its __type.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	body := fmt.Sprintf(`{"__type":"com.amazonaws.dynamodb.v20120810#%s","message":%q}`, code, msg)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", "faultproxy")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
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
