package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/testserver"
)

// The contention scenario's worker processes. The parent starts each as
// a copy of its own executable with workerEnv set in the environment,
// and talks to it over its standard input and output, one JSON object a
// line:
//
//	parent → worker  workerConfig    which contenders to run, where
//	worker → parent  workerReady     every contender's client made and warm
//	parent → worker  workerGo        the window, on CLOCK_MONOTONIC
//	worker → parent  workerReport    what each contender did
//
// Standard error is the parent's, for anything a person should read.

// workerEnv, set to "contention", makes the executable a worker.
const workerEnv = "DDBLOCK_LOAD_WORKER"

// isWorker reports whether this process was started as a worker.
func isWorker() bool { return os.Getenv(workerEnv) == "contention" }

// workerConfig tells a worker what to run.
type workerConfig struct {
	Proc     int    `json:"proc"`
	Endpoint string `json:"endpoint"`
	Table    string `json:"table"`
	Mode     string `json:"mode"`
	// Durations, in nanoseconds.
	Hold   time.Duration `json:"hold"`
	Retry  time.Duration `json:"retry"`
	Think  time.Duration `json:"think"`
	Period time.Duration `json:"period"`
	Safe   time.Duration `json:"safe"`
	Lease  time.Duration `json:"lease"`
	// Contenders are this worker's: each an ID and its key.
	Contenders []workerContender `json:"contenders"`
}

type workerContender struct {
	ID  int    `json:"id"`
	Key string `json:"key"`
}

type workerReady struct {
	Ready bool   `json:"ready"`
	Err   string `json:"err,omitempty"`
}

// workerGo starts the window [Start, End), in CLOCK_MONOTONIC ns.
type workerGo struct {
	Start int64 `json:"start"`
	End   int64 `json:"end"`
}

type workerReport struct {
	Proc       int               `json:"proc"`
	Contenders []contenderReport `json:"contenders"`
	Err        string            `json:"err,omitempty"`
}

// workerMain runs a worker: it returns the process's exit code.
func workerMain(in io.Reader, out io.Writer) int {
	if err := runWorker(bufio.NewReader(in), out); err != nil {
		fmt.Fprintln(os.Stderr, "ddblock-load worker:", err)
		return 1
	}
	return 0
}

func runWorker(in *bufio.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	var cfg workerConfig
	if err := readLine(in, &cfg); err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
	}
	contenders, err := newContenders(&cfg)
	if err != nil {
		_ = enc.Encode(workerReady{Err: err.Error()})
		return err
	}
	defer closeContenders(contenders)
	if err := enc.Encode(workerReady{Ready: true}); err != nil {
		return err
	}
	var g workerGo
	if err := readLine(in, &g); err != nil {
		return fmt.Errorf("waiting for the start: %w", err)
	}
	rep := workerReport{Proc: cfg.Proc}
	var wg sync.WaitGroup
	reports := make([]contenderReport, len(contenders))
	for i, c := range contenders {
		c.wire.setWindow(g.Start, g.End)
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = c.run(g.Start, g.End)
		}()
	}
	wg.Wait()
	rep.Contenders = reports
	return enc.Encode(rep)
}

// readLine reads one JSON object from one line.
func readLine(in *bufio.Reader, v any) error {
	line, err := in.ReadBytes('\n')
	if err != nil && (len(line) == 0 || !errors.Is(err, io.EOF)) {
		return err
	}
	return json.Unmarshal(line, v)
}

// contender is one client looping acquire, hold, release on its key.
type contender struct {
	id     int
	proc   int
	key    string
	mode   waitMode
	hold   time.Duration
	retry  time.Duration
	think  time.Duration
	client *ddblock.Client
	wire   *countingDDB
}

func newContenders(cfg *workerConfig) ([]*contender, error) {
	mode, err := lookupWaitMode(cfg.Mode)
	if err != nil {
		return nil, err
	}
	_, shared := mode.(interface{ sharedClient() bool })
	var cs []*contender
	for _, wc := range cfg.Contenders {
		own := wc.Key
		if shared {
			own = "" // one client's session serves every contender of the process
		}
		wire := newCountingDDB(testserver.ChildClient(cfg.Endpoint, 0), own)
		if shared && len(cs) > 0 {
			// One client for the process: the first contender's wire
			// counts every call of it, the others' stay at zero.
			cs = append(cs, &contender{id: wc.ID, proc: cfg.Proc, key: wc.Key, mode: mode, hold: cfg.Hold, retry: cfg.Retry, think: cfg.Think, client: cs[0].client, wire: wire})
			continue
		}
		// Each contender has a client of its own, down to the SDK
		// client and its connections, as separate programs would.
		opts := []ddblock.Option{
			ddblock.WithTableName(cfg.Table),
			ddblock.WithHeartbeatPeriod(cfg.Period),
			ddblock.WithSafePeriod(cfg.Safe),
			ddblock.WithLeaseDuration(cfg.Lease),
			ddblock.WithOwnerName(fmt.Sprintf("contender-%d", wc.ID)),
			ddblock.WithLogger(slog.New(slog.DiscardHandler)),
		}
		client, err := ddblock.New(wire, append(opts, mode.clientOptions()...)...)
		if err != nil {
			closeContenders(cs)
			return nil, fmt.Errorf("contender %d: %w", wc.ID, err)
		}
		cs = append(cs, &contender{id: wc.ID, proc: cfg.Proc, key: wc.Key, mode: mode, hold: cfg.Hold, retry: cfg.Retry, think: cfg.Think, client: client, wire: wire})
	}
	// Open each client's connection before the window: a read of its key
	// (none of them holds it yet, and uncounted: the window is not set).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range cs {
		if _, err := c.client.GetLock(ctx, c.key, ""); err != nil && ddblock.CodeOf(err) != ddblock.CodeLockNotFound {
			closeContenders(cs)
			return nil, fmt.Errorf("contender %d: warming up: %w", c.id, err)
		}
	}
	return cs, nil
}

func closeContenders(cs []*contender) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range cs {
		_ = c.client.Close(ctx, true)
	}
}

// run loops acquire, hold, release from start until end, and reports.
func (c *contender) run(start, end int64) contenderReport {
	r := contenderReport{ID: c.id, Proc: c.proc, Key: c.key}
	if d := start - monoNow(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	// The window's end, as a deadline the library understands.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Duration(end-monoNow())))
	defer cancel()
	// No waiter gives up before the window ends: the wait is what is
	// measured, however long.
	timeout := time.Duration(end-start) + time.Minute
	noteErr := func(err error) {
		if r.FirstError == "" {
			r.FirstError = err.Error()
		}
	}
	for {
		waitStart := monoNow()
		if waitStart >= end {
			break
		}
		l, err := c.mode.acquire(ctx, c.client, c.key, c.retry, timeout)
		acquired := monoNow()
		if err != nil {
			if ctx.Err() != nil {
				r.OpenWait = waitStart
				break
			}
			r.AcquireErrors++
			noteErr(err)
			// Do not spin on an error that repeats.
			select {
			case <-ctx.Done():
			case <-time.After(c.retry):
			}
			continue
		}
		if acquired >= end {
			// Won only after the window: a wait the end cut short.
			r.OpenWait = waitStart
			c.release(l, &r, noteErr)
			break
		}
		time.Sleep(c.hold)
		releaseStart := monoNow()
		c.release(l, &r, noteErr)
		r.Acquisitions = append(r.Acquisitions, acqEvent{WaitStart: waitStart, Acquired: acquired, ReleaseStart: releaseStart, ReleaseDone: monoNow()})
		if c.think > 0 {
			time.Sleep(c.think)
		}
	}
	r.Calls = c.wire.snapshot()
	return r
}

func (c *contender) release(l *ddblock.Lock, r *contenderReport, noteErr func(error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.mode.release(ctx, l); err != nil {
		r.ReleaseErrors++
		noteErr(fmt.Errorf("release: %w", err))
	}
}

// countingDDB counts the DynamoDB calls a contender's client sends, per
// lock key, when they are sent inside the window [start, end): the calls
// on a key's line of fair waiters (its counter and its tickets) count
// with the key, and those on the client's session item with own, the key
// of the contender whose client it is (its session serves only its
// waits), or apart when own is empty (a client shared by contenders).
type countingDDB struct {
	ddblock.DynamoDBAPI
	own        string
	start, end atomic.Int64
	mu         sync.Mutex
	counts     map[string]wireCounts
}

func newCountingDDB(ddb ddblock.DynamoDBAPI, own string) *countingDDB {
	w := &countingDDB{DynamoDBAPI: ddb, own: own, counts: map[string]wireCounts{}}
	w.start.Store(1<<63 - 1) // nothing counts before the window is set
	return w
}

func (w *countingDDB) setWindow(start, end int64) {
	w.end.Store(end)
	w.start.Store(start)
}

// count adds one call to key's counts if it is sent inside the window.
func (w *countingDDB) count(key map[string]types.AttributeValue, add func(*wireCounts)) {
	now := monoNow()
	if now < w.start.Load() || now >= w.end.Load() {
		return
	}
	pk := ""
	if v, ok := key[ddblock.DefaultPartitionKeyName].(*types.AttributeValueMemberS); ok {
		pk = w.keyOf(v.Value)
	}
	w.mu.Lock()
	c := w.counts[pk]
	add(&c)
	w.counts[pk] = c
	w.mu.Unlock()
}

// keyOf is the lock key an item's partition key counts with. A key's
// line of fair waiters (--wait-mode fair) is counted with the key, its
// counter ("ddblock_line#" KEY) and its tickets ("ddblock_wait#" GEN "#"
// NUMBER "#" KEY) alike: their calls are part of waiting for it; so is
// the session item ("ddblock_session#...") its tickets name, when the
// client is the contender's own.
func (w *countingDDB) keyOf(pk string) string {
	if k, ok := strings.CutPrefix(pk, "ddblock_line#"); ok {
		return k
	}
	if rest, ok := strings.CutPrefix(pk, "ddblock_wait#"); ok {
		if _, rest, ok := strings.Cut(rest, "#"); ok { // the generation
			if _, k, ok := strings.Cut(rest, "#"); ok { // the number
				return k
			}
		}
		return pk
	}
	if strings.HasPrefix(pk, sessionKeyPrefix) && w.own != "" {
		return w.own
	}
	return pk
}

func (w *countingDDB) snapshot() map[string]wireCounts {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]wireCounts, len(w.counts))
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

// GetItem counts a read.
func (w *countingDDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	w.count(in.Key, func(c *wireCounts) { c.Get++ })
	return w.DynamoDBAPI.GetItem(ctx, in, o...)
}

// PutItem counts a write.
func (w *countingDDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	w.count(in.Item, func(c *wireCounts) { c.Put++ })
	return w.DynamoDBAPI.PutItem(ctx, in, o...)
}

// UpdateItem counts a write.
func (w *countingDDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	w.count(in.Key, func(c *wireCounts) { c.Update++ })
	return w.DynamoDBAPI.UpdateItem(ctx, in, o...)
}

// DeleteItem counts a write.
func (w *countingDDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	w.count(in.Key, func(c *wireCounts) { c.Delete++ })
	return w.DynamoDBAPI.DeleteItem(ctx, in, o...)
}
