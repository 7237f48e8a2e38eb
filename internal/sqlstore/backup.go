package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Snapshot writes a consistent copy of the database file src into dst with
// VACUUM INTO, through a read-only connection: writers in any process keep
// going, and the copy holds exactly the transactions committed when its
// read transaction began. dst must not exist or be an empty file (create it
// first to choose its mode; SQLite would use 0644). The copy is a standalone
// database in rollback-journal mode, without -wal or -shm files.
//
// src is only ever opened by SQLite, never with a plain descriptor.
func Snapshot(ctx context.Context, src, dst string) error {
	db, err := sql.Open("sqlite", readOnlyURI(src, false))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", src, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", dst); err != nil {
		return fmt.Errorf("snapshot %s into %s: %w", src, dst, err)
	}
	return nil
}

// BackupResult describes a backup that was written and verified.
type BackupResult struct {
	Path  string // the backup file
	Bytes int64
	// Verification is the check of the written copy (no problems).
	Verification Verification
}

// Backup writes a verified snapshot of the store database src, of format
// f, to the new file dst (mode 0600). It snapshots into a hidden temporary
// file beside dst, verifies the copy (marker, schema, integrity) and only
// then links it into place, so dst either holds a verified backup or does
// not exist. An existing dst is never overwritten: the error matches
// ErrExists. A copy that fails verification gives a *VerifyError and is
// removed. Unless this process has src open, src's header and -wal are
// checked first as Open checks them: a -wal that cannot be tied to src is
// refused before SQLite reads it.
func Backup(ctx context.Context, src, dst string, f Format) (BackupResult, error) {
	if _, err := os.Lstat(dst); err == nil {
		return BackupResult{}, fmt.Errorf("back up to %s: %w", dst, ErrExists)
	}
	tmp, err := createTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return BackupResult{}, fmt.Errorf("back up to %s: %w", dst, err)
	}
	defer removeFiles(tmp)
	// A -wal SQLite cannot tie to src would be read into the snapshot, and
	// the -shm that read builds would make it look like src's own.
	if _, _, p := checkUnopened(src); p != nil {
		return BackupResult{}, fmt.Errorf("back up %s: %s", src, p.msg)
	}
	if err := Snapshot(ctx, src, tmp); err != nil {
		return BackupResult{}, err
	}
	v, err := Verify(ctx, tmp, f)
	if err != nil {
		return BackupResult{}, fmt.Errorf("verify the backup of %s: %w", src, err)
	}
	if !v.OK() {
		return BackupResult{}, &VerifyError{Path: "the snapshot of " + src, Problems: v.Problems}
	}
	size, err := syncFile(tmp)
	if err != nil {
		return BackupResult{}, fmt.Errorf("back up to %s: %w", dst, err)
	}
	if err := publish(tmp, dst); err != nil {
		return BackupResult{}, err
	}
	return BackupResult{Path: dst, Bytes: size, Verification: v}, nil
}

// createTemp creates an empty file named prefix + random hex in dir, mode
// 0600, and returns its path.
func createTemp(dir, prefix string) (string, error) {
	var b [8]byte
	for range 10 {
		_, _ = rand.Read(b[:])
		p := filepath.Join(dir, prefix+hex.EncodeToString(b[:]))
		fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return p, fh.Close()
	}
	return "", fmt.Errorf("create a temporary file in %s: too many name collisions", dir)
}

// removeFiles removes a temporary database and any sidecar SQLite left.
func removeFiles(path string) {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		_ = os.Remove(path + suffix)
	}
}

// syncFile fsyncs a file no SQLite connection of this process has open,
// and returns its size.
func syncFile(path string) (int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	if err := fh.Sync(); err != nil {
		return 0, err
	}
	fi, err := fh.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// syncDir fsyncs a directory so renames and links in it survive a crash.
func syncDir(dir string) error {
	fh, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer fh.Close()
	if err := fh.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// publish gives the finished file tmp the name dst without ever replacing
// an existing dst: a hard link fails if dst exists. Where hard links are
// not supported it falls back to a rename after checking dst is absent.
func publish(tmp, dst string) error {
	err := os.Link(tmp, dst)
	switch {
	case err == nil:
		_ = os.Remove(tmp)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("back up to %s: %w", dst, ErrExists)
	default:
		if _, serr := os.Lstat(dst); serr == nil {
			return fmt.Errorf("back up to %s: %w", dst, ErrExists)
		}
		if err := os.Rename(tmp, dst); err != nil {
			return fmt.Errorf("back up to %s: %w", dst, err)
		}
	}
	return syncDir(filepath.Dir(dst))
}
