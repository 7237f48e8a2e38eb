package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/testutil"
)

func TestNormalizeSQL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"CREATE TABLE kv (\nkey TEXT PRIMARY KEY, -- the key\nvalue BLOB NOT NULL\n)": "CREATE TABLE KV(KEY TEXT PRIMARY KEY,VALUE BLOB NOT NULL)",
		"create  table kv ( key text primary key ,value blob not null );":             "CREATE TABLE KV(KEY TEXT PRIMARY KEY,VALUE BLOB NOT NULL)",
		"CREATE /* c */ INDEX i ON t (a,\n\tb)":                                       "CREATE INDEX I ON T(A,B)",
		"CREATE TABLE t (a TEXT DEFAULT 'Mixed  Case -- no comment')":                 "CREATE TABLE T(A TEXT DEFAULT 'Mixed  Case -- no comment')",
		`CREATE TABLE "Quoted Name" (a)`:                                              `CREATE TABLE "Quoted Name"(A)`,
		"CREATE TABLE t (a TEXT DEFAULT 'it''s')":                                     "CREATE TABLE T(A TEXT DEFAULT 'it''s')",
	} {
		if got := sqlstore.NormalizeSQL(in); got != want {
			t.Errorf("NormalizeSQL(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

// newKV creates a KV store with one key and closes it.
func newKV(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := kv.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newQueue(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Send(context.Background(), queue.Text("hi")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rawExec runs statements on a database file through a plain read-write
// SQLite connection, as a foreign tool would.
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func verify(t *testing.T, path string, f sqlstore.Format) sqlstore.Verification {
	t.Helper()
	v, err := sqlstore.Verify(context.Background(), path, f)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func kinds(v sqlstore.Verification) string {
	var k []string
	for _, p := range v.Problems {
		k = append(k, p.Kind+" "+p.Object)
	}
	return strings.Join(k, "; ")
}

func TestVerifyAcceptsFreshStores(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		dir string
		f   sqlstore.Format
	}{{newKV(t), sqlitekv.Format()}, {newQueue(t), sqlitequeue.Format()}} {
		path := filepath.Join(c.dir, c.f.File)
		before := testutil.HashFile(t, path)
		v := verify(t, path, c.f)
		if !v.OK() || len(v.Notes) != 0 || v.Objects == 0 {
			t.Errorf("%s: %+v", c.f.Marker, v)
		}
		if testutil.HashFile(t, path) != before {
			t.Errorf("%s: Verify changed the database file", c.f.Marker)
		}
	}
}

func TestVerifyReportsDrift(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		queue bool
		stmts []string
		want  string // kinds
		note  bool
	}{
		{"column added", false, []string{"ALTER TABLE kv ADD COLUMN extra TEXT"}, "schema-changed table kv", false},
		{"unknown table and trigger", false, []string{"CREATE TABLE audit (x)", "CREATE TRIGGER tr AFTER INSERT ON kv BEGIN SELECT 1; END"},
			"schema-unknown table audit; schema-unknown trigger tr", false},
		{"spec index dropped", true, []string{"DROP INDEX idx_messages_visible"}, "schema-missing index idx_messages_visible", false},
		{"spec index changed", true, []string{"DROP INDEX idx_messages_visible", "CREATE INDEX idx_messages_visible ON messages (visible_at)"},
			"schema-changed index idx_messages_visible", false},
		{"own index dropped is a note", true, []string{"DROP INDEX lc_messages_delayed"}, "", true},
		{"foreign marker", false, []string{"UPDATE meta SET value = 'localkv.v9' WHERE key = 'format'"}, "marker table meta", false},
		{"no marker row", false, []string{"DELETE FROM meta"}, "marker table meta", false},
		{"no meta", false, []string{"DROP TABLE meta"}, "marker table meta", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir, f := newKV(t), sqlitekv.Format()
			if c.queue {
				dir, f = newQueue(t), sqlitequeue.Format()
			}
			path := filepath.Join(dir, f.File)
			rawExec(t, path, c.stmts...)
			v := verify(t, path, f)
			if got := kinds(v); got != c.want {
				t.Errorf("problems %q, want %q\n%+v", got, c.want, v.Problems)
			}
			if (len(v.Notes) > 0) != c.note {
				t.Errorf("notes %q", v.Notes)
			}
		})
	}
}

func TestVerifyReportsANonDatabaseAndTheOtherFormat(t *testing.T) {
	t.Parallel()
	junk := filepath.Join(t.TempDir(), "junk.sqlite")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not sqlite ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := verify(t, junk, sqlitekv.Format()); kinds(v) != "open " {
		t.Errorf("junk: %+v", v)
	}
	q := filepath.Join(newQueue(t), sqlitequeue.FileName)
	v := verify(t, q, sqlitekv.Format())
	if kinds(v) != "marker table meta" || !strings.Contains(v.Problems[0].Message, `"localqueue.v1"`) {
		t.Errorf("queue as kv: %+v", v)
	}
}

func TestBackupWhileWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := kv.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stop := make(chan struct{})
	written := make(chan int, 1)
	go func() {
		i := 0
		defer func() { written <- i }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Put(ctx, fmt.Sprintf("k%06d", i+1), []byte("v")); err != nil {
				t.Error(err)
				return
			}
			i++
		}
	}()
	// Wait for some writes, by polling the store.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ok, _ := s.Exists(ctx, "k000100"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writer made no progress")
		}
		time.Sleep(time.Millisecond)
	}
	dst := filepath.Join(t.TempDir(), "b.sqlite")
	res, err := sqlstore.Backup(ctx, filepath.Join(dir, sqlitekv.FileName), dst, sqlitekv.Format())
	close(stop)
	n := <-written
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes == 0 || res.Path != dst {
		t.Errorf("result %+v", res)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v %v", fi, err)
	}
	for _, side := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(dst + side); err == nil {
			t.Errorf("backup left %s", side)
		}
	}
	// The backup is a prefix k1..km of the writes, m >= 100.
	copyDir := t.TempDir()
	if err := os.Link(dst, filepath.Join(copyDir, sqlitekv.FileName)); err != nil {
		t.Fatal(err)
	}
	bs, err := kv.Open(ctx, copyDir, kv.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	var m int
	cursor := ""
	for {
		page, err := bs.Scan(ctx, "k", kv.MaxScanLimit, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			m++
			if want := fmt.Sprintf("k%06d", m); it.Key != want {
				t.Fatalf("key %d is %s, want %s: not a prefix", m, it.Key, want)
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if m < 100 || m > n {
		t.Errorf("backup holds %d keys; 100 were written before it began, %d in all", m, n)
	}

	// An existing destination is never overwritten.
	if _, err := sqlstore.Backup(ctx, filepath.Join(dir, sqlitekv.FileName), dst, sqlitekv.Format()); !errors.Is(err, sqlstore.ErrExists) {
		t.Errorf("second backup to the same file: %v", err)
	}
}

func TestBackupOfTheWrongFormatLeavesNothing(t *testing.T) {
	t.Parallel()
	src := filepath.Join(newQueue(t), sqlitequeue.FileName)
	out := t.TempDir()
	dst := filepath.Join(out, "b.sqlite")
	_, err := sqlstore.Backup(context.Background(), src, dst, sqlitekv.Format())
	var ve *sqlstore.VerifyError
	if !errors.As(err, &ve) || !errors.Is(err, sqlstore.ErrVerifyFailed) {
		t.Fatalf("err = %v", err)
	}
	if es, _ := os.ReadDir(out); len(es) != 0 {
		t.Errorf("left %v", es)
	}
}

func TestRestoreKeepsTheReplacedStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srcDir, liveDir := newKV(t), newKV(t)
	// Make the two differ.
	s, err := kv.Open(ctx, liveDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "live-only", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// While this process holds the store, Restore refuses.
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	src := filepath.Join(srcDir, sqlitekv.FileName)
	if _, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), src, now); err == nil || !strings.Contains(err.Error(), "this process has the store open") {
		t.Errorf("restore with an open handle: %v", err)
	}
	s.Close()

	// A plain SQLite connection (as another process would hold) keeps -wal.
	other, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(liveDir, sqlitekv.FileName)}).String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec("SELECT COUNT(*) FROM kv"); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), src, now); !errors.Is(err, sqlstore.ErrStoreInUse) {
		t.Errorf("restore while another connection is open: %v", err)
	}
	other.Close()

	res, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), src, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(liveDir, sqlitekv.FileName+".replaced-20250102T030405Z"); res.Replaced != want {
		t.Errorf("replaced at %s, want %s", res.Replaced, want)
	}
	if fi, err := os.Stat(res.Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("restored file: %v %v", fi, err)
	}
	es, _ := os.ReadDir(liveDir)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != ".localkv.sqlite.lock localkv.sqlite localkv.sqlite.replaced-20250102T030405Z" {
		t.Errorf("store dir holds %s", got)
	}
	r, er, err := sqlitetools.OpenKV(ctx, liveDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ok, _ := r.Exists(ctx, "live-only"); ok {
		t.Error("restored store still has the live-only key")
	}
	if ok, _ := r.Exists(ctx, "k"); !ok {
		t.Error("restored store lacks the backup's key")
	}
	var mode string
	if err := er.DB().R.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q %v", mode, err)
	}
	if v := verify(t, res.Replaced, sqlitekv.Format()); !v.OK() {
		t.Errorf("replaced store: %+v", v)
	}

	// A second restore at the same second gets another name.
	r.Close()
	res2, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), src, now)
	if err != nil || res2.Replaced != res.Replaced+"-2" {
		t.Errorf("second restore: %+v %v", res2, err)
	}
	// A source of the wrong format is refused before anything changes.
	if _, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), filepath.Join(newQueue(t), sqlitequeue.FileName), now); !errors.Is(err, sqlstore.ErrVerifyFailed) {
		t.Errorf("queue into kv: %v", err)
	}
}

const holdFileEnv = "LOCALCLOUD_TEST_HOLD_FILE"

// TestCheckHelperHold is the helper process of TestRestoreRefusesAChildHolder:
// it holds the file named by its environment open until killed.
func TestCheckHelperHold(t *testing.T) {
	path := os.Getenv(holdFileEnv)
	if path == "" {
		t.Skip("helper process of TestRestoreRefusesAChildHolder")
	}
	fh, err := os.Open(path)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fmt.Println("held", fh.Name())
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	os.Exit(2)
}

// TestRestoreRefusesAChildHolder: a holder that is a child of the restoring
// process is looked at again for a while (a fork that has not exec'd yet
// holds a copy of the parent's descriptors), but one that really holds the
// store is still refused, by pid, and the store is left as it was.
func TestRestoreRefusesAChildHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srcDir, liveDir := newKV(t), newKV(t)
	live := filepath.Join(liveDir, sqlitekv.FileName)
	c := testutil.StartChild(t, "file holder", "TestCheckHelperHold", holdFileEnv+"="+live)
	c.Expect(t, "held", time.Minute)
	before := testutil.StoreHashes(t, liveDir)
	_, err := sqlstore.Restore(ctx, liveDir, sqlitekv.Format(), filepath.Join(srcDir, sqlitekv.FileName), time.Now())
	if !errors.Is(err, sqlstore.ErrStoreInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d ", c.Cmd.Process.Pid)) {
		t.Errorf("restore while a child process holds the store: %v; want ErrStoreInUse naming pid %d", err, c.Cmd.Process.Pid)
	}
	if after := testutil.StoreHashes(t, liveDir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the refused restore changed the store directory:\n before %v\n after  %v", before, after)
	}
}

// TestVerifyStoreNotCreatedYet: a database file of no tables at all (an
// empty file, or one switched to WAL whose tables never reached the disk,
// as a power cut leaves a store created with durability normal) is a store
// not created yet, a note and no problem, and Open creates it; a database
// with any table of another program is still refused for its marker.
func TestVerifyStoreNotCreatedYet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		setup string // SQL run on the new file; "" leaves it empty
		ok    bool
	}{
		{"empty file", "", true},
		{"WAL header only", "PRAGMA journal_mode=WAL", true},
		{"a table of another program", "CREATE TABLE other (a)", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, sqlitequeue.FileName)
			if c.setup == "" {
				if err := os.WriteFile(path, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				db, err := sql.Open("sqlite", "file://"+path)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := db.ExecContext(ctx, c.setup); err != nil {
					t.Fatal(err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			v, err := sqlstore.Verify(ctx, path, sqlitequeue.Format())
			if err != nil {
				t.Fatal(err)
			}
			if c.ok != (len(v.Problems) == 0) {
				t.Fatalf("Verify: problems %v, notes %v; want ok=%v", v.Problems, v.Notes, c.ok)
			}
			if !c.ok {
				return
			}
			if len(v.Notes) == 0 || !strings.Contains(v.Notes[0], "not created yet") {
				t.Errorf("Verify notes %v, want one saying the store is not created yet", v.Notes)
			}
			q, err := queue.Open(ctx, dir)
			if err != nil {
				t.Fatalf("open after Verify accepted it: %v", err)
			}
			if err := q.Send(ctx, queue.Text("x")); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if v, err := sqlstore.Verify(ctx, path, sqlitequeue.Format()); err != nil || len(v.Problems) != 0 {
				t.Fatalf("Verify of the created store: %v %v", v.Problems, err)
			}
		})
	}
}
