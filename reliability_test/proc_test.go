package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/faultproxy"
	"github.com/ddblock/ddblock/internal/mutexcheck"
)

// workerProc is a worker process position: one incarnation at a time,
// started, killed, paused and stopped by the test, which reports as a
// problem any exit it did not cause (workerSlot is one).
type workerProc struct {
	name    string
	problem func(format string, args ...any)

	mu       sync.Mutex
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	stdout   *bytes.Buffer
	stderr   *bytes.Buffer
	exited   chan struct{}
	expected *atomic.Bool // set before we end the process on purpose
	tail     *eventTail
}

// launchLocked starts cmd as incarnation id, following its event log
// with tail; w.mu is held.
func (w *workerProc) launchLocked(id string, cmd *exec.Cmd, tail *eventTail) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.problem("worker %s: %v", id, err)
		return
	}
	stdout, stderr := &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		w.problem("starting worker %s: %v", id, err)
		return
	}
	exited := make(chan struct{})
	expected := new(atomic.Bool)
	w.cmd, w.stdin, w.stdout, w.stderr, w.exited, w.expected, w.tail = cmd, stdin, stdout, stderr, exited, expected, tail
	go func() {
		err := cmd.Wait()
		if !expected.Load() {
			w.problem("worker %s exited on its own: %v\n%s", id, err, stderr.String())
		}
		close(exited)
	}()
}

// waitOpen follows the current incarnation's event log until it shows
// something open (a tenure, a write under way: see eventTail), for at
// most limit; false when nothing showed.
func (w *workerProc) waitOpen(ctx context.Context, limit time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return false
	}
	deadline := time.Now().Add(limit)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if w.tail.anyOpen() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// kill sends SIGKILL and waits for the process to go.
func (w *workerProc) kill() {
	w.mu.Lock()
	cmd, exited, expected := w.cmd, w.exited, w.expected
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	expected.Store(true)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// pause stops the process for d, then lets it go on.
func (w *workerProc) pause(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil {
		return
	}
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		w.problem("SIGSTOP %s: %v", w.name, err)
		return
	}
	time.Sleep(d)
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		w.problem("SIGCONT %s: %v", w.name, err)
	}
}

// finish asks the worker to end (by closing its stdin) and waits for it,
// for at most grace; it returns what the worker printed, and false (with
// the problem reported) when it did not end cleanly.
func (w *workerProc) finish(grace time.Duration) ([]byte, bool) {
	w.mu.Lock()
	cmd, stdin, exited, expected, stdout, stderr := w.cmd, w.stdin, w.exited, w.expected, w.stdout, w.stderr
	w.mu.Unlock()
	if cmd == nil {
		return nil, false
	}
	expected.Store(true)
	_ = stdin.Close()
	select {
	case <-exited:
	case <-time.After(grace):
		w.problem("worker %s did not stop within %v of its stdin closing", w.name, grace)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return nil, false
	}
	if !cmd.ProcessState.Success() {
		w.problem("worker %s stopped with %v: %s", w.name, cmd.ProcessState, stderr.String())
		return nil, false
	}
	return stdout.Bytes(), true
}

// killNow is the test's last resort: no worker outlives it.
func (w *workerProc) killNow() {
	w.mu.Lock()
	cmd, exited, expected := w.cmd, w.exited, w.expected
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	expected.Store(true)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// eventTail reads a growing event log and keeps the set of things open
// in it, as track says which event opens or closes which key: tenures
// (acquired, not yet ended) for the checker, writes under way (logged,
// no outcome yet) for the lost-update run.
type eventTail struct {
	path    string
	offset  int64
	partial []byte
	open    map[string]bool
	track   func(ev mutexcheck.Event) (key string, opens, closes bool)
}

func newEventTail(path string, track func(ev mutexcheck.Event) (key string, opens, closes bool)) *eventTail {
	return &eventTail{path: path, open: map[string]bool{}, track: track}
}

// tenures tracks the tenures in progress.
func tenures(ev mutexcheck.Event) (string, bool, bool) {
	return ev.Tenure, ev.Kind == mutexcheck.Acquired, ev.Kind == mutexcheck.Ended
}

// writesUnderWay tracks the counter writes sent and not yet answered.
func writesUnderWay(ev mutexcheck.Event) (string, bool, bool) {
	return ev.Note, ev.Kind == mutexcheck.Write, ev.Kind == mutexcheck.Incremented || ev.Kind == mutexcheck.NotApplied
}

func (t *eventTail) anyOpen() bool {
	f, err := os.Open(t.path)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, _ := f.ReadAt(buf, t.offset)
		if n == 0 {
			break
		}
		t.offset += int64(n)
		t.partial = append(t.partial, buf[:n]...)
	}
	if last := bytes.LastIndexByte(t.partial, '\n'); last >= 0 {
		events, _ := mutexcheck.Parse(bytes.NewReader(t.partial[:last+1]))
		t.partial = append([]byte(nil), t.partial[last+1:]...)
		for _, ev := range events {
			switch key, opens, closes := t.track(ev); {
			case opens:
				t.open[key] = true
			case closes:
				delete(t.open, key)
			}
		}
	}
	return len(t.open) > 0
}

// workers is N worker processes ("w0", "w1", ...) of Clients lock
// clients each (./worker), each process behind a proxy of its own, and
// in the lost-update run (chaosConfig.Counters) incrementers. Worker 0's
// clients use the session flavours, worker 1's plain and fencing: every
// kind is killed and paused; every other worker's odd clients campaign
// in elections. About every Every a worker is struck: one strike in
// three is a SIGKILL (unless PausesOnly; the worker is restarted), the
// others a SIGSTOP for PauseMin to PauseMax (zero: from the heartbeat
// period to twice the lease plus the safe period), then SIGCONT. A
// strike waits, up to a second, for something open in the worker (a
// tenure; in the lost-update run a write under way), then up to
// StrikeWithin more, to strike at a random point of it. With fair
// waiters, strikes aim at the front of lines (fair_test.go), and Crowd
// more clients in each worker wait fairly for the first key's lock
// only, so that a kill takes several waiters of one line at once.
// TrustContext makes the WithLock holders check only their function's
// context (see mutexcheck.Holder.TrustContext).
type workers struct {
	N, Clients         int
	Every              time.Duration
	PauseMin, PauseMax time.Duration
	StrikeWithin       time.Duration
	PausesOnly         bool
	TrustContext       bool
	Crowd              int
}

func defaultWorkers(n, clients int) workers {
	return workers{N: n, Clients: clients, Every: 1200 * time.Millisecond, StrikeWithin: 30 * time.Millisecond}
}

func (k workers) describe() string {
	return fmt.Sprintf("%d worker processes x %d clients", k.N, k.Clients)
}

func (k workers) start(c *chaos, _ context.Context) party {
	p := &workersParty{c: c, k: k}
	if k.N > 0 {
		p.bin = workerBinary(c.t)
	}
	for i := range k.N {
		proxy := c.proxy(fmt.Sprintf("w%d.*", i))
		w := &workerSlot{p: p, proxy: proxy, flavour: i, workerProc: workerProc{name: fmt.Sprintf("w%d", i), problem: c.problem}}
		p.slots = append(p.slots, w)
		w.start()
	}
	c.t.Cleanup(func() {
		for _, w := range p.slots {
			w.killNow()
		}
	})
	return p
}

type workersParty struct {
	c     *chaos
	k     workers
	bin   string
	slots []*workerSlot
}

// disturb kills or pauses a worker about every k.Every.
func (p *workersParty) disturb(ctx context.Context) {
	c, k := p.c, p.k
	if len(p.slots) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(c.cfg.Seed, 2))
	for n := 0; sleep(ctx, around(rng, k.Every)); n++ {
		kill := n%3 == 1 && !k.PausesOnly
		// With fair waiters, every kill and one pause in two strike at
		// the front of a line (fair_test.go): a worker with the first
		// two tickets of a line (or two tickets in one), or the first.
		var w *workerSlot
		headSecond, front, aimed := false, false, false
		if c.cfg.Fair && (kill || n%3 == 0) {
			w, headSecond = p.huntFront(ctx, kill)
			front = w != nil
		}
		if w == nil {
			w = p.slots[rng.IntN(len(p.slots))]
			// Strike while the worker has something open, at a random
			// point of it, when it does so within a second.
			if aimed = w.waitOpen(ctx, time.Second); aimed && k.StrikeWithin > 0 {
				time.Sleep(between(rng, 0, k.StrikeWithin))
			}
		}
		if kill {
			id := w.id()
			w.kill()
			now := mutexcheck.Now()
			c.log.Trouble(id, now, now, "kill", 0)
			c.count("kill")
			if front {
				c.fair.add(func(t *fairTrouble) {
					t.BunchKills++
					if headSecond {
						t.HeadSecondKills++
					}
				})
			}
			time.Sleep(between(rng, 50*time.Millisecond, 300*time.Millisecond))
			w.start()
			continue
		}
		lo, hi := k.PauseMin, k.PauseMax
		if hi == 0 {
			lo, hi = c.cfg.Heartbeat, 2*c.cfg.Lease+c.cfg.Safe
		}
		d := between(rng, lo, hi)
		w.pause(d)
		c.count("pause")
		if aimed {
			c.count("aimed-pause")
		}
		if d > c.cfg.Lease {
			c.count("long-pause")
		}
		if front {
			c.fair.add(func(t *fairTrouble) {
				t.HeadPauses++
				if d > c.cfg.Lease {
					t.LongHeadPauses++
				}
			})
		}
	}
}

// stop asks every worker to finish, at once.
func (p *workersParty) stop() {
	var wg sync.WaitGroup
	for _, w := range p.slots {
		wg.Go(w.stop)
	}
	wg.Wait()
}

// workerSlot is one worker process position; a killed worker is
// replaced by a new incarnation in the same slot, behind the same proxy.
type workerSlot struct {
	workerProc
	p       *workersParty
	proxy   *faultproxy.Proxy
	flavour int
	inc     int
}

// id is the name of the worker's current incarnation.
func (w *workerSlot) id() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%s.%d", w.name, w.inc)
}

func (w *workerSlot) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inc++
	c, k := w.p.c, w.p.k
	c.count("worker-start")
	cfg := c.cfg
	id := fmt.Sprintf("%s.%d", w.name, w.inc)
	logPath := filepath.Join(c.dir, id+".log")
	args := []string{
		"-endpoint", w.proxy.URL(),
		"-table", c.env.table,
		"-keys", strings.Join(c.keys, ","),
		"-clients", fmt.Sprint(k.Clients),
		"-id", id,
		"-log", logPath,
		"-heartbeat", cfg.Heartbeat.String(), "-safe", cfg.Safe.String(), "-lease", cfg.Lease.String(),
		"-hold-min", cfg.HoldMin.String(), "-hold-max", cfg.HoldMax.String(), "-step", cfg.Step.String(),
		"-long-share", fmt.Sprint(cfg.LongShare), "-long-min", cfg.LongMin.String(), "-long-max", cfg.LongMax.String(),
		"-retry-period", cfg.RetryPeriod.String(),
		"-attempts", fmt.Sprint(cfg.Attempts),
		"-flavour", fmt.Sprint(2*w.flavour + 3), "-max-clock-skew", cfg.MaxClockSkew.String(),
		fmt.Sprintf("-trust-context=%v", k.TrustContext),
		fmt.Sprintf("-elections=%v", w.flavour%2 == 1),
		"-semaphore-slots", fmt.Sprint(cfg.SemaphoreSlots),
		fmt.Sprintf("-fair=%v", cfg.Fair),
		"-fair-timeout", cfg.FairTimeout.String(),
		"-crowd", fmt.Sprint(k.Crowd),
		"-set-size", fmt.Sprint(cfg.SetSize),
		"-seed", fmt.Sprint(cfg.Seed + uint64(w.inc*100+w.flavour)),
	}
	track := tenures
	if cw := cfg.Counters; cw != nil {
		args = append(args,
			"-counter-table", c.data,
			fmt.Sprintf("-guarded=%v", cw.Guarded),
			"-inc-min", fmt.Sprint(cw.IncMin), "-inc-max", fmt.Sprint(cw.IncMax),
			"-stall-share", fmt.Sprint(cw.WorkerStallShare), "-stall", cw.WorkerStall.String())
		track = writesUnderWay
	}
	w.launchLocked(id, exec.Command(w.p.bin, args...), newEventTail(logPath, track))
}

// stop asks the worker to finish (by closing its stdin), waits for it,
// and adds its counters.
func (w *workerSlot) stop() {
	id := w.id()
	out, ok := w.finish(60 * time.Second)
	now := mutexcheck.Now()
	c := w.p.c
	c.log.Trouble(id, now, now, "exit", 0)
	if !ok {
		return
	}
	var res struct{ Stats ddblock.Stats }
	if err := json.Unmarshal(out, &res); err != nil {
		c.problem("worker %s printed %q: %v", w.name, out, err)
		return
	}
	c.addStats(res.Stats)
}
