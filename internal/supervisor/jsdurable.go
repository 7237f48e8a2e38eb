package supervisor

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncJetStreamDirs fsyncs every directory of the embedded server's store
// (<dataDir>/jetstream), the data dir and its parent, once up has opened the
// stack's jetstream bindings, which creates their streams. nats-server
// fsyncs a stream's files and its msgs directory, but not a new stream's
// directory into its parent, nor the store's own directories: a power cut
// soon after up created a stream could take the whole stream, every
// acknowledged write with it, even with SyncAlways (the power-cut tests,
// internal/powercuttest, saw it). A failure is logged: the stores work, only
// that window stays open.
func (s *Supervisor) syncJetStreamDirs(dataDir string) {
	if !s.jsOn {
		return
	}
	root := filepath.Join(dataDir, JetStreamDir)
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return err
		}
		return fsyncDir(path)
	})
	if err == nil {
		err = fsyncDir(dataDir)
	}
	if err == nil {
		err = fsyncDir(filepath.Dir(dataDir))
	}
	if err != nil {
		s.log.Warn("cannot fsync the embedded JetStream store's directories; a power cut soon after a stream was created could lose it", keyErr, err)
	}
}

func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := f.Sync()
	if cerr := f.Close(); serr == nil {
		serr = cerr
	}
	return serr
}
