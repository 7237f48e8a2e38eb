package sqlitequeue_test

import (
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// These tests write rows the way another program using the spec's SQL may
// (Python's sqlite3 storing time.time()*1000, a json payload that is not
// JSON, an unknown payload_type, TEXT in an INTEGER column), through a raw
// database/sql connection to the real store file, and check that localcloud
// delivers what it can, never claims a row it does not return, and is not
// blocked by such a row.

// foreignWriter opens the store file in dir as another program would.
func foreignWriter(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitequeue.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// oddRow is one row a foreign writer inserts: each value is bound as given
// (float64 for REAL, string for TEXT, []byte for BLOB).
type oddRow struct {
	typ, data any
	enq, vis  any
	attempt   any
}

func insertRows(t *testing.T, db *sql.DB, rows ...oddRow) []int64 {
	t.Helper()
	var ids []int64
	for _, r := range rows {
		attempt := r.attempt
		if attempt == nil {
			attempt = int64(0)
		}
		res, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES (?1, ?2, ?3, ?4, ?5)`,
			r.typ, r.data, r.enq, r.vis, attempt)
		if err != nil {
			t.Fatalf("insert %+v: %v", r, err)
		}
		id, _ := res.LastInsertId()
		ids = append(ids, id)
	}
	return ids
}

// pyNow is what Python's time.time()*1000 gives: REAL milliseconds with a
// fraction, always one (.25, exact in a float64): a whole value would be
// stored as an INTEGER by the column's affinity and not be odd. (Computed
// from UnixNano, float64's 256 ns steps made the sum whole about once in
// 4,000 calls: TestOddRowsFound then missed its "enqueued_at" row.)
func pyNow(back time.Duration) float64 {
	return float64(time.Now().Add(-back).UnixMilli()) + 0.25
}

// oddMix are rows of every odd kind that can still be delivered, oldest
// first, and one plain row behind them.
func oddMix() []oddRow {
	now := time.Now().UnixMilli()
	return []oddRow{
		{typ: "json", data: `{"n":1}`, enq: pyNow(5 * time.Second), vis: pyNow(5 * time.Second)},
		{typ: "json", data: `{not json`, enq: now - 4000, vis: now - 4000},
		{typ: "xml", data: `<a/>`, enq: now - 3000, vis: now - 3000},
		{typ: "text", data: []byte("blob payload"), enq: now - 2000, vis: now - 2000, attempt: 1.5},
		{typ: "text", data: "attempt text", enq: now - 1500, vis: now - 1500, attempt: "many"},
		{typ: "text", data: "plain", enq: now - 1000, vis: now - 1000},
	}
}

// attempts reads every row's attempt count and receipt as stored.
func attempts(t *testing.T, db *sql.DB) map[int64]string {
	t.Helper()
	rows, err := db.Query(`SELECT id, quote(attempt), quote(receipt_handle) FROM messages`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var a, r string
		if err := rows.Scan(&id, &a, &r); err != nil {
			t.Fatal(err)
		}
		out[id] = a + " " + r
	}
	return out
}

func checkMix(t *testing.T, got []queue.Message, ids []int64) {
	t.Helper()
	want := []struct {
		typ, data string
		attempt   int
	}{
		{"json", `{"n":1}`, 1},
		{"json", `{not json`, 1},
		{"xml", `<a/>`, 1},
		{"text", "blob payload", 2},
		{"text", "attempt text", 1},
		{"text", "plain", 1},
	}
	if len(got) != len(want) {
		t.Fatalf("received %d messages, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		m := got[i]
		if m.ID != ids[i] || string(m.Payload.Type) != w.typ || m.Payload.Data != w.data || m.Attempt != w.attempt || m.ReceiptHandle == "" {
			t.Errorf("message %d: got id %d type %q data %q attempt %d receipt %q, want id %d type %q data %q attempt %d",
				i, m.ID, m.Payload.Type, m.Payload.Data, m.Attempt, m.ReceiptHandle, ids[i], w.typ, w.data, w.attempt)
		}
	}
	if first := got[0].EnqueuedAt; time.Since(first) < 4*time.Second || time.Since(first) > time.Minute {
		t.Errorf("REAL enqueued_at read as %v", first)
	}
	var v any
	if err := got[1].Payload.Decode(&v); err == nil || !strings.Contains(err.Error(), "INVALID_INPUT") {
		t.Errorf("Decode of invalid JSON: %v, want INVALID_INPUT", err)
	}
}

func TestOddRowsDelivered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		max  int
		dead bool
	}{
		{"one", 1, false},
		{"batch", queue.MaxReceiveBatch, false},
		{"one-dead-letter", 1, true},
		{"batch-dead-letter", queue.MaxReceiveBatch, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dir := filepath.Join(base, "q")
			var opts []queue.Option
			if tc.dead {
				opts = append(opts, queue.WithDeadLetter(3, filepath.Join(base, "dlq")))
			}
			q := openFile(t, dir, opts...)
			ids := insertRows(t, foreignWriter(t, dir), oddMix()...)
			var got []queue.Message
			for range 20 {
				msgs, err := q.Receive(ctx, tc.max)
				if err != nil {
					t.Fatalf("receive after %d messages: %v", len(got), err)
				}
				if len(msgs) == 0 {
					break
				}
				got = append(got, msgs...)
			}
			checkMix(t, got, ids)
			for _, m := range got {
				if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
					t.Errorf("ack %d: %v", m.ID, err)
				}
			}
			if left := attempts(t, foreignWriter(t, dir)); len(left) != 0 {
				t.Errorf("rows left after acking every delivery: %v", left)
			}
		})
	}
}

// TestOddRowsUndeliverable: a row whose enqueued_at is not a number cannot
// be delivered as a Message; it is never claimed, and the rows behind it
// are delivered.
func TestOddRowsUndeliverable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		max  int
		dead bool
	}{
		{"one", 1, false},
		{"batch", 3, false},
		{"dead-letter", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			dir, dlq := filepath.Join(base, "q"), filepath.Join(base, "dlq")
			var opts []queue.Option
			if tc.dead {
				opts = append(opts, queue.WithDeadLetter(3, dlq))
			}
			q := openFile(t, dir, opts...)
			db := foreignWriter(t, dir)
			now := time.Now().UnixMilli()
			ids := insertRows(t, db,
				oddRow{typ: "text", data: "bad time", enq: "yesterday", vis: now - 5000},
				oddRow{typ: "text", data: "a", enq: now - 2000, vis: now - 2000},
				oddRow{typ: "text", data: "b", enq: now - 1000, vis: now - 1000},
			)
			var got []string
			for range 5 {
				msgs, err := q.Receive(ctx, tc.max)
				if err != nil {
					t.Fatalf("receive: %v", err)
				}
				for _, m := range msgs {
					got = append(got, m.Payload.Data)
				}
			}
			if strings.Join(got, ",") != "a,b" {
				t.Fatalf("delivered %q, want a,b", got)
			}
			left := attempts(t, db)
			if !tc.dead {
				if left[ids[0]] != "0 NULL" {
					t.Errorf("undeliverable row: attempt and receipt %q, want it untouched (0 NULL)", left[ids[0]])
				}
				return
			}
			if _, ok := left[ids[0]]; ok {
				t.Errorf("undeliverable row still in the queue with a dead-letter queue: %q", left[ids[0]])
			}
			d := openFile(t, dlq)
			peeked, err := d.Peek(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(peeked) != 1 || peeked[0].Payload.Data != "bad time" || peeked[0].Origin == nil ||
				!strings.Contains(peeked[0].Origin.Reason, "enqueued_at") || !strings.Contains(peeked[0].Origin.Reason, "yesterday") {
				t.Fatalf("dead-letter queue holds %+v, want the row with a reason naming enqueued_at and its value", peeked)
			}
		})
	}
}

// TestOddRowsPeekStats: peek and stats work on a store with odd rows, and
// peek says what is odd about each.
func TestOddRowsPeekStats(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "q")
	q := openFile(t, dir)
	rows := append(oddMix(), oddRow{typ: "text", data: "bad time", enq: "yesterday", vis: "later"})
	insertRows(t, foreignWriter(t, dir), rows...)
	s, err := q.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if s.Total != int64(len(rows)) || s.Due != int64(len(rows)-1) || time.Since(s.Oldest) < 4*time.Second {
		t.Errorf("stats %+v, want total %d, due %d, oldest 5s ago", s, len(rows), len(rows)-1)
	}
	peeked, err := q.Peek(ctx, 100)
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	if len(peeked) != len(rows) {
		t.Fatalf("peek gave %d messages, want %d", len(peeked), len(rows))
	}
	oddWant := []string{"enqueued_at", "not valid JSON", "payload_type", "BLOB", "attempt", "", "enqueued_at"}
	for i, m := range peeked {
		odd := strings.Join(m.Odd, "; ")
		if (oddWant[i] == "") != (odd == "") || !strings.Contains(odd, oddWant[i]) {
			t.Errorf("peek message %d (%q): odd %q, want it to mention %q", i, m.Payload.Data, odd, oddWant[i])
		}
	}
	b, err := json.Marshal(peeked)
	if err != nil {
		t.Fatalf("marshal peek: %v", err)
	}
	_ = b
}

// TestOddRowsFound: OddRows (what localcloud check reports) names each odd
// row by id and what is odd, and nothing on a clean store.
func TestOddRowsFound(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "q")
	q := openFile(t, dir)
	if err := q.Send(ctx, queue.Text("clean")); err != nil {
		t.Fatal(err)
	}
	db := foreignWriter(t, dir)
	if probs := findOdd(t, db); len(probs) != 0 {
		t.Fatalf("clean store: %v", probs)
	}
	ids := insertRows(t, db, oddMix()...)
	probs := findOdd(t, db)
	text := strings.Join(probs, "\n")
	if len(probs) != len(ids)-1 {
		t.Errorf("found %d odd rows, want %d:\n%s", len(probs), len(ids)-1, text)
	}
	for _, want := range []string{"row 2:", "enqueued_at", "row 3:", "not valid JSON", "row 4:", `"xml"`, "row 5:", "BLOB", "row 6:", "attempt"} {
		if !strings.Contains(text, want) {
			t.Errorf("odd rows do not mention %q:\n%s", want, text)
		}
	}
}

func findOdd(t *testing.T, db *sql.DB) []string {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	probs, err := sqlitequeue.Format().CheckRows(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range probs {
		out = append(out, p.Message)
	}
	return out
}

// TestOddRowsWaitAndRedrive: ReceiveWait wakes for a delayed message whose
// visible_at is REAL, and a dead-letter queue holding rows another program
// wrote redrives them all.
func TestOddRowsWaitAndRedrive(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "q")
	// A poll far beyond the wait: only the timer on the next visible_at
	// can wake the waiter in time.
	q := openFile(t, dir, queue.WithPollInterval(time.Hour))
	db := foreignWriter(t, dir)
	insertRows(t, db, oddRow{typ: "text", data: "later", enq: pyNow(0), vis: pyNow(-300 * time.Millisecond)})
	start := time.Now()
	msgs, err := q.ReceiveWait(ctx, 1, 30*time.Second)
	if err != nil {
		t.Fatalf("receive wait: %v", err)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("receive wait returned after %s: woken by the end of the wait, not by the message's REAL visible_at 300ms on", waited)
	}
	if len(msgs) != 1 || msgs[0].Payload.Data != "later" {
		t.Fatalf("receive wait gave %+v after %s, want the delayed message", msgs, time.Since(start))
	}
	if err := q.Ack(ctx, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	dlqDir, target := filepath.Join(base, "dlq"), filepath.Join(base, "target")
	dlq := openFile(t, dlqDir)
	insertRows(t, foreignWriter(t, dlqDir), oddMix()...)
	res, err := dlq.Redrive(ctx, queue.RedriveTo(target), queue.RedriveMax(100))
	if err != nil {
		t.Fatalf("redrive: %v", err)
	}
	if res.Moved != len(oddMix()) {
		t.Fatalf("redrive %+v, want %d moved", res, len(oddMix()))
	}
	got, err := openFile(t, target).Peek(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, m := range got {
		data = append(data, m.Payload.Data)
	}
	if strings.Join(data, ",") != "{\"n\":1},{not json,<a/>,blob payload,attempt text,plain" {
		t.Fatalf("redriven payloads %q", data)
	}
}

// oddValue turns a fuzzed kind and bytes into a value of that SQLite
// storage class.
func oddValue(kind byte, b []byte) any {
	switch kind % 6 {
	case 0:
		return nil
	case 1:
		var n int64
		for _, c := range b {
			n = n<<8 | int64(c)
		}
		return n
	case 2:
		var n int64
		for _, c := range b {
			n = n<<8 | int64(c)
		}
		return float64(n) / 7
	case 3:
		return string(b)
	case 4:
		return b
	}
	return time.Now().UnixMilli()
}

// FuzzOddRow inserts one row of fuzzed values into a real store (a table
// without the spec's NOT NULLs, as another program may create it, so NULLs
// get in too) and asserts that receive, peek, stats and CheckRows neither
// fail nor panic, and that every row a receive claimed was returned.
func FuzzOddRow(f *testing.F) {
	f.Add(byte(3), []byte("json"), byte(3), []byte("{not json"), byte(2), []byte{1, 2}, byte(5), []byte{}, byte(1), []byte{0})
	f.Add(byte(0), []byte{}, byte(0), []byte{}, byte(0), []byte{}, byte(0), []byte{}, byte(0), []byte{})
	f.Add(byte(4), []byte{0xff, 0xfe}, byte(4), []byte{0}, byte(3), []byte("12"), byte(3), []byte("x"), byte(3), []byte("many"))
	f.Add(byte(3), []byte("text"), byte(1), []byte{42}, byte(3), []byte("yesterday"), byte(5), []byte{}, byte(2), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	dir := f.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitequeue.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('format', 'localqueue.v1');
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, payload_type TEXT, payload_data TEXT,
enqueued_at INTEGER, visible_at INTEGER, attempt INTEGER DEFAULT 0, receipt_handle TEXT)`); err != nil {
		f.Fatal(err)
	}
	q, err := openQueue(ctx, dir)
	if err != nil {
		f.Fatal(err)
	}
	defer q.Close()
	f.Fuzz(func(t *testing.T, tk byte, tb []byte, dk byte, db_ []byte, ek byte, eb []byte, vk byte, vb []byte, ak byte, ab []byte) {
		if err := q.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES (?1, ?2, ?3, ?4, ?5)`,
			oddValue(tk, tb), oddValue(dk, db_), oddValue(ek, eb), oddValue(vk, vb), oddValue(ak, ab)); err != nil {
			t.Skip(err)
		}
		for _, max := range []int{1, 2} {
			msgs, err := q.Receive(ctx, max, queue.ReceiveVisibility(time.Millisecond))
			if err != nil {
				t.Fatalf("receive(%d): %v", max, err)
			}
			var claimed int
			if err := db.QueryRow(`SELECT COUNT(*) FROM messages WHERE receipt_handle IS NOT NULL AND visible_at > ?1`, time.Now().UnixMilli()-5).Scan(&claimed); err != nil {
				t.Fatal(err)
			}
			if claimed > len(msgs) {
				t.Fatalf("receive(%d) claimed %d rows and returned %d", max, claimed, len(msgs))
			}
			time.Sleep(2 * time.Millisecond) // the 1 ms lease ends
		}
		if _, err := q.Peek(ctx, 10); err != nil {
			t.Fatalf("peek: %v", err)
		}
		if _, err := q.Stats(ctx); err != nil {
			t.Fatalf("stats: %v", err)
		}
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := sqlitequeue.Format().CheckRows(ctx, conn); err != nil {
			t.Fatalf("check rows: %v", err)
		}
	})
}
