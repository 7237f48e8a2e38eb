package bench

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, for pre-filling

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// The spec's statements used to pre-fill stores.
const (
	specSend = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?3, 0)`
	specPut = `INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3`
)

// payload100 is the 100-byte body of every benchmark message and value.
var payload100 = strings.Repeat("0123456789", 10)

// rawFill runs stmt n times with args(i) in ONE transaction on a plain
// database/sql connection to the database file path. Call it only while no
// store handle on that file is open in this process: closing this
// connection's descriptor must not drop locks a handle holds.
func rawFill(tb testing.TB, path, stmt string, n int, args func(i int) []any) {
	tb.Helper()
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Set("_txlock", "immediate")
	dsn := (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, stmt)
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if _, err := st.ExecContext(ctx, args(i)...); err != nil {
			tb.Fatalf("pre-fill row %d: %v", i, err)
		}
	}
	if err := st.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// prefillQueue creates the queue store in dir (through the binding, so the
// format marker and schema are the real ones), closes it, and inserts n due
// messages with the spec's INSERT in one transaction.
func prefillQueue(tb testing.TB, dir string, n int) {
	tb.Helper()
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	path := q.Path()
	if err := q.Close(); err != nil {
		tb.Fatal(err)
	}
	if n == 0 {
		return
	}
	at := time.Now().Add(-time.Second).UnixMilli()
	rawFill(tb, path, specSend, n, func(int) []any { return []any{string(queue.TypeText), payload100, at} })
}

// openQueue opens the queue store in dir, closed when the benchmark ends.
// The SQLite engine's own handle under it is kept for dbOf.
func openQueue(tb testing.TB, dir string) *queue.Queue {
	tb.Helper()
	q, eq, err := sqlitetools.OpenQueue(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	engineHandles.Store(q, eq)
	tb.Cleanup(func() {
		engineHandles.Delete(q)
		if err := q.Close(); err != nil {
			tb.Error(err)
		}
	})
	return q
}

// engineHandles holds the engine's handle under each queue openQueue
// opened.
var engineHandles sync.Map // *queue.Queue -> *sqlitequeue.Queue

// dbOf is the store plumbing under q, which openQueue opened.
func dbOf(tb testing.TB, q *queue.Queue) *sqlstore.DB {
	eq, ok := engineHandles.Load(q)
	if !ok {
		tb.Fatal("dbOf: the queue was not opened with openQueue")
	}
	return eq.(*sqlitequeue.Queue).DB()
}

// appendMessages adds n due messages at the tail of the queue in one write
// transaction through the handle's own writer (so it takes the store's
// locks like any other write).
func appendMessages(tb testing.TB, q *queue.Queue, n int) {
	tb.Helper()
	ctx := context.Background()
	at := time.Now().UnixMilli()
	err := dbOf(tb, q).Write(ctx, func(tx *sqlstore.Tx) error {
		for range n {
			if _, err := tx.Exec(ctx, specSend, string(queue.TypeText), payload100, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// prefillKV creates the KV store in dir through the binding, closes it, and
// puts keys (each with a 100-byte value) with the spec's upsert in one
// transaction.
func prefillKV(tb testing.TB, dir string, keys []string) {
	tb.Helper()
	s, err := kv.Open(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	path := s.Path()
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	val := []byte(payload100)
	rawFill(tb, path, specPut, len(keys), func(i int) []any { return []any{keys[i], val, nil} })
}

// openKV opens the KV store in dir, closed when the benchmark ends.
func openKV(tb testing.TB, dir string) *kv.Store {
	tb.Helper()
	s, err := kv.Open(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

func benchKey(i int) string { return fmt.Sprintf("bench:key:%08d", i) }

// reportRate stops the timer and reports n per second of measured time.
func reportRate(b *testing.B, n int, unit string) float64 {
	b.StopTimer()
	r := float64(n) / b.Elapsed().Seconds()
	b.ReportMetric(r, unit)
	return r
}

// receiveAck receives with batches of at most batch and acks every message
// until n messages were handled. It fails if the queue runs dry first.
func receiveAck(b *testing.B, q *queue.Queue, batch, n int) {
	ctx := context.Background()
	for got := 0; got < n; {
		msgs, err := q.Receive(ctx, min(batch, n-got))
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			b.Fatalf("queue empty after %d of %d messages", got, n)
		}
		for _, m := range msgs {
			if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
				b.Fatal(err)
			}
		}
		got += len(msgs)
	}
}
