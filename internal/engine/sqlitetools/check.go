package sqlitetools

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Problem kinds of Check besides sqlstore's (docs/CLI.md).
const (
	ProblemMode  = "mode"
	ProblemStore = "store"
	// ProblemMove is an unfinished move out of a queue toward a
	// destination the stack does not let it finish (MoveProblems).
	ProblemMove = "move"
)

// Check verifies b's store: directory and file modes (stat only), then
// the database through a read-only SQLite connection (marker, schema,
// integrity, rows another program wrote) and, for a queue, the unfinished
// moves up would leave in place. A store that does not exist yet is no
// problem.
func (Tools) Check(ctx context.Context, env *engine.Env, b config.Binding) (engine.Report, error) {
	f := formatOf(b.Type)
	r := engine.Report{Binding: b.Name, Type: string(b.Type), Format: f.Marker, Path: b.Path,
		File: File(b), Problems: []engine.Problem{}, Notes: []string{}}
	add := func(kind, object, msg string) {
		r.Problems = append(r.Problems, engine.Problem{Kind: kind, Object: object, Message: msg})
	}
	di, err := os.Stat(b.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.OK = true
		r.Summary = fmt.Sprintf("not provisioned yet (%s does not exist); localcloud up creates it", r.File)
		return r, nil
	case err != nil:
		add(ProblemStore, "", fmt.Sprintf("cannot stat store directory %s: %v", b.Path, err))
		return r, nil
	case !di.IsDir():
		add(ProblemStore, "", fmt.Sprintf("%s is not a directory", b.Path))
		return r, nil
	}
	v, msg := sqlstore.DirModeVerdict(b.Path, di.Mode())
	checkMode(&r, b.Path, v, msg)
	fi, err := os.Stat(r.File)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		add(ProblemStore, "", fmt.Sprintf("the store directory exists but %s does not; localcloud up creates it", f.File))
		r.OK = false
		return r, nil
	case err != nil:
		add(ProblemStore, "", fmt.Sprintf("cannot stat %s: %v", r.File, err))
		return r, nil
	case !fi.Mode().IsRegular():
		add(ProblemStore, "", fmt.Sprintf("%s is not a regular file (%s)", r.File, fi.Mode()))
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
	if b.Type == config.TypeQueue && ver.OK() && env.Stack != nil {
		for _, p := range queueMoveProblems(ctx, env.Stack, b) {
			add(ProblemMove, "table lc_moves", p)
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
	r.Problems = append(r.Problems, problems(ver.Problems)...)
	r.Notes = append(r.Notes, ver.Notes...)
	r.Objects = ver.Objects
	r.OK = len(r.Problems) == 0
	r.Summary = fmt.Sprintf("ok (%s, %d schema objects, integrity ok, modes ok) %s", r.Format, r.Objects, r.File)
	return r, nil
}

// problems converts sqlstore's findings.
func problems(ps []sqlstore.Problem) []engine.Problem {
	out := make([]engine.Problem, len(ps))
	for i, p := range ps {
		out[i] = engine.Problem(p)
	}
	return out
}

// problemLines is one line per problem.
func problemLines(ps []sqlstore.Problem) string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// checkMode reports a mode by the store file-mode policy (the one open
// applies): a mode it refuses (group or others can write) or one without
// the owner's access is a problem; one it warns about (group or others can
// read) is a note.
func checkMode(r *engine.Report, path string, v sqlstore.ModeVerdict, msg string) {
	switch v {
	case sqlstore.ModeRefuse, sqlstore.ModeOwner:
		r.Problems = append(r.Problems, engine.Problem{Kind: ProblemMode, Object: path, Message: msg})
	case sqlstore.ModeWarn:
		r.Notes = append(r.Notes, msg)
	}
}

// queueMoveProblems reads the unfinished moves of queue binding b's store
// through a read-only handle and returns those up would leave in place.
func queueMoveProblems(ctx context.Context, st *config.Stack, b config.Binding) []string {
	q, eq, err := OpenQueue(ctx, b.Path, queue.WithReadOnly())
	if err != nil {
		return []string{fmt.Sprintf("cannot read the unfinished moves: %v", err)}
	}
	defer q.Close()
	refs, err := eq.References(ctx)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the unfinished moves: %v", err)}
	}
	return MoveProblems(st, b, refs)
}

// MoveProblems returns, one line each, the unfinished moves among refs
// (the References of binding b's store) that up would leave in place:
// their destination is not one the stack lets b finish moves toward
// (engine.MoveTargets).
func MoveProblems(st *config.Stack, b config.Binding, refs []sqlitequeue.Reference) []string {
	dl, origins := engine.MoveTargets(st, b)
	var out []string
	for _, r := range refs {
		if r.Table != "lc_moves" {
			continue
		}
		var why string
		switch {
		case r.Kind == sqlitequeue.MoveDeadLetter && dl == "":
			why = fmt.Sprintf("binding %s has no dead-letter policy", b.Name)
		case r.Kind == sqlitequeue.MoveDeadLetter && r.Location != dl:
			why = fmt.Sprintf("the dead-letter policy of %s names %s (%s)", b.Name, b.DeadLetter, dl)
		case r.Kind == sqlitequeue.MoveDeadLetter:
			continue
		case r.Kind == sqlitequeue.MoveRedrive && slices.Contains(origins, r.Location):
			continue
		case r.Kind == sqlitequeue.MoveRedrive:
			if name := engine.QueueAt(st, r.Location); name != "" {
				why = fmt.Sprintf("%s is no queue that dead-letters into %s; `localcloud queue redrive %s --to %s` finishes it", name, b.Name, b.Name, name)
			} else {
				why = "it is no queue binding of the stack"
			}
		default:
			why = fmt.Sprintf("unknown kind of move %q", r.Kind)
		}
		out = append(out, fmt.Sprintf("%d unfinished %s move(s) toward %s left in place (hidden in this queue, not dropped): %s",
			r.Count, r.Kind, r.Location, why))
	}
	return out
}

// ForeignReferences returns, one line each, the locations among refs (the
// References of a store file meant for binding b) that are no other queue
// binding of the stack: restore refuses such a file, since a move or a
// redrive would write there.
func ForeignReferences(st *config.Stack, b config.Binding, refs []sqlitequeue.Reference) []string {
	var out []string
	for _, r := range refs {
		if name := engine.QueueAt(st, r.Location); name != "" && name != b.Name {
			continue
		}
		what := "unfinished " + r.Kind + " move(s) toward"
		if r.Table != "lc_moves" {
			what = "dead letter(s) whose recorded origin, where a redrive sends them, is"
		}
		out = append(out, fmt.Sprintf("%s: %d %s %q, which is no other queue binding of stack %s", r.Table, r.Count, what, r.Location, st.Name))
	}
	return out
}

// Backup writes a verified snapshot of b's store (sqlstore.Backup) to dest,
// or to dest/BINDING-<UTC time>.sqlite when dest is a folder.
func (Tools) Backup(ctx context.Context, env *engine.Env, b config.Binding, dest string, now time.Time) (engine.Backup, error) {
	if err := needStore(env, b); err != nil {
		return engine.Backup{}, err
	}
	dest, err := filepath.Abs(dest)
	if err != nil {
		return engine.Backup{}, err
	}
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, fmt.Sprintf("%s-%s.sqlite", b.Name, now.UTC().Format("20060102T150405Z")))
	}
	if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
		return engine.Backup{}, engine.Hint(fmt.Errorf("backup destination folder %s does not exist", filepath.Dir(dest)), "mkdir -p "+filepath.Dir(dest))
	}
	f := formatOf(b.Type)
	src := File(b)
	res, err := sqlstore.Backup(ctx, src, dest, f)
	var ve *sqlstore.VerifyError
	switch {
	case errors.Is(err, sqlstore.ErrExists):
		return engine.Backup{}, engine.Hint(fmt.Errorf("%s already exists; backup never overwrites a file", dest),
			"name a new file, or a folder to get BINDING-TIME.sqlite in it")
	case errors.As(err, &ve):
		return engine.Backup{}, engine.Hint(fmt.Errorf("the snapshot of %s failed verification, so no backup was written:\n%s", b.Name, problemLines(ve.Problems)),
			"localcloud check "+b.Name+" shows the store's problems")
	case err != nil:
		return engine.Backup{}, fmt.Errorf("back up %s: %w", b.Name, err)
	}
	return engine.Backup{Format: f.Marker, Source: src, Path: res.Path, Bytes: res.Bytes, Objects: res.Verification.Objects}, nil
}

// Restore verifies src and swaps it in as b's store (sqlstore.Restore),
// refusing a queue backup whose own tables name a location that is no
// other queue binding of the stack.
func (Tools) Restore(ctx context.Context, env *engine.Env, b config.Binding, src string, now time.Time) (engine.Restored, error) {
	src, err := filepath.Abs(src)
	if err != nil {
		return engine.Restored{}, err
	}
	if fi, err := os.Stat(src); err != nil || !fi.Mode().IsRegular() {
		return engine.Restored{}, engine.Hint(fmt.Errorf("restore source %s is not a readable file", src), "name a file written by localcloud backup")
	}
	if env.Exclusive != nil {
		release, err := env.Exclusive()
		if err != nil {
			return engine.Restored{}, err
		}
		defer release()
	}
	f := formatOf(b.Type)
	var checks []sqlstore.RestoreCheck
	if b.Type == config.TypeQueue && env.Stack != nil {
		checks = append(checks, func(ctx context.Context, db *sql.DB) error {
			refs, err := sqlitequeue.ReadReferences(ctx, db)
			if err != nil {
				return err
			}
			if lines := ForeignReferences(env.Stack, b, refs); len(lines) > 0 {
				return &foreignRefsError{lines: lines}
			}
			return nil
		})
	}
	res, err := sqlstore.Restore(ctx, b.Path, f, src, now, checks...)
	var ve *sqlstore.VerifyError
	var fe *foreignRefsError
	switch {
	case errors.As(err, &fe):
		return engine.Restored{}, engine.Hint(fmt.Errorf("%s names destinations that stack %s does not have, so nothing was changed:\n  %s",
			src, env.Stack.Name, strings.Join(fe.lines, "\n  ")),
			fmt.Sprintf("restore a backup of %s taken from this stack, or add the named queues to the stack file", b.Name))
	case errors.As(err, &ve):
		return engine.Restored{}, engine.Hint(fmt.Errorf("%s is not a sound %s store, so nothing was changed:\n%s", src, f.Marker, problemLines(ve.Problems)),
			fmt.Sprintf("restore a backup of a %s binding, made by localcloud backup", b.Type))
	case errors.Is(err, sqlstore.ErrStoreInUse):
		return engine.Restored{}, engine.Hint(err, fmt.Sprintf("stop the apps that use %s (localcloud run ...), then run restore again; nothing was changed", b.Name))
	case errors.Is(err, sqlstore.ErrStoreBusy):
		return engine.Restored{}, engine.Hint(err, "a writer held the store's lock for a long time; stop the apps that use it and retry")
	case err != nil:
		return engine.Restored{}, fmt.Errorf("restore %s: %w", b.Name, err)
	}
	return engine.Restored{Format: f.Marker, Source: src, Store: res.Path, Replaced: res.Replaced}, nil
}

// foreignRefsError refuses a queue backup whose own tables name locations
// that are no queue of the stack (ForeignReferences).
type foreignRefsError struct{ lines []string }

func (e *foreignRefsError) Error() string { return strings.Join(e.lines, "; ") }
