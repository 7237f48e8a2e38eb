package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/supervisor"
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

func (c *envCommand) flags() (fs *flag.FlagSet, file, format *string, asJSON *bool) {
	fs = newFlagSet("env")
	file = stackFlag(fs)
	format = fs.String("format", "sh", "output `FORMAT`: sh (export lines) or json (one object)")
	asJSON = fs.Bool("json", false, "print one JSON object of NAME: VALUE (the same as --format json)")
	return fs, file, format, asJSON
}

func (c *envCommand) Run(ctx context.Context, args []string) error {
	fs, file, format, asJSON := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	useJSON, err := jsonOrFormat(fs, *asJSON, *format, "sh")
	if err != nil {
		return err
	}
	vars, err := c.app.stackEnv(ctx, *file, "env")
	if err != nil {
		return err
	}
	if useJSON {
		m := make(map[string]string, len(vars))
		for _, v := range vars {
			m[v.Name] = v.Value
		}
		return c.app.printJSON(m)
	}
	for _, v := range vars {
		fmt.Fprintf(c.app.stdout, "export %s=%s\n", v.Name, shQuote(v.Value))
	}
	return nil
}

type envVar = supervisor.EnvVar

// stackEnv loads the stack file and returns the app's environment (appEnv),
// printing its note, if any, on stderr as from localcloud cmd. It first
// makes sure the stack's stores exist (provision).
func (a *app) stackEnv(ctx context.Context, file, cmd string) ([]envVar, error) {
	st, err := a.loadStack(file)
	if err != nil {
		return nil, err
	}
	a.provision(ctx, st, cmd)
	vars, note, err := appEnv(st)
	if err != nil {
		return nil, err
	}
	aws, err := sqsEnv(st, a.lookupEnv)
	if err != nil {
		return nil, err
	}
	vars = append(vars, aws...)
	if note != "" {
		fmt.Fprintf(a.stderr, "localcloud %s: %s\n", cmd, note)
	}
	return vars, nil
}

// provision makes sure the stack's stores exist, as up does, when no up
// serves the stack: an app's FromEnv opens only what its stack
// provisioned, so apps work without up. A store that cannot be made (on
// up's embedded JetStream while up is stopped, a cluster out of reach, a
// file of another format) is reported on stderr as from localcloud cmd;
// the app's FromEnv then says what is missing.
func (a *app) provision(ctx context.Context, st *config.Stack, cmd string) {
	env := engineEnv(st)
	defer env.Close()
	if env.UpRunning {
		return // up made them, and makes those of every reload
	}
	for _, b := range st.Bindings {
		t, err := toolsOf(b)
		if err == nil {
			var h engine.Handle
			if h, err = t.Open(ctx, env, b, engine.Create); err == nil {
				err = h.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(a.stderr, "localcloud %s: binding %s: its store is not made: %s\n", cmd, b.Name, oneLine(err.Error()))
		}
	}
}

// appEnv returns the variables of the app contract for st
// (supervisor.AppEnv). The NATS URL comes from runtime.json while an up
// owns the data dir; otherwise from notify.listen, and it is left out (note
// says so) when that port is 0, since only a running up knows the port.
func appEnv(st *config.Stack) (vars []envVar, note string, err error) {
	rt, running, err := supervisor.Probe(st.DataDir)
	if err != nil {
		return nil, "", err
	}
	var url string
	switch {
	case running && rt != nil:
		url = rt.NATSURL
	case running:
		note = "localcloud up is starting and has not published its NATS URL yet; " + envNATSURL + " is not set"
	default:
		host, port, _ := net.SplitHostPort(st.Notify.Listen) // checked by config
		if port == "0" {
			note = "localcloud up is not running and notify.listen picks a free port, so " + envNATSURL +
				" is not set; start localcloud up first for wake-up hints (the stores work without)"
		} else {
			url = "nats://" + net.JoinHostPort(host, port)
			note = fmt.Sprintf("localcloud up is not running, so nothing of this stack listens on the fixed NATS port %s "+
				"(another program may); %s is set anyway and apps fall back to polling until up starts",
				net.JoinHostPort(host, port), envNATSURL)
		}
	}
	vars, err = supervisor.AppEnv(st, url)
	return vars, note, err
}

// shQuote quotes s for a POSIX shell: inside single quotes nothing is
// special; each single quote in s ends the quoted text, adds an escaped
// quote (\') and starts a new quoted text.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (c *envCommand) Usage() {
	fs, _, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Print the environment an app needs to find its bindings.

Usage:
  localcloud env [-f FILE] [--json | --format sh|json]
  eval "$(localcloud env -f FILE)"

Variables:
  LOCALCLOUD_STACK_NAME      the stack's name
  LOCALCLOUD_NATS_URL        the hint server of the running up (left out when up
                             is not running and notify.listen uses port 0)
  LOCALCLOUD_NATS_TOKEN      only when the stack sets notify.token
  LOCALCLOUD_RUNTIME_FILE    <dataDir>/runtime.json, where a running up writes its
                             NATS URL at every start (clients re-read it to reconnect)
  LOCALCLOUD_BINDING_<NAME>  per binding, NAME upper case with - as _:
    {"service":"local-kv","dataDir":"/abs/dir","durability":"normal"}
    {"service":"local-queue","queuePath":"/abs/dir","subject":"localcloud.<stack>.<name>.available",
     "visibilityTimeout":"30s","visibilityTimeoutMs":30000,"durability":"normal"}

Go apps open a binding with kv.FromEnv(ctx, name) or queue.FromEnv(ctx, name).
FromEnv never creates a store; when up is not running, env first creates the
stack's stores that do not exist, as up does.
When up is not running, env says so on stderr: with notify.listen on port 0
LOCALCLOUD_NATS_URL is left out; with a fixed port it is set, but nothing of
this stack listens there yet.

Examples:
  eval "$(localcloud env)"
  localcloud env -f examples/stack.yaml --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
