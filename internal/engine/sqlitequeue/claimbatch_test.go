package sqlitequeue_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// TestClaimBatchOneStatement: a batch claim (one statement for its ids)
// returns the due messages in order, each with attempt 1 and a receipt of
// its own whose UUID is the row's receipt_handle, and leaves a row it
// cannot return (a NULL payload another program wrote, in a table made
// without the spec's NOT NULLs) untouched between them.
func TestClaimBatchOneStatement(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitequeue.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('format', 'localqueue.v1');
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, payload_type TEXT, payload_data TEXT,
enqueued_at INTEGER, visible_at INTEGER, attempt INTEGER DEFAULT 0, receipt_handle TEXT)`); err != nil {
		t.Fatal(err)
	}
	q := openFile(t, dir)
	now := time.Now().UnixMilli()
	ids := insertRows(t, db,
		oddRow{typ: "text", data: "a", enq: now - 4000, vis: now - 4000},
		oddRow{typ: "text", data: nil, enq: now - 3000, vis: now - 3000},
		oddRow{typ: "text", data: "b", enq: now - 2000, vis: now - 2000},
		oddRow{typ: "text", data: "c", enq: now - 1000, vis: now - 1000},
	)
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	seen := map[string]bool{}
	for _, m := range msgs {
		got = append(got, m.Payload.Data)
		id, u, ok := strings.Cut(m.ReceiptHandle, ":")
		if !ok || seen[u] || m.Attempt != 1 {
			t.Fatalf("message %d: receipt %q, attempt %d; want a receipt of its own, attempt 1", m.ID, m.ReceiptHandle, m.Attempt)
		}
		seen[u] = true
		var stored string
		if err := db.QueryRow(`SELECT receipt_handle FROM messages WHERE id = ?1`, m.ID).Scan(&stored); err != nil || stored != u || id == "" {
			t.Fatalf("message %d: stored receipt_handle %q, %v; want %q", m.ID, stored, err, u)
		}
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("delivered %q, want a,b,c in order", got)
	}
	if left := attempts(t, db); left[ids[1]] != "0 NULL" {
		t.Fatalf("the NULL payload row: attempt and receipt %q, want it untouched (0 NULL)", left[ids[1]])
	}
	for _, m := range msgs {
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	if left := attempts(t, db); len(left) != 1 {
		t.Fatalf("after the acks: %v, want only the NULL payload row", left)
	}
}

// TestClaimBatchFindsRowsByKey: the one-statement claim of a batch reaches
// its rows through the primary key, never by reading the table.
func TestClaimBatchFindsRowsByKey(t *testing.T) {
	t.Parallel()
	q := openFile(t, t.TempDir())
	for range 3 {
		if err := q.Send(ctx, queue.Text("m")); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{1, 10, 37} {
		args := []any{int64(1)}
		for i := range n {
			args = append(args, int64(i+1), "00000000-0000-4000-8000-000000000000")
		}
		p := explain(t, q, sqlitequeue.StmtClaimBatch(n), args...)
		t.Logf("claim of %d: %s", n, p)
		if strings.Contains(p, "SCAN messages") || !strings.Contains(p, "SEARCH messages USING INTEGER PRIMARY KEY (rowid=?)") {
			t.Errorf("claim of %d: plan %q; want the rows found by their key", n, p)
		}
	}
}
