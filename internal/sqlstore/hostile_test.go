package sqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/testutil"
)

// The hostile-store tests put a damaged or foreign file where a store is
// expected and check that the library (kv.Open, queue.Open, read-write and
// read-only) and Verify (localcloud check) refuse it with a clear
// BINDING_SETUP_FAILED that names the path and the problem, and that no
// byte of any file in the store directory changes and no file appears.

// crashDirEnv switches TestHostileHelperCrash into the helper process.
const crashDirEnv = "LOCALCLOUD_TEST_CRASH_DIR"

// crashSends is how many messages the helper sends before it is killed.
const crashSends = 200

// TestHostileHelperCrash is the helper process of crashedQueue: it opens
// the queue in $LOCALCLOUD_TEST_CRASH_DIR, sends crashSends messages, says
// "sent" and waits to be killed, leaving the store as a crash leaves it:
// the database, a non-empty -wal with the sends, and the -shm index.
func TestHostileHelperCrash(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process of the hostile-store tests")
	}
	ctx := context.Background()
	// Created and closed first, as a store of an earlier run is: a new
	// store's tables are in its -wal until the first checkpoint, and the
	// tests cut the database file, which must hold more than its header.
	q, err := queue.Open(ctx, dir)
	if err == nil {
		err = q.Close()
	}
	if err == nil {
		q, err = queue.Open(ctx, dir)
	}
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for i := range crashSends {
		if err := q.Send(ctx, queue.Text(fmt.Sprintf("m-%03d", i))); err != nil {
			fmt.Println("send:", err)
			os.Exit(1)
		}
	}
	fmt.Println("sent")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	os.Exit(2)
}

// crashedQueue returns a queue directory whose writer was killed (SIGKILL)
// after crashSends committed sends, with its -wal and -shm left behind.
func crashedQueue(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "q")
	c := testutil.StartChild(t, "crashing writer", "TestHostileHelperCrash", crashDirEnv+"="+dir)
	c.Expect(t, "sent", time.Minute)
	if err := c.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.Done
	path := filepath.Join(dir, sqlitequeue.FileName)
	for _, side := range []string{"-wal", "-shm"} {
		if fi, err := os.Stat(path + side); err != nil || fi.Size() == 0 {
			t.Fatalf("the killed writer left no non-empty %s (stat: %v)", side, err)
		}
	}
	return dir
}

// storeQueue creates a queue with n messages of 100 bytes and closes it.
func storeQueue(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "q")
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := q.Send(context.Background(), queue.Text(fmt.Sprintf("m-%03d-%s", i, strings.Repeat("x", 94)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// foreignWAL returns the -wal of a database of another program (a users
// table), copied while the program had it open.
func foreignWAL(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.db")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range []string{
		"PRAGMA journal_mode=WAL", "PRAGMA wal_autocheckpoint=0",
		"CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)",
		"INSERT INTO users (email) VALUES ('a@example.com')",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	// SQLite takes no lock on the -wal file itself, so reading it with a
	// descriptor of our own cannot disturb the connection.
	b, err := os.ReadFile(path + "-wal")
	if err != nil || len(b) == 0 {
		t.Fatalf("foreign -wal: %d bytes, %v", len(b), err)
	}
	return b
}

// wantSameFiles fails if a file of before changed or disappeared, or a
// file appeared. With sidecars, SQLite may have created the -shm index and
// an empty -wal of file to read it (a read-only connection of a WAL
// database needs them, see sqlstore.Verify); they hold no data.
func wantSameFiles(t *testing.T, dir string, before map[string][32]byte, after, file string, sidecars bool) {
	t.Helper()
	now := testutil.StoreHashes(t, dir)
	var names []string
	for n := range before {
		names = append(names, n)
	}
	for n := range now {
		if _, ok := before[n]; ok {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, n))
		switch {
		case sidecars && n == file+"-shm":
		case sidecars && n == file+"-wal" && err == nil && fi.Size() == 0:
		default:
			t.Errorf("%s: %s appeared", after, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		h, ok := now[n]
		switch {
		case !ok:
			t.Errorf("%s: %s disappeared", after, n)
		case h != before[n]:
			b := before[n]
			t.Errorf("%s: %s changed (sha256 %x -> %x)", after, n, b[:6], h[:6])
		}
	}
}

func writeFile(t *testing.T, path string, b []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, perm os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(path, 0o700) }) // so t.TempDir can clean up
}

// hostileCase is one damaged store.
type hostileCase struct {
	name string
	kv   bool // a KV store (else a queue)
	// make builds the store and returns its directory.
	make func(t *testing.T) string
	// want are the parts the open error must name, besides the path.
	want []string
	// verifyKinds are the Problem kinds Verify must report.
	verifyKinds []string
}

func hostileCases() []hostileCase {
	qpath := func(dir string) string { return filepath.Join(dir, sqlitequeue.FileName) }
	return []hostileCase{{
		name: "truncated mid-page",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 300)
			fi, _ := os.Stat(qpath(dir))
			if err := os.Truncate(qpath(dir), fi.Size()-1000); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		want:        []string{"cut mid-page", "is not a whole number of 4096-byte pages"},
		verifyKinds: []string{sqlstore.ProblemFile},
	}, {
		name: "truncated at a page boundary, marker page intact",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 300)
			fi, _ := os.Stat(qpath(dir))
			pages := fi.Size() / 4096
			if err := os.Truncate(qpath(dir), pages/2*4096); err != nil {
				t.Fatal(err)
			}
			// The cut kept the pages of the schema and the marker row.
			b, err := os.ReadFile(qpath(dir))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte("format"+sqlitequeue.Marker)) || !bytes.Contains(b, []byte("CREATE TABLE messages")) {
				t.Fatalf("the cut to %d of %d pages lost the marker or the schema", pages/2, pages)
			}
			return dir
		},
		want:        []string{"is truncated", "its header says"},
		verifyKinds: []string{sqlstore.ProblemFile},
	}, {
		name: "zeroed header",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 50)
			b, err := os.ReadFile(qpath(dir))
			if err != nil {
				t.Fatal(err)
			}
			copy(b, make([]byte, 100))
			writeFile(t, qpath(dir), b, 0o600)
			return dir
		},
		want:        []string{"header zeroed"},
		verifyKinds: []string{sqlstore.ProblemOpen},
	}, {
		name: "another program's -wal",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 50)
			writeFile(t, qpath(dir)+"-wal", foreignWAL(t), 0o600)
			return dir
		},
		want:        []string{"-wal", "cannot be shown to belong", "there is no localqueue.sqlite-shm", "move it away"},
		verifyKinds: []string{sqlstore.ProblemWAL},
	}, {
		name: "another store's -wal, without its -shm",
		make: func(t *testing.T) string {
			other := crashedQueue(t)
			dir := storeQueue(t, 50)
			b, err := os.ReadFile(qpath(other) + "-wal")
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, qpath(dir)+"-wal", b, 0o600)
			return dir
		},
		want:        []string{"-wal", "cannot be shown to belong", "there is no localqueue.sqlite-shm"},
		verifyKinds: []string{sqlstore.ProblemWAL},
	}, {
		name: "another store's -wal over a crashed store's",
		make: func(t *testing.T) string {
			other := crashedQueue(t)
			dir := crashedQueue(t)
			b, err := os.ReadFile(qpath(other) + "-wal")
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, qpath(dir)+"-wal", b, 0o600)
			return dir
		},
		want:        []string{"-wal", "cannot be shown to belong", "its salts", "index is of another WAL"},
		verifyKinds: []string{sqlstore.ProblemWAL},
	}, {
		name: "another format's marker",
		kv:   true,
		make: func(t *testing.T) string {
			dir := newKV(t)
			rawExec(t, filepath.Join(dir, sqlitekv.FileName), "UPDATE meta SET value = 'localkv.v2' WHERE key = 'format'")
			for _, side := range []string{"-wal", "-shm"} {
				if _, err := os.Stat(filepath.Join(dir, sqlitekv.FileName) + side); err == nil {
					t.Fatalf("the marker edit left a %s", side)
				}
			}
			return dir
		},
		want:        []string{`found format "localkv.v2"`, `supported format is "localkv.v1"`},
		verifyKinds: []string{sqlstore.ProblemMarker},
	}, {
		name: "world-writable directory",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 10)
			chmod(t, dir, 0o777)
			return dir
		},
		want:        []string{"store directory", "mode 0777", "group or others can write it", "chmod 700 "},
		verifyKinds: nil, // modes are check's, not Verify's
	}, {
		name: "group-writable database file",
		kv:   true,
		make: func(t *testing.T) string {
			dir := newKV(t)
			if err := os.Chmod(filepath.Join(dir, sqlitekv.FileName), 0o660); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		want:        []string{"mode 0660", "group or others can read and write it", "chmod 600 "},
		verifyKinds: nil,
	}, {
		// Every ack would be a no-op: the acked message comes back.
		name: "trigger on messages that inserts acked messages back",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 3)
			rawExec(t, qpath(dir), `CREATE TRIGGER keep_acked AFTER DELETE ON messages BEGIN
INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (old.payload_type, old.payload_data, old.enqueued_at, 0, 0); END`)
			return dir
		},
		want:        []string{`trigger "keep_acked"`, "not part of localqueue.v1", "DROP TRIGGER"},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "trigger on kv that resurrects deleted keys",
		kv:   true,
		make: func(t *testing.T) string {
			dir := newKV(t)
			rawExec(t, filepath.Join(dir, sqlitekv.FileName), `CREATE TRIGGER undelete AFTER DELETE ON kv BEGIN
INSERT INTO kv (key, value, expires_at) VALUES (old.key, old.value, old.expires_at); END`)
			return dir
		},
		want:        []string{`trigger "undelete"`, "not part of localkv.v1"},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "trigger that copies values into meta",
		kv:   true,
		make: func(t *testing.T) string {
			dir := newKV(t)
			rawExec(t, filepath.Join(dir, sqlitekv.FileName), `CREATE TRIGGER leak AFTER INSERT ON kv BEGIN
INSERT OR REPLACE INTO meta (key, value) VALUES ('leak-' || new.key, CAST(new.value AS TEXT)); END`)
			return dir
		},
		want:        []string{`trigger "leak"`},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "a view",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 3)
			rawExec(t, qpath(dir), `CREATE VIEW due AS SELECT * FROM messages WHERE visible_at <= 0`)
			return dir
		},
		want:        []string{`view "due"`, "DROP VIEW"},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		// A UNIQUE index of someone else's would refuse sends.
		name: "an unknown index on messages",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 3)
			rawExec(t, qpath(dir), `CREATE UNIQUE INDEX one_payload ON messages (payload_data)`)
			return dir
		},
		want:        []string{`index "one_payload"`, "DROP INDEX"},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "an lc_-named index localcloud does not have",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 3)
			rawExec(t, qpath(dir), `CREATE UNIQUE INDEX lc_one_payload ON messages (payload_data)`)
			return dir
		},
		want:        []string{`index "lc_one_payload"`},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "an unknown table",
		kv:   true,
		make: func(t *testing.T) string {
			dir := newKV(t)
			rawExec(t, filepath.Join(dir, sqlitekv.FileName), `CREATE TABLE audit (who TEXT, what TEXT)`)
			return dir
		},
		want:        []string{`table "audit"`, "DROP TABLE"},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}, {
		name: "a trigger and a view, both named",
		make: func(t *testing.T) string {
			dir := storeQueue(t, 3)
			rawExec(t, qpath(dir), `CREATE VIEW v1 AS SELECT 1`,
				`CREATE TRIGGER lc_t1 BEFORE UPDATE ON messages BEGIN SELECT RAISE(IGNORE); END`)
			return dir
		},
		want:        []string{`view "v1"`, `trigger "lc_t1"`},
		verifyKinds: []string{sqlstore.ProblemSchemaUnknown},
	}}
}

// openStore opens the case's store the way an app does and closes it if
// the open succeeded.
func openStore(c hostileCase, dir string, readOnly bool) error {
	ctx := context.Background()
	if c.kv {
		var opts []kv.Option
		if readOnly {
			opts = append(opts, kv.WithReadOnly())
		}
		s, err := kv.Open(ctx, dir, opts...)
		if err == nil {
			_ = s.Close()
		}
		return err
	}
	var opts []queue.Option
	if readOnly {
		opts = append(opts, queue.WithReadOnly())
	}
	q, err := queue.Open(ctx, dir, opts...)
	if err == nil {
		_ = q.Close()
	}
	return err
}

func TestHostileStoresAreRefusedUntouched(t *testing.T) {
	t.Parallel()
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := c.make(t)
			f, file := sqlitequeue.Format(), sqlitequeue.FileName
			if c.kv {
				f, file = sqlitekv.Format(), sqlitekv.FileName
			}
			path := filepath.Join(dir, file)
			before := testutil.StoreHashes(t, dir)
			_, planted := before[file+"-wal"]

			for _, ro := range []bool{false, true} {
				err := openStore(c, dir, ro)
				what := fmt.Sprintf("open (read-only %v)", ro)
				var be *bindings.Error
				switch {
				case !errors.As(err, &be):
					t.Errorf("%s: err = %v; want a *bindings.Error", what, err)
				case be.Code != bindings.CodeBindingSetupFailed:
					t.Errorf("%s: code %s; want %s: %v", what, be.Code, bindings.CodeBindingSetupFailed, err)
				default:
					for _, w := range append([]string{path}, c.want...) {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("%s: error does not say %q:\n%v", what, w, err)
						}
					}
				}
				wantSameFiles(t, dir, before, what, file, !planted)
			}

			v, err := sqlstore.Verify(context.Background(), path, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.verifyKinds {
				found := false
				for _, p := range v.Problems {
					found = found || p.Kind == k
				}
				if !found {
					t.Errorf("Verify reported %q; want a %q problem", kinds(v), k)
				}
			}
			for _, p := range v.Problems {
				t.Logf("Verify: %s", p)
			}
			wantSameFiles(t, dir, before, "Verify", file, !planted)
		})
	}
}

// TestForeignWALWasCheckpointedIntoTheStore documents why the WAL check
// exists: SQLite itself replays a -wal of another database and, when the
// last connection closes, writes it into the database file. A plain
// read-write connection, as the handshake used, turns the queue into the
// other program's database.
func TestForeignWALWasCheckpointedIntoTheStore(t *testing.T) {
	t.Parallel()
	dir := storeQueue(t, 50)
	path := filepath.Join(dir, sqlitequeue.FileName)
	writeFile(t, path+"-wal", foreignWAL(t), 0o600)
	before := testutil.HashFile(t, path)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	var tables string
	if err := db.QueryRow("SELECT group_concat(name) FROM sqlite_master WHERE type = 'table'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if tables != "users" {
		t.Errorf("SQLite read the store with the foreign -wal as tables %q; want the other program's users", tables)
	}
	if testutil.HashFile(t, path) == before {
		t.Errorf("closing the connection left the database file as it was; the WAL check guards against a checkpoint SQLite no longer does")
	}
}

// TestCrashLeftWALIsRecovered is the other side of the WAL check: the -wal
// and -shm a killed writer leaves are the store's own, so every committed
// send is there after the next open, in order.
func TestCrashLeftWALIsRecovered(t *testing.T) {
	t.Parallel()
	dir := crashedQueue(t)
	ctx := context.Background()
	var logs bytes.Buffer
	q, err := queue.Open(ctx, dir, queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatalf("open after the crash: %v", err)
	}
	defer q.Close()
	for i := range crashSends {
		ms, err := q.Receive(ctx, 1)
		if err != nil || len(ms) != 1 {
			t.Fatalf("receive %d: %v, %d messages", i, err, len(ms))
		}
		if want := fmt.Sprintf("m-%03d", i); ms[0].Payload.Data != want {
			t.Fatalf("message %d = %q; want %q", i, ms[0].Payload.Data, want)
		}
		if err := q.Ack(ctx, ms[0].ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := q.Receive(ctx, 1); err != nil || len(ms) != 0 {
		t.Errorf("after %d messages: %d more, %v", crashSends, len(ms), err)
	}
}

// TestLiveWALIsTrusted: a store another process has open has a non-empty
// -wal; opening it meanwhile is the normal case and must work.
func TestLiveWALIsTrusted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "q")
	c := testutil.StartChild(t, "live writer", "TestHostileHelperCrash", crashDirEnv+"="+dir)
	c.Expect(t, "sent", time.Minute)
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open while another process has the store open: %v", err)
	}
	defer q.Close()
	st, err := q.Stats(context.Background())
	if err != nil || st.Total != crashSends {
		t.Errorf("stats %+v, %v; want %d messages", st, err, crashSends)
	}
}

// TestGroupReadableStoreOpensWithAWarning: a database file or directory
// that group or others may read (but not write) opens, as spec-written
// stores and t.TempDir directories need, and the logger says so.
func TestGroupReadableStoreOpensWithAWarning(t *testing.T) {
	t.Parallel()
	dir := newKV(t)
	path := filepath.Join(dir, sqlitekv.FileName)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s, err := kv.Open(context.Background(), dir, kv.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok, err := s.Get(context.Background(), "k"); err != nil || !ok || string(v) != "v" {
		t.Errorf("get k = %q, %v, %v", v, ok, err)
	}
	for _, w := range []string{"level=WARN", path, "mode 0644", "chmod 600 " + path} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log does not say %q:\n%s", w, logs.String())
		}
	}
}

// TestCrashLeftWALOverACutFileIsRefused: a -wal a killed writer left is
// trusted (its -shm records it), so the header check lets the database file
// be shorter than its header says (a checkpoint cut short looks so). The
// store read with that WAL is then checked through a connection that
// cannot checkpoint: cut to its first page, it has lost the marker and is
// refused, and neither the database file nor the -wal changes.
func TestCrashLeftWALOverACutFileIsRefused(t *testing.T) {
	t.Parallel()
	dir := crashedQueue(t)
	path := filepath.Join(dir, sqlitequeue.FileName)
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	db, wal := testutil.HashFile(t, path), testutil.HashFile(t, path+"-wal")
	_, err := queue.Open(context.Background(), dir)
	t.Logf("open: %v", err)
	var be *bindings.Error
	if !errors.As(err, &be) || be.Code != bindings.CodeBindingSetupFailed || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "-wal a process that ended left") {
		t.Errorf("open of a cut file with a crash-left -wal: %v; want BINDING_SETUP_FAILED naming %s and the -wal", err, path)
	}
	if testutil.HashFile(t, path) != db || testutil.HashFile(t, path+"-wal") != wal {
		t.Errorf("the refused open changed the database file or the -wal")
	}
}

// TestBackupRefusesAForeignWAL: a backup reads the store through SQLite,
// which would replay a foreign -wal into the snapshot and build a -shm that
// makes the -wal look like the store's own to the next open. Backup
// refuses it first and changes nothing.
func TestBackupRefusesAForeignWAL(t *testing.T) {
	t.Parallel()
	dir := storeQueue(t, 20)
	path := filepath.Join(dir, sqlitequeue.FileName)
	writeFile(t, path+"-wal", foreignWAL(t), 0o600)
	before := testutil.StoreHashes(t, dir)
	dst := filepath.Join(t.TempDir(), "b.sqlite")
	_, err := sqlstore.Backup(context.Background(), path, dst, sqlitequeue.Format())
	if err == nil || !strings.Contains(err.Error(), path+"-wal") || !strings.Contains(err.Error(), "cannot be shown to belong") {
		t.Errorf("backup of a store with a foreign -wal: %v; want the -wal named", err)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("backup left %s (stat: %v)", dst, err)
	}
	wantSameFiles(t, dir, before, "backup", sqlitequeue.FileName, false)
}

// TestRestoreOverHostileStores: restore is how a damaged store is fixed, so
// it works over a file SQLite cannot open (kept byte for byte as the
// replaced one); but it refuses while a foreign -wal sits beside the store,
// since checkpointing it would write it into the file it keeps.
func TestRestoreOverHostileStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	src := filepath.Join(storeQueue(t, 5), sqlitequeue.FileName)

	damaged := storeQueue(t, 50)
	path := filepath.Join(damaged, sqlitequeue.FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, make([]byte, 100))
	writeFile(t, path, b, 0o600)
	res, err := sqlstore.Restore(ctx, damaged, sqlitequeue.Format(), src, now)
	if err != nil {
		t.Fatalf("restore over a zeroed header: %v", err)
	}
	if kept, err := os.ReadFile(res.Replaced); err != nil || !bytes.Equal(kept, b) {
		t.Errorf("the replaced damaged file was not kept byte for byte (%v)", err)
	}
	q, err := queue.Open(ctx, damaged)
	if err != nil {
		t.Fatalf("open the restored store: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Total != 5 {
		t.Errorf("restored store: %+v, %v; want the backup's 5 messages", st, err)
	}
	_ = q.Close()

	planted := storeQueue(t, 50)
	path = filepath.Join(planted, sqlitequeue.FileName)
	writeFile(t, path+"-wal", foreignWAL(t), 0o600)
	before := testutil.StoreHashes(t, planted)
	_, err = sqlstore.Restore(ctx, planted, sqlitequeue.Format(), src, now)
	if err == nil || !strings.Contains(err.Error(), path+"-wal") || !strings.Contains(err.Error(), "cannot be shown to belong") {
		t.Errorf("restore beside a foreign -wal: %v; want the -wal named", err)
	}
	wantSameFiles(t, planted, before, "restore", sqlitequeue.FileName, false)
}

// TestHotJournalIsRolledBack: a writer killed while it created a store (in
// rollback-journal mode, before the switch to WAL) leaves a database file
// shorter than its first page says and a hot -journal. That is not a cut
// file: SQLite rolls the journal back on the next open, which then creates
// the store. The cut is taken from a real transaction that spilled pages
// to the file before its commit.
func TestHotJournalIsRolledBack(t *testing.T) {
	t.Parallel()
	scratch := filepath.Join(t.TempDir(), sqlitequeue.FileName)
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: scratch}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, s := range []string{"PRAGMA cache_size=1", "BEGIN", sqlstore.MetaDDL, sqlitequeue.Format().Schema,
		"INSERT INTO meta VALUES ('format', 'localqueue.v1')"} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	for i := range 200 {
		if _, err := db.Exec("INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at) VALUES ('text', ?, 0, 0)", strings.Repeat("x", 500)+fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	// The transaction is open: copy the files as a kill would leave them
	// (the scratch connection is thrown away, so the locks this copy
	// drops do not matter).
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sqlitequeue.FileName)
	for _, side := range []string{"", "-journal"} {
		b, err := os.ReadFile(scratch + side)
		if err != nil || len(b) == 0 {
			t.Fatalf("the open transaction left no %s: %d bytes, %v", side, len(b), err)
		}
		if side == "" {
			b = b[:4096] // the first page is written, the rest not yet
		}
		writeFile(t, path+side, b, 0o600)
	}
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open after a creation cut short: %v", err)
	}
	defer q.Close()
	if err := q.Send(context.Background(), queue.Text("after")); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(context.Background()); err != nil || st.Total != 1 {
		t.Errorf("stats %+v, %v; want the rolled-back store with the one new message", st, err)
	}
}

// TestUnknownOwnTableOpens: a table in localcloud's own namespace that this
// version does not define (a newer version's) is inert and does not stop
// the open; Verify still reports it.
func TestUnknownOwnTableOpens(t *testing.T) {
	t.Parallel()
	dir := storeQueue(t, 2)
	path := filepath.Join(dir, sqlitequeue.FileName)
	rawExec(t, path, `CREATE TABLE lc_future (x INTEGER)`)
	q, err := queue.Open(t.Context(), dir)
	if err != nil {
		t.Fatalf("open with an lc_ table: %v", err)
	}
	if msgs, err := q.Receive(t.Context(), 10); err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %d messages, %v", len(msgs), err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if v := verify(t, path, sqlitequeue.Format()); !strings.Contains(kinds(v), sqlstore.ProblemSchemaUnknown+" table lc_future") {
		t.Errorf("Verify: %s; want the unknown lc_future", kinds(v))
	}
}

// TestForeignObjectErrorNamesTheObject pins the wording of the refusal.
func TestForeignObjectErrorNamesTheObject(t *testing.T) {
	t.Parallel()
	dir := storeQueue(t, 1)
	rawExec(t, filepath.Join(dir, sqlitequeue.FileName), `CREATE TRIGGER keep AFTER DELETE ON messages BEGIN SELECT 1; END`)
	_, err := queue.Open(t.Context(), dir)
	t.Logf("%v", err)
	if !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), `trigger "keep" (CREATE TRIGGER keep AFTER DELETE ON messages BEGIN SELECT 1; END)`) ||
		!strings.Contains(err.Error(), `DROP TRIGGER "keep";`) {
		t.Errorf("err = %v", err)
	}
}

// TestCrashLeftWALWithATruncatedIndex: a process killed while it opened a
// crashed store, after SQLite's first connection truncated the -shm index
// and before it rebuilt it from the -wal, leaves the -wal with an index of
// zeros (or an empty one). The next open accepts it and SQLite rebuilds the
// index: every committed send is there (localcloud migrate, SIGKILLed at
// random points, met it).
func TestCrashLeftWALWithATruncatedIndex(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{0, 32768} {
		t.Run(fmt.Sprintf("shm=%d", size), func(t *testing.T) {
			t.Parallel()
			dir := crashedQueue(t)
			shm := filepath.Join(dir, sqlitequeue.FileName) + "-shm"
			if err := os.Truncate(shm, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(shm, size); err != nil {
				t.Fatal(err)
			}
			openCrashed(t, dir)
		})
	}
	// Killed inside the rebuild: the first copy of the index header is not
	// initialised. torn: SQLite writes the header's second copy, then the
	// first; a kill part way through the second leaves it torn (its first
	// 32 bytes: isInit and mxFrame, not the salts) and the first still
	// zeros. version: the first copy holds only its version (3007000), the
	// rest zeros, the state a SIGKILLed localcloud migrate left.
	for _, c := range []struct {
		name  string
		plant func(hdr, shm []byte)
	}{
		{"torn", func(hdr, shm []byte) { copy(shm[48:80], hdr[48:80]) }},
		{"version", func(hdr, shm []byte) { copy(shm[0:4], hdr[0:4]) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := crashedQueue(t)
			shm := filepath.Join(dir, sqlitequeue.FileName) + "-shm"
			hdr := make([]byte, 96)
			fh, err := os.Open(shm)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadFull(fh, hdr)
			fh.Close()
			if err != nil {
				t.Fatal(err)
			}
			if hdr[48+12] != 1 || binary.NativeEndian.Uint32(hdr[48+16:]) == 0 || binary.NativeEndian.Uint32(hdr[0:]) != 3007000 {
				t.Fatalf("the crashed store's index header: version %d, copy 2 isInit %d, mxFrame %d; want 3007000 and a header that indexes frames",
					binary.NativeEndian.Uint32(hdr[0:]), hdr[48+12], binary.NativeEndian.Uint32(hdr[48+16:]))
			}
			planted := make([]byte, 32768)
			c.plant(hdr, planted)
			writeFile(t, shm, planted, 0o600)
			openCrashed(t, dir)
		})
	}
}

// openCrashed opens the queue crashedQueue left at dir and checks that
// every committed send is there.
func openCrashed(t *testing.T, dir string) {
	t.Helper()
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open with a -wal and a zeroed or torn index: %v", err)
	}
	defer q.Close()
	st, err := q.Stats(context.Background())
	if err != nil || st.Total != crashSends {
		t.Fatalf("stats %+v, %v; want the %d committed sends", st, err, crashSends)
	}
}
