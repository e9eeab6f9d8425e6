package main

import (
	"encoding/json"
	"io"
	"time"
)

// jsonResult is one scenario as --json prints it: one object a line, so
// that runs can be compared by a script. Durations are in seconds, and
// every name is settled: later scenarios (a session holding the locks,
// say) fill the same fields rather than new ones.
type jsonResult struct {
	Server  string  `json:"server"` // dynalite, dynamodb-local, or external (--endpoint)
	Locks   int     `json:"locks"`
	PeriodS float64 `json:"period_s"`
	SafeS   float64 `json:"safe_s"`
	LeaseS  float64 `json:"lease_s"`
	// Session is whether a session item stood in for the locks' own
	// heartbeats (--session). The heartbeat and gap fields then describe
	// that item's writes: each lock's gap is its session's, and its first
	// gap runs from its acquire to the first session write sent after it.
	Session     bool    `json:"session"`
	Concurrency int     `json:"heartbeat_concurrency"`
	TPS         int     `json:"heartbeat_tps"`
	WindowS     float64 `json:"window_s"`

	AcquireAllS float64 `json:"acquire_all_s"` // acquiring every lock, --acquire-workers at a time
	// HeartbeatWritesPerS counts the heartbeat UpdateItems of the window,
	// successful or failed (each is a write the table is billed for),
	// whatever their item, per second: the locks' own, or with --session
	// the session item's.
	HeartbeatWritesPerS float64 `json:"heartbeat_writes_per_s"`
	HeartbeatsFailed    int64   `json:"heartbeats_failed"` // of those, the failed ones (a count)
	// HeartbeatCallMaxMs is the window's slowest successful heartbeat
	// call, send to reply; HeartbeatCallsSlow counts those that took
	// over a tenth of a period.
	HeartbeatCallMaxMs float64 `json:"heartbeat_call_max_ms"`
	HeartbeatCallsSlow int64   `json:"heartbeat_calls_slow"`
	// CeilingWritesPerS is the server's best rate measured by this run,
	// 0 when it was not measured; ShareOfCeiling is 0 then too.
	CeilingWritesPerS float64 `json:"ceiling_writes_per_s"`
	ShareOfCeiling    float64 `json:"share_of_ceiling"`
	Rounds            uint64  `json:"rounds"`      // Stats.Rounds in the window
	LateRounds        uint64  `json:"late_rounds"` // Stats.LateRounds in the window

	// FirstGapMaxS is the longest wait of any lock from its acquire's
	// write to its first heartbeat's (both as the replies came back).
	FirstGapMaxS float64 `json:"first_gap_max_s"`
	FirstGapP99S float64 `json:"first_gap_p99_s"`
	// FirstGapSentMaxS is the same wait from the acquire's send to the
	// first heartbeat's: the scheduler's timing without reply latency.
	FirstGapSentMaxS float64 `json:"first_gap_sent_max_s"`
	// RoundsBefore and LateRoundsBefore are Stats.Rounds and
	// Stats.LateRounds from the client's start to the window's.
	RoundsBefore     uint64 `json:"rounds_before_window"`
	LateRoundsBefore uint64 `json:"late_rounds_before_window"`
	// EarlyRepeats counts heartbeats that came back less than half a
	// period after the lock's previous successful write, from the first
	// acquire to the end of the window; EarlyRepeatsWindow those of the
	// window alone.
	EarlyRepeats       int64 `json:"early_repeats"`
	EarlyRepeatsWindow int64 `json:"early_repeats_window"`
	// The gaps are each lock's largest gap between two successful
	// heartbeats in the window (the gap still open at its end included),
	// taken over the locks: median, p99 and max.
	GapMedianS     float64 `json:"gap_median_s"`
	GapP99S        float64 `json:"gap_p99_s"`
	LargestGapMaxS float64 `json:"largest_gap_max_s"`
	// The same gaps from send to send: the scheduler's own timing, which
	// a slow reply or a stalled server does not stretch.
	GapSentP99S float64 `json:"gap_sent_p99_s"`
	GapSentMaxS float64 `json:"gap_sent_max_s"`

	InDangerWindow uint64 `json:"in_danger_window"`
	InDangerTotal  uint64 `json:"in_danger_total"` // since the client was made
	Stolen         uint64 `json:"stolen_total"`

	HeapPerLockBytes     float64 `json:"heap_per_lock_bytes"` // heap after GC, holding minus idle, per lock
	GoroutinesLibraryMax int     `json:"goroutines_library_max"`
	GoroutinesMax        int     `json:"goroutines_max"`
	ProbeP50Ms           float64 `json:"fresh_acquire_p50_ms"` // a fresh lock's acquire while the heartbeats run
	ProbeP99Ms           float64 `json:"fresh_acquire_p99_ms"`
	CPUClientCores       float64 `json:"cpu_client_cores"`
	CPUServerCores       float64 `json:"cpu_server_cores"` // 0 for a server this command did not start
	LoadAverageStart     string  `json:"load_average_start"`
}

func (r *scenarioResult) json(server string, lease time.Duration, tps int, ceilings []ceilingResult) jsonResult {
	d := r.deltaStats()
	c := bestCeiling(ceilings)
	j := jsonResult{
		Server: server,
		Locks:  r.locks, Session: r.session, PeriodS: r.period.Seconds(), SafeS: r.safe.Seconds(), LeaseS: lease.Seconds(),
		Concurrency: r.concurrency, TPS: tps, WindowS: r.window.Seconds(),
		AcquireAllS:          r.acquireTime.Seconds(),
		HeartbeatWritesPerS:  float64(r.heartbeatsOK+r.heartbeatsFailed) / r.window.Seconds(),
		HeartbeatsFailed:     r.heartbeatsFailed,
		HeartbeatCallMaxMs:   ms(r.callMax),
		HeartbeatCallsSlow:   r.callsSlow,
		CeilingWritesPerS:    c,
		Rounds:               d.Rounds,
		LateRounds:           d.LateRounds,
		FirstGapMaxS:         slicesMax(r.firstGap).Seconds(),
		FirstGapP99S:         r.firstGap.pct(99).Seconds(),
		FirstGapSentMaxS:     slicesMax(r.firstGapSent).Seconds(),
		RoundsBefore:         r.statsBefore.Rounds,
		LateRoundsBefore:     r.statsBefore.LateRounds,
		EarlyRepeats:         r.earlyBefore + r.earlyWindow,
		EarlyRepeatsWindow:   r.earlyWindow,
		GapMedianS:           r.perLockGap.pct(50).Seconds(),
		GapP99S:              r.perLockGap.pct(99).Seconds(),
		LargestGapMaxS:       slicesMax(r.perLockGap).Seconds(),
		GapSentP99S:          r.perLockGapSent.pct(99).Seconds(),
		GapSentMaxS:          slicesMax(r.perLockGapSent).Seconds(),
		InDangerWindow:       d.InDanger,
		InDangerTotal:        r.statsEnd.InDanger,
		Stolen:               r.statsEnd.Stolen,
		HeapPerLockBytes:     (float64(r.heapHeld) - float64(r.heapIdle)) / float64(r.locks),
		GoroutinesLibraryMax: r.libMax,
		GoroutinesMax:        r.goroutinesHeldMax,
		ProbeP50Ms:           ms(r.probeBusy.pct(50)),
		ProbeP99Ms:           ms(r.probeBusy.pct(99)),
		LoadAverageStart:     r.loadStart,
	}
	if c > 0 {
		j.ShareOfCeiling = r.rate() / c
	}
	if r.cpu.known {
		j.CPUClientCores = r.cpu.self.Seconds() / r.window.Seconds()
		if r.cpu.hasServer {
			j.CPUServerCores = r.cpu.server.Seconds() / r.window.Seconds()
		}
	}
	return j
}

// slicesMax is the largest duration, unrounded.
func slicesMax(d durations) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func printJSON(out io.Writer, j jsonResult) error {
	return json.NewEncoder(out).Encode(j)
}
