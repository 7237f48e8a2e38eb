package dirwatch

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

const dbName = "localqueue.sqlite"

// dirEvents records a DirWatcher's callbacks.
type dirEvents struct {
	mu      sync.Mutex
	changed map[string][]time.Time // start time of each Changed call, per directory
	gone    []string               // "dir|name" per Gone call
}

func (e *dirEvents) onChanged(dir string) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.changed == nil {
		e.changed = make(map[string][]time.Time)
	}
	e.changed[dir] = append(e.changed[dir], now)
}

func (e *dirEvents) onGone(dir, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gone = append(e.gone, dir+"|"+name)
}

func (e *dirEvents) calls(dir string) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.changed[dir])
}

func (e *dirEvents) sawGone(dir, name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.gone, dir+"|"+name)
}

func newTestDirWatcher(t *testing.T, debounce time.Duration, dirs ...string) (*DirWatcher, *dirEvents) {
	t.Helper()
	ev := &dirEvents{}
	w, err := NewDirWatcher(DirWatcherOptions{Name: dbName, Debounce: debounce, Changed: ev.onChanged, Gone: ev.onGone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	for _, d := range dirs {
		if err := w.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	return w, ev
}

func appendFile(t *testing.T, path string, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDirWatcherMatchingFiles: writes to the database file and its -wal/-journal give Changed
// calls; other files give none. Events from one inotify descriptor arrive in order, so a write in
// a second directory works as a barrier: once its call arrives, any call for the first directory
// would already have been made (a first call is never delayed).
func TestDirWatcherMatchingFiles(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	_, ev := newTestDirWatcher(t, 0, a, b)

	appendFile(t, filepath.Join(a, "other.sqlite-wal"), "x")
	appendFile(t, filepath.Join(a, "notes.txt"), "x")
	appendFile(t, filepath.Join(a, "xlocalqueue.sqlite"), "x")
	appendFile(t, filepath.Join(b, dbName+"-wal"), "x")
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call for the barrier directory", func() bool { return len(ev.calls(b)) > 0 })
	if got := ev.calls(a); len(got) != 0 {
		t.Fatalf("%d calls for writes to non-matching files", len(got))
	}

	for _, name := range []string{dbName, dbName + "-wal", dbName + "-journal"} {
		n := len(ev.calls(a))
		written := time.Now()
		appendFile(t, filepath.Join(a, name), "x")
		testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call after a write to "+name, func() bool {
			calls := ev.calls(a)
			return len(calls) > n && calls[len(calls)-1].After(written)
		})
	}
}

// TestDirWatcherCoalescesBurst: a burst of WAL writes gives at most one call per window, and a
// call always starts after the last write. The window is long so that the bound holds on a
// loaded machine.
func TestDirWatcherCoalescesBurst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const window = 100 * time.Millisecond
	_, ev := newTestDirWatcher(t, window, dir)

	wal := filepath.Join(dir, dbName+"-wal")
	start := time.Now()
	appendFile(t, wal, "first")
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "leading call", func() bool { return len(ev.calls(dir)) > 0 })

	const writes = 200
	for i := range writes {
		appendFile(t, wal, string(rune('a'+i%26)))
	}
	last := time.Now()
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call after the last write", func() bool {
		calls := ev.calls(dir)
		return calls[len(calls)-1].After(last)
	})
	elapsed := time.Since(start)
	calls := ev.calls(dir)
	if limit := int(elapsed/window) + 2; len(calls) > limit {
		t.Errorf("%d calls in %s, more than one per %s window (limit %d)", len(calls), elapsed, window, limit)
	}
	for i := 1; i < len(calls); i++ {
		// The calls' own clock readings lag the watcher's by a little; allow for that.
		if gap := calls[i].Sub(calls[i-1]); gap < window/2 {
			t.Errorf("calls %d and %d only %s apart", i-1, i, gap)
		}
	}
	t.Logf("%d writes in %s -> %d calls", writes+1, last.Sub(start), len(calls))
}

func TestDirWatcherGoneOnDirectoryRemoval(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(dir, dbName), "db")
	w, ev := newTestDirWatcher(t, 0, dir)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "Gone for the database file", func() bool { return ev.sawGone(dir, dbName) })
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "Gone for the directory", func() bool { return ev.sawGone(dir, "") })
	if got := w.Dirs(); len(got) != 0 {
		t.Fatalf("Dirs() = %v after the directory was removed", got)
	}

	// Re-created and re-added, it is watched again.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(dir, dbName+"-wal"), "x")
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call in the re-added directory", func() bool { return len(ev.calls(dir)) > 0 })
}

func TestDirWatcherGoneOnDirectoryRename(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, ev := newTestDirWatcher(t, 0, dir)
	if err := os.Rename(dir, filepath.Join(parent, "moved")); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "Gone for the renamed directory", func() bool { return ev.sawGone(dir, "") })
	if got := w.Dirs(); len(got) != 0 {
		t.Fatalf("Dirs() = %v after the directory was renamed", got)
	}
}

func TestDirWatcherGoneOnFileRemoveAndRename(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	appendFile(t, filepath.Join(a, dbName), "db")
	appendFile(t, filepath.Join(b, dbName), "db")
	appendFile(t, filepath.Join(b, dbName+"-journal"), "j")
	_, ev := newTestDirWatcher(t, 0, a, b)

	if err := os.Rename(filepath.Join(a, dbName), filepath.Join(a, "old.sqlite")); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "Gone for the renamed file", func() bool { return ev.sawGone(a, dbName) })

	// Removing the journal is routine (a change, not a loss); removing the database is a loss.
	if err := os.Remove(filepath.Join(b, dbName+"-journal")); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call for the removed journal", func() bool { return len(ev.calls(b)) > 0 })
	if ev.sawGone(b, dbName+"-journal") {
		t.Fatal("Gone for a journal file")
	}
	if err := os.Remove(filepath.Join(b, dbName)); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "Gone for the removed file", func() bool { return ev.sawGone(b, dbName) })
}

func TestDirWatcherRemove(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	w, ev := newTestDirWatcher(t, 0, a, b)
	if got, want := w.Dirs(), []string{a, b}; !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("Dirs() = %v", got)
	}
	if err := w.Remove(a); err != nil {
		t.Fatal(err)
	}
	if err := w.Remove(a); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	appendFile(t, filepath.Join(a, dbName+"-wal"), "x")
	appendFile(t, filepath.Join(b, dbName+"-wal"), "x") // barrier, as in TestDirWatcherMatchingFiles
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "call for the barrier directory", func() bool { return len(ev.calls(b)) > 0 })
	if got := ev.calls(a); len(got) != 0 {
		t.Fatalf("%d calls for a removed directory", len(got))
	}
}

func TestDirWatcherErrors(t *testing.T) {
	t.Parallel()
	if _, err := NewDirWatcher(DirWatcherOptions{Name: dbName}); err == nil {
		t.Error("NewDirWatcher accepted a nil Changed")
	}
	if _, err := NewDirWatcher(DirWatcherOptions{Name: "a/b", Changed: func(string) {}}); err == nil {
		t.Error("NewDirWatcher accepted a path as Name")
	}
	dir := t.TempDir()
	w, _ := newTestDirWatcher(t, 0)
	if err := w.Add(filepath.Join(dir, "missing")); err == nil {
		t.Error("Add accepted a missing directory")
	}
	file := filepath.Join(dir, "file")
	appendFile(t, file, "x")
	if err := w.Add(file); err == nil {
		t.Error("Add accepted a file")
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir + "/"); err != nil {
		t.Fatalf("Add of the same directory again: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := w.Add(t.TempDir()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close = %v, want ErrClosed", err)
	}
}
