package main

// Helpers shared by the commands that work on a binding's store: kv,
// queue, check, backup, restore.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// timeLayout is how times are printed: UTC with milliseconds, the
// precision of the store formats.
const timeLayout = "2006-01-02T15:04:05.000Z"

func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// parseArgs parses args with flags allowed before, between and after the
// positional arguments (flag.Parse alone stops at the first positional
// one), and returns the positional arguments. Everything after "--" is
// positional.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments: at least min, at most
// max (-1: no limit).
func wantArgs(fs *flag.FlagSet, pos []string, min, max int, synopsis string) error {
	if len(pos) >= min && (max < 0 || len(pos) <= max) {
		return nil
	}
	msg := fmt.Sprintf("%s needs %s", fs.Name(), synopsis)
	if max >= 0 && len(pos) > max {
		msg = fmt.Sprintf("%s takes %s, got an extra argument %q", fs.Name(), synopsis, pos[max])
	}
	return &usageError{msg: msg, try: fmt.Sprintf("localcloud %s -h", fs.Name())}
}

// parseWantArgs parses args with parseArgs and checks the number of
// positional arguments with wantArgs.
func parseWantArgs(fs *flag.FlagSet, args []string, min, max int, synopsis string) ([]string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs(fs, pos, min, max, synopsis); err != nil {
		return nil, err
	}
	return pos, nil
}

// jsonFlag adds the --json flag of the commands that print data.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print one JSON object (schema in docs/CLI.md) instead of text")
}

// jsonOrFormat reconciles --json with --format (kept for scripts that use
// it): it reports whether the output is JSON. text names the format's
// other value ("text", "sh", "yaml").
func jsonOrFormat(fs *flag.FlagSet, asJSON bool, format, text string) (bool, error) {
	cmd := fs.Name()
	switch {
	case format == "json":
		return true, nil
	case format != text:
		return false, &usageError{
			msg: fmt.Sprintf("--format must be %s or json, got %q", text, format),
			try: fmt.Sprintf("localcloud %s --json", cmd),
		}
	}
	formatSet := false
	fs.Visit(func(f *flag.Flag) { formatSet = formatSet || f.Name == "format" })
	if asJSON && formatSet {
		return false, &usageError{
			msg: fmt.Sprintf("--json and --format %s contradict each other", format),
			try: fmt.Sprintf("localcloud %s --json (or --format %s alone)", cmd, text),
		}
	}
	return asJSON, nil
}

// printJSON writes v as indented JSON without HTML escaping.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// findBinding loads the stack and returns the binding called name, which
// must be of type want ("" for any).
func (a *app) findBinding(file, name string, want config.Type) (*config.Stack, config.Binding, error) {
	st, fileErr, err := a.loadServedStack(file)
	if err != nil {
		return nil, config.Binding{}, err
	}
	b, ok := st.Binding(name)
	if fileErr != nil && (!ok || servedOnServer(*b)) {
		// The runtime file does not say where a store on a server (a
		// jetstream binding's cluster) is; and a binding up does not
		// serve is the file's.
		return nil, config.Binding{}, fileErr
	}
	if !ok {
		var names []string
		for _, b := range st.Bindings {
			if want == "" || b.Type == want {
				names = append(names, b.Name)
			}
		}
		have := "it has none"
		if len(names) > 0 {
			have = "it has " + strings.Join(names, ", ")
		}
		what := "binding"
		if want != "" {
			what = string(want) + " binding"
		}
		return nil, config.Binding{}, &hintError{
			err: fmt.Errorf("stack file %s has no %s called %q; %s", st.File, what, name, have),
			try: "localcloud validate -f " + st.File + " lists the bindings",
		}
	}
	if want != "" && b.Type != want {
		return nil, config.Binding{}, &hintError{
			err: fmt.Errorf("binding %s is a %s, not a %s", b.Name, b.Type, want),
			try: fmt.Sprintf("localcloud %s -h", b.Type),
		}
	}
	return st, *b, nil
}

// engineEnv returns the engine tools' environment for st: the stack and
// what the running up publishes of itself. Close it when done.
func engineEnv(st *config.Stack) *engine.Env {
	env := &engine.Env{Stack: st}
	if st != nil {
		if rt, running, err := supervisor.Probe(st.DataDir); err == nil && running {
			env.UpRunning = true
			if rt != nil {
				env.UpURL = rt.NATSURL
			}
		}
	}
	return env
}

// toolsOf returns the tools of b's engine.
func toolsOf(b config.Binding) (engine.Tools, error) { return engine.For(b) }

// servedOnServer reports whether b's store lives on a server (its engine's
// Traits.Server) rather than in files the runtime file locates; an engine
// that is not registered counts as one.
func servedOnServer(b config.Binding) bool {
	t, err := engine.For(b)
	return err != nil || t.Traits().Server
}

// openBinding opens b's store through its engine's tools with access a,
// on an environment of its own. close closes the handle and what was
// opened for it (a connection to JetStream).
func openBinding(ctx context.Context, st *config.Stack, b config.Binding, a engine.Access) (h engine.Handle, close func(), err error) {
	t, err := toolsOf(b)
	if err != nil {
		return nil, nil, err
	}
	env := engineEnv(st)
	h, err = t.Open(ctx, env, b, a)
	if err != nil {
		_ = env.Close()
		return nil, nil, err
	}
	return h, func() { _ = h.Close(); _ = env.Close() }, nil
}

// openKV opens a KV binding's store, creating it only when create is set
// (as an app's first write would).
func openKV(ctx context.Context, st *config.Stack, b config.Binding, create bool) (s *kv.Store, close func(), err error) {
	a := engine.Write
	if create {
		a = engine.Create
	}
	h, close, err := openBinding(ctx, st, b, a)
	if err != nil {
		return nil, nil, err
	}
	return h.KV(), close, nil
}

// openQueue opens a queue binding's store with the binding's settings
// (engine.Read: read-only; engine.Write: the store must exist;
// engine.Create: created if missing, for send). A writer on a SQLite
// store also joins the hints of a running up, so a send or nack from the
// command line wakes waiting consumers at once.
func openQueue(ctx context.Context, st *config.Stack, b config.Binding, a engine.Access) (q *queue.Queue, close func(), err error) {
	h, close, err := openBinding(ctx, st, b, a)
	if err != nil {
		return nil, nil, err
	}
	return h.Queue(), close, nil
}

// storeErr turns a store error into the command's error: invalid input
// from the command line is a usage mistake (exit 2).
func storeErr(cmd string, err error) error {
	if bindings.CodeOf(err) == bindings.CodeInvalidInput {
		return &usageError{msg: err.Error(), try: "localcloud " + cmd + " -h"}
	}
	return err
}

// interruptible returns a context that ends on SIGINT or SIGTERM, for
// commands that wait (receive --wait, bench) so they can stop cleanly.
func (a *app) interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 2)
	a.notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		a.stopNotify(sigs)
		close(done)
		cancel()
	}
}

// isTerminal reports whether w (or r) is a character device, such as a
// terminal.
func isTerminal(f any) bool {
	fh, ok := f.(*os.File)
	if !ok {
		return false
	}
	fi, err := fh.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// readInput reads a value given as an argument, or stdin for "-", at most
// limit bytes. An input over the limit is a usage error naming field, the
// limit and the input's real size (the rest of stdin is read to count it).
func (a *app) readInput(arg, field string, limit int) ([]byte, error) {
	if arg != "-" {
		if len(arg) > limit {
			return nil, &usageError{msg: fmt.Sprintf("%s: must be at most %d bytes, got %d bytes", field, limit, len(arg))}
		}
		return []byte(arg), nil
	}
	if a.stdin == nil {
		return []byte{}, nil
	}
	b, err := io.ReadAll(io.LimitReader(a.stdin, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > limit {
		rest, err := io.Copy(io.Discard, a.stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return nil, &usageError{msg: fmt.Sprintf("%s (stdin): must be at most %d bytes, got %d bytes", field, limit, int64(len(b))+rest)}
	}
	return b, nil
}

// previewBytes is how much of a value or payload a table shows.
const previewBytes = 48

// preview shows the start of b quoted, with escapes for anything not
// printable, and "..." when it was cut.
func preview(b []byte) string {
	if len(b) <= previewBytes {
		return strconv.Quote(string(b))
	}
	cut := previewBytes
	for cut > previewBytes-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return strconv.Quote(string(b[:cut])) + "..."
}

// valueJSON is a value in JSON output: base64 always, text too when the
// bytes are valid UTF-8.
type valueJSON struct {
	Bytes       int     `json:"bytes"`
	ValueBase64 string  `json:"valueBase64"`
	ValueText   *string `json:"valueText,omitempty"`
}

func encodeValue(b []byte) valueJSON {
	v := valueJSON{Bytes: len(b), ValueBase64: base64.StdEncoding.EncodeToString(b)}
	if utf8.Valid(b) {
		s := string(b)
		v.ValueText = &s
	}
	return v
}

// subcommands runs the subcommand named by args[0].
func subcommands(ctx context.Context, group string, subs map[string]func(context.Context, []string) error, args []string) error {
	var names []string
	for n := range subs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) == 0 {
		return &usageError{
			msg: fmt.Sprintf("%s needs a subcommand: %s", group, strings.Join(names, ", ")),
			try: fmt.Sprintf("localcloud %s -h", group),
		}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	}
	run, ok := subs[args[0]]
	if !ok {
		return &usageError{
			msg: fmt.Sprintf("unknown %s subcommand %q; %s has %s", group, args[0], group, strings.Join(names, ", ")),
			try: fmt.Sprintf("localcloud %s -h", group),
		}
	}
	return run(ctx, args[1:])
}
