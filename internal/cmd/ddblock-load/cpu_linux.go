package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times; it is
// 100 on every Linux this tool is likely to meet.
const clockTicks = 100

// readCPU reads this process's CPU time and that of its descendants (the
// server, when the tool started it: dynalite's Node.js process, or
// DynamoDB Local's Node.js wrapper and the JVM it runs), so that a run
// can show which side of the wire spent the two cores.
func readCPU() cpuUse {
	var c cpuUse
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		c.known = true
	}
	c.machine, c.hasMachine = machineBusy()
	for _, pid := range descendants("self") {
		if d, ok := procCPU(pid); ok {
			c.server += d
			c.hasServer = true
		}
	}
	return c
}

// descendants lists the live descendants of a process ("self", or a pid),
// from /proc/<pid>/task/*/children.
func descendants(pid string) []string {
	var out []string
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, child := range strings.Fields(string(b)) {
			out = append(out, child)
			out = append(out, descendants(child)...)
		}
	}
	return out
}

// procCPU is utime+stime of a live process, from /proc/<pid>/stat.
func procCPU(pid string) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces; the fields after it are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	// After the name: state(3) ... utime(14) stime(15), i.e. f[11], f[12].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / clockTicks, true
}

// machineBusy is the CPU time every process on the machine has spent,
// from the first line of /proc/stat: what is not ours was someone else's.
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	// user nice system idle iowait irq softirq steal ...: all but idle
	// and iowait are busy.
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / clockTicks, true
}
