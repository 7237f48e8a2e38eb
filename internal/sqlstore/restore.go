package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// RestoreLockWait is how long Restore waits for the store's write lock
// (writers hold it for one transaction, milliseconds).
const RestoreLockWait = 10 * time.Second

// ReplacedSuffix starts the name under which Restore keeps the database it
// replaced: <file>.replaced-<UTC yyyymmddThhmmssZ>.
const ReplacedSuffix = ".replaced-"

// RestoreResult describes a finished restore.
type RestoreResult struct {
	// Path is the store's database file, now holding the restored copy.
	Path string
	// Replaced is where the database that was replaced now lives; "" when
	// the store had none.
	Replaced string
	// Verification is the check of the installed copy (no problems).
	Verification Verification
}

// RestoreCheck is a check of a format's own beyond Verify, run by Restore
// on its verified private copy of the snapshot (opened read-only) before
// anything is swapped; an error refuses the restore and is returned
// wrapped.
type RestoreCheck func(ctx context.Context, db *sql.DB) error

// Restore replaces the database of the store of format f in dir with a
// copy of the snapshot src, atomically, keeping the replaced database
// beside it as <file>.replaced-<UTC time>.
//
// src is verified first (marker, schema, integrity; a *VerifyError if it
// fails); checks run on the verified copy. Then, holding the store's write lock file (so no localcloud writer
// of any process is inside a transaction, and none starts one until the swap
// is done), Restore copies src into a temporary file in dir with VACUUM
// INTO, verifies the copy, switches it to WAL, checkpoints the live
// database (PRAGMA wal_checkpoint(TRUNCATE)) and closes it, and refuses
// with ErrStoreInUse if another process has the store open: its -wal or
// -shm file is still there afterwards (SQLite removes them when the last
// connection closes), or, on Linux, /proc shows a process holding the file.
// Finally it hard-links the live file to the replaced
// name and renames the copy over the live name, so the path always holds a
// complete database.
//
// The caller makes sure no localcloud up serves the store. A process that
// opens the store during the swap keeps reading the old file (its inode)
// until it reopens; Restore cannot see such a process beforehand, so stop
// apps first. This process must not hold a handle on the store.
func Restore(ctx context.Context, dir string, f Format, src string, now time.Time, checks ...RestoreCheck) (RestoreResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return RestoreResult{}, err
	}
	live := filepath.Join(abs, f.File)
	res := RestoreResult{Path: live}
	si, err := os.Stat(src)
	if err != nil {
		return res, fmt.Errorf("restore from %s: %w", src, err)
	}
	if !si.Mode().IsRegular() {
		return res, fmt.Errorf("restore from %s: not a regular file (mode %s)", src, si.Mode())
	}
	if li, err := os.Stat(live); err == nil && os.SameFile(si, li) {
		return res, fmt.Errorf("restore from %s: that is the store's own database file", src)
	}
	v, err := Verify(ctx, src, f)
	if err != nil {
		return res, fmt.Errorf("verify %s: %w", src, err)
	}
	if !v.OK() {
		return res, &VerifyError{Path: src, Problems: v.Problems}
	}

	locks.Lock()
	_, open := locks.m[live]
	locks.Unlock()
	if open {
		return res, fmt.Errorf("restore %s: this process has the store open", live)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return res, fmt.Errorf("restore %s: create store directory: %w", live, err)
	}
	unlock, err := lockForRestore(ctx, filepath.Join(abs, LockFileName(f.File)))
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}
	defer unlock()

	tmp, err := createTemp(abs, "."+f.File+".restore-")
	if err != nil {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}
	defer removeFiles(tmp)
	if err := Snapshot(ctx, src, tmp); err != nil {
		return res, err
	}
	if v, err = Verify(ctx, tmp, f); err != nil {
		return res, fmt.Errorf("verify the copy of %s: %w", src, err)
	}
	if !v.OK() {
		return res, &VerifyError{Path: "the copy of " + src, Problems: v.Problems}
	}
	res.Verification = v
	if err := runChecks(ctx, tmp, checks); err != nil {
		return res, fmt.Errorf("restore %s from %s: %w", live, src, err)
	}
	if err := switchToWAL(ctx, tmp); err != nil {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}
	if _, err := syncFile(tmp); err != nil {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}

	if _, err := os.Stat(live); err == nil {
		// Checkpointing a -wal that cannot be tied to the live database
		// would write it into the file kept as the replaced one. A damaged
		// file without a -wal has nothing to checkpoint (and SQLite could
		// not open it): it is kept as it is.
		_, w, p := checkUnopened(live)
		if p != nil && p.kind == ProblemWAL {
			return res, fmt.Errorf("restore %s: %s", live, p.msg)
		}
		// A process seen holding the store is refused before the
		// checkpoint, which would write that process's WAL into the file.
		if err := heldByOthers(live); err != nil {
			return res, fmt.Errorf("restore %s: %w", live, err)
		}
		if p == nil || w != walNone {
			if err := checkpointAndClose(ctx, live); err != nil {
				return res, fmt.Errorf("restore %s: %w", live, err)
			}
		}
		if err := notInUse(live); err != nil {
			return res, fmt.Errorf("restore %s: %w", live, err)
		}
		if res.Replaced, err = keepReplaced(live, now); err != nil {
			return res, fmt.Errorf("restore %s: keep the replaced database: %w", live, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}
	if err := os.Rename(tmp, live); err != nil {
		return res, fmt.Errorf("restore %s: move the copy into place: %w", live, err)
	}
	if err := syncDir(abs); err != nil {
		return res, fmt.Errorf("restore %s: %w", live, err)
	}
	return res, nil
}

// holder is a process that has a file open.
type holder struct {
	pid  int
	name string
	// child: a child of this process. Between fork and exec a child holds
	// a copy of every descriptor this process had open at the fork, one
	// of this process's own brief opens of the store included.
	child bool
}

// notInUse fails with ErrStoreInUse when another process has the live
// database open. Two signs: on Linux, a process holding the file itself,
// seen in /proc, which also catches a connection that switched the file to
// WAL and has been idle since (it holds no -wal, -shm or lock), looked at
// first so that the refusal names the process; and SQLite keeping -wal and
// -shm while any connection that has read the WAL is open (the last one to
// close removes them).
func notInUse(live string) error {
	if err := heldByOthers(live); err != nil {
		return err
	}
	// No holder seen (or /proc unreadable): the -wal/-shm check stands
	// alone.
	for _, side := range []string{live + "-wal", live + "-shm"} {
		if _, err := os.Stat(side); err == nil {
			return fmt.Errorf("%w: %s is still there after the last connection of this process closed; stop the apps that use the store and retry",
				ErrStoreInUse, filepath.Base(side))
		}
	}
	return nil
}

// heldByOthers fails with ErrStoreInUse naming the processes other than
// this one seen holding live (Linux; nil elsewhere or when /proc cannot be
// read).
func heldByOthers(live string) error {
	hs, err := holders(live)
	// A holder that is a child of this process may be a fork not yet
	// exec'd (another goroutine starting a program while this one had
	// the file open to checkpoint it): such a copy goes at the exec, so
	// children are looked at again for a while before the refusal. A
	// child that really uses the store still holds it then.
	for deadline := time.Now().Add(childExecWait); err == nil && len(hs) > 0 && allChildren(hs) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		hs, err = holders(live)
	}
	if err != nil || len(hs) == 0 {
		return nil
	}
	var names []string
	for _, h := range hs {
		names = append(names, fmt.Sprintf("pid %d (%s)", h.pid, h.name))
	}
	return fmt.Errorf("%w: %s; stop it and retry", ErrStoreInUse, strings.Join(names, ", "))
}

// childExecWait is how long a store held only by children of this process
// is looked at again before Restore refuses (see notInUse).
const childExecWait = 500 * time.Millisecond

func allChildren(hs []holder) bool {
	for _, h := range hs {
		if !h.child {
			return false
		}
	}
	return true
}

// lockForRestore takes the store's write lock file exclusively, waiting at
// most RestoreLockWait. The lock file is not a database file, so a plain
// descriptor on it is safe.
func lockForRestore(ctx context.Context, path string) (func(), error) {
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(RestoreLockWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = flock(int(fh.Fd()), syscall.LOCK_UN); _ = fh.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			fh.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			fh.Close()
			return nil, fmt.Errorf("%w: %s held for more than %s", ErrStoreBusy, path, RestoreLockWait)
		}
		select {
		case <-ctx.Done():
			fh.Close()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// readWriteURI opens path read-write without creating it.
func readWriteURI(path string) string {
	q := url.Values{}
	q.Set("mode", "rw")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	return fileURI(path, q)
}

// switchToWAL puts a private database file into WAL mode, as every store
// is, and closes it (which removes its -wal and -shm again).
func switchToWAL(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", readWriteURI(path))
	if err != nil {
		return err
	}
	defer db.Close()
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("switch the copy to WAL: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("switch the copy to WAL: journal_mode is %q", mode)
	}
	return db.Close()
}

// checkpointAndClose moves everything in the live database's WAL into the
// database file and closes the connection again. If it was the last
// connection, SQLite removes -wal and -shm.
func checkpointAndClose(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", readWriteURI(path))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var busy, logFrames, done int
	if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if busy != 0 {
		return fmt.Errorf("checkpoint: %w: a reader in another process kept the WAL busy", ErrStoreInUse)
	}
	return db.Close()
}

// keepReplaced gives the live database a second name,
// <file>.replaced-<UTC time>[-N], with a hard link (the live name stays
// valid until the copy is renamed over it). Where hard links are not
// supported it renames instead.
func keepReplaced(live string, now time.Time) (string, error) {
	base := live + ReplacedSuffix + now.UTC().Format("20060102T150405Z")
	for i := 1; i <= 100; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Link(live, name)
		if err == nil {
			return name, nil
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if _, serr := os.Lstat(name); serr == nil {
			continue
		}
		if rerr := os.Rename(live, name); rerr != nil {
			return "", fmt.Errorf("link: %v; rename: %w", err, rerr)
		}
		return name, nil
	}
	return "", fmt.Errorf("too many replaced databases named %s*", base)
}

// runChecks runs checks on the database file at path, read-only.
func runChecks(ctx context.Context, path string, checks []RestoreCheck) error {
	if len(checks) == 0 {
		return nil
	}
	db, err := sql.Open("sqlite", readOnlyURI(path, true))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, c := range checks {
		if err := c(ctx, db); err != nil {
			return err
		}
	}
	return db.Close()
}
