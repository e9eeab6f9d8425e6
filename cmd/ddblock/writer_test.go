package main

// The test binary doubles as the command the end-to-end tests run under
// `ddblock run`: a writer that appends timestamped lines to a file, so
// that a test can read, from the commands' own output, whether two of
// them ever ran at once.

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writerArg, as the test binary's first argument, runs the writer instead
// of the tests.
const writerArg = "ddblock-test-writer"

func init() {
	if len(os.Args) > 1 && os.Args[1] == writerArg {
		os.Exit(writerMain(os.Args[2:]))
	}
}

// writerMain: WHO FILE INTERVAL COUNT [ignore-term]. It appends
// "WHO line SEQ T PID PPID" every INTERVAL, COUNT times (0: until it is
// stopped), T being CLOCK_MONOTONIC in nanoseconds read just before the
// write. On SIGTERM it appends "WHO term 0 T PID PPID" and exits 143,
// unless told to ignore SIGTERM, in which case only SIGKILL stops it.
func writerMain(args []string) int {
	if len(args) < 4 {
		fmt.Fprintln(os.Stderr, "writer: WHO FILE INTERVAL COUNT [ignore-term]")
		return 2
	}
	who, path := args[0], args[1]
	interval, err1 := time.ParseDuration(args[2])
	count, err2 := strconv.Atoi(args[3])
	if err := errors.Join(err1, err2); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 2
	}
	term := make(chan os.Signal, 1)
	if len(args) > 4 && args[4] == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(term, syscall.SIGTERM)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 2
	}
	write := func(kind string, seq int) {
		// One write per line: lines of several writers never mix.
		line := fmt.Sprintf("%s %s %d %d %d %d\n", who, kind, seq, machineNow(), os.Getpid(), os.Getppid())
		if _, err := f.WriteString(line); err != nil {
			os.Exit(3)
		}
	}
	for seq := 1; count == 0 || seq <= count; seq++ {
		select {
		case <-term:
			write("term", 0)
			return 128 + int(syscall.SIGTERM)
		default:
		}
		write("line", seq)
		time.Sleep(interval)
	}
	return 0
}

// writerLine is one line of a writer.
type writerLine struct {
	who, kind string
	seq       int
	at        int64 // CLOCK_MONOTONIC, ns
	pid, ppid int
}

// readWriterLines parses the writers' file ("" while it does not exist).
func readWriterLines(t *testing.T, path string) []writerLine {
	t.Helper()
	var out []writerLine
	for line := range strings.Lines(readFile(t, path)) {
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("bad writer line %q", line)
		}
		var w writerLine
		w.who, w.kind = f[0], f[1]
		var errs [4]error
		w.seq, errs[0] = strconv.Atoi(f[2])
		w.at, errs[1] = strconv.ParseInt(f[3], 10, 64)
		w.pid, errs[2] = strconv.Atoi(f[4])
		w.ppid, errs[3] = strconv.Atoi(f[5])
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatalf("bad writer line %q: %v", line, err)
		}
		out = append(out, w)
	}
	return out
}

// writerCommand is the command line of a writer.
func writerCommand(t *testing.T, who, file string, interval time.Duration, count int, extra ...string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{self, writerArg, who, file, interval.String(), strconv.Itoa(count)}, extra...)
}

// writerFile is a fresh file for the writers of one test.
func writerFile(t *testing.T) string { return filepath.Join(t.TempDir(), "lines") }

// linesOf returns the lines of one writer, in the file's order.
func linesOf(lines []writerLine, who string) []writerLine {
	var out []writerLine
	for _, l := range lines {
		if l.who == who {
			out = append(out, l)
		}
	}
	return out
}
