package sqlstore

import (
	"errors"
	"io/fs"
	"os"

	"github.com/localcloud/localcloud/bindings"
)

// SyncWAL makes every commit of this store so far durable: it fsyncs the
// -wal (commits with durability normal are written to it but not synced)
// and the store directory (so the -wal's own name survives, which SQLite
// syncs only at its first checkpoint). A move between two stores needs it:
// the record of a move must be durable in one file before the next step
// commits in the other, or a power cut can keep the second step and drop
// the first (a message in both queues; the power-cut tests found it). With
// durability full, or in memory, every commit is already as durable as it
// gets and it does nothing.
//
// It opens the -wal with a descriptor of its own: SQLite takes no lock on
// that file, so closing it drops none (unlike one on the database file).
func (db *DB) SyncWAL() error {
	if !db.lazySync || db.Dir == "" {
		return nil
	}
	f, err := os.Open(db.Path + "-wal")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Checkpointed and removed: the database file was synced then.
	case err != nil:
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "sync %s-wal", db.Path)
	default:
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(serr, cerr); err != nil {
			return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "sync %s-wal", db.Path)
		}
	}
	if err := syncDir(db.Dir); err != nil {
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "sync store directory %q", db.Dir)
	}
	return nil
}
