package dirwatch

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDirDebounce is the DirWatcher's coalescing window per directory.
const DefaultDirDebounce = time.Millisecond

// DirWatcherOptions configures a DirWatcher.
type DirWatcherOptions struct {
	// Name is the base name of the database file, e.g. "localqueue.sqlite". Events on files whose
	// base name starts with it (the file itself, "-wal", "-journal", "-shm") count. Required.
	Name string

	// Changed is called with a watched directory after a matching file in it was created,
	// written, removed or renamed, coalesced per directory: at once if the directory's last call
	// is at least Debounce old, otherwise once at the end of that window. The last event is
	// always followed by a call. Treat it as "go look" and confirm with PRAGMA data_version:
	// events can come before the writer's commit returns, and SQLite's own writes in this process
	// cause them too. Required.
	Changed func(dir string)

	// Gone, if set, is called when the database file itself (name == Name) is removed or renamed
	// away, or when the watched directory is (name == ""). A gone directory is no longer
	// watched; Add it again once it exists.
	Gone func(dir, name string)

	// Debounce is the coalescing window of Changed. A negative value calls Changed for every
	// event. Defaults to DefaultDirDebounce (1 ms).
	Debounce time.Duration

	// Logger receives watcher errors. Defaults to discarding them.
	Logger *slog.Logger
}

// DirWatcher watches directories, not files (files are replaced and removed under it), with
// inotify on Linux. Callbacks run one at a time on the watcher's goroutine; they should return
// quickly and must not call Close.
type DirWatcher struct {
	fw      *fsnotify.Watcher
	opts    DirWatcherOptions
	window  time.Duration
	log     *slog.Logger
	done    chan struct{}
	exited  chan struct{}
	closeMu sync.Once

	mu     sync.Mutex
	dirs   map[string]struct{}
	closed bool
}

// NewDirWatcher starts a watcher with no directories; add them with Add.
func NewDirWatcher(opts DirWatcherOptions) (*DirWatcher, error) {
	if opts.Name == "" || strings.ContainsRune(opts.Name, filepath.Separator) {
		return nil, fmt.Errorf("new dir watcher: Name %q must be a base file name", opts.Name)
	}
	if opts.Changed == nil {
		return nil, errors.New("new dir watcher: Changed is nil")
	}
	window := opts.Debounce
	if window == 0 {
		window = DefaultDirDebounce
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fw, err := fsnotify.NewBufferedWatcher(256)
	if err != nil {
		return nil, fmt.Errorf("new dir watcher: %w", err)
	}
	w := &DirWatcher{
		fw:     fw,
		opts:   opts,
		window: window,
		log:    log,
		done:   make(chan struct{}),
		exited: make(chan struct{}),
		dirs:   make(map[string]struct{}),
	}
	go w.loop()
	return w, nil
}

// Add starts watching dir, which must exist and be a directory. Callbacks receive dir cleaned
// with filepath.Clean. Adding a watched directory again does nothing.
func (w *DirWatcher) Add(dir string) error {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("watch directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("watch directory %q: not a directory", dir)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("watch directory %q: %w", dir, ErrClosed)
	}
	if _, ok := w.dirs[dir]; ok {
		return nil
	}
	if err := w.fw.Add(dir); err != nil {
		return fmt.Errorf("watch directory %q: %w", dir, err)
	}
	w.dirs[dir] = struct{}{}
	return nil
}

// Remove stops watching dir. Removing a directory that is not watched does nothing.
func (w *DirWatcher) Remove(dir string) error {
	dir = filepath.Clean(dir)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.dirs[dir]; !ok {
		return nil
	}
	delete(w.dirs, dir)
	if err := w.fw.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, fsnotify.ErrClosed) {
		return fmt.Errorf("unwatch directory %q: %w", dir, err)
	}
	return nil
}

// Dirs returns the watched directories, sorted.
func (w *DirWatcher) Dirs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.dirs))
	for d := range w.dirs {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// Close stops the watcher and waits for a running callback to return. Pending coalesced calls
// are dropped. It is safe to call more than once.
func (w *DirWatcher) Close() error {
	var err error
	w.closeMu.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.done)
		err = w.fw.Close()
		<-w.exited
	})
	if err != nil {
		return fmt.Errorf("close dir watcher: %w", err)
	}
	return nil
}

func (w *DirWatcher) watched(dir string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.dirs[dir]
	return ok
}

// forget drops dir after it was removed or renamed away. It reports whether dir was watched.
func (w *DirWatcher) forget(dir string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.dirs[dir]; !ok {
		return false
	}
	delete(w.dirs, dir)
	_ = w.fw.Remove(dir) // already gone for a delete; needed after a rename
	return true
}

// dirState is one directory's coalescing state, owned by the loop goroutine.
type dirState struct {
	last     time.Time
	pending  bool
	deadline time.Time
}

// loop owns all coalescing state and runs every callback, so callbacks never overlap.
func (w *DirWatcher) loop() {
	defer close(w.exited)
	states := make(map[string]*dirState)
	timer := time.NewTimer(time.Hour)
	timer.Stop()

	// reschedule arms the timer for the earliest pending deadline.
	reschedule := func() {
		var next time.Time
		for _, st := range states {
			if st.pending && (next.IsZero() || st.deadline.Before(next)) {
				next = st.deadline
			}
		}
		if next.IsZero() {
			timer.Stop()
			return
		}
		timer.Reset(time.Until(next))
	}
	changed := func(dir string) {
		st := states[dir]
		if st == nil {
			st = &dirState{}
			states[dir] = st
		}
		if st.pending {
			return
		}
		now := time.Now()
		if w.window > 0 && !st.last.IsZero() && now.Sub(st.last) < w.window {
			st.pending = true
			st.deadline = st.last.Add(w.window)
			reschedule()
			return
		}
		st.last = now
		w.opts.Changed(dir)
	}

	for {
		select {
		case <-w.done:
			return

		case ev, ok := <-w.fw.Events:
			if !ok {
				return
			}
			w.handle(ev, states, changed, reschedule)

		case err, ok := <-w.fw.Errors:
			if !ok {
				return
			}
			w.log.Warn("directory watcher", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: any directory may have changed.
				for _, dir := range w.Dirs() {
					changed(dir)
				}
			}

		case <-timer.C:
			now := time.Now()
			for dir, st := range states {
				if !st.pending || st.deadline.After(now) {
					continue
				}
				st.pending = false
				if !w.watched(dir) {
					delete(states, dir)
					continue
				}
				st.last = time.Now()
				w.opts.Changed(dir)
			}
			reschedule()
		}
	}
}

func (w *DirWatcher) handle(ev fsnotify.Event, states map[string]*dirState, changed func(string), reschedule func()) {
	name := filepath.Clean(ev.Name)
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)

	// The watched directory itself: from its own watch, or from a watched parent.
	if gone && w.watched(name) {
		if w.forget(name) {
			delete(states, name)
			reschedule()
			if w.opts.Gone != nil {
				w.opts.Gone(name, "")
			}
		}
		return
	}

	dir, base := filepath.Dir(name), filepath.Base(name)
	if !strings.HasPrefix(base, w.opts.Name) || !w.watched(dir) {
		return
	}
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Write) && !gone {
		return // chmod only
	}
	if gone && base == w.opts.Name {
		if w.opts.Gone != nil {
			w.opts.Gone(dir, base)
		}
		return
	}
	changed(dir)
}
