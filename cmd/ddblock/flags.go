package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// cmdFlags is a subcommand's flag set and its help text.
type cmdFlags struct {
	*flag.FlagSet
	env      *environ
	synopsis string // after "Usage: ddblock "
	about    string
}

func newFlags(env *environ, name, synopsis, about string) *cmdFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package would print its error and the whole usage on
	// stderr; ddblock prints one line of its own instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, env: env, synopsis: synopsis, about: about}
}

// usage writes the subcommand's help.
func (f *cmdFlags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: ddblock %s\n\n%s\n", f.synopsis, strings.TrimSpace(f.about))
	n := 0
	f.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprint(w, "\nFlags (-flag and --flag are the same):\n")
		f.SetOutput(w)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
}

// parse reads args in which flags may come before, between and after
// nPos positional arguments, as in `ddblock get KEY --sort-key S`. What
// follows the positional arguments and their flags, at the first
// argument that is not a flag or after "--", is returned as rest; it is
// refused unless allowRest. --help prints the help on stdout and ends
// the program with status 0.
func (f *cmdFlags) parse(args []string, nPos int, allowRest bool, names ...string) (pos, rest []string, err error) {
	parse := func(args []string) (rest []string, dashed bool, err error) {
		if err := f.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.usage(f.env.stdout)
				return nil, false, exitWith(exitOK)
			}
			return nil, false, usageError("%v (see ddblock %s --help)", err, f.Name())
		}
		rest = f.Args()
		consumed := len(args) - len(rest)
		return rest, consumed > 0 && args[consumed-1] == "--", nil
	}
	for len(pos) < nPos {
		rest, dashed, err := parse(args)
		if err != nil {
			return nil, nil, err
		}
		if dashed {
			// After "--" nothing is a flag: the missing positional
			// arguments come first (a key may start with "-").
			take := min(nPos-len(pos), len(rest))
			pos = append(pos, rest[:take]...)
			args = rest[take:]
			if allowRest && len(pos) == nPos {
				// With a command to follow, "--" separates the arguments
				// from it: `run -- sh -c true` has forgotten its KEY, and
				// must not take sh for it. A key that starts with "-"
				// is written `run -- KEY -- COMMAND`.
				if len(args) == 0 || args[0] != "--" {
					missing := "an argument"
					if len(names) > 0 {
						missing = names[len(names)-1]
					}
					return nil, nil, usageError("missing %s before -- (see ddblock %s --help)", missing, f.Name())
				}
				args = args[1:]
			}
			return f.finish(pos, args, nPos, allowRest, names)
		}
		if len(rest) == 0 {
			args = nil
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(args) > 0 {
		if args, _, err = parse(args); err != nil {
			return nil, nil, err
		}
	}
	return f.finish(pos, args, nPos, allowRest, names)
}

func (f *cmdFlags) finish(pos, rest []string, nPos int, allowRest bool, names []string) ([]string, []string, error) {
	if len(pos) < nPos {
		missing := "an argument"
		if len(pos) < len(names) {
			missing = names[len(pos)]
		}
		return nil, nil, usageError("missing %s (see ddblock %s --help)", missing, f.Name())
	}
	if len(rest) > 0 && !allowRest {
		return nil, nil, usageError("unexpected argument %q (see ddblock %s --help)", rest[0], f.Name())
	}
	return pos, rest, nil
}

// isSet reports whether the flag was given on the command line.
func (f *cmdFlags) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) {
		if fl.Name == name {
			set = true
		}
	})
	return set
}

// attrFlag collects repeated --attr NAME=VALUE flags.
type attrFlag map[string]string

func (a attrFlag) String() string {
	parts := make([]string, 0, len(a))
	for k, v := range a {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (a attrFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=VALUE, got %q", s)
	}
	a[name] = value
	return nil
}

// nonNegative checks a duration flag.
func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return usageError("--%s must not be negative, got %v", name, d)
	}
	return nil
}
