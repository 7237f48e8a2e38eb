package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/asyncapi"
)

// asyncapiCommand prints the AsyncAPI 3.0.0 document of a stack's hint
// channels.
type asyncapiCommand struct {
	app *app
}

func (c *asyncapiCommand) flags() (fs *flag.FlagSet, file, format *string, asJSON *bool) {
	fs = newFlagSet("asyncapi")
	file = stackFlag(fs)
	format = fs.String("format", string(asyncapi.FormatJSON), "output `FORMAT`: json or yaml")
	asJSON = fs.Bool("json", false, "print the document as JSON (the default; the same as --format json)")
	return fs, file, format, asJSON
}

func (c *asyncapiCommand) Run(ctx context.Context, args []string) error {
	fs, file, format, asJSON := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if *format != string(asyncapi.FormatJSON) && *format != string(asyncapi.FormatYAML) {
		return &usageError{msg: fmt.Sprintf("--format must be json or yaml, got %q", *format), try: "localcloud asyncapi --format yaml"}
	}
	if *asJSON && *format != string(asyncapi.FormatJSON) {
		return &usageError{msg: fmt.Sprintf("--json and --format %s contradict each other", *format), try: "localcloud asyncapi --json"}
	}
	f := asyncapi.Format(*format)
	st, err := c.app.loadStack(*file)
	if err != nil {
		return err
	}
	doc, err := asyncapi.Generate(asyncAPIInput(st, f))
	if err != nil {
		return err
	}
	_, err = c.app.stdout.Write(doc)
	return err
}

// asyncAPIInput describes st's hint channels: one per queue binding whose
// engine wakes consumers with hints (engine.Traits.Hints; JetStream wakes
// its consumers itself, so a jetstream queue has none), on the server of
// notify.listen. It depends on the stack file only, so the
// document is the same whether up runs or not.
func asyncAPIInput(st *config.Stack, f asyncapi.Format) asyncapi.Input {
	in := asyncapi.Input{StackName: st.Name, DefaultHost: st.Notify.Listen, Format: f}
	for _, b := range st.Bindings {
		if t, err := toolsOf(b); err == nil && b.Type == config.TypeQueue && t.Traits().Hints {
			in.Bindings = append(in.Bindings, b.Name)
		}
	}
	return in
}

func (c *asyncapiCommand) Usage() {
	fs, _, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Print the AsyncAPI 3.0.0 document of a stack's wake-up hints.

Usage:
  localcloud asyncapi [-f FILE] [--json | --format json|yaml]

The document has one channel per queue binding, with the address
localcloud.<stack>.<binding>.available, the JSON schema of the hint payload
({"binding":"orders","due":3,"at":1767225600000}), a receive operation (what
a consumer implements) and a send operation (what localcloud does) per
channel, and one server with protocol nats whose host variable defaults to
the stack's notify.listen. With port 0 there, the real port is only known
while up runs: localcloud status prints it.

Example:
  localcloud asyncapi -f stack.yaml --format yaml > hints.asyncapi.yaml

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
