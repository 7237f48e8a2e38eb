package sqlstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	f := l.file
	err := flockFile(f, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return func() { _ = flockFile(f, syscall.LOCK_UN); unlockMu() }, nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		// No usable file lock (an odd filesystem): SQLite still serialises.
		return unlockMu, nil
	}
	// Block in the kernel, which wakes waiters in order, but give up after
	// LockWait or when ctx ends.
	w, err := startLockWaiter(f.Name())
	if err != nil {
		log.Warn("store lock file cannot be reopened to wait for it; writing without it", "lock", l.key, "err", err)
		return unlockMu, nil
	}
	timer := time.NewTimer(LockWait)
	defer timer.Stop()
	select {
	case err := <-w.got:
		if err != nil {
			w.close()
			return unlockMu, nil
		}
		return func() { w.close(); unlockMu() }, nil
	case <-ctx.Done():
		w.abandon()
		unlockMu()
		return nil, ctx.Err()
	case <-timer.C:
		log.Warn("store lock file held too long; writing without it", "lock", l.key, "waited", LockWait)
		w.abandon()
		return unlockMu, nil
	}
}

// lockWaiters counts the goroutines blocked in flock for a lock file (or
// about to end after it returned), abandoned ones included.
var lockWaiters atomic.Int64

// lockWaiter is one blocking wait for a lock file. It waits on a descriptor
// of its own (an open file description of its own, so its flock is its
// own), never on the writeLock's shared file: the writeLock may close that
// one while the wait is still blocked in the kernel (the store was closed),
// and its descriptor number may then belong to another file, such as
// another store's lock file, which an unlock through the number would
// silently free.
//
// The acquire call that started the wait owns it until it either takes the
// result from got (then it owns the lock and the file, and close releases
// both) or calls abandon. An abandoned waiter owns itself: when flock
// returns it closes its own file, which releases the lock if it was
// granted. Nothing else ever closes or uses that file, so the goroutine can
// outlive the store without touching anything that is not its own. It lives
// until the kernel grants the lock (a holder that is stopped keeps it
// blocked; the process's exit ends it).
type lockWaiter struct {
	f   *os.File
	got chan error // buffered; the result of flock, unless abandoned

	mu        sync.Mutex
	abandoned bool
}

// startLockWaiter opens path again and waits for its exclusive flock in a
// goroutine.
func startLockWaiter(path string) (*lockWaiter, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	w := &lockWaiter{f: f, got: make(chan error, 1)}
	lockWaiters.Add(1)
	go w.wait()
	return w, nil
}

func (w *lockWaiter) wait() {
	defer lockWaiters.Add(-1)
	err := flockFile(w.f, syscall.LOCK_EX)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.abandoned {
		_ = w.f.Close() // releases the lock, if it was granted
		return
	}
	w.got <- err // never blocks: buffered, and sent once
}

// abandon hands the waiter over to its goroutine; if flock has already
// returned, it closes the file itself.
func (w *lockWaiter) abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	select {
	case <-w.got:
		w.close()
	default:
		w.abandoned = true
	}
}

// close releases the lock (if held) and closes the waiter's file. Only its
// owner calls it.
func (w *lockWaiter) close() {
	_ = flockFile(w.f, syscall.LOCK_UN)
	_ = w.f.Close()
}

// flockFile runs flock on f's descriptor while f keeps it open: the
// descriptor cannot be closed (and its number reused) during the call, and a
// closed f gives os.ErrClosed instead of touching whatever file has the
// number now.
func flockFile(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = flock(int(fd), how) }); err != nil {
		return err
	}
	return ferr
}

func flock(fd, how int) error {
	for {
		err := syscall.Flock(fd, how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
