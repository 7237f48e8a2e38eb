package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/localcloud/localcloud/config"
)

// validateCommand checks a stack file: "ok" and a line per binding, or every
// problem with its line.
type validateCommand struct {
	app *app
}

func (c *validateCommand) flags() (fs *flag.FlagSet, file *string, asJSON *bool, format *string) {
	fs = newFlagSet("validate")
	file = stackFlag(fs)
	asJSON = jsonFlag(fs)
	format = fs.String("format", "text", "output `FORMAT`: text or json (the same as --json)")
	return fs, file, asJSON, format
}

func (c *validateCommand) Run(ctx context.Context, args []string) error {
	fs, file, asJSON, format := c.flags()
	pos, err := parseWantArgs(fs, args, 0, 1, "at most one stack FILE")
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		if *file != "" && *file != pos[0] {
			return &usageError{msg: fmt.Sprintf("validate got two stack files: -f %s and %s", *file, pos[0]), try: "localcloud validate FILE"}
		}
		*file = pos[0]
	}
	useJSON, err := jsonOrFormat(fs, *asJSON, *format, "text")
	if err != nil {
		return err
	}
	st, err := c.app.loadStack(*file)
	if err != nil {
		var ce *config.Errors
		if useJSON && errors.As(err, &ce) {
			out := validateJSON{OK: false, File: c.app.stackPath(*file), Problems: []validateProblem{}}
			for _, p := range ce.Problems {
				out.Problems = append(out.Problems, validateProblem{File: p.File, Line: p.Line, Col: p.Col, Field: p.Field, Message: p.Msg})
			}
			if perr := c.app.printJSON(out); perr != nil {
				return perr
			}
			return &exitCodeError{code: exitFailure}
		}
		return err
	}
	if useJSON {
		out := validateJSON{OK: true, File: st.File, Stack: st.Name, DataDir: st.DataDir, Listen: st.Notify.Listen,
			Bindings: []validateBinding{}, Problems: []validateProblem{}}
		for _, b := range st.Bindings {
			vb := validateBinding{Name: b.Name, Type: string(b.Type), Path: b.Path, Durability: b.Durability}
			if b.Engine != config.DefaultEngine {
				vb.Engine = b.Engine
			}
			if t, err := toolsOf(b); err == nil {
				p := t.Place(b)
				vb.Stream, vb.Replicas = p.Stream, p.Replicas
			}
			if b.Type == config.TypeQueue {
				vb.VisibilityTimeout = b.VisibilityTimeout.String()
				vb.VisibilityTimeoutMs = b.VisibilityTimeout.Milliseconds()
				vb.MaxAttempts, vb.DeadLetter = b.MaxAttempts, b.DeadLetter
			}
			out.Bindings = append(out.Bindings, vb)
		}
		return c.app.printJSON(out)
	}
	fmt.Fprintf(c.app.stdout, "ok: stack %s in %s: %s, data dir %s, hints on %s\n",
		st.Name, st.File, quantity(len(st.Bindings), "binding"), st.DataDir, st.Notify.Listen)
	printBindings(c.app.stdout, st)
	return nil
}

// The --json output of validate (docs/CLI.md).
type (
	validateJSON struct {
		OK       bool              `json:"ok"`
		File     string            `json:"file"`
		Stack    string            `json:"stack,omitempty"`
		DataDir  string            `json:"dataDir,omitempty"`
		Listen   string            `json:"listen,omitempty"`
		Bindings []validateBinding `json:"bindings,omitempty"`
		Problems []validateProblem `json:"problems"`
	}
	validateBinding struct {
		Name                string `json:"name"`
		Type                string `json:"type"`
		Path                string `json:"path"`
		Engine              string `json:"engine,omitempty"`
		Stream              string `json:"stream,omitempty"`
		Replicas            int    `json:"replicas,omitempty"`
		Durability          string `json:"durability"`
		VisibilityTimeout   string `json:"visibilityTimeout,omitempty"`
		VisibilityTimeoutMs int64  `json:"visibilityTimeoutMs,omitempty"`
		MaxAttempts         int    `json:"maxAttempts,omitempty"`
		DeadLetter          string `json:"deadLetter,omitempty"`
	}
	validateProblem struct {
		File    string `json:"file,omitempty"`
		Line    int    `json:"line,omitempty"`
		Col     int    `json:"col,omitempty"`
		Field   string `json:"field,omitempty"`
		Message string `json:"message"`
	}
)

// printBindings prints one line per binding: name, type, directory and the
// settings in force.
func printBindings(w io.Writer, st *config.Stack) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, b := range st.Bindings {
		where := b.Path
		if t, err := toolsOf(b); err == nil {
			where = t.Where(b)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", b.Name, b.Type, where, settings(b))
	}
	tw.Flush()
}

// settings formats a binding's settings as key=value pairs.
func settings(b config.Binding) string {
	var parts []string
	if b.Type == config.TypeQueue {
		parts = append(parts, "visibilityTimeout="+b.VisibilityTimeout.String())
		if b.MaxAttempts > 0 {
			parts = append(parts, fmt.Sprintf("maxAttempts=%d", b.MaxAttempts), "deadLetter="+b.DeadLetter)
		}
	}
	if b.Replicas > 0 {
		parts = append(parts, fmt.Sprintf("replicas=%d", b.Replicas))
	}
	parts = append(parts, "durability="+b.Durability)
	return strings.Join(parts, " ")
}

func (c *validateCommand) Usage() {
	fs, _, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Check a stack file without touching anything.

Usage:
  localcloud validate [FILE] [-f FILE] [--json]

Prints "ok" and one line per binding (name, type, directory, settings), or
every problem found as FILE:LINE:COL: field: problem, and exits 1. FILE may
be given as an argument or with -f; without either, $LOCALCLOUD_STACK, else
./stack.yaml, else ./stack.yml.

Examples:
  localcloud validate
  localcloud validate examples/stack.yaml
  localcloud validate -f examples/stack.yaml --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
