package sqlstore

import (
	"os"
	"path/filepath"

	"github.com/localcloud/localcloud/bindings"
)

// makeStoreDir creates dir (0700) and every missing parent, and fsyncs the
// parent of each directory it created, so that after a power cut or an OS
// crash the new directories are still there: a directory entry is durable
// only once its parent is fsynced, and without that a store's first
// commits, fsynced into a file whose directory vanished, would be lost with
// it (the power-cut tests, internal/powercuttest, found this).
func makeStoreDir(dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		created = append(created, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "create store directory %q", dir)
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "sync directory %q", filepath.Dir(d))
		}
	}
	return nil
}
