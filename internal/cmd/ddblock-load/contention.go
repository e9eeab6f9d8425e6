package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The contention scenario (--scenario contention): K contenders, each a
// ddblock client of its own, spread over P worker processes, loop
// acquire, hold for H, release (then pause for --think, 0 by default) on
// one key (or on each of --keys keys, contender i on key i mod keys) for
// the window's duration. Waiters poll
// every --retry-period, in the way --wait-mode names. It reports how
// fairly the key went round (acquisitions per contender, Jain's index,
// the longest streak by one contender), how long the waits were, how
// fast the key passed from one holder to the next, and what the waiting
// cost on the wire (reads and writes per second per key).

// contentionConfig is the scenario's part of the command line.
type contentionConfig struct {
	contenders int
	procs      int
	keys       int
	hold       time.Duration
	retry      time.Duration
	// think is a pause after each release before asking again: 0 (the
	// default) asks again at once, as the measurement did.
	think time.Duration
	mode  string
}

// Scenario names for --scenario.
const (
	scenarioHeartbeats = "heartbeats"
	scenarioContention = "contention"
)

// addContentionFlags registers the scenario's flags.
func addContentionFlags(fs *flag.FlagSet, c *contentionConfig) {
	fs.IntVar(&c.contenders, "contenders", 12, "contention: contenders, each with a ddblock client of its own")
	fs.IntVar(&c.procs, "procs", 3, "contention: worker processes the contenders are spread over (round robin)")
	fs.IntVar(&c.keys, "keys", 1, "contention: keys contended for (contender i waits for key i mod keys)")
	fs.DurationVar(&c.hold, "hold", 30*time.Millisecond, "contention: how long each acquisition holds the lock")
	fs.DurationVar(&c.retry, "retry-period", 50*time.Millisecond, "contention: waiters' retry period (AcquireOptions.RetryPeriod)")
	fs.DurationVar(&c.think, "think", 0, "contention: pause after each release before asking again (0: at once)")
	fs.StringVar(&c.mode, "wait-mode", "unfair", "contention: how waiters wait: "+waitModeNames())
}

// check lists what is wrong with the scenario's settings.
func (c *contentionConfig) check() []string {
	var problems []string
	if c.contenders <= 0 || c.procs <= 0 || c.keys <= 0 {
		problems = append(problems, "--contenders, --procs and --keys must be positive")
	} else {
		if c.procs > c.contenders {
			problems = append(problems, fmt.Sprintf("--procs %d is more than --contenders %d: a worker would have none", c.procs, c.contenders))
		}
		if c.keys > c.contenders {
			problems = append(problems, fmt.Sprintf("--keys %d is more than --contenders %d: a key would have none", c.keys, c.contenders))
		}
	}
	if c.hold < 0 {
		problems = append(problems, "--hold must not be negative")
	}
	if c.think < 0 {
		problems = append(problems, "--think must not be negative")
	}
	if c.retry <= 0 {
		problems = append(problems, "--retry-period must be positive")
	}
	if _, err := lookupWaitMode(c.mode); err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// contentionResult is one run of the scenario.
type contentionResult struct {
	cfg       contentionConfig
	window    time.Duration
	loadStart string
	loadEnd   string
	procOf    map[int]int // contender ID → worker process
	stats     contentionStats
}

// runContention runs the scenario against endpoint. childEnv is the
// environment the workers get (the server's credentials: see
// testserver.Server.ChildEnv).
func runContention(ctx context.Context, ddb ddbClient, endpoint string, childEnv []string, cfg *config) (*contentionResult, error) {
	cc := cfg.contention
	table, err := createTable(ctx, ddb, "contention")
	if err != nil {
		return nil, err
	}
	defer deleteTable(ddb, table)

	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable to start the workers: %w", err)
	}
	res := &contentionResult{cfg: cc, procOf: map[int]int{}}
	configs := make([]workerConfig, cc.procs)
	for p := range configs {
		configs[p] = workerConfig{Proc: p, Endpoint: endpoint, Table: table, Mode: cc.mode,
			Hold: cc.hold, Retry: cc.retry, Think: cc.think, Period: cfg.period, Safe: cfg.safe, Lease: cfg.lease}
	}
	for i := range cc.contenders {
		p := i % cc.procs
		configs[p].Contenders = append(configs[p].Contenders, workerContender{ID: i, Key: contentionKey(i % cc.keys)})
		res.procOf[i] = p
	}

	workers := make([]*worker, 0, cc.procs)
	defer func() {
		for _, w := range workers {
			w.stop()
		}
	}()
	for p := range cc.procs {
		w, err := startWorker(ctx, exe, childEnv, configs[p])
		if err != nil {
			return nil, fmt.Errorf("worker %d: %w", p, err)
		}
		workers = append(workers, w)
	}
	// Every client made and warm before the window opens: on a busy
	// machine starting a process can take seconds.
	for _, w := range workers {
		var ready workerReady
		if err := w.read(ctx, 2*time.Minute, &ready); err != nil {
			return nil, fmt.Errorf("worker %d: waiting for it to be ready: %w", w.proc, err)
		}
		if !ready.Ready {
			return nil, fmt.Errorf("worker %d: %s", w.proc, ready.Err)
		}
	}

	res.loadStart = loadAverage()
	start := monoNow() + int64(200*time.Millisecond)
	end := start + int64(cfg.duration)
	for _, w := range workers {
		if err := json.NewEncoder(w.stdin).Encode(workerGo{Start: start, End: end}); err != nil {
			return nil, fmt.Errorf("worker %d: starting it: %w", w.proc, err)
		}
	}
	var reports []contenderReport
	for _, w := range workers {
		var rep workerReport
		// A worker reports once its last release (after the end) is
		// done.
		wait := time.Duration(end-monoNow()) + 2*time.Minute
		if err := w.read(ctx, wait, &rep); err != nil {
			return nil, fmt.Errorf("worker %d: waiting for its report: %w", w.proc, err)
		}
		if rep.Err != "" {
			return nil, fmt.Errorf("worker %d: %s", w.proc, rep.Err)
		}
		reports = append(reports, rep.Contenders...)
	}
	res.loadEnd = loadAverage()
	for _, w := range workers {
		if err := w.finish(); err != nil {
			return nil, fmt.Errorf("worker %d: %w", w.proc, err)
		}
	}
	if len(reports) != cc.contenders {
		return nil, fmt.Errorf("the workers reported %d contenders; want %d", len(reports), cc.contenders)
	}
	res.window = time.Duration(end - start)
	res.stats = aggregate(reports, start, end)
	return res, nil
}

func contentionKey(k int) string { return fmt.Sprintf("contention-%d", k) }

// worker is a worker process the parent started.
type worker struct {
	proc   int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	lines  chan lineOrErr
	done   bool
}

type lineOrErr struct {
	line []byte
	err  error
}

// startWorker starts this executable as a worker and sends it its
// configuration.
func startWorker(ctx context.Context, exe string, env []string, cfg workerConfig) (*worker, error) {
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(append([]string(nil), env...), workerEnv+"=contention")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &worker{proc: cfg.Proc, cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), lines: make(chan lineOrErr)}
	// One reader goroutine per worker, ended by the pipe's EOF when the
	// process exits (finish, or stop's kill).
	go func() {
		defer close(w.lines)
		for {
			line, err := w.stdout.ReadBytes('\n')
			if len(line) > 0 || err != nil {
				w.lines <- lineOrErr{line, err}
			}
			if err != nil {
				return
			}
		}
	}()
	if err := json.NewEncoder(stdin).Encode(cfg); err != nil {
		w.stop()
		return nil, fmt.Errorf("sending its configuration: %w", err)
	}
	return w, nil
}

// read reads the worker's next line into v, giving up after wait.
func (w *worker) read(ctx context.Context, wait time.Duration, v any) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l, ok := <-w.lines:
		if !ok || (l.err != nil && len(l.line) == 0) {
			return errors.New("it exited (see its standard error above)")
		}
		if err := json.Unmarshal(l.line, v); err != nil {
			return fmt.Errorf("reading %q: %w", strings.TrimSpace(string(l.line)), err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("no answer in %v", wait)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish closes the worker's input and waits for it to exit.
func (w *worker) finish() error {
	w.done = true
	_ = w.stdin.Close()
	for range w.lines {
	}
	return w.cmd.Wait()
}

// stop kills a worker that did not finish, by its pid, and reaps it.
func (w *worker) stop() {
	if w.done {
		return
	}
	w.done = true
	_ = w.stdin.Close()
	_ = w.cmd.Process.Kill()
	for range w.lines {
	}
	_ = w.cmd.Wait()
}

func (r *contentionResult) print(out io.Writer) {
	s := r.stats
	fmt.Fprintf(out, "acquisitions: %d in %v (%.1f/s); per contender min %d / max %d; Jain's fairness index %.3f\n",
		s.total, r.window.Round(time.Millisecond), float64(s.total)/r.window.Seconds(), s.minAcq, s.maxAcq, s.jain)
	var b strings.Builder
	for i, id := range s.contenders {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "c%d/p%d %d", id, r.procOf[id], s.perContender[i])
	}
	fmt.Fprintf(out, "              per contender (contender/process count): %s\n", b.String())
	fmt.Fprintf(out, "wait:         AcquireLock called → lock returned: p50 %v / p99 %v / max %v over %d waits; %d still waiting at the end, the longest for %v (counted in the max)\n",
		s.waits.pct(50), s.waits.pct(99), round(s.waitMax), len(s.waits), len(s.openWaits), s.openWaits.max())
	fmt.Fprintf(out, "              begun after every contender was served once: p50 %v / p99 %v / max %v over %d waits; the first acquisition came %v after the window opened\n",
		s.steadyWaits.pct(50), s.steadyWaits.pct(99), s.steadyWaits.max(), len(s.steadyWaits), s.firstAcquired.Round(time.Microsecond))
	fmt.Fprintf(out, "order:        at most %d acquisitions by others inside one wait (K−1 = %d when served in arrival order)\n", s.overtaken, s.mostContenders()-1)
	fmt.Fprintf(out, "hold:         AcquireLock returned → Release called: p50 %v / p99 %v / max %v\n", s.holds.pct(50), s.holds.pct(99), s.holds.max())
	fmt.Fprintf(out, "streak:       longest %d acquisitions in a row by contender %d (key %s)\n", s.streak, s.streakBy, s.streakKey)
	fmt.Fprintf(out, "handoff:      Release called → the next holder's AcquireLock returned: p50 %v / p99 %v / max %v over %d handoffs, %d of them back to the releaser; %d overlaps\n",
		s.handoffs.pct(50), s.handoffs.pct(99), s.handoffs.max(), len(s.handoffs), s.handoffSelf, s.overlaps)
	fmt.Fprintf(out, "              to another contender than the releaser: p50 %v / p99 %v / max %v over %d handoffs\n",
		s.handoffOther.pct(50), s.handoffOther.pct(99), s.handoffOther.max(), len(s.handoffOther))
	for _, k := range s.keys {
		fmt.Fprintf(out, "key %-10s %d contenders, %d acquisitions, longest streak %d (contender %d); %.1f reads/s, %.1f writes/s on the wire\n",
			k.key+":", k.contenders, k.acquisitions, k.streak, k.streakBy, k.readsPerS, k.writesPerS)
	}
	if s.acquireErrors > 0 || s.releaseErrors > 0 {
		fmt.Fprintf(out, "errors:       %d acquires and %d releases failed; the first: %s\n", s.acquireErrors, s.releaseErrors, s.firstError)
	}
	if s.overlaps > 0 {
		fmt.Fprintf(out, "OVERLAPS:     %d times the next holder had the key before the previous one called Release\n", s.overlaps)
	}
}

// jsonContention is the contention scenario as --json prints it, one
// object a line. Durations are in seconds (_s) or milliseconds (_ms).
type jsonContention struct {
	Scenario      string  `json:"scenario"` // "contention"
	Server        string  `json:"server"`
	WaitMode      string  `json:"wait_mode"`
	Contenders    int     `json:"contenders"`
	Processes     int     `json:"processes"`
	Keys          int     `json:"keys"`
	HoldMs        float64 `json:"hold_ms"`
	RetryPeriodMs float64 `json:"retry_period_ms"`
	ThinkMs       float64 `json:"think_ms"`
	WindowS       float64 `json:"window_s"`

	Acquisitions int `json:"acquisitions"`
	// AcquisitionsPerContender is by contender ID (0 to contenders-1).
	AcquisitionsPerContender []int   `json:"acquisitions_per_contender"`
	AcquisitionsMin          int     `json:"acquisitions_min"`
	AcquisitionsMax          int     `json:"acquisitions_max"`
	JainIndex                float64 `json:"jain_index"`
	// The waits, AcquireLock called to the lock returned. The max counts
	// the waits still open at the window's end, up to the end.
	WaitP50S       float64 `json:"wait_p50_s"`
	WaitP99S       float64 `json:"wait_p99_s"`
	WaitMaxS       float64 `json:"wait_max_s"`
	WaitsOpenAtEnd int     `json:"waits_open_at_end"`
	// LongestStreak is the most acquisitions of one key in a row by one
	// contender, over the keys.
	LongestStreak          int `json:"longest_streak"`
	LongestStreakContender int `json:"longest_streak_contender"`
	// The handoffs: from the holder's call to Release to the next
	// holder's AcquireLock returning, on CLOCK_MONOTONIC across the
	// processes. HandoffsToSelf counts those where the releaser was the
	// next holder; Overlaps, pairs where the next holder had the key
	// before the previous called Release (must be 0).
	HandoffP50Ms float64 `json:"handoff_p50_ms"`
	HandoffP99Ms float64 `json:"handoff_p99_ms"`
	Handoffs     int     `json:"handoffs"`
	// The same over the handoffs to another contender than the
	// releaser: a waiter's, not the releaser's own quick re-acquire.
	HandoffOtherP50Ms float64 `json:"handoff_other_p50_ms"`
	HandoffOtherP99Ms float64 `json:"handoff_other_p99_ms"`
	HandoffsOther     int     `json:"handoffs_other"`
	HandoffsToSelf    int     `json:"handoffs_to_self"`
	Overlaps          int     `json:"overlaps"`
	// OvertakenMax is the most acquisitions of a key by others inside
	// one wait: at most K−1 (contenders of the key less one) when
	// waiters are served in arrival order.
	OvertakenMax int `json:"overtaken_max"`
	// The waits begun after every contender was served once (the start,
	// where all come at once, left out).
	SteadyWaitP50S float64 `json:"steady_wait_p50_s"`
	SteadyWaitP99S float64 `json:"steady_wait_p99_s"`
	SteadyWaitMaxS float64 `json:"steady_wait_max_s"`
	SteadyWaits    int     `json:"steady_waits"`
	// FirstAcquiredMs is how long after the window opened the first
	// acquisition came.
	FirstAcquiredMs float64 `json:"first_acquired_ms"`
	// The holds, AcquireLock returned to Release called: the hold asked
	// for (--hold) plus however late the contender's timer and goroutine
	// ran.
	HoldP50Ms float64 `json:"hold_p50_ms"`
	HoldP99Ms float64 `json:"hold_p99_ms"`
	HoldMaxMs float64 `json:"hold_max_ms"`
	// PerKey is each key's figures; reads are GetItem calls sent by all
	// its contenders in the window, writes PutItem, UpdateItem and
	// DeleteItem calls, per second.
	PerKey []jsonContentionKey `json:"per_key"`

	AcquireErrors    int    `json:"acquire_errors"`
	ReleaseErrors    int    `json:"release_errors"`
	LoadAverageStart string `json:"load_average_start"`
	LoadAverageEnd   string `json:"load_average_end"`
}

type jsonContentionKey struct {
	Key           string  `json:"key"`
	Contenders    int     `json:"contenders"`
	Acquisitions  int     `json:"acquisitions"`
	LongestStreak int     `json:"longest_streak"`
	ReadsPerS     float64 `json:"reads_per_s"`
	WritesPerS    float64 `json:"writes_per_s"`
	HandoffP50Ms  float64 `json:"handoff_p50_ms"`
	HandoffP99Ms  float64 `json:"handoff_p99_ms"`
}

func (r *contentionResult) json(server string) jsonContention {
	s := r.stats
	j := jsonContention{
		Scenario: scenarioContention, Server: server, WaitMode: r.cfg.mode,
		Contenders: r.cfg.contenders, Processes: r.cfg.procs, Keys: r.cfg.keys,
		HoldMs: ms(r.cfg.hold), RetryPeriodMs: ms(r.cfg.retry), ThinkMs: ms(r.cfg.think), WindowS: r.window.Seconds(),
		Acquisitions: s.total, AcquisitionsPerContender: s.perContender,
		AcquisitionsMin: s.minAcq, AcquisitionsMax: s.maxAcq, JainIndex: s.jain,
		WaitP50S: s.waits.pct(50).Seconds(), WaitP99S: s.waits.pct(99).Seconds(), WaitMaxS: s.waitMax.Seconds(),
		WaitsOpenAtEnd: len(s.openWaits),
		LongestStreak:  s.streak, LongestStreakContender: s.streakBy,
		HandoffP50Ms: ms(s.handoffs.pct(50)), HandoffP99Ms: ms(s.handoffs.pct(99)),
		Handoffs:          len(s.handoffs),
		HandoffOtherP50Ms: ms(s.handoffOther.pct(50)), HandoffOtherP99Ms: ms(s.handoffOther.pct(99)), HandoffsOther: len(s.handoffOther),
		HandoffsToSelf: s.handoffSelf, Overlaps: s.overlaps,
		OvertakenMax:   s.overtaken,
		SteadyWaitP50S: s.steadyWaits.pct(50).Seconds(), SteadyWaitP99S: s.steadyWaits.pct(99).Seconds(),
		SteadyWaitMaxS: s.steadyWaits.max().Seconds(), SteadyWaits: len(s.steadyWaits),
		FirstAcquiredMs: ms(s.firstAcquired),
		HoldP50Ms:       ms(s.holds.pct(50)), HoldP99Ms: ms(s.holds.pct(99)), HoldMaxMs: ms(s.holds.max()),
		AcquireErrors: s.acquireErrors, ReleaseErrors: s.releaseErrors,
		LoadAverageStart: r.loadStart, LoadAverageEnd: r.loadEnd,
	}
	for _, k := range s.keys {
		j.PerKey = append(j.PerKey, jsonContentionKey{
			Key: k.key, Contenders: k.contenders, Acquisitions: k.acquisitions, LongestStreak: k.streak,
			ReadsPerS: k.readsPerS, WritesPerS: k.writesPerS,
			HandoffP50Ms: ms(k.handoffs.pct(50)), HandoffP99Ms: ms(k.handoffs.pct(99)),
		})
	}
	return j
}

// contentionMain runs the scenario once and prints its report: as text
// on out, and with --json as one object on stdout.
func contentionMain(ctx context.Context, ddb ddbClient, endpoint string, env []string, server string, cfg *config, out, stdout io.Writer) error {
	cc := cfg.contention
	fmt.Fprintf(out, "\n== contention: %d contenders in %d processes on %d key(s), hold %v, think %v, retry period %v, wait mode %s, window %v ==\n",
		cc.contenders, cc.procs, cc.keys, cc.hold, cc.think, cc.retry, cc.mode, cfg.duration)
	fmt.Fprintf(out, "load average before the workers start: %s\n", loadAverage())
	r, err := runContention(ctx, ddb, endpoint, env, cfg)
	if err != nil {
		return fmt.Errorf("contention: %w", err)
	}
	fmt.Fprintf(out, "load average at the window's start: %s\n", r.loadStart)
	r.print(out)
	fmt.Fprintf(out, "load average at the window's end: %s\n", r.loadEnd)
	if cfg.json {
		return json.NewEncoder(stdout).Encode(r.json(server))
	}
	return nil
}
