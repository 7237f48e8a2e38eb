package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// app is what every command gets from the process: its standard streams and
// environment, injected so tests can drive commands in process.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	environ        func() []string
	// notify and stopNotify are signal.Notify and signal.Stop.
	notify     func(c chan<- os.Signal, sig ...os.Signal)
	stopNotify func(c chan<- os.Signal)
	// exit ends the process at once (a second signal during shutdown).
	exit func(code int)
	// warnedServed: the warning that a data command uses the stack up
	// serves, not the broken file, was printed (loadServedStack).
	warnedServed bool
}

func newApp(stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{
		stdin:      stdin,
		stdout:     stdout,
		stderr:     stderr,
		lookupEnv:  os.LookupEnv,
		environ:    os.Environ,
		notify:     signal.Notify,
		stopNotify: signal.Stop,
		exit:       os.Exit,
	}
}

func (a *app) getenv(name string) string {
	v, _ := a.lookupEnv(name)
	return v
}

// command is one subcommand: a struct with a flag.FlagSet.
type command interface {
	// Run parses args (the arguments after the command's name) and runs.
	Run(ctx context.Context, args []string) error
	// Usage prints the command's help to stdout.
	Usage()
}

// commandList is every command with its one-line summary, in the order
// the top-level help, the README table and the shell completions list them.
var commandList = []struct{ name, summary string }{
	{"init", "write a commented starter stack.yaml"},
	{"up", "provision a stack's stores and serve them until stopped"},
	{"validate", "check a stack file and list its bindings"},
	{"env", "print the environment an app needs to find its bindings"},
	{"run", "run a command with that environment"},
	{"status", "show whether up runs and the state of each binding"},
	{"kv", "get, put, delete, exists, scan the keys of a KV binding"},
	{"queue", "send, receive, ack, nack, extend, purge, peek, stats, tail, redrive a queue"},
	{"check", "verify every store read-only: marker, schema, integrity, modes"},
	{"backup", "write a verified online snapshot of a binding's store"},
	{"restore", "replace a binding's store with a backup (up must be stopped)"},
	{"migrate", "move a binding's data to its store on another engine (jetstream, sqlite)"},
	{"bench", "measure KV and queue throughput and latency on a temporary store"},
	{"asyncapi", "print the AsyncAPI 3.0.0 document of the stack's hint channels"},
	{"completion", "print a bash, zsh or fish completion script"},
	{"version", "print localcloud's version and build"},
}

// Subcommands of kv and queue, for help and completion.
var (
	kvSubcommands    = []string{"get", "put", "delete", "exists", "scan"}
	queueSubcommands = []string{"send", "receive", "ack", "nack", "extend", "purge", "peek", "stats", "tail", "redrive"}
)

// usageText is the top-level help.
func usageText() string {
	var b strings.Builder
	b.WriteString(`localcloud runs local KV stores and queues for development.

Usage:
  localcloud <command> [flags]

Commands:
`)
	for _, c := range commandList {
		fmt.Fprintf(&b, "  %-10s  %s\n", c.name, c.summary)
	}
	b.WriteString(`
Every command reads the stack file named by -f FILE (or --file FILE), else
$LOCALCLOUD_STACK, else ./stack.yaml (or ./stack.yml), looked for in the
current folder and then its parents up to the repository root.

Examples:
  localcloud init && localcloud up
  localcloud run -- go run ./cmd/myapp
  localcloud queue peek orders --json

Run "localcloud <command> -h" for a command's flags and examples;
"localcloud --version" prints the version.
Exit codes: 0 success, 1 failure, 2 usage mistake; run passes its command's on.
`)
	return b.String()
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(stdin, stdout, stderr).main(ctx, args)
}

func (a *app) commands() map[string]command {
	return map[string]command{
		"up":         &upCommand{app: a},
		"validate":   &validateCommand{app: a},
		"env":        &envCommand{app: a},
		"run":        &runCommand{app: a},
		"status":     &statusCommand{app: a},
		"kv":         &kvCommand{app: a},
		"queue":      &queueCommand{app: a},
		"check":      &checkCommand{app: a},
		"backup":     &backupCommand{app: a},
		"restore":    &restoreCommand{app: a},
		"migrate":    &migrateCommand{app: a},
		"bench":      &benchCommand{app: a},
		"asyncapi":   &asyncapiCommand{app: a},
		"init":       &initCommand{app: a},
		"version":    &versionCommand{app: a},
		"completion": &completionCommand{app: a},
		// Hidden: a load process of bench --processes.
		benchWorkerName: &benchWorkerCommand{app: a},
		// Hidden: the binding names the completion scripts offer.
		completeBindingsName: &completeBindingsCommand{app: a},
	}
}

func (a *app) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usageText())
		return exitUsage
	}
	name := args[0]
	switch name {
	case "--version", "-version", "-V":
		name, args = "version", append([]string{"version"}, args[1:]...)
	}
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && name == "help" {
			if c, ok := a.commands()[args[1]]; ok {
				c.Usage()
				return exitOK
			}
		}
		fmt.Fprint(a.stdout, usageText())
		return exitOK
	}
	c, ok := a.commands()[name]
	if !ok {
		return a.fail(&usageError{
			msg: fmt.Sprintf("unknown command %q", name),
			try: "localcloud -h lists the commands: " + strings.Join(a.commandNames(), ", "),
		})
	}
	err := c.Run(ctx, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		var h *subHelp
		if su, ok := c.(subUsager); ok && errors.As(err, &h) && su.subUsage(h.fs) {
			return exitOK
		}
		c.Usage()
		return exitOK
	}
	return a.fail(err)
}

func (a *app) commandNames() []string {
	var names []string
	for n := range a.commands() {
		if n != benchWorkerName && n != completeBindingsName {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct {
	msg string
	try string
}

func (e *usageError) Error() string { return e.msg }

// hintError is a failure with a suggestion printed as "Try: ...".
type hintError struct {
	err error
	try string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// exitCodeError ends the process with code and prints nothing: run passes
// its command's exit code on this way.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// fail prints err as "Error: ..." (plus "Try: ..." when there is a hint)
// and returns its exit code.
func (a *app) fail(err error) int {
	if err == nil {
		return exitOK
	}
	var code *exitCodeError
	if errors.As(err, &code) {
		return code.code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(a.stderr, "Error: %s\n", ue.msg)
		if ue.try != "" {
			fmt.Fprintf(a.stderr, "Try: %s\n", ue.try)
		}
		return exitUsage
	}
	var ce *config.Errors
	if errors.As(err, &ce) {
		n := len(ce.Problems)
		s := "s"
		if n == 1 {
			s = ""
		}
		fmt.Fprintf(a.stderr, "Error: invalid stack file: %d problem%s\n", n, s)
		for _, p := range ce.Problems {
			fmt.Fprintln(a.stderr, p.String())
		}
		return exitFailure
	}
	fmt.Fprintf(a.stderr, "Error: %s\n", oneLine(err.Error()))
	var he *hintError
	var eh *engine.HintError
	switch {
	case errors.As(err, &he) && he.try != "":
		fmt.Fprintf(a.stderr, "Try: %s\n", he.try)
	case errors.As(err, &eh) && eh.Try != "":
		fmt.Fprintf(a.stderr, "Try: %s\n", eh.Try)
	}
	return exitFailure
}

// oneLine indents the continuation lines of a multi-line message so each
// Error stays one visual block.
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n       ")
}

// newFlagSet returns a flag set that reports instead of printing: Run turns
// its errors into usage errors with parseFlags.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args; -h gives flag.ErrHelp (Usage, exit 0), a bad flag
// a usage error in our words (flagError).
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return &subHelp{fs: fs}
	}
	if err == nil {
		return nil
	}
	return &usageError{msg: flagError(fs, err), try: fmt.Sprintf("localcloud %s -h", fs.Name())}
}

// The messages of package flag that flagError rewords.
var (
	flagInvalidRE = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): `)
	flagMissingRE = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
	flagUnknownRE = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
)

// flagError says what is wrong with a flag as a user reads it:
// `--ttl: "banana" is not a duration, e.g. 30s`.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if m := flagUnknownRE.FindStringSubmatch(msg); m != nil {
		if guess := sameWordsFlag(fs, m[1]); guess != "" {
			return fmt.Sprintf("unknown flag %s; did you mean %s?", flagName(m[1]), flagName(guess))
		}
		return fmt.Sprintf("unknown flag %s", flagName(m[1]))
	}
	if m := flagMissingRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s needs a value%s", flagName(m[1]), flagExample(fs, m[1], ", e.g. "))
	}
	if m := flagInvalidRE.FindStringSubmatch(msg); m != nil {
		val, qerr := strconv.Unquote(m[1])
		if qerr != nil {
			val = m[1]
		}
		what := "is not a valid value"
		if f := fs.Lookup(m[2]); f != nil {
			if g, ok := f.Value.(flag.Getter); ok {
				switch g.Get().(type) {
				case time.Duration:
					what = "is not a duration"
				case int, int64, uint, uint64:
					what = "is not a whole number"
				case bool:
					what = "is not true or false"
				}
			}
		}
		return fmt.Sprintf("%s: %q %s%s", flagName(m[2]), val, what, flagExample(fs, m[2], ", e.g. "))
	}
	return msg
}

// sameWordsFlag is the flag of fs made of the same hyphen-separated words
// as name in another order (--payload-json for --json-payload), or "".
func sameWordsFlag(fs *flag.FlagSet, name string) string {
	words := func(n string) string {
		w := strings.Split(n, "-")
		sort.Strings(w)
		return strings.Join(w, "-")
	}
	want, found := words(name), ""
	fs.VisitAll(func(f *flag.Flag) {
		if found == "" && f.Name != name && strings.Contains(f.Name, "-") && words(f.Name) == want {
			found = f.Name
		}
	})
	return found
}

// flagName writes a flag as help shows it: -f, --json.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagExample is sep plus an example value for the flag's type ("" when
// there is none to give).
func flagExample(fs *flag.FlagSet, name, sep string) string {
	f := fs.Lookup(name)
	if f == nil {
		return ""
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return sep + "30s"
	case int, int64, uint, uint64:
		return sep + "10"
	case bool:
		return sep + "true"
	}
	return ""
}

// noArgs refuses positional arguments for commands that take none.
func noArgs(fs *flag.FlagSet) error {
	if fs.NArg() == 0 {
		return nil
	}
	return &usageError{
		msg: fmt.Sprintf("%s takes no arguments, got %q", fs.Name(), fs.Arg(0)),
		try: fmt.Sprintf("localcloud %s -h", fs.Name()),
	}
}

// stackFlag adds the -f flag every command has, and its long form --file.
func stackFlag(fs *flag.FlagSet) *string {
	p := fs.String("f", "", "stack `FILE` (default $LOCALCLOUD_STACK, else stack.yaml or stack.yml here or in a parent folder)")
	fs.StringVar(p, "file", "", "the same as -f")
	return p
}

// stackPath resolves -f: the flag, else $LOCALCLOUD_STACK, else stack.yaml
// or stack.yml in the working directory or the nearest parent folder up to
// the repository root (config.DefaultFile).
func (a *app) stackPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return config.DefaultFile(a.getenv)
}

// loadStack reads and checks the stack file named by -f (see stackPath).
func (a *app) loadStack(flagValue string) (*config.Stack, error) {
	path := a.stackPath(flagValue)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		try := fmt.Sprintf("name the stack file, not its folder: -f %s", filepath.Join(path, config.DefaultStackFile))
		for _, name := range []string{config.DefaultStackFile, config.AltStackFile} {
			if fi, err := os.Stat(filepath.Join(path, name)); err == nil && !fi.IsDir() {
				try = fmt.Sprintf("-f %s", filepath.Join(path, name))
				break
			}
		}
		return nil, &hintError{err: fmt.Errorf("stack file %s is a directory, not a regular file", path), try: try}
	}
	st, err := config.Load(path, a.loadOptions()...)
	var nr *config.NotRegularError
	if errors.As(err, &nr) {
		return nil, &hintError{err: err, try: "name a regular stack file with -f FILE or $LOCALCLOUD_STACK; it is read in one go, never from a pipe or device"}
	}
	if errors.Is(err, fs.ErrNotExist) {
		if flagValue == "" && a.getenv(config.EnvStackFile) == "" {
			where := "the current folder"
			if wd, werr := os.Getwd(); werr == nil {
				where = wd
				if _, top, _ := config.FindStackFile(wd); top != wd {
					where += " or its parent folders up to " + top
				}
			}
			return nil, &hintError{
				err: fmt.Errorf("no stack file: no %s or %s in %s", config.DefaultStackFile, config.AltStackFile, where),
				try: "localcloud init writes a starter stack.yaml here; or name one with -f FILE or $LOCALCLOUD_STACK",
			}
		}
		return nil, &hintError{
			err: fmt.Errorf("stack file %s not found", path),
			try: "check the path given with -f FILE or $LOCALCLOUD_STACK, or write a starter stack.yaml with localcloud init",
		}
	}
	return st, err
}

func (a *app) loadOptions() []config.Option {
	return []config.Option{config.WithLookupEnv(a.lookupEnv)}
}

// printDefaults prints a flag set's flags, as the Usage texts end with, in
// one style: a flag and its alias (usage "the same as -X") on one line,
// "-f, --file FILE" or "-J, --json-payload", --name for the others.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	alias := map[string]string{} // flag name -> its alias's
	fs.VisitAll(func(f *flag.Flag) {
		if target, ok := strings.CutPrefix(f.Usage, "the same as -"); ok {
			target = strings.TrimPrefix(target, "-")
			if fs.Lookup(target) != nil {
				alias[target] = f.Name
			}
		}
	})
	isAlias := map[string]bool{}
	for _, a := range alias {
		isAlias[a] = true
	}
	fs.VisitAll(func(f *flag.Flag) {
		if isAlias[f.Name] {
			return // shown with the flag it stands for
		}
		arg, usage := flag.UnquoteUsage(f)
		name := flagName(f.Name)
		if a, ok := alias[f.Name]; ok {
			if len(a) < len(f.Name) {
				name = flagName(a) + ", " + name
			} else {
				name += ", " + flagName(a)
			}
		}
		if arg != "" {
			name += " " + arg
		}
		fmt.Fprintf(w, "  %s\n    \t%s", name, usage)
		if d := f.DefValue; d != "" && d != "false" && d != "0" && d != "0s" {
			fmt.Fprintf(w, " (default %s)", d)
		}
		fmt.Fprintln(w)
	})
}

// lockedWriter serialises writes of several log handlers to one stream.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// loggers returns up's logger and the quieter one for the embedded NATS
// server (warnings only unless verbose), both slog text on stderr.
func (a *app) loggers(verbose bool) (log, natsLog *slog.Logger) {
	w := &lockedWriter{w: a.stderr}
	level, natsLevel := slog.LevelInfo, slog.LevelWarn
	if verbose {
		level, natsLevel = slog.LevelDebug, slog.LevelDebug
	}
	log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	natsLog = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: natsLevel}))
	return log, natsLog
}

// quantity gives "1 message", "2 messages", "0 messages"; words ending in s,
// x or y take "es" or "ies" as in English ("1 entry", "2 entries").
func quantity[N ~int | ~int64](n N, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	switch {
	case strings.HasSuffix(word, "y") && !strings.HasSuffix(word, "ey"):
		word = strings.TrimSuffix(word, "y") + "ies"
	case strings.HasSuffix(word, "s"), strings.HasSuffix(word, "x"):
		word += "es"
	default:
		word += "s"
	}
	return fmt.Sprintf("%d %s", n, word)
}
