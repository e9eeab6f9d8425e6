package main

// The guard protocol: what `ddblock run` (its supervisor, supervisor.go)
// and its guard process (guard.go) say to each other. Two pipes, one
// message a line: a word, then its arguments, space-separated:
//
//	ddblock → guard, the control pipe (the guard's fd 3):
//	  D <ns>            ctlDeadline   the lock is safe until <ns> on the shared clock
//	  T                 ctlTerminate  stop the command now: SIGTERM, SIGKILL after the grace
//	  S <signo>         ctlSignal     send this signal to the command's group
//
//	guard → ddblock, the event pipe (the guard's fd 4):
//	  P <pid>           evStarted     the command started; <pid> leads its process group
//	  N                 evNotStarted  the command was not started: the safe period ran
//	                                  out first, or ddblock asked to stop (T) or died
//	  E <status> <msg>  evStartFailed the command could not be started (126 or 127)
//	  T deadline|asked  evTerminated  SIGTERM sent: the deadline passed, or ddblock asked
//	  K                 evKilled      SIGKILL sent, the grace being over
//	  X <status>        evExited      the command ended; the shell's status (128+N: signal N)
//
// The guard exits after X, E or N. A pipe that ends means the other side
// is gone: the guard then kills the command's group at once, and ddblock
// kills what is left of it and decides about the lock (guardDied).

import "strings"

// The guard's descriptors, as ExtraFiles put them.
const (
	guardControlFD = 3
	guardEventFD   = 4
)

// Control messages, ddblock to guard.
const (
	ctlDeadline  = "D"
	ctlTerminate = "T"
	ctlSignal    = "S"
)

// Events, guard to ddblock.
const (
	evStarted     = "P"
	evNotStarted  = "N"
	evStartFailed = "E"
	evTerminated  = "T"
	evKilled      = "K"
	evExited      = "X"
)

// Why the guard sent SIGTERM: evTerminated's argument.
const (
	termDeadline = "deadline"
	termAsked    = "asked"
)

// protoLine is one message: its word, then its arguments, space-separated.
func protoLine(word string, args ...string) string {
	return strings.Join(append([]string{word}, args...), " ")
}

// parseLine splits a message into its word and the rest.
func parseLine(line string) (word, arg string) {
	word, arg, _ = strings.Cut(line, " ")
	return word, arg
}
