package sqlitequeue_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// TestLegacyArrivalRecordsMigrate: a dead-letter queue written by an older
// localcloud keeps its records in lc_dead_letters, keyed by (origin, id).
// A read-write open moves them into lc_arrivals in one transaction; a move
// the older version began and whose step 2 ran (its record is in the DLQ,
// the intent still in the source) is finished without a second copy; and a
// message that later gets the same id (the source restored) still arrives.
func TestLegacyArrivalRecordsMigrate(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq")
	now := time.Now().UnixMilli()
	// Both stores exist with localcloud's tables.
	openFile(t, src).Close()
	openFile(t, dlq).Close()
	srcDB := rawDB(t, filepath.Join(src, sqlitequeue.FileName))
	dlqDB := rawDB(t, filepath.Join(dlq, sqlitequeue.FileName))
	// The source: message 7 hidden mid-move (step 1 by the older version).
	execAll(t, srcDB,
		`INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', 6)`,
		fmt.Sprintf(`INSERT INTO messages (id, payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle)
VALUES (7, 'text', 'moved-once', %d, %d, 1, '11111111-1111-4111-8111-111111111111')`, now-5000, now+3600000),
		fmt.Sprintf(`INSERT INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at)
VALUES (7, '11111111-1111-4111-8111-111111111111', '%s', 'dead-letter', 'orders', 1, NULL, %d)`, dlq, now-2000))
	// The DLQ: step 2 of that move ran (record and copy), and an earlier
	// message 7 of the same source died long before (a restore rewound the
	// source's ids since).
	execAll(t, dlqDB,
		`INSERT INTO messages (id, payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES (1, 'text', 'moved-once', 0, 0, 0)`,
		fmt.Sprintf(`INSERT INTO lc_dead_letters (origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, moved_at, dlq_message_id)
VALUES ('%s', 7, 'orders', 1, NULL, %d, %d, 1)`, src, now-5000, now-1000),
		fmt.Sprintf(`INSERT INTO lc_redriven (dlq_store, dlq_id, message_id, redriven_at) VALUES ('%s', 3, 9, %d)`, base, now-9000))
	closeDB(t, srcDB)
	closeDB(t, dlqDB)

	// The source opens with the policy: recovery finishes the move.
	openFile(t, src, queue.WithDeadLetter(1, dlq)).Close()
	st := readDLState(t, src, dlq)
	if len(st.source) != 0 || st.dlqMsgs != 1 || st.intents != 0 {
		t.Fatalf("after recovery: %d in the source, %d in the DLQ, %d intents; want 0, 1, 0", len(st.source), st.dlqMsgs, st.intents)
	}
	dlqDB = rawDB(t, filepath.Join(dlq, sqlitequeue.FileName))
	var legacy, arrivals, tokened int
	if err := dlqDB.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM lc_dead_letters) + (SELECT COUNT(*) FROM lc_redriven),
(SELECT COUNT(*) FROM lc_arrivals), (SELECT COUNT(*) FROM lc_arrivals WHERE move_token = '11111111-1111-4111-8111-111111111111')`).
		Scan(&legacy, &arrivals, &tokened); err != nil {
		t.Fatal(err)
	}
	closeDB(t, dlqDB)
	if legacy != 0 || arrivals != 2 || tokened != 1 {
		t.Fatalf("after the migration: %d legacy rows, %d arrival records, %d with the move's token; want 0, 2, 1", legacy, arrivals, tokened)
	}

	// The source starts over at id 7 (as after a restore): the next
	// message 7 that dies arrives, though a record of origin id 7 exists.
	srcDB = rawDB(t, filepath.Join(src, sqlitequeue.FileName))
	execAll(t, srcDB, `UPDATE sqlite_sequence SET seq = 6 WHERE name = 'messages'`)
	closeDB(t, srcDB)
	q := openFile(t, src, queue.WithDeadLetter(1, dlq))
	if err := q.Send(ctx, queue.Text("second seven")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1, queue.ReceiveVisibility(time.Millisecond))
	if err != nil || len(msgs) != 1 || msgs[0].ID != 7 {
		t.Fatalf("receive = %+v, %v; want message 7", msgs, err)
	}
	time.Sleep(5 * time.Millisecond) // the 1 ms lease ends
	if msgs, err := q.Receive(ctx, 1); err != nil || len(msgs) != 0 {
		t.Fatalf("receive past maxAttempts = %+v, %v; want none", msgs, err)
	}
	q.Close()
	// Two dead letters of origin id 7 now: readDLState would call that a
	// duplicate, so the counts are read directly.
	for dir, want := range map[string]int64{src: 0, dlq: 2} {
		h := openFile(t, dir, queue.WithReadOnly())
		s, err := h.Stats(ctx)
		h.Close()
		if err != nil || s.Total != want {
			t.Fatalf("%s: %d messages (%v); want %d", dir, s.Total, err, want)
		}
	}
}

// TestDeadLetterAliasOfItselfRefused: a dead-letter path that is a symlink
// to the queue's own directory (or reaches it through a symlinked parent)
// is the queue itself: Open refuses it, naming both paths, instead of
// moving messages into themselves forever with their attempts reset.
func TestDeadLetterAliasOfItselfRefused(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	q := filepath.Join(base, "q")
	openFile(t, q).Close()
	alias := filepath.Join(base, "alias")
	if err := os.Symlink(q, alias); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(base, "via")
	if err := os.Symlink(base, parent); err != nil {
		t.Fatal(err)
	}
	for _, dlq := range []string{alias, filepath.Join(parent, "q"), filepath.Join(parent, "alias")} {
		h, err := openQueue(ctx, q, queue.WithDeadLetter(2, dlq))
		if err == nil {
			h.Close()
			t.Fatalf("Open with dead-letter queue %s (the queue itself) succeeded", dlq)
		}
		if bindings.CodeOf(err) != bindings.CodeInvalidInput || !strings.Contains(err.Error(), dlq) || !strings.Contains(err.Error(), q) {
			t.Errorf("Open with dead-letter queue %s: %v; want INVALID_INPUT naming both paths", dlq, err)
		}
	}
	// A redrive into itself through the alias is refused too.
	h := openFile(t, q)
	if _, err := h.Redrive(ctx, queue.RedriveTo(alias)); bindings.CodeOf(err) != bindings.CodeInvalidInput {
		t.Errorf("Redrive to an alias of itself: %v; want INVALID_INPUT", err)
	}
}

// TestCraftedMovesLeftInPlace: a store file with intents toward places the
// handle does not name (a directory elsewhere, an in-memory queue, a
// redrive nobody runs) must not steer a write: no store is created there,
// no message goes to memory, and every message stays in the source with
// its intent, reported by References and logged.
func TestCraftedMovesLeftInPlace(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	src, dlq, elsewhere := filepath.Join(base, "orders"), filepath.Join(base, "orders-dlq"), filepath.Join(base, "any", "dir")
	want := spendAll(t, src, 3)
	srcDB := rawDB(t, filepath.Join(src, sqlitequeue.FileName))
	now := time.Now().UnixMilli()
	for i, dest := range []struct{ kind, loc string }{{"dead-letter", elsewhere}, {"dead-letter", "memory:void"}, {"redrive", elsewhere}} {
		execAll(t, srcDB,
			fmt.Sprintf(`UPDATE messages SET visible_at = %d WHERE id = %d`, now+3600000, i+1),
			fmt.Sprintf(`INSERT INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at)
VALUES (%d, 'crafted-%d', '%s', '%s', '', 1, NULL, %d)`, i+1, i, dest.loc, dest.kind, now-60000))
	}
	closeDB(t, srcDB)
	var log hwLog
	q := openFile(t, src, queue.WithDeadLetter(1, dlq), queue.WithLogger(log.logger()))
	if msgs, err := q.Receive(ctx, 10); err != nil || len(msgs) != 0 {
		t.Fatalf("Receive = %d messages, %v; want none (all hidden mid-move)", len(msgs), err)
	}
	if _, err := q.Redrive(ctx); err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	refs, err := mustEngine(t, q).References(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	for _, dir := range []string{elsewhere, dlq} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (%v): a crafted intent steered a write", dir, err)
		}
	}
	st := readDLState(t, src, "/nonexistent")
	if st.intents != 3 || len(st.source) != 3 {
		t.Fatalf("%d intents, %d messages in the source; want 3, 3 (left in place)", st.intents, len(st.source))
	}
	for id, p := range want {
		if st.source[id] != p {
			t.Errorf("message %d = %.40q; want %.40q", id, st.source[id], p)
		}
	}
	if !strings.Contains(log.String(), "left in place") || !strings.Contains(log.String(), "any/dir") {
		t.Errorf("no warning naming the destination; log:\n%s", log.String())
	}
	got := map[string]int64{}
	for _, r := range refs {
		got[r.Table+" "+r.Kind+" "+r.Location] += r.Count
	}
	for _, k := range []string{"lc_moves dead-letter " + elsewhere, "lc_moves dead-letter memory:void", "lc_moves redrive " + elsewhere} {
		if got[k] != 1 {
			t.Errorf("References lack %q: %v", k, refs)
		}
	}
}

// mustEngine returns the SQLite engine under q.
func mustEngine(t *testing.T, q *queue.Queue) *sqlitequeue.Queue {
	t.Helper()
	e := engineOf(q)
	if e == nil {
		t.Fatalf("%s is not a queue of the SQLite engine", q.Path())
	}
	return e
}
