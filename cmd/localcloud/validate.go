package main

import (
	"context"
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

func (c *validateCommand) flags() (*flag.FlagSet, *string) {
	fs := newFlagSet("validate")
	return fs, stackFlag(fs)
}

func (c *validateCommand) Run(ctx context.Context, args []string) error {
	fs, file := c.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	st, err := c.app.loadStack(*file)
	if err != nil {
		return err
	}
	s := "s"
	if len(st.Bindings) == 1 {
		s = ""
	}
	fmt.Fprintf(c.app.stdout, "ok: stack %s in %s: %d binding%s, data dir %s, hints on %s\n",
		st.Name, st.File, len(st.Bindings), s, st.DataDir, st.Notify.Listen)
	printBindings(c.app.stdout, st)
	return nil
}

// printBindings prints one line per binding: name, type, directory and the
// settings in force.
func printBindings(w io.Writer, st *config.Stack) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, b := range st.Bindings {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", b.Name, b.Type, b.Path, settings(b))
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
	parts = append(parts, "durability="+b.Durability)
	return strings.Join(parts, " ")
}

func (c *validateCommand) Usage() {
	fs, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Check a stack file without touching anything.

Usage:
  localcloud validate [-f FILE]

Prints "ok" and one line per binding (name, type, directory, settings), or
every problem found as FILE:LINE:COL: field: problem, and exits 1.

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
