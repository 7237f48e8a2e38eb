package sqlstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// LockWait is how long a writer waits for the cross-process lock file before
// it goes ahead without it. The lock only orders writers fairly; SQLite's own
// locking keeps them correct, so a holder that hangs (a stopped process)
// degrades fairness, never safety.
const LockWait = 5 * time.Second

// LockFileName is the name of the lock file beside a store's database file.
// It starts with a dot so it is not one of the "<file>.sqlite*" siblings the
// spec counts as part of the store.
func LockFileName(dbFile string) string { return "." + dbFile + ".lock" }

// writeLock serialises the writers of one store file: a channel-based mutex
// shared by every handle of this process, then flock(2) on the lock file
// shared with every other localcloud process.
type writeLock struct {
	key  string
	mu   chan struct{}
	file *os.File // nil in memory mode
	refs int
}

var locks = struct {
	sync.Mutex
	m map[string]*writeLock
}{m: map[string]*writeLock{}}

// acquireLock returns the process-wide lock of the store file name in dir
// (dir "" is a memory store) and takes a reference on it. When no handle of
// this process has the store open, first (if not nil) runs before anything
// else, while other opens of the same process wait: the only moment a plain
// descriptor may read the database file (see inspect). An error of first
// is returned as is.
func acquireLock(dir, name string, first func() error) (*writeLock, error) {
	key := filepath.Join(dir, name)
	locks.Lock()
	defer locks.Unlock()
	if l, ok := locks.m[key]; ok {
		l.refs++
		return l, nil
	}
	if first != nil {
		if err := first(); err != nil {
			return nil, err
		}
	}
	l := &writeLock{key: key, mu: make(chan struct{}, 1), refs: 1}
	if dir != "" {
		p := filepath.Join(dir, LockFileName(name))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, bindings.Wrap(bindings.CodeLocalFilesystemError, err, "open lock file %q", p)
		}
		l.file = f
	}
	locks.m[key] = l
	return l, nil
}

func (l *writeLock) release() {
	locks.Lock()
	defer locks.Unlock()
	l.refs--
	if l.refs > 0 {
		return
	}
	delete(locks.m, l.key)
	if l.file != nil {
		_ = l.file.Close()
	}
}

// acquire takes the in-process lock, then the file lock. The returned
// function releases both.
func (l *writeLock) acquire(ctx context.Context, log *slog.Logger) (func(), error) {
	select {
	case l.mu <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	unlockMu := func() { <-l.mu }
	if l.file == nil {
		return unlockMu, nil
	}
	fd := int(l.file.Fd())
	err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return func() { _ = flock(fd, syscall.LOCK_UN); unlockMu() }, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		// No usable file lock (an odd filesystem): SQLite still serialises.
		return unlockMu, nil
	}
	// Block in the kernel, which wakes waiters in order, but give up after
	// LockWait or when ctx ends.
	got := make(chan error, 1)
	go func() { got <- flock(fd, syscall.LOCK_EX) }()
	timer := time.NewTimer(LockWait)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			return unlockMu, nil
		}
		return func() { _ = flock(fd, syscall.LOCK_UN); unlockMu() }, nil
	case <-ctx.Done():
		abandon(fd, got)
		unlockMu()
		return nil, ctx.Err()
	case <-timer.C:
		log.Warn("store lock file held too long; writing without it", "lock", l.key, "waited", LockWait)
		abandon(fd, got)
		return unlockMu, nil
	}
}

// abandon releases the file lock once the blocked flock call that nobody
// waits for any more returns.
func abandon(fd int, got <-chan error) {
	go func() {
		if err := <-got; err == nil {
			_ = flock(fd, syscall.LOCK_UN)
		}
	}()
}

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
