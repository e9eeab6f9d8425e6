package mutexcheck

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EventKind is the kind of one line of a holder's log.
type EventKind byte

// The kinds of event.
const (
	// Acquired: a holder got the lock on Key; Tenure names this holding
	// from now on, Note is the record version number it wrote, Token its
	// fencing token (0 when it has none), and Detail the owner of the
	// held item it took over ("" when the key was free or released).
	Acquired EventKind = 'A'
	// Step: the holder checked that its lock was safe (Lock.Err() == nil)
	// and works; T was read just before that check.
	Step EventKind = 'S'
	// Ended: the holder stopped working under the lock; Note says why
	// ("done" when it chose to, else the lock's error code).
	Ended EventKind = 'E'
	// Released: the holder's release of the tenure's lock returned; Note
	// is "ok", the error's code, or "unknown" when the release was not
	// observed (WithLock releases by itself, best effort).
	Released EventKind = 'R'
	// Failure: a call failed; Tenure names the holder, Key the call
	// ("acquire", "release"), Note the error code, Detail the message.
	Failure EventKind = 'F'
	// Limit: the locks of a group (the keys "GROUP/slot-I", a
	// semaphore's slots) may have at most Token holders at once; Key is
	// the group, Tenure the holder that says so.
	Limit EventKind = 'L'
	// Resize: a resize of the group Key to Token slots, named Tenure;
	// Note is "begin" (logged before the call), "done" (after it
	// returned success: acknowledged) or "failed" (it returned an error,
	// and may have written the new number all the same).
	Resize EventKind = 'Z'
	// Write: a counter holder (see [Incrementer]) is about to write the
	// counter Key of its tenure; Token is the value it read, Note the
	// write's ID (a guarded write's ClientRequestToken).
	Write EventKind = 'W'
	// Incremented: the write Note of tenure was acknowledged: it
	// returned success, or a retry with its request token said it
	// committed; Token is the value written.
	Incremented EventKind = 'I'
	// NotApplied: the write Note of tenure is known not to have been
	// applied; Token is the value it would have written and Detail the
	// error code that says so.
	NotApplied EventKind = 'N'
	// Params: the holder Tenure, a client of Client in the process
	// Proc, waits with these settings: Lease (its client's lease, which
	// a waiter must watch an unreleased item of its for), Retry (how
	// often it looks) and Heartbeat (its client's heartbeat period);
	// Note lists flags, comma-separated ("fair", "session", "calls":
	// its client's DynamoDB calls are on record, "cli": a `ddblock run`).
	// Logged once per holder, before its first attempt.
	Params EventKind = 'P'
	// Attempting: the holder Tenure starts an acquire of Key at T
	// ("GROUP/slot-*" for a semaphore's Acquire). Written before the
	// call, so that an attempt cut short by a kill is on record.
	Attempting EventKind = 'Q'
	// Attempted: the acquire of Key by Tenure that started at T ended at
	// End; Note is "acquired" or the error's code.
	Attempted EventKind = 'T'
	// Call: the client Tenure made the DynamoDB call Op on the item
	// (Key, SortKey), sent at T, answered at End; Note is "ok", "cond"
	// (its condition failed: nothing written) or "err" (anything else:
	// a write's outcome is unknown); Detail, for a PutItem, the record
	// version number it wrote, and "release" for a delete or an update
	// that marks an item released.
	Call EventKind = 'C'
	// Trouble: something struck Tenure, a name or, ending in "*", a
	// prefix of names (holders, clients, processes), from T to End: Note
	// says what ("kill", "abandon", "closed" and "exit" end a client or
	// process at T; "stall": a process did not run, or ran late, from T
	// to End; "startup": a process started and did not wait yet;
	// "fault-KIND": a fault of its fault proxy). Token is, for a
	// latency fault, the longest it holds a request before forwarding it
	// (ns).
	Trouble EventKind = 'X'
)

// Event is one line of a holder's log.
type Event struct {
	Kind   EventKind
	Tenure string
	Key    string
	T      int64 // Now() reading
	Token  int64
	Note   string
	Detail string
	// End is when an attempt or a call ended, or a trouble.
	End int64
	// Client and Proc are a Params holder's client and process; Op and
	// SortKey a Call's operation and item.
	Client, Proc, Op, SortKey string
	// Lease, Retry and Heartbeat are a Params holder's settings.
	Lease, Retry, Heartbeat time.Duration
}

// Log writes events, one line each, to a file shared by the holders of
// one process. Every event is written with a single Write, unbuffered,
// so that what a holder verified is on record even if its process is
// killed the next instant. It is safe for concurrent use.
//
// Names (tenures, keys, notes) must not contain white space.
type Log struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewLog returns a log writing to w.
func NewLog(w io.Writer) *Log { return &Log{w: w} }

// Err returns the first write error, if any.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Log) write(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if _, err := io.WriteString(l.w, line); err != nil {
		l.err = err
	}
}

// Acquired records that tenure began: the lock on key was acquired at t
// with record version number rvn and fencing token token, taking over a
// held item of takenFrom (empty when it took a free or released key).
func (l *Log) Acquired(tenure, key string, t int64, rvn string, token int64, takenFrom string) {
	l.write(fmt.Sprintf("A %s %s %d %s %d %s\n", word(tenure), word(key), t, word(rvn), token, word(takenFrom)))
}

// Step records a verified step of tenure at t.
func (l *Log) Step(tenure string, t int64) {
	l.write(fmt.Sprintf("S %s %d\n", word(tenure), t))
}

// Ended records that tenure stopped working at t, and why.
func (l *Log) Ended(tenure string, t int64, reason string) {
	l.write(fmt.Sprintf("E %s %d %s\n", word(tenure), t, word(reason)))
}

// Released records how the release of tenure's lock ended.
func (l *Log) Released(tenure string, t int64, outcome string) {
	l.write(fmt.Sprintf("R %s %d %s\n", word(tenure), t, word(outcome)))
}

// Failure records a failed call by holder: op is "acquire" or "release",
// code the error's code, detail its message.
func (l *Log) Failure(holder, op string, t int64, code, detail string) {
	detail = strings.Join(strings.Fields(detail), " ")
	l.write(fmt.Sprintf("F %s %s %d %s %s\n", word(holder), word(op), t, word(code), detail))
}

// Limit records that the group's slots (keys "group/slot-I") may have at
// most n holders at once.
func (l *Log) Limit(holder, group string, t int64, n int) {
	l.write(fmt.Sprintf("L %s %s %d %d\n", word(holder), word(group), t, n))
}

// Resize records a phase of a resize of group to n slots: "begin" just
// before the call, then "done" once it returned success, or "failed".
func (l *Log) Resize(resize, group string, t int64, n int, phase string) {
	l.write(fmt.Sprintf("Z %s %s %d %d %s\n", word(resize), word(group), t, n, word(phase)))
}

// Write records that tenure is about to write value+1 to the counter key
// after reading value; id names the write.
func (l *Log) Write(tenure, key string, t int64, value int64, id string) {
	l.write(fmt.Sprintf("W %s %s %d %d %s\n", word(tenure), word(key), t, value, word(id)))
}

// Incremented records that the write id of tenure, of value to the
// counter key, was acknowledged.
func (l *Log) Incremented(tenure, key string, t int64, value int64, id string) {
	l.write(fmt.Sprintf("I %s %s %d %d %s\n", word(tenure), word(key), t, value, word(id)))
}

// NotApplied records that the write id of tenure, of value to the
// counter key, is known not to have been applied, and the code that
// says so.
func (l *Log) NotApplied(tenure, key string, t int64, value int64, id, code string) {
	l.write(fmt.Sprintf("N %s %s %d %d %s %s\n", word(tenure), word(key), t, value, word(id), word(code)))
}

// Params records the settings of holder's waits, once, before its
// first attempt (see [Params]).
func (l *Log) Params(holder, client, proc string, t int64, lease, retry, heartbeat time.Duration, flags ...string) {
	l.write(fmt.Sprintf("P %s %d %s %s %d %d %d %s\n", word(holder), t, word(client), word(proc),
		int64(lease), int64(retry), int64(heartbeat), word(strings.Join(flags, ","))))
}

// Attempting records that holder starts an acquire of key at t.
func (l *Log) Attempting(holder, key string, t int64) {
	l.write(fmt.Sprintf("Q %s %s %d\n", word(holder), word(key), t))
}

// Attempted records how the acquire of key by holder that started at
// start ended at end: "acquired" or the error's code.
func (l *Log) Attempted(holder, key string, start, end int64, outcome string) {
	l.write(fmt.Sprintf("T %s %s %d %d %s\n", word(holder), word(key), start, end, word(outcome)))
}

// Call records a DynamoDB call of client: op on (pk, sk), sent at sent,
// answered at end, its outcome ("ok", "cond", "err") and, for a put,
// the record version number it wrote.
func (l *Log) Call(client, op, pk, sk string, sent, end int64, outcome, rvn string) {
	l.write(fmt.Sprintf("C %s %s %s %s %d %d %s %s\n", word(client), word(op), word(pk), word(sk), sent, end, word(outcome), word(rvn)))
}

// Trouble records that what struck target (a name, or a prefix of
// names ending in "*") from t to end; hold is a latency fault's longest
// hold of a request.
func (l *Log) Trouble(target string, t, end int64, what string, hold time.Duration) {
	l.write(fmt.Sprintf("X %s %d %d %s %d\n", word(target), t, end, word(what), int64(hold)))
}

// word keeps a name on one field of a line.
func word(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), "_")
}

// Parse reads a log. A last line cut short (its process was killed while
// writing it) is ignored; any other malformed line is an error.
func Parse(r io.Reader) ([]Event, error) {
	var events []Event
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return events, nil // an unterminated last line is a torn write
		}
		if err != nil {
			return events, err
		}
		ev, perr := parseLine(strings.TrimSuffix(line, "\n"))
		if perr != nil {
			return events, fmt.Errorf("mutexcheck: line %d %q: %w", n, line, perr)
		}
		events = append(events, ev)
	}
}

func parseLine(line string) (Event, error) {
	f := strings.Fields(line)
	if len(f) == 0 || len(f[0]) != 1 {
		return Event{}, errors.New("no event kind")
	}
	ev := Event{Kind: EventKind(f[0][0])}
	want := map[EventKind]int{Acquired: 7, Step: 3, Ended: 4, Released: 4, Failure: 5, Limit: 5, Resize: 6,
		Write: 6, Incremented: 6, NotApplied: 7, Params: 9, Attempting: 4, Attempted: 6, Call: 9, Trouble: 6}[ev.Kind]
	if want == 0 {
		return Event{}, fmt.Errorf("unknown event kind %q", f[0])
	}
	if len(f) < want {
		return Event{}, fmt.Errorf("%d fields, want %d", len(f), want)
	}
	var tField string
	switch ev.Kind {
	case Acquired:
		ev.Tenure, ev.Key, tField, ev.Note = f[1], f[2], f[3], f[4]
		token, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("token %q: %w", f[5], err)
		}
		ev.Token = token
		if f[6] != "-" {
			ev.Detail = f[6]
		}
	case Step:
		ev.Tenure, tField = f[1], f[2]
	case Ended, Released:
		ev.Tenure, tField, ev.Note = f[1], f[2], f[3]
	case Failure:
		ev.Tenure, ev.Key, tField, ev.Note = f[1], f[2], f[3], f[4]
		ev.Detail = strings.Join(f[5:], " ")
	case Limit:
		ev.Tenure, ev.Key, tField = f[1], f[2], f[3]
		n, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || n < 1 {
			return Event{}, fmt.Errorf("limit %q: want a positive number", f[4])
		}
		ev.Token = n
	case Resize:
		ev.Tenure, ev.Key, tField, ev.Note = f[1], f[2], f[3], f[5]
		n, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || n < 1 {
			return Event{}, fmt.Errorf("resize to %q: want a positive number", f[4])
		}
		if ev.Note != "begin" && ev.Note != "done" && ev.Note != "failed" {
			return Event{}, fmt.Errorf("resize phase %q: want begin, done or failed", ev.Note)
		}
		ev.Token = n
	case Write, Incremented, NotApplied:
		ev.Tenure, ev.Key, tField, ev.Note = f[1], f[2], f[3], f[5]
		v, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("counter value %q: %w", f[4], err)
		}
		ev.Token = v
		if ev.Kind == NotApplied {
			ev.Detail = f[6]
		}
	case Params:
		ev.Tenure, tField, ev.Client, ev.Proc = f[1], f[2], f[3], f[4]
		for i, d := range []*time.Duration{&ev.Lease, &ev.Retry, &ev.Heartbeat} {
			n, err := strconv.ParseInt(f[5+i], 10, 64)
			if err != nil || n < 0 {
				return Event{}, fmt.Errorf("duration %q: want a number of nanoseconds", f[5+i])
			}
			*d = time.Duration(n)
		}
		if f[8] != "-" {
			ev.Note = f[8]
		}
	case Attempting:
		ev.Tenure, ev.Key, tField = f[1], f[2], f[3]
	case Attempted:
		ev.Tenure, ev.Key, tField, ev.Note = f[1], f[2], f[3], f[5]
		end, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("end %q: %w", f[4], err)
		}
		ev.End = end
	case Call:
		ev.Tenure, ev.Op, ev.Key, ev.SortKey, tField, ev.Note = f[1], f[2], f[3], f[4], f[5], f[7]
		end, err := strconv.ParseInt(f[6], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("end %q: %w", f[6], err)
		}
		ev.End = end
		if f[8] != "-" {
			ev.Detail = f[8]
		}
	case Trouble:
		ev.Tenure, tField, ev.Note = f[1], f[2], f[4]
		end, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("end %q: %w", f[3], err)
		}
		hold, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil {
			return Event{}, fmt.Errorf("hold %q: %w", f[5], err)
		}
		ev.End, ev.Token = end, hold
	}
	t, err := strconv.ParseInt(tField, 10, 64)
	if err != nil {
		return Event{}, fmt.Errorf("time %q: %w", tField, err)
	}
	ev.T = t
	return ev, nil
}
