package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockFileName is the owner lock file inside a data dir.
const LockFileName = ".lock"

// lockRetry is how long Start retries a lock that is held. A holder is
// almost always another up (then it fails after this short wait), but
// Probe takes a shared lock for a few microseconds; the retry keeps an up
// that starts during a probe from failing for nothing.
const lockRetry = 100 * time.Millisecond

// ErrLocked is matched by a [*LockedError]: another process owns the data
// dir.
var ErrLocked = errors.New("data dir is in use by another localcloud up")

// LockedError says who holds a data dir's owner lock.
type LockedError struct {
	// Path is the lock file.
	Path string
	// PID is the holder's process id as it wrote it into the lock file; 0
	// when it could not be read.
	PID int
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%v: %s is held by %s", ErrLocked, e.Path, holder)
}

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// ownerLock is the exclusive flock on <dataDir>/.lock, held for up's life.
type ownerLock struct {
	path string
	f    *os.File
	id   fileID
}

// acquireOwnerLock takes the owner lock of dataDir, which must exist, and
// writes this process's pid into the lock file.
func acquireOwnerLock(dataDir string) (*ownerLock, error) {
	path := filepath.Join(dataDir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open owner lock: %w", err)
	}
	deadline := time.Now().Add(lockRetry)
	for {
		err = flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, &LockedError{Path: path, PID: readPID(path)}
		}
		time.Sleep(5 * time.Millisecond)
	}
	fi, err := f.Stat()
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close() // drops the flock too
		return nil, fmt.Errorf("write pid into owner lock %s: %w", path, err)
	}
	return &ownerLock{path: path, f: f, id: idOf(fi)}, nil
}

// release empties the lock file and drops the lock. The file stays: removing
// it would let two processes lock two different files of the same name.
func (l *ownerLock) release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// check reports a problem when the lock file was deleted or replaced, which
// would let a second up start on the same data dir; "" when it is intact.
func (l *ownerLock) check() string {
	fi, err := os.Stat(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("owner lock file %s was deleted; another localcloud up could start on this data dir; restart up", l.path)
	case err != nil:
		return fmt.Sprintf("cannot stat owner lock file: %v", err)
	case idOf(fi) != l.id:
		return fmt.Sprintf("owner lock file %s was replaced; another localcloud up could start on this data dir; restart up", l.path)
	}
	return ""
}

func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// Probe reports whether an up owns dataDir and, if it has written one yet,
// its runtime file. It takes a shared lock on the owner lock file for a
// moment: if that fails, an up holds the exclusive lock. A runtime file
// without a lock holder is stale (left by a killed up) and is not returned.
func Probe(dataDir string) (rt *Runtime, running bool, err error) {
	f, err := os.Open(filepath.Join(dataDir, LockFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("probe owner lock: %w", err)
	}
	defer f.Close()
	err = flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = flock(int(f.Fd()), syscall.LOCK_UN)
		return nil, false, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, false, fmt.Errorf("probe owner lock %s: %w", f.Name(), err)
	}
	rt, err = ReadRuntime(dataDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil // up is starting and has not written it yet
	}
	if err != nil {
		return nil, true, err
	}
	return rt, true, nil
}

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// fileID identifies a file across renames: its device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileID{}
}
