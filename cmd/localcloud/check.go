package main

import (
	"context"
	"fmt"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// checkCommand verifies stores read-only.
type checkCommand struct {
	app *app
}

// checkJSON is check's --json output.
type checkJSON struct {
	OK       bool            `json:"ok"`
	Problems int             `json:"problems"`
	Stores   []engine.Report `json:"stores"`
}

// problemRow is the kind of a row another program wrote (sqlstore's).
const problemRow = "row"

func (c *checkCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("check")
	file := stackFlag(fs)
	asJSON := jsonFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	st, err := c.app.loadStack(*file)
	if err != nil {
		return err
	}
	var bs []config.Binding
	if len(pos) == 0 {
		bs = st.Bindings
	}
	for _, name := range pos {
		b, ok := st.Binding(name)
		if !ok {
			return &hintError{
				err: fmt.Errorf("stack file %s has no binding called %q", st.File, name),
				try: "localcloud validate -f " + st.File + " lists the bindings",
			}
		}
		bs = append(bs, *b)
	}
	out := checkJSON{Stores: []engine.Report{}}
	env := engineEnv(st)
	defer env.Close()
	for _, b := range bs {
		t, err := toolsOf(b)
		if err != nil {
			return err
		}
		r, err := t.Check(ctx, env, b)
		if err != nil {
			return err
		}
		out.Problems += len(r.Problems)
		out.Stores = append(out.Stores, r)
	}
	out.OK = out.Problems == 0
	if *asJSON {
		if err := c.app.printJSON(out); err != nil {
			return err
		}
	} else {
		c.print(out)
	}
	if out.OK {
		return nil
	}
	bad, rows := 0, 0
	for _, s := range out.Stores {
		if !s.OK {
			bad++
		}
		for _, p := range s.Problems {
			if p.Kind == problemRow {
				rows++
			}
		}
	}
	try := "restore a verified backup (localcloud restore BINDING FILE), or fix the modes with chmod 700 DIR / chmod 600 FILE"
	if rows == out.Problems {
		// Only rows another program wrote: the store itself is sound.
		try = "the row problems are rows another program wrote that localcloud coerces or cannot deliver (README: Guarantees); fix or delete them with that program, or ack/purge them"
	}
	return &hintError{
		err: fmt.Errorf("check found %d problem%s in %d of %d stores", out.Problems, plural(out.Problems), bad, len(out.Stores)),
		try: try,
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (c *checkCommand) print(out checkJSON) {
	w := c.app.stdout
	for _, s := range out.Stores {
		if s.OK {
			fmt.Fprintf(w, "%s: %s\n", s.Binding, s.Summary)
		}
		for _, p := range s.Problems {
			fmt.Fprintf(w, "%s: %s: %s\n", s.Binding, p.Kind, p.Message)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "%s: note: %s\n", s.Binding, n)
		}
	}
}

func (c *checkCommand) Usage() {
	fs := newFlagSet("check")
	stackFlag(fs)
	jsonFlag(fs)
	fmt.Fprint(c.app.stdout, `Verify the stores of a stack, read-only.

Usage:
  localcloud check [-f FILE] [--json] [BINDING...]

For every binding (or the ones named) check verifies:
  - the modes of the store directory (created 0700) and of the database
    file and its -wal and -shm files (created 0600), by the policy open
    applies: group or others able to write is a problem, able only to read
    (0750, 0644) a note;
  - the database file is whole (a SQLite header, whole pages, as many as
    its header says) and a non-empty -wal belongs to it (held by a running
    process, or recorded in the -shm a crashed writer left); a -wal that
    cannot be shown to belong is not read;
  - the meta table holds the format marker of the binding's type
    (localkv.v1 or localqueue.v1);
  - the schema matches the format's DDL: every table and index of the spec
    (compared as normalized SQL: comments, whitespace and case ignored),
    plus localcloud's own index and tables (lc_*) on queues; a missing,
    changed or unknown object is a problem (a missing lc_ object is only a
    note: a spec-exact store has none);
  - PRAGMA integrity_check;
  - the rows: one "row" problem per row another program wrote that
    localcloud reads with a conversion or cannot deliver (a REAL or TEXT
    timestamp, a json payload that is not JSON, an unknown payload_type, a
    number or TEXT in the kv value column, ...), naming the row id or key.

On a jetstream binding check opens it read-only through the engine: the
stream exists with the settings the binding needs, a queue's consumer
exists, leaders are elected; it reports the stream's replicas, leader and
any offline or lagging replica (docs/CLI.md, "check").

It prints one line per problem ("BINDING: KIND: message"), or "BINDING: ok",
and exits 1 if it found any problem. A binding whose store does not exist yet
is not a problem. check opens the database read-only through SQLite and never
writes to it; on a WAL store whose -wal and -shm files are missing SQLite
creates them, empty, to read. It works while localcloud up runs.

Examples:
  localcloud check
  localcloud check -f stack.yaml orders --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
