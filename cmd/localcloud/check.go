package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/admin"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// checkCommand verifies stores read-only.
type checkCommand struct {
	app *app
}

// Problem kinds of check besides sqlstore's (docs/CLI.md).
const (
	problemMode  = "mode"
	problemStore = "store"
	// problemMove is an unfinished move out of a queue toward a
	// destination the stack does not let it finish (supervisor.MoveProblems).
	problemMove = "move"
)

// checkJSON is check's --json output.
type checkJSON struct {
	OK       bool             `json:"ok"`
	Problems int              `json:"problems"`
	Stores   []checkStoreJSON `json:"stores"`
}

type checkStoreJSON struct {
	Binding  string             `json:"binding"`
	Type     string             `json:"type"`
	Format   string             `json:"format"`
	Path     string             `json:"path"`
	File     string             `json:"file"`
	Exists   bool               `json:"exists"`
	OK       bool               `json:"ok"`
	Objects  int                `json:"objects"`
	Problems []sqlstore.Problem `json:"problems"`
	Notes    []string           `json:"notes"`
	// Engine is "jetstream" for a jetstream binding, with its Stream, the
	// stream's Replicas and its Leader ("" on a single server); absent for
	// a sqlite binding. Format is then "jetstream", Path and File "".
	// Skipped: not checked (up's embedded server is not running).
	Engine   string `json:"engine,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Replicas int    `json:"replicas,omitempty"`
	Leader   string `json:"leader,omitempty"`
	Skipped  bool   `json:"skipped,omitempty"`
}

func formatOf(t config.Type) sqlstore.Format {
	if t == config.TypeQueue {
		return sqlitequeue.Format()
	}
	return sqlitekv.Format()
}

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
	out := checkJSON{Stores: []checkStoreJSON{}}
	for _, b := range bs {
		if b.Engine == config.EngineJetStream {
			r := checkJetStream(ctx, st, b)
			out.Problems += len(r.Problems)
			out.Stores = append(out.Stores, r)
			continue
		}
		r, err := checkStore(ctx, st, b)
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
			if p.Kind == sqlstore.ProblemRow {
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
		switch {
		case s.Skipped:
			fmt.Fprintf(w, "%s: skipped (engine jetstream, stream %s)\n", s.Binding, s.Stream)
		case s.Engine == config.EngineJetStream && !s.Exists && s.OK:
			fmt.Fprintf(w, "%s: not provisioned yet (engine jetstream, stream %s)\n", s.Binding, s.Stream)
		case s.Engine == config.EngineJetStream && s.OK:
			what := ""
			if s.Type == string(config.TypeQueue) {
				what = ", consumer lc"
			}
			if s.Leader != "" {
				what += ", leader " + s.Leader
			}
			fmt.Fprintf(w, "%s: ok (engine jetstream, stream %s with the expected settings, %d replica(s)%s)\n", s.Binding, s.Stream, s.Replicas, what)
		case !s.Exists && s.OK:
			fmt.Fprintf(w, "%s: not provisioned yet (%s does not exist); localcloud up creates it\n", s.Binding, s.File)
		case s.OK:
			fmt.Fprintf(w, "%s: ok (%s, %d schema objects, integrity ok, modes ok) %s\n", s.Binding, s.Format, s.Objects, s.File)
		}
		for _, p := range s.Problems {
			fmt.Fprintf(w, "%s: %s: %s\n", s.Binding, p.Kind, p.Message)
		}
		for _, n := range s.Notes {
			fmt.Fprintf(w, "%s: note: %s\n", s.Binding, n)
		}
	}
}

// checkStore verifies one binding's store: directory and file modes (stat
// only), then the database through a read-only SQLite connection.
func checkStore(ctx context.Context, st *config.Stack, b config.Binding) (checkStoreJSON, error) {
	f := formatOf(b.Type)
	r := checkStoreJSON{Binding: b.Name, Type: string(b.Type), Format: f.Marker, Path: b.Path,
		File: filepath.Join(b.Path, f.File), Problems: []sqlstore.Problem{}, Notes: []string{}}
	add := func(kind, object, msg string) {
		r.Problems = append(r.Problems, sqlstore.Problem{Kind: kind, Object: object, Message: msg})
	}
	di, err := os.Stat(b.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.OK = true
		return r, nil
	case err != nil:
		add(problemStore, "", fmt.Sprintf("cannot stat store directory %s: %v", b.Path, err))
		return r, nil
	case !di.IsDir():
		add(problemStore, "", fmt.Sprintf("%s is not a directory", b.Path))
		return r, nil
	}
	v, msg := sqlstore.DirModeVerdict(b.Path, di.Mode())
	checkMode(&r, b.Path, v, msg)
	fi, err := os.Stat(r.File)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add(problemStore, "", fmt.Sprintf("the store directory exists but %s does not; localcloud up creates it", f.File))
		r.OK = false
		return r, nil
	case err != nil:
		add(problemStore, "", fmt.Sprintf("cannot stat %s: %v", r.File, err))
		return r, nil
	case !fi.Mode().IsRegular():
		add(problemStore, "", fmt.Sprintf("%s is not a regular file (%s)", r.File, fi.Mode()))
		return r, nil
	}
	r.Exists = true
	v, msg = sqlstore.FileModeVerdict(r.File, fi.Mode())
	checkMode(&r, r.File, v, msg)
	sides := []string{"-wal", "-shm"}
	existed := map[string]bool{}
	for _, side := range sides {
		_, err := os.Stat(r.File + side)
		existed[side] = err == nil
	}
	ver, err := sqlstore.Verify(ctx, r.File, f)
	if err != nil {
		return r, fmt.Errorf("check %s: %w", b.Name, err)
	}
	if b.Type == config.TypeQueue && ver.OK() {
		for _, p := range queueMoveProblems(ctx, st, b) {
			add(problemMove, "table lc_moves", p)
		}
	}
	// Stat the sidecars after the read, so a second check reports the same:
	// a read-only open of a WAL store creates missing ones, with the
	// database file's mode, and leaves them.
	for _, side := range sides {
		if si, err := os.Stat(r.File + side); err == nil {
			v, msg := sqlstore.FileModeVerdict(r.File+side, si.Mode())
			if !existed[side] && msg != "" {
				msg += " (" + f.File + side + " was created by SQLite for this read, with the database file's mode)"
			}
			checkMode(&r, r.File+side, v, msg)
		}
	}
	r.Problems = append(r.Problems, ver.Problems...)
	r.Notes = append(r.Notes, ver.Notes...)
	r.Objects = ver.Objects
	r.OK = len(r.Problems) == 0
	return r, nil
}

// checkMode reports a mode by the store file-mode policy (the one open
// applies): a mode it refuses (group or others can write) or one without
// the owner's access is a problem; one it warns about (group or others can
// read) is a note.
func checkMode(r *checkStoreJSON, path string, v sqlstore.ModeVerdict, msg string) {
	switch v {
	case sqlstore.ModeRefuse, sqlstore.ModeOwner:
		r.Problems = append(r.Problems, sqlstore.Problem{Kind: problemMode, Object: path, Message: msg})
	case sqlstore.ModeWarn:
		r.Notes = append(r.Notes, msg)
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

// queueMoveProblems reads the unfinished moves of queue binding b's store
// through a read-only handle and returns those up would leave in place.
func queueMoveProblems(ctx context.Context, st *config.Stack, b config.Binding) []string {
	q, err := queue.Open(ctx, b.Path, queue.WithReadOnly())
	if err != nil {
		return []string{fmt.Sprintf("cannot read the unfinished moves: %v", err)}
	}
	defer q.Close()
	eq, err := admin.Queue(q)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the unfinished moves: %v", err)}
	}
	refs, err := eq.References(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the unfinished moves: %v", err)}
	}
	return supervisor.MoveProblems(st, b, refs)
}
