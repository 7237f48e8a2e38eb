package sqlitekv_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/kv/kvtest"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

func TestConformanceFile(t *testing.T) {
	t.Parallel()
	kvtest.Run(t, func(t *testing.T) kvtest.Harness {
		dir := filepath.Join(t.TempDir(), "store")
		return kvtest.Harness{
			Persistent: true,
			Caps:       kvtest.Capabilities{ControlsTime: true},
			Check:      integrityCheck,
			Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
				t.Helper()
				s, err := openKV(ctx, dir, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	})
}

var memSeq atomic.Int64

func TestConformanceMemory(t *testing.T) {
	t.Parallel()
	kvtest.Run(t, memoryHarness(kvtest.Capabilities{ControlsTime: true}))
}

// TestConformanceMemoryServerTime runs the suite as it runs on an engine
// that keeps its own time: no fake clock, real waits.
func TestConformanceMemoryServerTime(t *testing.T) {
	t.Parallel()
	kvtest.Run(t, memoryHarness(kvtest.Capabilities{}))
}

// integrityCheck is the SQLite engine's own check after every case.
func integrityCheck(t *testing.T, s *kv.Store) {
	t.Helper()
	var res string
	if err := dbOf(s).R.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("integrity_check = %q, %v; want ok", res, err)
	}
}

func memoryHarness(caps kvtest.Capabilities) func(t *testing.T) kvtest.Harness {
	return func(t *testing.T) kvtest.Harness {
		name := fmt.Sprintf("conformance-%d", memSeq.Add(1))
		return kvtest.Harness{
			Caps:  caps,
			Check: integrityCheck,
			Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
				t.Helper()
				s, err := openKVMemory(ctx, name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		}
	}
}

func TestFileModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "kv")
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	wantMode(t, dir, 0o700)
	wantMode(t, filepath.Join(dir, sqlitekv.FileName), 0o600)
	wantMode(t, filepath.Join(dir, sqlitekv.FileName+"-wal"), 0o600)
	wantMode(t, filepath.Join(dir, sqlitekv.FileName+"-shm"), 0o600)
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s mode = %v, want %v", path, got, want)
	}
}

func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func tables(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	return strings.Join(names, ",")
}

func wantSetupFailed(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Fatalf("err = %v; want BINDING_SETUP_FAILED", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestForeignFormatUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitekv.FileName)
	db := rawDB(t, path)
	for _, q := range []string{
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`INSERT INTO meta VALUES ('format', 'teststore.v2')`,
		`CREATE TABLE widgets (id INTEGER PRIMARY KEY)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_, err := openKV(ctx, dir)
	wantSetupFailed(t, err, "teststore.v2", "localkv.v1", path)
	if got := tables(t, db); got != "meta,widgets" {
		t.Fatalf("tables after refused open = %s; want meta,widgets", got)
	}
}

func TestChangedMarkerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawDB(t, filepath.Join(dir, sqlitekv.FileName))
	if _, err := db.Exec(`UPDATE meta SET value = 'localkv.v2' WHERE key = 'format'`); err != nil {
		t.Fatal(err)
	}
	_, err = openKV(ctx, dir)
	wantSetupFailed(t, err, "localkv.v2", "localkv.v1")
}

func TestOtherProgramsDatabaseUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := rawDB(t, filepath.Join(dir, sqlitekv.FileName))
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT)`); err != nil {
		t.Fatal(err)
	}
	_, err := openKV(ctx, dir)
	wantSetupFailed(t, err, "notes", "localkv.v1")
	if got := tables(t, db); got != "notes" {
		t.Fatalf("tables = %s; want notes only", got)
	}
}

func TestGarbageFileUntouched(t *testing.T) {
	t.Parallel()
	for name, content := range map[string][]byte{
		"garbage": bytes.Repeat([]byte("not a database, just bytes\x00\xff"), 200),
		"text":    []byte("hello, I am a text file of another program\n"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, sqlitekv.FileName)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := openKV(ctx, dir)
			wantSetupFailed(t, err, path)
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, content) {
				t.Fatalf("file changed by a refused open (err %v)", err)
			}
		})
	}
}

func TestDirectoryAtFilePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitekv.FileName)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := openKV(ctx, dir)
	wantSetupFailed(t, err, path, "directory")
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		t.Fatalf("directory at the store path disturbed: %v", err)
	}
}

func TestUncreatableDirectory(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	file := filepath.Join(base, "plainfile")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := openKV(ctx, filepath.Join(file, "kv"))
	if !errors.Is(err, bindings.ErrLocalFilesystem) {
		t.Fatalf("err = %v; want LOCAL_FILESYSTEM_ERROR", err)
	}
}

// A store written by another spec-exact implementation opens and works.
func TestSpecWrittenStoreOpens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := rawDB(t, filepath.Join(dir, sqlitekv.FileName))
	for _, q := range []string{
		"PRAGMA journal_mode=WAL",
		`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localkv.v1')`,
		sqlitekv.Schema,
		`INSERT INTO kv (key, value, expires_at) VALUES ('spec:a', X'00FF', NULL)`,
		`INSERT INTO kv (key, value, expires_at) VALUES ('spec:text', 'hi', NULL)`,
		`INSERT INTO kv (key, value, expires_at) VALUES ('spec:empty', X'', NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, ok, err := s.Get(ctx, "spec:a")
	if err != nil || !ok || !bytes.Equal(got, []byte{0, 0xff}) {
		t.Fatalf("Get = %x %v %v", got, ok, err)
	}
	// Another program may bind a string to the BLOB column.
	if got, ok, err := s.Get(ctx, "spec:text"); err != nil || !ok || string(got) != "hi" {
		t.Fatalf("Get of a TEXT value = %q %v %v", got, ok, err)
	}
	if got, ok, err := s.Get(ctx, "spec:empty"); err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("Get of an empty value = %#v %v %v, want a non-nil empty slice", got, ok, err)
	}
	if _, err := s.Put(ctx, "ours", []byte("v")); err != nil {
		t.Fatal(err)
	}
	var v []byte
	if err := db.QueryRow(`SELECT value FROM kv WHERE key = 'ours'`).Scan(&v); err != nil || string(v) != "v" {
		t.Fatalf("spec reader sees %q, %v", v, err)
	}
}

func TestMemoryLifetime(t *testing.T) {
	t.Parallel()
	name := fmt.Sprintf("lifetime-%d", memSeq.Add(1))
	a, err := openKVMemory(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	other, err := openKVMemory(ctx, name+"-other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, ok, _ := other.Get(ctx, "k"); ok {
		t.Fatal("a differently named memory store shares data")
	}
	a.Close()
	b, err := openKVMemory(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, ok, _ := b.Get(ctx, "k"); ok {
		t.Fatal("memory store outlived its last handle")
	}
	if _, err := openKVMemory(ctx, "bad/name"); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("bad memory name: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Put(ctx, "k", []byte("v"))
	ro, err := openKV(ctx, dir, kv.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got, ok, err := ro.Get(ctx, "k"); err != nil || !ok || string(got) != "v" {
		t.Fatalf("read-only Get = %q %v %v", got, ok, err)
	}
	if _, err := ro.Put(ctx, "k2", []byte("v")); !errors.Is(err, bindings.ErrKVOperationFailed) {
		t.Fatalf("read-only Put = %v; want KV_OPERATION_FAILED", err)
	}
	if _, err := openKV(ctx, filepath.Join(dir, "nothing-here"), kv.WithReadOnly()); !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Fatalf("read-only open of a missing store = %v", err)
	}
}

// A writer that does not take localcloud's lock file (another program) holds
// the database's write lock; a Put waits for it instead of failing.
func TestWaitsForForeignWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := rawDB(t, filepath.Join(dir, sqlitekv.FileName))
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO kv (key, value) VALUES ('foreign', X'01')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "ours", []byte("v"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Put returned while another connection held the write lock: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Put after the foreign commit: %v", err)
	}
	for _, k := range []string{"foreign", "ours"} {
		if ok, err := s.Exists(ctx, k); err != nil || !ok {
			t.Errorf("Exists(%s) = %v, %v", k, ok, err)
		}
	}
}
