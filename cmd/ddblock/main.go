// Command ddblock is the operator's and the newcomer's door to ddblock's
// distributed locks on DynamoDB: it keeps a command single across a fleet
// (run), shows who holds what (ls, get), clears a stuck lock (release),
// creates the lock table (create-table), and shows the library at work
// against a local server (demo).
//
// See doc/cli.md for every subcommand, its flags and its exit statuses.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/wire"
)

// Exit statuses of ddblock itself. `ddblock run` otherwise exits with its
// command's status (0-125 as the command returned it, 128+N when the
// command was killed by signal N), so these sit where the sysexits(3)
// convention puts them and where commands rarely tread.
const (
	exitOK = 0
	// exitNotFound: get or release named a lock (or a line of fair
	// waiters, or a ticket in one) that is not in the table.
	exitNotFound = 1
	// exitUsage: bad flags or arguments, or settings that cannot work
	// together (EX_USAGE).
	exitUsage = 64
	// exitDataErr: where a lock, a semaphore or a line was expected, the
	// table holds an item that ddblock cannot read: another client or a
	// person wrote it (EX_DATAERR). It is not exitInternal, which says
	// that ddblock itself went wrong; the message says how to clear the
	// item (release --force, or resize for a semaphore's metadata).
	exitDataErr = 65
	// exitUnavailable: DynamoDB could not be used: the table does not
	// exist, the server cannot be reached (EX_UNAVAILABLE).
	exitUnavailable = 69
	// exitInternal: anything else that went wrong (EX_SOFTWARE),
	// including the guard of run's command ending unexpectedly: meant for
	// ddblock's own failures, not for data in the table (exitDataErr).
	exitInternal = 70
	// exitCantCreate: create-table found the table there already
	// (EX_CANTCREAT).
	exitCantCreate = 73
	// exitBusy: run did not get the lock within --wait, or release found
	// the lock changed under it (EX_TEMPFAIL: try again later).
	exitBusy = 75
	// exitLockLost: run's lock went into danger or was stolen while the
	// command ran, or was not renewed in time; the command was stopped.
	exitLockLost = 76
	// exitNoPerm: AWS refused a permission (an IAM policy that does not
	// allow the action, which the message names) or the credentials
	// (expired, unknown, badly signed) (EX_NOPERM). Never retried.
	exitNoPerm = 77
	// exitConfig: the table exists but does not have the keys ddblock is
	// configured for (EX_CONFIG).
	exitConfig = 78
	// exitCannotExecute and exitCommandNotFound are the shell's statuses
	// for a command that cannot be run.
	exitCannotExecute   = 126
	exitCommandNotFound = 127
	// exitSignalBase + N: the command (or ddblock, while waiting for the
	// lock) was ended by signal N.
	exitSignalBase = 128
)

// exitError ends the program with status code, after printing msg (one
// line, unless empty) on stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// fail returns an exitError whose message is formatted on one line.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: oneLine(fmt.Sprintf(format, args...))}
}

// exitWith ends the program with code and no message: the child's own
// status, passed through.
func exitWith(code int) error { return &exitError{code: code} }

// usageError is a mistake on the command line.
func usageError(format string, args ...any) error { return fail(exitUsage, format, args...) }

// oneLine keeps a message on one line: errors.Join separates its errors
// with newlines, and scripts read ddblock's stderr line by line. It is
// made safe for a terminal too (see termSafe): messages name keys and
// owners read from the table.
func oneLine(s string) string {
	return termSafe(strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " "))
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *environ, args []string) error
}

// environ is what a subcommand may touch of the outside world, so that
// tests and the demo can redirect it.
type environ struct {
	stdin  io.Reader
	stdout io.Writer
	// stderr takes ddblock's own messages and log records; in the
	// program it is a queue that never blocks (see queuedWriter).
	stderr io.Writer
	// childStderr is the stderr handed to a child process: the real one.
	childStderr io.Writer
	getenv      func(string) string
	// self is the ddblock binary, which run starts again as the guard of
	// its command; empty where there is none (tests of the package).
	self string
}

func commands() []command {
	return []command{
		{"run", "run a command while holding a lock", cmdRun},
		{"ls", "list the locks in the table", cmdLs},
		{"get", "show one lock", cmdGet},
		{"leader", "show an election's leader (--watch: each change)", cmdLeader},
		{"release", "remove a stuck lock, whoever holds it (needs --force)", cmdRelease},
		{"resize", "change a semaphore's number of slots, safely", cmdResize},
		{"create-table", "create the lock table", cmdCreateTable},
		{"ensure-table", "create the lock table if missing, check its keys, enable TTL", cmdEnsureTable},
		{"demo", "watch two workers share a lock on a local server", cmdDemo},
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == guardCommand {
		os.Exit(runGuard(os.Args[2:], os.Stderr))
	}
	// Nothing ddblock writes may block it: a stuck stderr would stop its
	// heartbeats (see queuedWriter).
	realStderr := os.Stderr
	stderr := newQueuedWriter(realStderr, stderrBuffer)
	releaseStderr := captureStderr(stderr)
	self, err := selfPath()
	if err != nil {
		self = ""
	}
	env := &environ{stdin: os.Stdin, stdout: os.Stdout, stderr: stderr, childStderr: realStderr, getenv: os.Getenv, self: self}
	code := runMain(context.Background(), env, os.Args[1:])
	releaseStderr(flushTimeout)
	stderr.Close(flushTimeout)
	os.Exit(code)
}

// runMain runs the subcommand named by args[0] and returns the exit status.
func runMain(ctx context.Context, env *environ, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(env.stderr, "ddblock: missing command (see ddblock --help)")
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			return runMain(ctx, env, []string{args[1], "--help"})
		}
		mainUsage(env.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return report(env, name, c.run(ctx, env, args[1:]))
		}
	}
	fmt.Fprintf(env.stderr, "ddblock: unknown command %q (see ddblock --help)\n", name)
	return exitUsage
}

// report prints err's message, if any, and returns its exit status.
func report(env *environ, name string, err error) int {
	if err == nil {
		return exitOK
	}
	var e *exitError
	if !errors.As(err, &e) {
		code := exitInternal
		switch {
		case ddblock.CodeOf(err) == ddblock.CodeAccessDenied || wire.AccessDenied(err):
			code = exitNoPerm
		case ddblock.CodeOf(err) == ddblock.CodeInvalidItem:
			// The table's data, not ddblock's fault, even where a
			// command did not say so itself.
			code = exitDataErr
		}
		e = &exitError{code: code, msg: oneLine(err.Error())}
	}
	if e.msg != "" {
		fmt.Fprintf(env.stderr, "ddblock %s: %s\n", name, termSafe(e.msg))
	}
	return e.code
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: ddblock COMMAND [flags] [arguments]

ddblock takes, inspects and releases distributed locks kept in a DynamoDB
table, compatible with python_dynamodb_lock.

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'ddblock COMMAND --help' for a command's flags.

AWS settings come from the SDK's default chain (AWS_REGION, AWS_PROFILE,
~/.aws/config and credentials, instance roles...); --endpoint or
AWS_ENDPOINT_URL_DYNAMODB point at a local server.

Exit statuses: 0 success; 1 no such lock (or line); 64 usage (bad flags
or arguments); 65 an item at the key that ddblock cannot read (another
client wrote it; the message says how to clear it); 69 DynamoDB
unavailable (table missing, server unreachable, no transactions for run
--key); 70 internal error; 73
create-table: the table exists already; 75 lock busy (not acquired
within --wait, or changed before release could remove it,
or attached to a live session: see release --help; or resize's holders
above the new number still held their slots); 76 lock lost while
the command ran; 77 permission or credentials refused by AWS (the message
names the action); 78 the table's keys are not the ones configured; 126 the
command cannot be run; 127 the command was not found; otherwise run exits
with its command's status (128+N: killed by signal N).
`)
}
