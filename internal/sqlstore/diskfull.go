package sqlstore

import (
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/localcloud/localcloud/bindings"
)

// lowSpace is the free space under which an I/O error of SQLite is taken
// for a full disk: SQLite reports ENOSPC as SQLITE_FULL when a write of the
// database or -wal comes up short, but as an I/O error when the -shm index
// cannot grow.
const lowSpace = 1 << 20

// fsErr returns err as a LOCAL_FILESYSTEM_ERROR that says the disk is full
// and names the store when err is SQLite's SQLITE_FULL, or an SQLITE_IOERR
// while the store's filesystem has less than lowSpace free. Other errors
// are returned as they are. SQLite rolled the failed statement back, so
// nothing of it was committed.
func (db *DB) fsErr(err error) error {
	return db.diskFull(err, "the write was not committed")
}

// openErr is fsErr for a failed open: a process that opens a store needs
// room for the -shm index SQLite creates beside it.
func (db *DB) openErr(err error) error {
	return db.diskFull(err, "the store was not opened")
}

func (db *DB) diskFull(err error, outcome string) error {
	if err == nil || db.Dir == "" || bindings.CodeOf(err) == bindings.CodeLocalFilesystemError {
		return err
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	free, known := freeBytes(db.Dir)
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL:
	case sqlite3.SQLITE_IOERR:
		if !known || free >= lowSpace {
			return err
		}
	default:
		return err
	}
	space := "no space left"
	if known {
		space = fmt.Sprintf("%d bytes free", free)
	}
	return &bindings.Error{Code: bindings.CodeLocalFilesystemError, Err: err, Msg: fmt.Sprintf(
		"store %q: the disk is full (%s on the filesystem of %s): %s; free space and retry",
		db.Path, space, db.Dir, outcome)}
}
