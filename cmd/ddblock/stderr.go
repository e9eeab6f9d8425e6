package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// stderrBuffer is the limit of ddblock's own output held back while
// stderr does not take it: far more than a run says in normal times.
const stderrBuffer = 64 << 10

// flushTimeout bounds how long ddblock waits at exit for stderr to take
// what is still queued.
const flushTimeout = time.Second

// queuedWriter is ddblock's stderr for its own messages and the library's
// log records. Write never blocks: it queues a copy of each record and
// returns, and one goroutine writes the queue out. A stderr that nobody
// reads (a full pipe, a stalled log shipper) therefore cannot stop the
// goroutines that log: the library's heartbeater and monitor, and the
// loop that supervises the command. When the queue is full, records are
// dropped and counted, and a line saying how many follows as soon as
// stderr takes output again.
//
// Each Write is one record (fmt.Fprintf and slog handlers write a line in
// one call), dropped or kept whole. It is safe for concurrent use.
type queuedWriter struct {
	w     io.Writer
	limit int

	mu      sync.Mutex
	queue   [][]byte
	queued  int // bytes in queue
	dropped int // records dropped since the last note
	closing bool
	wake    chan struct{} // capacity 1: there is work, or closing
	done    chan struct{} // closed when the writer goroutine ends
}

// newQueuedWriter starts the goroutine that writes to w; Close stops it.
func newQueuedWriter(w io.Writer, limit int) *queuedWriter {
	q := &queuedWriter{w: w, limit: limit, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Write queues a copy of p, or drops it when the queue is full. It
// always reports success: a record that cannot be written must not be
// the writer's caller's problem.
func (q *queuedWriter) Write(p []byte) (int, error) {
	q.mu.Lock()
	if q.closing || q.queued+len(p) > q.limit {
		q.dropped++
	} else {
		q.queue = append(q.queue, append([]byte(nil), p...))
		q.queued += len(p)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (q *queuedWriter) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		batch, dropped, closing := q.queue, q.dropped, q.closing
		q.queue, q.queued, q.dropped = nil, 0, 0
		q.mu.Unlock()
		for _, rec := range batch {
			_, _ = q.w.Write(rec) // nowhere to report a failing stderr
		}
		if dropped > 0 {
			_, _ = fmt.Fprintf(q.w, "ddblock: dropped %d writes of its own output: stderr did not take them\n", dropped)
		}
		if closing && len(batch) == 0 && dropped == 0 {
			return
		}
		if len(batch) == 0 && dropped == 0 {
			<-q.wake
		}
	}
}

// Close writes out what is queued, waiting at most timeout for stderr to
// take it, and stops the writer goroutine unless stderr is stuck (a
// process about to exit leaves it behind). Later writes are dropped.
func (q *queuedWriter) Close(timeout time.Duration) {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-q.done:
	case <-t.C:
	}
}

// captureStderr points os.Stderr at a pipe that one goroutine drains into
// q, so that code which writes to os.Stderr by itself (the AWS SDK's
// default logger among it) cannot block ddblock either. Only os.Stderr
// changes, once, before any other goroutine runs: descriptor 2 stays the
// real stderr, so that a crash (the Go runtime writes straight to it) is
// still reported, and child processes are handed the real one (see
// environ.childStderr). The returned function closes the pipe and waits,
// at most timeout, for it to be drained; later writes to os.Stderr are
// lost, as the process is about to exit.
func captureStderr(q *queuedWriter) (release func(timeout time.Duration)) {
	r, w, err := os.Pipe()
	if err != nil {
		return func(time.Duration) {}
	}
	os.Stderr = w
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = q.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return func(timeout time.Duration) {
		_ = w.Close()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		}
	}
}
