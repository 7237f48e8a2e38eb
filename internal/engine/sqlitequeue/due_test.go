package sqlitequeue_test

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// TestReceivePlanSkipsRowsNotDue (issue 22): the receive's select and the
// one-statement claim read the due fresh rows by a range of
// lc_messages_fresh, the due delayed and delivered rows by ranges of
// lc_messages_delayed_due and lc_messages_delivered, and walk nothing but
// the first 64 delayed rows in order (LIMIT 64): no scan
// of an index that holds the delayed or in-flight rows ahead of the due
// ones (before: SCAN lc_messages_order, 100 ms per receive behind 1,000,000
// delayed messages), and not the spec's index, which would sort every due
// row.
func TestReceivePlanSkipsRowsNotDue(t *testing.T) {
	t.Parallel()
	c := clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	dir := t.TempDir()
	q := openFile(t, dir, queue.WithClock(c.Now))
	// Delayed messages, then due ones, some in flight: the plans are made
	// on connections opened with these rows in place.
	batch := make([]queue.Payload, queue.MaxSendBatch)
	for i := range batch {
		batch[i] = queue.Text(fmt.Sprintf("m%d", i))
	}
	for range 20 {
		if err := q.SendBatch(ctx, batch, queue.WithDelay(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if err := q.SendBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Millisecond)
	if _, err := q.Receive(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openFile(t, dir, queue.WithClock(c.Now))
	now := c.Now().UnixMilli()
	plans := map[string]string{
		"claim one": explain(t, q, sqlitequeue.StmtClaimOne, int64(0), "00000000-0000-0000-0000-000000000000", now),
		"probe":     explain(t, q, `SELECT 1 FROM messages WHERE visible_at <= ?1 LIMIT 1`, now),
	}
	for _, limit := range []int{1, queue.MaxReceiveBatch} { // SQLite plans with the bound LIMIT
		plans[fmt.Sprintf("select, limit %d", limit)] = explain(t, q, sqlitequeue.StmtDue, now, limit)
	}
	for name, p := range plans {
		t.Logf("%s: %s", name, p)
		if name == "probe" { // LIMIT 1 of a range: one row read
			if !strings.Contains(p, "SEARCH messages USING COVERING INDEX idx_messages_visible (visible_at<?)") {
				t.Errorf("probe plan %q; want a range of the spec's index", p)
			}
			continue
		}
		for _, want := range []string{
			"SEARCH messages USING COVERING INDEX lc_messages_fresh (enqueued_at<?)",
			"SEARCH messages USING COVERING INDEX lc_messages_delayed_due (visible_at<?)",
			"SEARCH messages USING COVERING INDEX lc_messages_delivered (visible_at<?)",
		} {
			if !strings.Contains(p, want) {
				t.Errorf("%s plan %q; want %q", name, p, want)
			}
		}
		// The one walk in order is of the delayed rows, under LIMIT 64.
		for _, step := range strings.Split(p, "; ") {
			if strings.HasPrefix(step, "SCAN messages") && step != "SCAN messages USING COVERING INDEX lc_messages_delayed" {
				t.Errorf("%s plan scans %q; want only ranges, and the walk of lc_messages_delayed", name, step)
			}
		}
		if strings.Count(p, "SCAN messages") != 1 || !strings.Contains(sqlitequeue.StmtDue, "ORDER BY enqueued_at, id LIMIT 64)") {
			t.Errorf("%s plan %q; want exactly one walk of lc_messages_delayed, the one under LIMIT 64", name, p)
		}
		if strings.Contains(p, "idx_messages_visible") || strings.Contains(p, "lc_messages_order") {
			t.Errorf("%s plan %q uses the spec's index or the retired lc_messages_order", name, p)
		}
	}
}

// TestDueSelectMatchesSpec: on rows another program wrote (REAL, TEXT,
// BLOB and NULL times and attempts, in a table without the spec's NOT
// NULLs), the
// receive's select returns exactly the spec's select's ids in its order,
// and the one-statement claim claims the first of them that it can return,
// at every now and batch size, with delayed rows fewer and more than the
// 64 the select walks in order.
func TestDueSelectMatchesSpec(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := foreignWriter(t, dir)
	if _, err := db.Exec(`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('format', 'localqueue.v1');
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, payload_type TEXT, payload_data TEXT,
enqueued_at INTEGER, visible_at INTEGER, attempt INTEGER DEFAULT 0, receipt_handle TEXT)`); err != nil {
		t.Fatal(err)
	}
	q, err := openQueue(ctx, dir) // creates localcloud's indexes
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const base = 1_767_225_600_000
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 22))
	value := func() any {
		switch r := rng.IntN(20); {
		case r < 14:
			return int64(base + rng.IntN(9) - 4)
		case r < 16:
			return float64(base+rng.IntN(9)-4) + 0.5
		case r == 16:
			return []string{"x", "12", ""}[rng.IntN(3)]
		case r == 17:
			return []byte{1}
		default:
			return nil
		}
	}
	for round := range 40 {
		if _, err := db.Exec(`DELETE FROM messages`); err != nil {
			t.Fatal(err)
		}
		rows := rng.IntN(300)
		for range rows {
			enq := value()
			vis := enq
			if rng.IntN(2) == 0 {
				vis = value()
			}
			attempt := []any{int64(0), int64(0), int64(0), int64(1), int64(2), nil, 0.0, "0", "x"}[rng.IntN(9)]
			if _, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES ('text', 'p', ?1, ?2, ?3)`, enq, vis, attempt); err != nil {
				t.Fatal(err)
			}
		}
		for now := int64(base - 5); now <= base+5; now++ {
			for _, n := range []int{1, 2, 3, 10} {
				want := ids(t, db, specDue, now, n)
				got := ids(t, db, sqlitequeue.StmtDue, now, n)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d (%d rows), now %d, n %d: select gave %v, the spec's %v", round, rows, now, n, got, want)
				}
			}
			// The first due row with a numeric enqueued_at, claimed unless
			// its attempt is NULL (then stmtOddDue sends Receive to the
			// batch claim, which skips it).
			want := ids(t, db, `SELECT id FROM messages WHERE id = (SELECT id FROM messages WHERE visible_at <= ?1 AND enqueued_at < ''
ORDER BY enqueued_at, id LIMIT 1) AND attempt IS NOT NULL`, now)
			got := claimOne(t, db, now)
			if !slices.Equal(got, want) {
				t.Fatalf("round %d (%d rows), now %d: claim one claimed %v, want %v", round, rows, now, got, want)
			}
		}
	}
}

func ids(t *testing.T, db *sql.DB, stmt string, args ...any) []int64 {
	t.Helper()
	rows, err := db.Query(stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		var rest any
		dest := []any{&id}
		if cols, _ := rows.Columns(); len(cols) == 2 {
			dest = append(dest, &rest)
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claimOne runs the one-statement claim at now in a transaction it rolls
// back and returns the id it claimed.
func claimOne(t *testing.T, db *sql.DB, now int64) []int64 {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.Query(sqlitequeue.StmtClaimOne, now+1000, "00000000-0000-4000-8000-000000000000", now)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		var enq, typ, data, attempt, attrs any
		if err := rows.Scan(&id, &enq, &typ, &data, &attempt, &attrs); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRetiredOrderIndexDropped: a store an earlier version made (with
// lc_messages_order, without the due select's indexes) opens read-only and
// is checked without a problem, and its next read-write open drops the old
// index and creates the new ones; the messages are delivered in order.
func TestRetiredOrderIndexDropped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	q := openFile(t, dir)
	for i := range 5 {
		if err := q.Send(ctx, queue.Text(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	db := foreignWriter(t, dir)
	if _, err := db.Exec(`DROP INDEX lc_messages_fresh; DROP INDEX lc_messages_delayed; DROP INDEX lc_messages_delayed_due; DROP INDEX lc_messages_delivered;
CREATE INDEX lc_messages_order ON messages (enqueued_at, id, visible_at)`); err != nil {
		t.Fatal(err)
	}
	ro, err := openQueue(ctx, dir, queue.WithReadOnly())
	if err != nil {
		t.Fatalf("read-only open of a store with the retired index: %v", err)
	}
	if _, err := ro.Peek(ctx, 10); err != nil {
		t.Fatal(err)
	}
	v, err := sqlstore.Verify(ctx, dbOf(ro).Path, sqlitequeue.Format())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Problems) != 0 || !strings.Contains(strings.Join(v.Notes, "\n"), "index lc_messages_order of an earlier version") {
		t.Errorf("check of a store with the retired index: problems %v, notes %v; want none, and a note about it", v.Problems, v.Notes)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	q = openFile(t, dir)
	var names []string
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'lc\_messages\_%' ESCAPE '\' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	if want := []string{"lc_messages_delayed", "lc_messages_delayed_due", "lc_messages_delivered", "lc_messages_fresh"}; !slices.Equal(names, want) {
		t.Errorf("indexes after the read-write open %v; want %v", names, want)
	}
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Payload.Data)
	}
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(got, want) {
		t.Errorf("received %v; want %v", got, want)
	}
}
