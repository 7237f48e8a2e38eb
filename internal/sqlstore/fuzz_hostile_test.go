package sqlstore_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
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

// FuzzHostileStore builds a small store file from the fuzz input, as a
// hostile or careless program could leave it (triggers, views, foreign
// indexes and tables, odd types, NULLs, REAL timestamps, bad JSON, unknown
// payload types, crafted lc_* rows), then opens it with queue.Open or
// kv.Open and runs a few operations. It asserts: no panic; nothing written
// outside the fuzz root (the store and its dead-letter queue; a sibling
// directory and the working directory are watched); every error is a
// *bindings.Error, and a refusal that says the files were left untouched
// left them so; and what succeeded behaved correctly (a receive claims
// exactly the rows it returns, an ack removes its message, a deleted key
// stays deleted, meta is never changed, a message with a pending move ends
// in its source or in the dead-letter queue the policy names).
//
// The input drives genStore: its first byte holds flags, then each op is a
// byte naming one of hostileOps and the bytes of its parameters.
func FuzzHostileStore(f *testing.F) {
	f.Add([]byte{0})                                             // an empty spec-exact queue
	f.Add([]byte{flagKV})                                        // an empty spec-exact kv store
	f.Add([]byte{flagExtra, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0}) // one message
	f.Fuzz(func(t *testing.T, in []byte) {
		runHostile(t, in)
	})
}

// Flags of the first input byte.
const (
	flagKV         = 1 << iota // a localkv.v1 store, else localqueue.v1
	flagDeadLetter             // open the queue with a dead-letter policy
	flagExtra                  // the queue file has localcloud's own objects
	flagWAL                    // leave the file in WAL mode
)

// genInput reads the fuzz input; past its end every byte is 0.
type genInput struct{ b []byte }

func (g *genInput) more() bool { return len(g.b) > 0 }

func (g *genInput) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *genInput) pick(n int) int { return int(g.byte()) % n }

func (g *genInput) str() string {
	n := min(g.pick(32), len(g.b))
	s := string(g.b[:n])
	g.b = g.b[n:]
	return s
}

// hostileEnv is where one fuzz input runs.
type hostileEnv struct {
	root, store, dlq, sibling string
	now                       int64
}

const fuzzUUID = "0b0e7e1c-5b2e-4c55-9d0f-3b5b9d9f6a11"

// timeValue returns one way a foreign writer may store a time.
func (e hostileEnv) timeValue(c int) any {
	return []any{e.now, float64(e.now) + 0.5, "123abc", []byte{0, 0xff}, int64(-5), int64(9e18)}[c]
}

// hostileOps are the generator's statements; each takes its parameters
// from g and returns SQL and arguments. Statements that do not apply to
// the store (a trigger on messages in a kv store) simply fail and are
// skipped.
var hostileOps = []func(e hostileEnv, g *genInput) (string, []any){
	func(e hostileEnv, g *genInput) (string, []any) { // a message row
		ptype := []any{"json", "text", "bogus", ""}[g.pick(4)]
		data := g.str()
		enq, vis := e.timeValue(g.pick(6)), e.timeValue(g.pick(6))
		att := []any{0, 1, 5, -1, "x", 2.5}[g.pick(6)]
		rh := []any{nil, fuzzUUID, "garbage", 7}[g.pick(4)]
		return `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle) VALUES (?, ?, ?, ?, ?, ?)`,
			[]any{ptype, data, enq, vis, att, rh}
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a kv row
		key := g.str()
		var val any
		switch g.pick(4) {
		case 0:
			val = []byte(g.str())
		case 1:
			val = g.str()
		case 2:
			val = 42
		default:
			val = 1.5
		}
		exp := []any{nil, int64(1), e.now + 3600e3, float64(e.now) + 3600e3 + 0.5, "soon"}[g.pick(5)]
		return `INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)`, []any{key, val, exp}
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a trigger
		body := []string{
			`ackloop%d AFTER DELETE ON messages BEGIN INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES (old.payload_type, old.payload_data, old.enqueued_at, 0, 0); END`,
			`undelete%d AFTER DELETE ON kv BEGIN INSERT INTO kv (key, value, expires_at) VALUES (old.key, old.value, old.expires_at); END`,
			`leak%d AFTER INSERT ON kv BEGIN INSERT OR REPLACE INTO meta (key, value) VALUES ('leak-' || new.key, CAST(new.value AS TEXT)); END`,
			`noclaim%d BEFORE UPDATE ON messages BEGIN SELECT RAISE(IGNORE); END`,
			`flip%d AFTER INSERT ON messages BEGIN UPDATE meta SET value = 'other.v9' WHERE key = 'format'; END`,
			`lc_wipe%d AFTER INSERT ON lc_moves BEGIN DELETE FROM messages; END`,
		}[g.pick(6)]
		return "CREATE TRIGGER " + fmt.Sprintf(body, g.byte()), nil
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a view
		return []string{`CREATE VIEW due AS SELECT * FROM messages`, `CREATE VIEW live AS SELECT * FROM kv`, `CREATE VIEW lc_view AS SELECT 1`}[g.pick(3)], nil
	},
	func(e hostileEnv, g *genInput) (string, []any) { // an index
		return []string{
			`CREATE UNIQUE INDEX one_payload ON messages (payload_data)`,
			`CREATE INDEX by_value ON kv (value)`,
			`CREATE INDEX by_json ON messages (json_extract(payload_data, '$.a'))`,
			`CREATE INDEX lc_by_attempt ON messages (attempt)`,
		}[g.pick(4)], nil
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a table
		return []string{`CREATE TABLE audit (x)`, `CREATE TABLE lc_future (x)`, `CREATE TABLE messages2 (x)`}[g.pick(3)], nil
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a pending move
		id := []any{1, 2, 3, 999, -1}[g.pick(5)]
		dest := []string{e.sibling, "evil", "memory:void", e.dlq, "", e.store}[g.pick(6)]
		if dest == "" {
			dest = g.str()
		}
		kind := []string{"dead-letter", "redrive", "bogus"}[g.pick(3)]
		attempts := int(g.byte())
		started := []any{int64(0), e.now, float64(e.now) + 0.5}[g.pick(3)]
		return `INSERT OR REPLACE INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at) VALUES (?, ?, ?, ?, '', ?, NULL, ?)`,
			[]any{id, fuzzUUID, dest, kind, attempts, started}
	},
	func(e hostileEnv, g *genInput) (string, []any) { // an arrival record
		if g.pick(2) == 0 {
			return `INSERT OR REPLACE INTO lc_dead_letters (origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, moved_at, dlq_message_id) VALUES (?, ?, '', 1, NULL, ?, ?, ?)`,
				[]any{[]string{e.store, e.sibling, "memory:void"}[g.pick(3)], int(g.byte()), e.timeValue(g.pick(6)), e.now, []any{nil, 1, 2, 999}[g.pick(4)]}
		}
		return `INSERT OR REPLACE INTO lc_redriven (dlq_store, dlq_id, message_id, redriven_at) VALUES (?, ?, ?, ?)`,
			[]any{[]string{e.dlq, e.sibling}[g.pick(2)], int(g.byte()), []any{nil, 1, 999}[g.pick(3)], e.timeValue(g.pick(6))}
	},
	func(e hostileEnv, g *genInput) (string, []any) { // meta rows
		switch g.pick(3) {
		case 0:
			return `INSERT OR REPLACE INTO meta (key, value) VALUES ('x', ?)`, []any{g.str()}
		case 1:
			return `UPDATE meta SET value = ? WHERE key = 'format'`, []any{g.str()}
		default:
			return `DELETE FROM meta WHERE key = 'format'`, nil
		}
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a dropped index
		return []string{`DROP INDEX idx_messages_visible`, `DROP INDEX lc_messages_delayed`}[g.pick(2)], nil
	},
	func(e hostileEnv, g *genInput) (string, []any) { // a changed table
		return []string{`ALTER TABLE messages ADD COLUMN note TEXT`, `ALTER TABLE kv ADD COLUMN note TEXT DEFAULT 'x'`, `ALTER TABLE meta ADD COLUMN note TEXT`}[g.pick(3)], nil
	},
}

// genStore builds the store file of in and returns the flags.
func genStore(t *testing.T, e hostileEnv, in []byte) byte {
	t.Helper()
	g := &genInput{b: in}
	flags := g.byte()
	f := sqlitequeue.Format()
	if flags&flagKV != 0 {
		f = sqlitekv.Format()
	}
	if err := os.MkdirAll(e.store, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.store, f.File)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ddl := sqlstore.MetaDDL + "\n" + f.Schema
	if flags&flagExtra != 0 {
		ddl += "\n" + f.Extra
	}
	for _, st := range []string{ddl, `INSERT INTO meta (key, value) VALUES ('format', '` + f.Marker + `')`} {
		if _, err := db.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	for n := 0; g.more() && n < 24; n++ {
		op := hostileOps[g.pick(len(hostileOps))]
		st, args := op(e, g)
		_, _ = db.ExecContext(ctx, st, args...) // one that does not apply is skipped
	}
	if flags&flagWAL != 0 {
		_, _ = db.ExecContext(ctx, "PRAGMA journal_mode=WAL")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return flags
}

// tree maps every file under dir (not following symlinks) to its size and
// modification time.
func tree(t *testing.T, dir string, recursive bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != dir && !recursive {
			out[p] = "dir"
			return filepath.SkipDir
		}
		if fi, err := d.Info(); err == nil {
			out[p] = fmt.Sprintf("%d %s %s", fi.Size(), fi.ModTime().Format(time.RFC3339Nano), fi.Mode())
		}
		return nil
	})
	return out
}

// rawDB opens the database at path read-only through SQLite (never a plain
// descriptor, so it is safe beside an open handle).
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(5000)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}).String())
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// rawRows returns the rows of query as strings, or nil if it fails (the
// table may not exist).
func rawRows(t *testing.T, path, query string) []string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	db := rawDB(t, path)
	defer db.Close()
	rows, err := db.Query(query)
	if err != nil {
		return nil
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil
		}
		var parts []string
		for _, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			parts = append(parts, fmt.Sprintf("%v", v))
		}
		out = append(out, strings.Join(parts, "|"))
	}
	return out
}

// wantBindingsErr fails unless err is nil or a *bindings.Error.
func wantBindingsErr(t *testing.T, what string, err error) {
	t.Helper()
	var be *bindings.Error
	if err != nil && !errors.As(err, &be) {
		t.Fatalf("%s: %T %v; want nil or a *bindings.Error", what, err, err)
	}
}

func runHostile(t *testing.T, in []byte) {
	root := t.TempDir()
	e := hostileEnv{root: root, store: filepath.Join(root, "store"), dlq: filepath.Join(root, "dlq"),
		sibling: t.TempDir(), now: time.Now().UnixMilli()}
	flags := genStore(t, e, in)
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	siblingBefore, cwdBefore := tree(t, e.sibling, true), tree(t, cwd, false)
	defer func() {
		if got := tree(t, e.sibling, true); fmt.Sprint(got) != fmt.Sprint(siblingBefore) {
			t.Errorf("a file outside the store was written: sibling directory %v, was %v", got, siblingBefore)
		}
		if got := tree(t, cwd, false); fmt.Sprint(got) != fmt.Sprint(cwdBefore) {
			t.Errorf("a file in the working directory was written: %v, was %v", keys(got), keys(cwdBefore))
		}
	}()
	if flags&flagKV != 0 {
		fuzzKV(t, e)
	} else {
		fuzzQueue(t, e, flags&flagDeadLetter != 0)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// refusedUntouched checks a failed open: a *bindings.Error, and if it says
// the files were left untouched, they were: the database file byte for
// byte, and no -wal with data appeared (SQLite's -shm index and an empty
// -wal hold no data; a read of a WAL database may create or rewrite them).
func refusedUntouched(t *testing.T, err error, dir string, before map[string][32]byte) {
	t.Helper()
	wantBindingsErr(t, "open", err)
	if !strings.Contains(err.Error(), "left untouched") {
		return
	}
	after := testutil.StoreHashes(t, dir)
	for _, m := range []map[string][32]byte{before, after} {
		for n, h := range m {
			if strings.HasSuffix(n, "-shm") || strings.HasSuffix(n, "-wal") && h == sha256.Sum256(nil) {
				delete(m, n)
			}
		}
	}
	for n, h := range before {
		if after[n] != h {
			t.Fatalf("open said %q, but %s changed", err, n)
		}
	}
	for n := range after {
		if _, ok := before[n]; !ok {
			t.Fatalf("open said %q, but %s appeared", err, n)
		}
	}
}

func fuzzKV(t *testing.T, e hostileEnv) {
	ctx := t.Context()
	path := filepath.Join(e.store, sqlitekv.FileName)
	metaBefore := rawRows(t, path, `SELECT key, value FROM meta ORDER BY key`)
	before := testutil.StoreHashes(t, e.store)
	s, err := kv.Open(ctx, e.store)
	if err != nil {
		refusedUntouched(t, err, e.store, before)
		return
	}
	defer func() {
		if err := s.Close(); err != nil {
			wantBindingsErr(t, "close", err)
		}
		if got := rawRows(t, path, `SELECT key, value FROM meta ORDER BY key`); fmt.Sprint(got) != fmt.Sprint(metaBefore) {
			t.Errorf("meta changed: %q, was %q", got, metaBefore)
		}
	}()
	page, err := s.Scan(ctx, "", 100, "")
	wantBindingsErr(t, "scan", err)
	for _, it := range page.Items {
		_, _, err := s.Get(ctx, it.Key)
		wantBindingsErr(t, "get "+it.Key, err)
	}
	for _, k := range rawRows(t, path, `SELECT key FROM kv LIMIT 20`) {
		_, _, err := s.Get(ctx, k)
		wantBindingsErr(t, fmt.Sprintf("get %q", k), err)
	}
	if _, err := s.Put(ctx, "fuzz-key", []byte("v")); err != nil {
		wantBindingsErr(t, "put", err)
		return
	}
	if v, ok, err := s.Get(ctx, "fuzz-key"); err != nil || !ok || string(v) != "v" {
		t.Fatalf("get after put: %q, %v, %v; want v", v, ok, err)
	}
	if err := s.Delete(ctx, "fuzz-key"); err != nil {
		wantBindingsErr(t, "delete", err)
		return
	}
	if v, ok, err := s.Get(ctx, "fuzz-key"); err != nil || ok {
		t.Fatalf("get after delete: %q, %v, %v; want absent (deleted stays deleted)", v, ok, err)
	}
	if ok, err := s.Exists(ctx, "fuzz-key"); err != nil || ok {
		t.Fatalf("exists after delete: %v, %v; want false", ok, err)
	}
}

// receipts maps each message id to its receipt_handle, read raw.
func receipts(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range rawRows(t, path, `SELECT id, receipt_handle FROM messages`) {
		id, rh, _ := strings.Cut(r, "|")
		out[id] = rh
	}
	return out
}

func fuzzQueue(t *testing.T, e hostileEnv, deadLetter bool) {
	ctx := t.Context()
	path := filepath.Join(e.store, sqlitequeue.FileName)
	dlqPath := filepath.Join(e.dlq, sqlitequeue.FileName)
	metaBefore := rawRows(t, path, `SELECT key, value FROM meta ORDER BY key`)
	// Messages with a pending move when the file was built.
	// Each row is "id|token": a move is confirmed by its own token.
	moving := rawRows(t, path, `SELECT m.id, mv.token FROM messages m JOIN lc_moves mv ON mv.message_id = m.id`)
	before := testutil.StoreHashes(t, e.store)
	var opts []queue.Option
	if deadLetter {
		opts = append(opts, queue.WithDeadLetter(2, e.dlq))
	}
	q, err := queue.Open(ctx, e.store, opts...)
	if err != nil {
		refusedUntouched(t, err, e.store, before)
		return
	}
	ackedIDs := map[string]bool{}
	closed := false
	closeQ := func() {
		if closed {
			return
		}
		closed = true
		if err := q.Close(); err != nil {
			wantBindingsErr(t, "close", err)
		}
	}
	defer func() {
		closeQ()
		if got := rawRows(t, path, `SELECT key, value FROM meta ORDER BY key`); fmt.Sprint(got) != fmt.Sprint(metaBefore) {
			t.Errorf("meta changed: %q, was %q", got, metaBefore)
		}
		// A message that was being moved is in its source or arrived in
		// the dead-letter queue the policy names; nowhere else.
		left := map[string]bool{}
		for _, id := range rawRows(t, path, `SELECT id FROM messages`) {
			left[id] = true
		}
		arrived := map[string]bool{}
		if deadLetter {
			// The arrival record of this very move (its token), not of
			// any earlier message that had the same id.
			for _, r := range rawRows(t, dlqPath, `SELECT move_token FROM lc_arrivals WHERE kind = 'dead-letter' AND origin_store = '`+strings.ReplaceAll(e.store, "'", "''")+`'`) {
				arrived[r] = true
			}
		}
		for _, row := range moving {
			id, token, _ := strings.Cut(row, "|")
			if !left[id] && !arrived[token] && !ackedIDs[id] {
				t.Errorf("message %s with a pending move is neither in its queue nor in the dead-letter queue %s", id, e.dlq)
			}
		}
	}()

	// Once a store opened, its rows are served: a row that cannot be
	// decoded is delivered as-is or dead-lettered, never an error that
	// blocks the rows behind it.
	if _, err := q.Peek(ctx, 100); err != nil {
		t.Errorf("peek: %v", err)
	}
	if _, err := q.Stats(ctx); err != nil {
		t.Errorf("stats: %v", err)
	}

	beforeRecv := receipts(t, path)
	msgs, err := q.Receive(ctx, 10, queue.ReceiveVisibility(time.Minute))
	wantBindingsErr(t, "receive", err)
	if err != nil {
		t.Errorf("receive: %v", err)
	}
	afterRecv := receipts(t, path)
	tokens := map[string]bool{}
	for _, r := range rawRows(t, path, `SELECT token FROM lc_moves`) {
		tokens[r] = true
	}
	returned := map[string]bool{}
	for _, m := range msgs {
		id, u, _ := strings.Cut(m.ReceiptHandle, ":")
		returned[id] = true
		if afterRecv[id] != u {
			t.Errorf("received message %s has receipt %q in the file, want %q", id, afterRecv[id], u)
		}
	}
	for id, rh := range afterRecv {
		old, was := beforeRecv[id]
		if was && old != rh && !returned[id] && !tokens[rh] {
			t.Errorf("receive claimed message %s (receipt %q -> %q) but did not return it (err %v)", id, old, rh, err)
		}
	}

	total := len(afterRecv)
	acked := 0
	for _, m := range msgs {
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Errorf("ack of a fresh receipt %s: %v", m.ReceiptHandle, err)
			continue
		}
		acked++
		ackedIDs[strings.Split(m.ReceiptHandle, ":")[0]] = true
	}
	if got := len(receipts(t, path)); acked > 0 && got != total-acked {
		t.Errorf("after %d acks the queue holds %d rows, want %d (acked messages came back?)", acked, got, total-acked)
	}
	if err := q.Send(ctx, queue.Text("fuzz")); err != nil {
		t.Errorf("send: %v", err)
	}
	if _, err := q.Peek(ctx, 100); err != nil {
		t.Errorf("peek after send: %v", err)
	}
	closeQ()
}
