package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/cmd/localcloud/internal/supervisor"
	"github.com/localcloud/localcloud/config"
)

// Variables of the app contract besides the per-binding ones
// (config.EnvName).
const (
	envNATSURL   = bindings.EnvNATSURL
	envNATSToken = bindings.EnvNATSToken
	envStackName = bindings.EnvStackName
)

// envCommand prints the environment an app needs to find its bindings.
type envCommand struct {
	app *app
}

func (c *envCommand) flags() (fs *flag.FlagSet, file, format *string) {
	fs = newFlagSet("env")
	file = stackFlag(fs)
	format = fs.String("format", "sh", "output `FORMAT`: sh (export lines) or json (one object)")
	return fs, file, format
}

func (c *envCommand) Run(ctx context.Context, args []string) error {
	fs, file, format := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *format != "sh" && *format != "json" {
		return &usageError{msg: fmt.Sprintf("-format must be sh or json, got %q", *format), try: "localcloud env --format json"}
	}
	vars, err := c.app.stackEnv(*file, "env")
	if err != nil {
		return err
	}
	if *format == "json" {
		m := make(map[string]string, len(vars))
		for _, v := range vars {
			m[v.name] = v.value
		}
		return c.app.printJSON(m)
	}
	for _, v := range vars {
		fmt.Fprintf(c.app.stdout, "export %s=%s\n", v.name, shQuote(v.value))
	}
	return nil
}

type envVar struct{ name, value string }

func (v envVar) String() string { return v.name + "=" + v.value }

// stackEnv loads the stack file and returns the app's environment (appEnv),
// printing its note, if any, on stderr as from localcloud cmd.
func (a *app) stackEnv(file, cmd string) ([]envVar, error) {
	st, err := a.loadStack(file)
	if err != nil {
		return nil, err
	}
	vars, note, err := appEnv(st)
	if err != nil {
		return nil, err
	}
	if note != "" {
		fmt.Fprintf(a.stderr, "localcloud %s: %s\n", cmd, note)
	}
	return vars, nil
}

// appEnv returns the variables of the app contract for st: the stack name,
// the NATS URL (and token), and per binding LOCALCLOUD_BINDING_<NAME> with
// the binding's JSON. The NATS URL comes from runtime.json while an up owns
// the data dir; otherwise from notify.listen, and it is left out (note
// says so) when that port is 0, since only a running up knows the port.
func appEnv(st *config.Stack) (vars []envVar, note string, err error) {
	vars = append(vars, envVar{envStackName, st.Name})
	rt, running, err := supervisor.Probe(st.DataDir)
	if err != nil {
		return nil, "", err
	}
	switch {
	case running && rt != nil:
		vars = append(vars, envVar{envNATSURL, rt.NATSURL})
	case running:
		note = "localcloud up is starting and has not published its NATS URL yet; " + envNATSURL + " is not set"
	default:
		host, port, _ := net.SplitHostPort(st.Notify.Listen) // checked by config
		if port == "0" {
			note = "localcloud up is not running and notify.listen picks a free port, so " + envNATSURL +
				" is not set; start localcloud up first for wake-up hints (the stores work without)"
		} else {
			vars = append(vars, envVar{envNATSURL, "nats://" + net.JoinHostPort(host, port)})
		}
	}
	if st.Notify.Token != "" {
		vars = append(vars, envVar{envNATSToken, st.Notify.Token})
	}
	for _, b := range st.Bindings {
		var v any
		switch b.Type {
		case config.TypeKV:
			v = kv.EnvBinding{Service: kv.Service, DataDir: b.Path, Durability: b.Durability}
		case config.TypeQueue:
			eb := queue.EnvBinding{
				Service:           queue.Service,
				QueuePath:         b.Path,
				Subject:           config.Subject(st.Name, b.Name),
				VisibilityTimeout: b.VisibilityTimeout.String(),
				// The same in milliseconds, for apps in any language.
				VisibilityTimeoutMs: ptrTo(b.VisibilityTimeout.Milliseconds()),
				Durability:          b.Durability,
				// Consume's retry back-off and the dedup window, so every
				// process of the app applies the same policy.
				RetryDelay:      b.RetryDelay.String(),
				RetryDelayMs:    ptrTo(b.RetryDelay.Milliseconds()),
				MaxRetryDelay:   b.MaxRetryDelay.String(),
				MaxRetryDelayMs: ptrTo(b.MaxRetryDelay.Milliseconds()),
				DedupWindow:     b.DedupWindow.String(),
				DedupWindowMs:   ptrTo(b.DedupWindow.Milliseconds()),
			}
			// The dead-letter policy travels with the binding so every
			// process of the app enforces it (config checked deadLetter).
			if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 {
				eb.MaxAttempts = b.MaxAttempts
				eb.DeadLetter = &queue.EnvDeadLetter{Binding: dl.Name, QueuePath: dl.Path}
			}
			v = eb
		default:
			continue
		}
		js, err := marshalCompact(v)
		if err != nil {
			return nil, "", fmt.Errorf("encode binding %s: %w", b.Name, err)
		}
		vars = append(vars, envVar{config.EnvName(b.Name), js})
	}
	return vars, note, nil
}

func ptrTo[T any](v T) *T { return &v }

// marshalCompact encodes v as one line of JSON without HTML escaping, so
// paths stay readable.
func marshalCompact(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// shQuote quotes s for a POSIX shell: inside single quotes nothing is
// special; each single quote in s ends the quoted text, adds an escaped
// quote (\') and starts a new quoted text.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *envCommand) Usage() {
	fs, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Print the environment an app needs to find its bindings.

Usage:
  localcloud env [-f FILE] [--format sh|json]
  eval "$(localcloud env -f FILE)"

Variables:
  LOCALCLOUD_STACK_NAME      the stack's name
  LOCALCLOUD_NATS_URL        the hint server of the running up (left out when up
                             is not running and notify.listen uses port 0)
  LOCALCLOUD_NATS_TOKEN      only when the stack sets notify.token
  LOCALCLOUD_BINDING_<NAME>  per binding, NAME upper case with - as _:
    {"service":"local-kv","dataDir":"/abs/dir","durability":"normal"}
    {"service":"local-queue","queuePath":"/abs/dir","subject":"localcloud.<stack>.<name>.available",
     "visibilityTimeout":"30s","visibilityTimeoutMs":30000,"durability":"normal"}

Go apps open a binding with kv.FromEnv(ctx, name) or queue.FromEnv(ctx, name).

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
