package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// restoreCommand swaps a verified snapshot in as a binding's store.
type restoreCommand struct {
	app *app
	now func() time.Time // time.Now; tests replace it
}

// restoreJSON is restore's --json output.
type restoreJSON struct {
	Binding string `json:"binding"`
	Type    string `json:"type"`
	Format  string `json:"format"`
	Source  string `json:"source"`
	Store   string `json:"store"`
	// Replaced is where the previous database was kept; "" when the store
	// had none.
	Replaced string `json:"replaced"`
}

func (c *restoreCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("restore")
	file := stackFlag(fs)
	asJSON := jsonFlag(fs)
	pos, err := parseWantArgs(fs, args, 2, 2, "BINDING SRC")
	if err != nil {
		return err
	}
	st, b, err := c.app.findBinding(*file, pos[0], "")
	if err != nil {
		return err
	}
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	t, err := toolsOf(b)
	if err != nil {
		return err
	}
	env := engineEnv(st)
	defer env.Close()
	env.Exclusive = func() (func(), error) { return holdDataDir(st) }
	res, err := t.Restore(ctx, env, b, pos[1], now())
	if err != nil {
		return err
	}
	if *asJSON {
		return c.app.printJSON(restoreJSON{Binding: b.Name, Type: string(b.Type), Format: res.Format, Source: res.Source, Store: res.Store, Replaced: res.Replaced})
	}
	fmt.Fprintf(c.app.stdout, "restored %s from %s (marker, schema and integrity verified)\n", b.Name, res.Source)
	if res.Replaced != "" {
		fmt.Fprintf(c.app.stdout, "the replaced store is kept at %s\n", res.Replaced)
	}
	return nil
}

// holdDataDir takes the exclusive lock localcloud up takes on
// <dataDir>/.lock, so restore is refused while up serves the stack and up
// cannot start during the swap. It does not write a pid into the file.
func holdDataDir(st *config.Stack) (func(), error) {
	if err := os.MkdirAll(st.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(st.DataDir, supervisor.LockFileName)
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err == nil {
		return func() { _ = fh.Close() }, nil // closing drops the flock
	}
	fh.Close()
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	holder, try := "localcloud up", "stop localcloud up first, then run restore again"
	if rt, _, _ := supervisor.Probe(st.DataDir); rt != nil && rt.PID > 0 {
		holder = fmt.Sprintf("localcloud up (pid %d)", rt.PID)
		try = fmt.Sprintf("stop localcloud up first (kill %d), then run restore again", rt.PID)
	}
	return nil, &hintError{
		err: fmt.Errorf("%s serves stack %s (it holds %s); restore refuses to swap a store under it; nothing was changed", holder, st.Name, path),
		try: try,
	}
}

func (c *restoreCommand) Usage() {
	fs := newFlagSet("restore")
	stackFlag(fs)
	jsonFlag(fs)
	fmt.Fprint(c.app.stdout, `Replace a binding's store with a backup.

Usage:
  localcloud restore [-f FILE] [--json] BINDING SRC

restore refuses while localcloud up serves the stack (stop it first) and
holds up's data dir lock meanwhile, so up cannot start during the swap. It
verifies SRC (format marker of the binding's type, schema, PRAGMA
integrity_check) before touching anything, and refuses a queue backup whose
localcloud tables (unfinished moves, recorded origins of dead letters) name
a location that is no other queue binding of the stack. Then, holding the store's write
lock (no localcloud writer of any process is mid-write), it copies SRC into a
temporary file in the store directory with VACUUM INTO, verifies the copy,
checkpoints the live store into its database file and gives it a second name,
<file>.replaced-<UTC yyyymmddThhmmssZ>, and renames the copy into place in one
step. The replaced store stays beside it; delete it when no longer needed.

A jetstream binding (engine: jetstream) has no file: restore refuses it
(exit 1) and names the NATS tooling: nats stream restore DIR.

Limits: restore refuses (and changes nothing) when another process has the
store open, which it sees from the -wal/-shm files SQLite keeps while a
connection is open and, on Linux, from /proc (naming the pid; processes of
other users are not visible). A process that opens the store during the swap
keeps reading the old file until it reopens it. Stop the apps that use the
binding first.

Examples:
  localcloud restore carts backups/carts-20250102T030405Z.sqlite
  localcloud restore -f stack.yaml orders orders.sqlite --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
