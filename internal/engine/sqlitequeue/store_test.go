package sqlitequeue_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/queuetest"
	"github.com/localcloud/localcloud/internal/clock"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("File", func(t *testing.T) {
		t.Parallel()
		queuetest.Run(t, fileHarness)
	})
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		queuetest.Run(t, memoryHarness)
	})
	// The same engine on real time: the suite's server-time forms, checked
	// against an engine whose fake-clock forms pass too.
	t.Run("FileRealTime", func(t *testing.T) {
		t.Parallel()
		queuetest.Run(t, func(t *testing.T) queuetest.Harness {
			h := fileHarness(t)
			h.Caps.ControlsTime = false
			return h
		})
	})
}

// fileHarness is a store in a directory that does not exist yet, so every
// case also exercises its creation.
func fileHarness(t *testing.T) queuetest.Harness {
	base := t.TempDir()
	dir := filepath.Join(base, "queue")
	return queuetest.Harness{
		Persistent: true,
		Caps:       sqliteCaps,
		Check:      integrityCheck, CheckReceipt: checkReceiptColumn, RefuseSends: refuseSends, RefuseAcks: refuseAcks,
		Open: func(t *testing.T, opts ...queue.Option) *queue.Queue {
			t.Helper()
			return openFile(t, dir, opts...)
		},
		TryOpen: func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
			return openQueue(ctx, dir, opts...)
		},
		OpenSibling: func(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
			t.Helper()
			return openFile(t, filepath.Join(base, "sibling-"+name), opts...)
		},
	}
}

var memSeq atomic.Int64

// memName is a memory store name no other test of this process uses.
func memName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, memSeq.Add(1)) }

func memoryHarness(t *testing.T) queuetest.Harness {
	name := memName("conformance")
	return queuetest.Harness{
		Caps:  sqliteCaps,
		Check: integrityCheck, CheckReceipt: checkReceiptColumn, RefuseSends: refuseSends, RefuseAcks: refuseAcks,
		Open: func(t *testing.T, opts ...queue.Option) *queue.Queue {
			t.Helper()
			return openMemory(t, name, opts...)
		},
		TryOpen: func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
			return openQueueMemory(ctx, name, opts...)
		},
		OpenSibling: func(t *testing.T, sibling string, opts ...queue.Option) *queue.Queue {
			t.Helper()
			return openMemory(t, name+"-"+sibling, opts...)
		},
	}
}

// sqliteCaps are the SQLite engine's capabilities: it follows
// queue.WithClock and its receipts are "{id}:{uuid}".
var sqliteCaps = queuetest.Capabilities{ControlsTime: true, IDUUIDReceipts: true, LastErrors: true, DedupKeys: true}

// integrityCheck runs PRAGMA integrity_check through q's reader pool.
func integrityCheck(t *testing.T, q *queue.Queue) {
	t.Helper()
	var res string
	if err := dbOf(q).R.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", res, err)
	}
}

var receiptRE = regexp.MustCompile(`^([0-9]+):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)

// checkReceiptColumn asserts m's receipt is "{id}:{uuid}" with the uuid and
// attempt in the row's columns.
func checkReceiptColumn(t *testing.T, q *queue.Queue, m queue.Message) {
	t.Helper()
	p := receiptRE.FindStringSubmatch(m.ReceiptHandle)
	if p == nil {
		t.Fatalf("receipt %q is not {id}:{uuid}", m.ReceiptHandle)
	}
	if p[1] != strconv.FormatInt(m.ID, 10) {
		t.Fatalf("receipt %q does not start with the id %d", m.ReceiptHandle, m.ID)
	}
	if _, err := uuid.Parse(p[2]); err != nil {
		t.Fatalf("receipt %q: %v", m.ReceiptHandle, err)
	}
	var receipt *string
	var attempt int
	err := dbOf(q).R.QueryRowContext(ctx, "SELECT receipt_handle, attempt FROM messages WHERE id = ?", m.ID).Scan(&receipt, &attempt)
	if err != nil {
		t.Fatalf("read message %d: %v", m.ID, err)
	}
	if receipt == nil || *receipt != p[2] {
		t.Fatalf("receipt_handle column = %v; want the receipt's uuid %q", receipt, p[2])
	}
	if attempt != m.Attempt {
		t.Fatalf("attempt column = %d; message says %d", attempt, m.Attempt)
	}
}

// refuseSends makes q's writer refuse the insert of a message whose data is
// data: a TEMP trigger lives on this handle's own writer connection only, so
// the file's schema is unchanged and nobody else sees it.
func refuseSends(t *testing.T, q *queue.Queue, data string) (undo func()) {
	t.Helper()
	return refuse(t, q, "INSERT", "NEW", data)
}

// refuseAcks makes q's store abort the delete of the message whose data is
// data (an ack's), until undo.
func refuseAcks(t *testing.T, q *queue.Queue, data string) (undo func()) {
	t.Helper()
	return refuse(t, q, "DELETE", "OLD", data)
}

// refuse adds a temporary trigger that aborts every op (INSERT, DELETE) on
// the messages table whose row (NEW, OLD) has the payload data.
func refuse(t *testing.T, q *queue.Queue, op, row, data string) (undo func()) {
	t.Helper()
	db := dbOf(q)
	err := db.Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TRIGGER queuetest_fail BEFORE `+op+` ON main.messages
WHEN `+row+`.payload_data = '`+strings.ReplaceAll(data, "'", "''")+`' BEGIN SELECT RAISE(ABORT, 'queuetest: refused `+strings.ToLower(op)+`'); END`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		err := db.Write(ctx, func(tx *sqlstore.Tx) error {
			_, err := tx.Exec(ctx, `DROP TRIGGER temp.queuetest_fail`)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func openFile(t *testing.T, dir string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := openQueue(ctx, dir, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func openMemory(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := openQueueMemory(ctx, name, opts...)
	if err != nil {
		t.Fatalf("open memory %s: %v", name, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func checkIntegrity(t *testing.T, db *sql.DB) {
	t.Helper()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", res, err)
	}
}

func wantCode(t *testing.T, err error, code *bindings.Error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, code) {
		t.Fatalf("err = %v; want %s", err, code.Code)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

// ---- File mode ----

func TestFileModes(t *testing.T) {
	t.Parallel()
	for _, d := range []bindings.Durability{bindings.DurabilityNormal, bindings.DurabilityFull} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "a", "queue")
			q := openFile(t, dir, queue.WithDurability(d))
			if err := q.Send(ctx, queue.Text("x")); err != nil {
				t.Fatal(err)
			}
			if q.Path() != filepath.Join(dir, sqlitequeue.FileName) {
				t.Errorf("Path() = %q; want %q", q.Path(), filepath.Join(dir, sqlitequeue.FileName))
			}
			wantMode(t, dir, 0o700|os.ModeDir)
			wantMode(t, filepath.Join(dir, sqlitequeue.FileName), 0o600)
			wantMode(t, filepath.Join(dir, sqlitequeue.FileName+"-wal"), 0o600)
			wantMode(t, filepath.Join(dir, sqlitequeue.FileName+"-shm"), 0o600)
			var mode string
			if err := dbOf(q).R.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
			checkIntegrity(t, dbOf(q).R)
		})
	}
}

// wantMode stats path (a stat opens no descriptor on the live database).
func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode() & (os.ModeDir | os.ModePerm); got != want {
		t.Errorf("%s mode = %v; want %v", path, got, want)
	}
}

// rawDB opens path the way another program would: plain database/sql on
// the "sqlite" driver. Close it before a queue handle opens the file, and
// never read the file's bytes while it is open.
func rawDB(t *testing.T, path string, pragmas ...string) *sql.DB {
	t.Helper()
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)"
	for _, p := range pragmas {
		dsn += "&_pragma=" + p
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func closeDB(t *testing.T, db *sql.DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// dump is the logical content of a database: its schema and every row of
// every table, in a stable order.
func dump(t *testing.T, path string) string {
	t.Helper()
	db := rawDB(t, path, "query_only(1)")
	defer closeDB(t, db)
	var b strings.Builder
	rows, err := db.QueryContext(ctx, "SELECT type, name, tbl_name, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var typ, name, tbl, sqlText string
		if err := rows.Scan(&typ, &name, &tbl, &sqlText); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s %s: %s\n", typ, name, tbl, sqlText)
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	rows.Close()
	for _, tbl := range tables {
		r, err := db.QueryContext(ctx, fmt.Sprintf("SELECT * FROM %q ORDER BY 1", tbl))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := r.Columns()
		for r.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := r.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %v\n", tbl, vals)
		}
		r.Close()
	}
	return b.String()
}

func tableNames(t *testing.T, path string) string {
	t.Helper()
	db := rawDB(t, path, "query_only(1)")
	defer closeDB(t, db)
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return strings.Join(names, ",")
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantSameBytes checks that the file at path still holds before, byte for
// byte, and names the first differing offsets if not.
func wantSameBytes(t *testing.T, path string, before []byte) {
	t.Helper()
	after := readFile(t, path)
	if bytes.Equal(after, before) {
		return
	}
	var diff []string
	for i := 0; i < min(len(before), len(after)) && len(diff) < 8; i++ {
		if before[i] != after[i] {
			diff = append(diff, fmt.Sprintf("@%d: %d->%d", i, before[i], after[i]))
		}
	}
	t.Errorf("file bytes changed by the refused open: %d -> %d bytes, %s (bytes 18,19 are the header's journal mode: 1 rollback, 2 WAL)",
		len(before), len(after), strings.Join(diff, ", "))
}

// wantNoSiblings checks that no -wal/-shm/-journal file was left beside a
// refused file.
func wantNoSiblings(t *testing.T, path string) {
	t.Helper()
	for _, s := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(path + s); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s%s exists after a refused open (stat: %v)", path, s, err)
		}
	}
}

// TestForeignFormatUntouched: a store of another format is refused before
// any provider table is created, and left as it was.
func TestForeignFormatUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitequeue.FileName)
	db := rawDB(t, path)
	execAll(t, db,
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`INSERT INTO meta VALUES ('format', 'teststore.v2')`,
		`CREATE TABLE widgets (id INTEGER PRIMARY KEY, name TEXT)`,
		`INSERT INTO widgets (name) VALUES ('sprocket'), ('gear')`,
	)
	closeDB(t, db)
	beforeBytes, beforeDump := readFile(t, path), dump(t, path)

	_, err := openQueue(ctx, dir)
	wantCode(t, err, bindings.ErrBindingSetupFailed, "teststore.v2", sqlitequeue.Marker, path)

	if got := tableNames(t, path); got != "meta,sqlite_autoindex_meta_1,widgets" {
		t.Errorf("tables after the refused open: %s; want meta, widgets only (no messages)", got)
	}
	if after := dump(t, path); after != beforeDump {
		t.Errorf("content changed by the refused open:\nbefore:\n%s\nafter:\n%s", beforeDump, after)
	}
	wantSameBytes(t, path, beforeBytes)
	wantNoSiblings(t, path)
}

// TestChangedMarkerRefused: a localqueue store whose marker says a future
// version is refused, naming both versions.
func TestChangedMarkerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := openFile(t, dir)
	if err := q.Send(ctx, queue.Text("from v1")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sqlitequeue.FileName)
	db := rawDB(t, path)
	execAll(t, db, `UPDATE meta SET value = 'localqueue.v2' WHERE key = 'format'`)
	closeDB(t, db)
	before := dump(t, path)

	_, err := openQueue(ctx, dir)
	wantCode(t, err, bindings.ErrBindingSetupFailed, "localqueue.v2", sqlitequeue.Marker, path)
	_, err = openQueue(ctx, dir, queue.WithReadOnly())
	wantCode(t, err, bindings.ErrBindingSetupFailed, "localqueue.v2", sqlitequeue.Marker)
	if after := dump(t, path); after != before {
		t.Errorf("content changed by the refused open:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestNoMarkerRowRefused: a meta table without the format row is refused
// too (the marker is never written into an existing store).
func TestNoMarkerRowRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitequeue.FileName)
	db := rawDB(t, path)
	execAll(t, db,
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`,
		`INSERT INTO meta VALUES ('owner', 'someone')`)
	closeDB(t, db)
	before := dump(t, path)
	_, err := openQueue(ctx, dir)
	wantCode(t, err, bindings.ErrBindingSetupFailed, sqlitequeue.Marker, path)
	if after := dump(t, path); after != before {
		t.Errorf("content changed by the refused open:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestOtherProgramsDatabaseUntouched: a SQLite database of another program
// (tables, no meta) is refused and left as it was.
func TestOtherProgramsDatabaseUntouched(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitequeue.FileName)
	db := rawDB(t, path)
	execAll(t, db,
		`CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT)`,
		`INSERT INTO users (email) VALUES ('a@example.com')`)
	closeDB(t, db)
	beforeBytes, beforeDump := readFile(t, path), dump(t, path)

	_, err := openQueue(ctx, dir)
	wantCode(t, err, bindings.ErrBindingSetupFailed, path, sqlitequeue.Marker, "users")

	if got := tableNames(t, path); got != "users" {
		t.Errorf("tables after the refused open: %s; want users only", got)
	}
	if after := dump(t, path); after != beforeDump {
		t.Errorf("content changed by the refused open:\nbefore:\n%s\nafter:\n%s", beforeDump, after)
	}
	wantSameBytes(t, path, beforeBytes)
	wantNoSiblings(t, path)
}

func TestGarbageFileUntouched(t *testing.T) {
	t.Parallel()
	for name, content := range map[string][]byte{
		"text":            bytes.Repeat([]byte("this is not a database\n"), 200),
		"short":           []byte("hello"),
		"zeros-then-text": append(make([]byte, 100), []byte("not sqlite")...),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, sqlitequeue.FileName)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := openQueue(ctx, dir)
			wantCode(t, err, bindings.ErrBindingSetupFailed, path)
			wantSameBytes(t, path, content)
			wantMode(t, path, 0o644)
			wantNoSiblings(t, path)
		})
	}
}

func TestDirectoryAtFilePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitequeue.FileName)
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := openQueue(ctx, dir)
	wantCode(t, err, bindings.ErrBindingSetupFailed, path)
	if st, err := os.Stat(path); err != nil || !st.IsDir() {
		t.Errorf("the directory at %s was changed (stat: %v)", path, err)
	}
}

// ---- Receive cost ----

func explain(t *testing.T, q *queue.Queue, stmt string, args ...any) string {
	t.Helper()
	rows, err := dbOf(q).R.QueryContext(ctx, "EXPLAIN QUERY PLAN "+stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}

// ---- Memory mode ----

func TestMemoryGoneWhenLastHandleCloses(t *testing.T) {
	t.Parallel()
	name := memName("lifetime")
	a := openMemory(t, name)
	b := openMemory(t, name)
	if err := a.Send(ctx, queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	if a.Path() != "memory:"+name {
		t.Errorf("Path() = %q; want %q", a.Path(), "memory:"+name)
	}
	for _, q := range []*queue.Queue{a, b} {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c := openMemory(t, name)
	msgs, err := c.Receive(ctx, 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("after every handle closed: %d messages, %v; want an empty queue", len(msgs), err)
	}
	checkIntegrity(t, dbOf(c).R)
}

func TestMemorySharedWhileOpen(t *testing.T) {
	t.Parallel()
	name := memName("shared")
	a := openMemory(t, name)
	if err := a.Send(ctx, queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	b := openMemory(t, name)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	msgs, err := b.Receive(ctx, 10)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "x" {
		t.Fatalf("second handle got %d messages, %v; want the one sent on the first", len(msgs), err)
	}
	c := openMemory(t, name)
	if err := c.Ack(ctx, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := dbOf(b).R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&n); err != nil || n != 0 {
		t.Fatalf("COUNT(*) = %d, %v after an ack on a third handle; want 0", n, err)
	}
	checkIntegrity(t, dbOf(b).R)
}

func TestMemoryNamesIndependent(t *testing.T) {
	t.Parallel()
	a := openMemory(t, memName("indep-a"))
	b := openMemory(t, memName("indep-b"))
	if err := a.Send(ctx, queue.Text("only in a")); err != nil {
		t.Fatal(err)
	}
	if msgs, err := b.Receive(ctx, 10); err != nil || len(msgs) != 0 {
		t.Fatalf("b got %d messages, %v; want none (a different store)", len(msgs), err)
	}
	if msgs, err := a.Receive(ctx, 10); err != nil || len(msgs) != 1 {
		t.Fatalf("a got %d messages, %v; want 1", len(msgs), err)
	}
}

// ---- Interoperability with a spec-exact implementation ----

// The spec's DDL and statements, verbatim (localqueue.v1).
const (
	specMetaDDL = `CREATE TABLE IF NOT EXISTS meta (
key TEXT PRIMARY KEY,
value TEXT NOT NULL
);`
	specMarker      = `INSERT OR IGNORE INTO meta (key, value) VALUES ('format', 'localqueue.v1');`
	specMessagesDDL = `CREATE TABLE IF NOT EXISTS messages (
id INTEGER PRIMARY KEY AUTOINCREMENT,
payload_type TEXT NOT NULL, -- "json" | "text"
payload_data TEXT NOT NULL, -- serialized JSON for "json", raw string for "text"
enqueued_at INTEGER NOT NULL, -- unix epoch MILLISECONDS
visible_at INTEGER NOT NULL, -- unix epoch MILLISECONDS; due when <= now
attempt INTEGER NOT NULL DEFAULT 0, -- delivery count, incremented per receive
receipt_handle TEXT -- UUID of the CURRENT delivery, NULL if never delivered
);
CREATE INDEX IF NOT EXISTS idx_messages_visible ON messages (visible_at, enqueued_at, id);`
	specSend = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0);`
	specDue   = `SELECT id FROM messages WHERE visible_at <= ?1 ORDER BY enqueued_at, id LIMIT ?2`
	specClaim = `UPDATE messages
SET visible_at = ?1, attempt = attempt + 1,
receipt_handle = ?2 WHERE id = ?3
RETURNING payload_type, payload_data, attempt;`
	specAck = `DELETE FROM messages WHERE id = ?1 AND receipt_handle = ?2;`
	// The spec writes the nack's time as "?now", a placeholder SQLite does
	// not parse; a spec implementation binds it as a third parameter.
	specNack = `UPDATE messages SET visible_at = ?3 WHERE id = ?1 AND receipt_handle = ?2;`
)

type specMsg struct {
	id      int64
	typ     string
	data    string
	attempt int
	uuid    string
}

// specReceive is the spec's batch receive on a raw connection: one BEGIN
// IMMEDIATE transaction, select the due ids, claim each with a fresh UUID.
func specReceive(t *testing.T, db *sql.DB, now time.Time, lease time.Duration, n int) []specMsg {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	execConn(t, conn, "BEGIN IMMEDIATE")
	committed := false
	defer func() {
		if !committed {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	rows, err := conn.QueryContext(ctx, specDue, now.UnixMilli(), n)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	var out []specMsg
	for _, id := range ids {
		m := specMsg{id: id, uuid: uuid.NewString()}
		if err := conn.QueryRowContext(ctx, specClaim, now.Add(lease).UnixMilli(), m.uuid, id).Scan(&m.typ, &m.data, &m.attempt); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	execConn(t, conn, "COMMIT")
	committed = true
	return out
}

func execConn(t *testing.T, conn *sql.Conn, stmt string) {
	t.Helper()
	if _, err := conn.ExecContext(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// specAckRows runs the spec's ack and returns the deleted row count.
func specAckRows(t *testing.T, db *sql.DB, id int64, u string) int64 {
	t.Helper()
	res, err := db.ExecContext(ctx, specAck, id, u)
	if err != nil {
		t.Fatal(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSpecWrittenStoreOpens: a store created purely by the spec's SQL (as
// another implementation writes it) opens and works with localcloud.
func TestSpecWrittenStoreOpens(t *testing.T) {
	t.Parallel()
	for _, journal := range []string{"delete", "wal"} {
		t.Run(journal, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, sqlitequeue.FileName)
			base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			db := rawDB(t, path, "journal_mode("+journal+")")
			execAll(t, db, specMetaDDL, specMarker, specMessagesDDL)
			sends := []struct {
				typ, data string
				at        time.Time
			}{
				{"text", "first", base},
				{"json", `{"key":"value","num":42}`, base.Add(time.Millisecond)},
				{"text", "third, same millisecond as the json", base.Add(time.Millisecond)},
				{"text", "sent last but stamped earliest", base.Add(-time.Second)},
			}
			for _, s := range sends {
				if _, err := db.ExecContext(ctx, specSend, s.typ, s.data, s.at.UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			// One message in flight under the spec implementation's lease.
			claimed := specReceive(t, db, base.Add(time.Second), 30*time.Second, 1)
			if len(claimed) != 1 || claimed[0].data != "sent last but stamped earliest" || claimed[0].attempt != 1 {
				t.Fatalf("spec claim = %+v", claimed)
			}
			closeDB(t, db)

			c := clock.New(base.Add(2 * time.Second))
			q := openFile(t, dir, queue.WithClock(c.Now))
			msgs, err := q.Receive(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range msgs {
				got = append(got, string(m.Payload.Type)+":"+m.Payload.Data)
			}
			want := []string{"text:first", `json:{"key":"value","num":42}`, "text:third, same millisecond as the json"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("received %q; want %q", got, want)
			}
			// The spec implementation's receipt is "{id}:{uuid}" to localcloud.
			specReceipt := fmt.Sprintf("%d:%s", claimed[0].id, claimed[0].uuid)
			if err := q.Ack(ctx, specReceipt); err != nil {
				t.Fatalf("ack of the spec implementation's receipt: %v", err)
			}
			for _, m := range msgs {
				if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Send(ctx, queue.Text("from localcloud")); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := dbOf(q).R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&n); err != nil || n != 1 {
				t.Fatalf("COUNT(*) = %d, %v; want 1", n, err)
			}
			var mode string
			if err := dbOf(q).R.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
			checkIntegrity(t, dbOf(q).R)
		})
	}
}

// TestSpecReaderReadsLocalcloudStore: messages sent by localcloud are read,
// claimed and acked by the spec's statements alone, and localcloud honours
// the spec implementation's claims afterwards.
func TestSpecReaderReadsLocalcloudStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, sqlitequeue.FileName)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := clock.New(base)
	q := openFile(t, dir, queue.WithClock(c.Now))
	payloads := []queue.Payload{
		queue.Text("alpha"),
		queue.JSON(map[string]any{"key": "value", "num": 42}),
		queue.Text("gamma"),
		queue.Text("delta"),
	}
	for _, p := range payloads {
		if err := q.Send(ctx, p); err != nil {
			t.Fatal(err)
		}
		c.Advance(time.Millisecond)
	}
	// One localcloud delivery, left in flight.
	lc, err := q.Receive(ctx, 1)
	if err != nil || len(lc) != 1 {
		t.Fatalf("Receive = %d, %v", len(lc), err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	db := rawDB(t, path)
	var marker string
	if err := db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'format'`).Scan(&marker); err != nil || marker != "localqueue.v1" {
		t.Fatalf("marker = %q, %v; want localqueue.v1", marker, err)
	}
	// The spec DDL is a no-op on a localcloud store (same tables, IF NOT EXISTS).
	execAll(t, db, specMetaDDL, specMarker, specMessagesDDL)

	now := base.Add(time.Second)
	got := specReceive(t, db, now, 30*time.Second, 2)
	if len(got) != 2 || got[0].typ != "json" || got[0].data != `{"key":"value","num":42}` ||
		got[1].typ != "text" || got[1].data != "gamma" || got[0].attempt != 1 {
		t.Fatalf("spec receive = %+v; want the json message then gamma, attempt 1", got)
	}
	// localcloud's receipt is "{id}:{uuid}"; the spec reader splits it.
	idStr, u, _ := strings.Cut(lc[0].ReceiptHandle, ":")
	if idStr != fmt.Sprint(lc[0].ID) {
		t.Fatalf("receipt %q", lc[0].ReceiptHandle)
	}
	if n := specAckRows(t, db, lc[0].ID, u); n != 1 {
		t.Fatalf("spec ack of localcloud's receipt deleted %d rows; want 1", n)
	}
	if n := specAckRows(t, db, got[0].id, got[0].uuid); n != 1 {
		t.Fatalf("spec ack deleted %d rows; want 1", n)
	}
	if n := specAckRows(t, db, got[1].id, "00000000-0000-0000-0000-000000000000"); n != 0 {
		t.Fatalf("spec ack with a wrong uuid deleted %d rows; want 0", n)
	}
	// The spec's nack: visible again at once, attempt kept.
	res, err := db.ExecContext(ctx, specNack, got[1].id, got[1].uuid, now.UnixMilli())
	if err != nil {
		t.Fatalf("spec nack: %v", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("spec nack changed %d rows; want 1", n)
	}
	// Send through the spec too.
	if _, err := db.ExecContext(ctx, specSend, "text", "from the spec", now.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	closeDB(t, db)

	c.Set(now)
	q = openFile(t, dir, queue.WithClock(c.Now))
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range msgs {
		texts = append(texts, fmt.Sprintf("%s@%d", m.Payload.Data, m.Attempt))
	}
	if want := "gamma@2,delta@1,from the spec@1"; strings.Join(texts, ",") != want {
		t.Fatalf("localcloud received %s; want %s", strings.Join(texts, ","), want)
	}
	// The spec reader's stale uuid for gamma is stale to localcloud too.
	err = q.Ack(ctx, fmt.Sprintf("%d:%s", got[1].id, got[1].uuid))
	if !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("ack with the spec reader's old receipt: %v; want ErrStaleReceipt", err)
	}
	checkIntegrity(t, dbOf(q).R)
}

// TestNextVisibleUsesSpecIndex: the wake-up timer's query is one seek on
// idx_messages_visible, not a scan.
func TestNextVisibleUsesSpecIndex(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir())
	rows, err := dbOf(q).R.Query(`EXPLAIN QUERY PLAN SELECT MIN(visible_at) FROM messages WHERE visible_at > ?1`, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan += detail + "\n"
	}
	want := "SEARCH messages USING COVERING INDEX idx_messages_visible (visible_at>?)\n"
	if plan != want {
		t.Fatalf("plan:\n%s\nwant:\n%s", plan, want)
	}
}
