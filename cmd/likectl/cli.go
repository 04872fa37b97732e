package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/likes-dev/likes/clock"
)

// Exit statuses (kubectl/etcdctl conventions).
const (
	exitOK      = 0 // done, nothing to report
	exitFinding = 1 // done, and found something: mismatches, a partial or truncated result, a refused record
	exitFailure = 2 // a usage error, or the command could not do its work (cannot connect, refused)
)

var (
	// errUsage is wrapped by every usage error (unknown command, bad flag,
	// missing argument): exit 2.
	errUsage = errors.New("usage")
	// errFinding is wrapped by errors that report what the command found
	// (mismatches, a partial result): exit 1.
	errFinding = errors.New("finding")
)

// usagef returns a usage error (exit 2).
func usagef(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// findingf returns a finding (exit 1).
func findingf(format string, a ...any) error {
	return &findingError{msg: fmt.Sprintf(format, a...)}
}

type findingError struct{ msg string }

func (e *findingError) Error() string        { return e.msg }
func (e *findingError) Is(target error) bool { return target == errFinding }

// exitCode maps run's error to the process's exit status.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFinding):
		return exitFinding
	default:
		return exitFailure
	}
}

// env is what commands write to and read time from.
type env struct {
	stdout, stderr io.Writer
	clock          clock.Clock
}

// runFunc runs a command with its positional arguments (after its flags).
type runFunc func(ctx context.Context, args []string) error

// command is a node of likectl's command tree. A group has subs; a leaf has
// setup, which registers its flags and returns what runs it (flags are parsed
// before anything runs, so -h never touches the network); raw leaves parse
// their own arguments.
type command struct {
	name    string
	summary string // one line, for the parent's list
	usage   string // synopsis line(s), without "likectl "
	long    string // description printed by help
	subs    []*command
	setup   func(fs *flag.FlagSet, e *env) runFunc
	// raw runs a command that parses its arguments itself; rawFlags lists
	// its flags for completion.
	raw      func(ctx context.Context, args []string, e *env) error
	rawFlags []string
	// args completes positional arguments (completion).
	args []string
}

func (c *command) sub(name string) *command {
	for _, s := range c.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// hasHelp reports whether args ask for help before any "--".
func hasHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}

// execute walks args down the tree from root and runs the command found.
func execute(ctx context.Context, root *command, args []string, e *env) error {
	cur, path := root, []string{root.name}
	for cur.subs != nil {
		// A group that runs itself too (likectl regions [-o json]) does so
		// unless a subcommand is named.
		if cur.setup != nil && (len(args) == 0 || cur.sub(args[0]) == nil) {
			break
		}
		if len(args) == 0 {
			fmt.Fprint(e.stderr, helpText(cur, path, nil))
			return usagef("%s: want a subcommand: %s", strings.Join(path, " "), subNames(cur))
		}
		a := args[0]
		if isHelp(a) {
			fmt.Fprint(e.stdout, helpText(cur, path, nil))
			return nil
		}
		if cur == root && a == "help" {
			return help(root, args[1:], e)
		}
		next := cur.sub(a)
		if next == nil && hasHelp(args) {
			fmt.Fprint(e.stdout, helpText(cur, path, nil))
			return nil
		}
		if next == nil {
			return usagef("unknown command %q for %q (want %s; see %s -h)", a, strings.Join(path, " "), subNames(cur), strings.Join(path, " "))
		}
		cur, path, args = next, append(path, a), args[1:]
	}
	name := strings.Join(path, " ")
	if cur.raw != nil {
		return cur.raw(ctx, args, e)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	run := cur.setup(fs, e)
	// -h anywhere (before "--") is help, as in kubectl: after a positional
	// argument or a bad flag too.
	if hasHelp(args) {
		fmt.Fprint(e.stdout, helpText(cur, path, fs))
		return nil
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, helpText(cur, path, fs))
			return nil
		}
		return usagef("%s: %v (see %s -h)", name, err, name)
	}
	return run(ctx, fs.Args())
}

// help prints the help of the command named by args (likectl help pins move).
func help(root *command, args []string, e *env) error {
	cur, path := root, []string{root.name}
	for _, a := range args {
		next := cur.sub(a)
		if next == nil {
			return usagef("help: unknown command %q for %q (want %s)", a, strings.Join(path, " "), subNames(cur))
		}
		cur, path = next, append(path, a)
	}
	var fs *flag.FlagSet
	if cur.setup != nil {
		fs = flag.NewFlagSet(strings.Join(path, " "), flag.ContinueOnError)
		cur.setup(fs, e)
	}
	if cur.raw != nil {
		return cur.raw(context.Background(), []string{"-h"}, e)
	}
	fmt.Fprint(e.stdout, helpText(cur, path, fs))
	return nil
}

func subNames(c *command) string {
	var n []string
	for _, s := range c.subs {
		n = append(n, s.name)
	}
	return strings.Join(n, ", ")
}

// helpText is a command's usage: synopsis, description, subcommands or flags.
func helpText(c *command, path []string, fs *flag.FlagSet) string {
	var b strings.Builder
	name := strings.Join(path, " ")
	switch {
	case c.usage != "":
		for i, l := range strings.Split(c.usage, "\n") {
			if i == 0 {
				fmt.Fprintf(&b, "Usage: %s %s\n", path[0], l)
			} else {
				fmt.Fprintf(&b, "       %s %s\n", path[0], l)
			}
		}
	case c.subs != nil:
		fmt.Fprintf(&b, "Usage: %s <command> [flags]\n", name)
	default:
		fmt.Fprintf(&b, "Usage: %s [flags]\n", name)
	}
	if c.summary != "" && len(path) > 1 {
		fmt.Fprintf(&b, "\n%s\n", c.summary)
	}
	if c.long != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.long, "\n"))
	}
	if c.subs != nil {
		b.WriteString("\nCommands:\n")
		w := 0
		for _, s := range c.subs {
			w = max(w, len(s.name))
		}
		for _, s := range c.subs {
			fmt.Fprintf(&b, "  %-*s  %s\n", w, s.name, s.summary)
		}
		fmt.Fprintf(&b, "\nRun '%s <command> -h' for a command's flags.\n", name)
	}
	if fs != nil {
		var flags strings.Builder
		fs.VisitAll(func(f *flag.Flag) {
			typ, usage := flag.UnquoteUsage(f)
			dash := "--"
			if len(f.Name) == 1 {
				dash = "-"
			}
			fmt.Fprintf(&flags, "  %s%s", dash, f.Name)
			if typ != "" {
				fmt.Fprintf(&flags, " %s", typ)
			}
			fmt.Fprintf(&flags, "\n      %s", usage)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "-1" {
				fmt.Fprintf(&flags, " (default %s)", f.DefValue)
			}
			flags.WriteString("\n")
		})
		if flags.Len() > 0 {
			b.WriteString("\nFlags:\n")
			b.WriteString(flags.String())
		}
	}
	if len(path) == 1 {
		b.WriteString(exitHelp)
	}
	return b.String()
}

const exitHelp = `
Exit status: 0 done; 1 done with a finding (mismatches, a partial or truncated
result, a refused record); 2 a usage error or a failure (bad flag, cannot connect).
`

// visit calls fn on every command below c with its path.
func visit(c *command, path []string, fn func(c *command, path []string)) {
	fn(c, path)
	for _, s := range c.subs {
		visit(s, append(append([]string(nil), path...), s.name), fn)
	}
}

// flagNames lists a command's flags ("--name" or "-o"), sorted.
func flagNames(c *command) []string {
	var out []string
	switch {
	case c.setup != nil:
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs, &env{stdout: io.Discard, stderr: io.Discard, clock: clock.Real{}})
		fs.VisitAll(func(f *flag.Flag) {
			if len(f.Name) == 1 {
				out = append(out, "-"+f.Name)
			} else {
				out = append(out, "--"+f.Name)
			}
		})
	case c.raw != nil:
		for _, f := range c.rawFlags {
			out = append(out, "--"+f)
		}
	}
	if c.subs == nil {
		out = append(out, "-h")
	}
	sort.Strings(out)
	return out
}

// outputFlag is -o table|json of the read commands.
type outputFlag struct{ format string }

func (o *outputFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "o", "table", "output format: table or json (JSON field names are stable)")
	fs.StringVar(&o.format, "output", "table", "same as -o")
}

func (o *outputFlag) check() error {
	switch o.format {
	case "table", "json":
		return nil
	}
	return usagef("-o %q: want table or json", o.format)
}

func (o *outputFlag) json() bool { return o.format == "json" }

// writeJSON prints v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// progress prints progress lines of a long run on stderr: at most one per
// interval (and the last), none with --quiet.
type progress struct {
	w        io.Writer
	clk      clock.Clock
	what     string
	interval time.Duration
	every    int // also print every `every` items (0: only by time)

	mu   sync.Mutex
	last time.Time
}

func newProgress(e *env, quiet bool, what string) *progress {
	w := e.stderr
	if quiet {
		w = io.Discard
	}
	return &progress{w: w, clk: e.clock, what: what, interval: time.Second, every: 100, last: e.clock.Now()}
}

// step reports done of total (total < 0: unknown); final forces a line.
func (p *progress) step(done, total int, final bool, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	if !final && now.Sub(p.last) < p.interval && (p.every == 0 || done == 0 || done%p.every != 0) {
		return
	}
	p.last = now
	of := ""
	if total >= 0 {
		of = fmt.Sprintf("/%d", total)
	}
	if detail != "" {
		detail = " " + detail
	}
	fmt.Fprintf(p.w, "%s: %d%s%s\n", p.what, done, of, detail)
}

// ticking prints "what: still running (Ns)" every interval until stop is
// called (for one long request whose progress is server-side).
func (p *progress) ticking() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	start := p.clk.Now()
	t := p.clk.NewTicker(p.interval)
	wg.Go(func() {
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C():
				fmt.Fprintf(p.w, "%s: still running (%.0fs)\n", p.what, now.Sub(start).Seconds())
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
