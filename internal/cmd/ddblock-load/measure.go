package main

import (
	"fmt"
	"slices"
	"time"
)

// durations is a sample of latencies or gaps.
type durations []time.Duration

// pct returns the p-th percentile (nearest rank), or 0 for no sample.
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s)) + 0.5)
	i = min(max(i-1, 0), len(s)-1)
	return round(s[i])
}

func (d durations) min() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return round(slices.Min(d))
}

func (d durations) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return round(slices.Max(d))
}

// round keeps printed durations readable.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(10 * time.Microsecond)
	}
}

// cpuUse is CPU time spent by this process, by the server it started,
// and by the whole machine.
type cpuUse struct {
	self, server time.Duration
	machine      time.Duration // every process's, this one's included
	known        bool          // this process's time was read
	hasServer    bool          // and the server's
	hasMachine   bool          // and the machine's
}

func (c cpuUse) since(before cpuUse) cpuUse {
	return cpuUse{
		self: c.self - before.self, server: c.server - before.server, machine: c.machine - before.machine,
		known: c.known && before.known, hasServer: c.hasServer && before.hasServer, hasMachine: c.hasMachine && before.hasMachine,
	}
}

// String gives each as cores busy over the wall time elapsed. On a shared
// machine, "other processes" says whether the neighbours took a share.
func (c cpuUse) String(elapsed time.Duration) string {
	if !c.known {
		return "n/a"
	}
	cores := func(d time.Duration) float64 { return d.Seconds() / elapsed.Seconds() }
	s := fmt.Sprintf("client %.2f cores", cores(c.self))
	if c.hasServer {
		s += fmt.Sprintf(", server %.2f cores", cores(c.server))
		if c.hasMachine {
			s += fmt.Sprintf(", other processes %.2f cores", cores(max(c.machine-c.self-c.server, 0)))
		}
	}
	return s
}
