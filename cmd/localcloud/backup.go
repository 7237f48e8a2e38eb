package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/supervisor"
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
	if b.Engine == config.EngineJetStream {
		return jetStreamBackupRefused(st, b, "backup")
	}
	if err := needStore(st, b); err != nil {
		return err
	}
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	began := now()
	dest, err := filepath.Abs(pos[1])
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dest); err == nil && fi.IsDir() {
		dest = filepath.Join(dest, fmt.Sprintf("%s-%s.sqlite", b.Name, began.UTC().Format("20060102T150405Z")))
	}
	if fi, err := os.Stat(filepath.Dir(dest)); err != nil || !fi.IsDir() {
		return &hintError{err: fmt.Errorf("backup destination folder %s does not exist", filepath.Dir(dest)), try: "mkdir -p " + filepath.Dir(dest)}
	}
	f := formatOf(b.Type)
	src := bindingFile(b)
	res, err := sqlstore.Backup(ctx, src, dest, f)
	var ve *sqlstore.VerifyError
	switch {
	case errors.Is(err, sqlstore.ErrExists):
		return &hintError{err: fmt.Errorf("%s already exists; backup never overwrites a file", dest), try: "name a new file, or a folder to get BINDING-TIME.sqlite in it"}
	case errors.As(err, &ve):
		return &hintError{err: fmt.Errorf("the snapshot of %s failed verification, so no backup was written:\n%s", b.Name, problemLines(ve.Problems)),
			try: "localcloud check " + b.Name + " shows the store's problems"}
	case err != nil:
		return fmt.Errorf("back up %s: %w", b.Name, err)
	}
	took := time.Since(began)
	if *asJSON {
		return c.app.printJSON(backupJSON{Binding: b.Name, Type: string(b.Type), Format: f.Marker, Source: src, Backup: res.Path,
			Bytes: res.Bytes, Objects: res.Verification.Objects, DurationMillis: took.Milliseconds()})
	}
	fmt.Fprintf(c.app.stdout, "backed up %s to %s (%d bytes, %s; marker, schema and integrity verified) in %s\n",
		b.Name, res.Path, res.Bytes, f.Marker, took.Round(time.Millisecond))
	return nil
}

func problemLines(ps []sqlstore.Problem) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += "\n"
		}
		s += p.String()
	}
	return s
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

// jetStreamBackupRefused is the error of backup and restore on a jetstream
// binding: they copy SQLite files; a stream is backed up and restored with
// the NATS tooling, which names the stream.
func jetStreamBackupRefused(st *config.Stack, b config.Binding, cmd string) error {
	stream := supervisor.StreamName(b)
	return &hintError{
		err: fmt.Errorf("%s copies SQLite store files; %s binding %s uses engine jetstream (stream %s on %s): use the NATS tooling for it",
			cmd, b.Type, b.Name, stream, jsWhere(st)),
		try: fmt.Sprintf("nats stream backup %s ./%s-backup (and nats stream restore ./%s-backup to restore it)", stream, stream, stream),
	}
}
