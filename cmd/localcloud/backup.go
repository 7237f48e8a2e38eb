package main

import (
	"context"
	"fmt"
	"time"
)

// backupCommand writes a verified online snapshot of a binding's store.
type backupCommand struct {
	app *app
	now func() time.Time // time.Now; tests replace it
}

// backupJSON is backup's --json output.
type backupJSON struct {
	Binding        string `json:"binding"`
	Type           string `json:"type"`
	Format         string `json:"format"`
	Source         string `json:"source"`
	Backup         string `json:"backup"`
	Bytes          int64  `json:"bytes"`
	Objects        int    `json:"objects"`
	DurationMillis int64  `json:"durationMillis"`
}

func (c *backupCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet("backup")
	file := stackFlag(fs)
	asJSON := jsonFlag(fs)
	pos, err := parseWantArgs(fs, args, 2, 2, "BINDING DEST")
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
	began := now()
	t, err := toolsOf(b)
	if err != nil {
		return err
	}
	env := engineEnv(st)
	defer env.Close()
	res, err := t.Backup(ctx, env, b, pos[1], began)
	if err != nil {
		return err
	}
	took := time.Since(began)
	if *asJSON {
		return c.app.printJSON(backupJSON{Binding: b.Name, Type: string(b.Type), Format: res.Format, Source: res.Source, Backup: res.Path,
			Bytes: res.Bytes, Objects: res.Objects, DurationMillis: took.Milliseconds()})
	}
	fmt.Fprintf(c.app.stdout, "backed up %s to %s (%d bytes, %s; marker, schema and integrity verified) in %s\n",
		b.Name, res.Path, res.Bytes, res.Format, took.Round(time.Millisecond))
	return nil
}

func (c *backupCommand) Usage() {
	fs := newFlagSet("backup")
	stackFlag(fs)
	jsonFlag(fs)
	fmt.Fprint(c.app.stdout, `Write a consistent, verified snapshot of a binding's store.

Usage:
  localcloud backup [-f FILE] [--json] BINDING DEST

backup copies the store with SQLite's VACUUM INTO through a read-only
connection: apps and localcloud up keep reading and writing, and the copy
holds exactly the writes committed when the copy began (never a raw copy
of the database and -wal files). The copy goes to a hidden temporary file
beside DEST, is verified (format marker, schema, PRAGMA integrity_check)
and only then gets the name DEST, mode 0600. DEST is never overwritten;
when DEST is a folder the backup is DEST/BINDING-<UTC yyyymmddThhmmssZ>.sqlite.
The backup is a single self-contained file (rollback journal mode, no -wal).

A jetstream binding (engine: jetstream) has no file: backup refuses it (exit
1) and names the NATS tooling: nats stream backup LCQ_<binding> DIR.

Examples:
  localcloud backup carts carts.sqlite
  localcloud backup orders backups/ --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
