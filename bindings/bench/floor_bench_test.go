//go:build unix

package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// floorRounds is how many alternating rounds BenchmarkConsumeVsFloor runs
// of each contender.
const floorRounds = 5

// BenchmarkConsumeVsFloor: Consume against the floor of the same work, in
// one run (issue 25). Each of floorRounds rounds drains b.N pre-filled
// messages from a fresh store twice, alternating:
//
//   - floor: raw prepared statements on one connection to the store file,
//     with the engine's pragmas (WAL, synchronous NORMAL, the writer's
//     wal_autocheckpoint and journal_size_limit, busy_timeout 0 behind the
//     lock file) and its lock-file protocol (an in-process mutex, then
//     flock on .localqueue.sqlite.lock, around every write transaction):
//     the spec's claim of up to 10 (BEGIN IMMEDIATE, the select of due ids,
//     the claim UPDATE of each with a new receipt, COMMIT), then ONE
//     transaction deleting the 10 by id and receipt. The statements are
//     the engine's own (sqlitequeue.StmtDue, StmtClaim, StmtAck), so the
//     floor uses the indexes the engine's select uses: a copy of an older
//     select went on reading the whole table once its index was retired.
//     No context that can end, no public API, no checkpointer goroutine.
//   - consume: queue.Open and Consume with 8 workers and a handler that
//     does nothing, until every message was handled and Consume returned.
//
// Reports the median rate of each (floor-msgs/s, consume-msgs/s), the
// median of the per-round ratios (ratio, target >= 0.9) and the median
// heap allocations per message of each (floor-allocs/msg,
// consume-allocs/msg: runtime.MemStats.Mallocs over the drain, every
// goroutine of the process) and of CPU time per message (floor-cpu-us,
// consume-cpu-us: user+system from getrusage over the drain, which other
// processes move far less than the rates). LC_FLOOR_SIDE=floor or consume runs only that
// side (for -cpuprofile). One op is one message of one contender's round.
func BenchmarkConsumeVsFloor(b *testing.B) {
	side := os.Getenv("LC_FLOOR_SIDE")
	var floor, cons, ratios, fAllocs, cAllocs, fCPU, cCPU []float64
	for r := range floorRounds {
		var fr, cr, fa, ca float64
		if side != "consume" {
			var fc float64
			fr, fa, fc = floorDrain(b, b.N)
			floor, fAllocs, fCPU = append(floor, fr), append(fAllocs, fa), append(fCPU, fc)
		}
		if side != "floor" {
			var cc float64
			cr, ca, cc = consumeDrain(b, b.N)
			cons, cAllocs, cCPU = append(cons, cr), append(cAllocs, ca), append(cCPU, cc)
		}
		if side == "" {
			ratios = append(ratios, cr/fr)
		}
		b.Logf("round %d: floor %.0f msgs/s (%.1f allocs/msg), consume %.0f msgs/s (%.1f allocs/msg)", r+1, fr, fa, cr, ca)
	}
	if side != "consume" {
		b.ReportMetric(median(floor), "floor-msgs/s")
		b.ReportMetric(median(fAllocs), "floor-allocs/msg")
		b.ReportMetric(median(fCPU), "floor-cpu-us")
	}
	if side != "floor" {
		b.ReportMetric(median(cons), "consume-msgs/s")
		b.ReportMetric(median(cAllocs), "consume-allocs/msg")
		b.ReportMetric(median(cCPU), "consume-cpu-us")
	}
	if side == "" {
		b.ReportMetric(median(ratios), "ratio")
	}
}

// mallocs is the process's count of heap allocations so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// consumeDrain pre-fills a fresh store with n messages, opens it and
// drains it with Consume (8 workers); it returns messages per second,
// allocations per message and CPU microseconds per message of the drain
// alone.
func consumeDrain(b *testing.B, n int) (rate, allocs, cpuUS float64) {
	b.StopTimer()
	dir := b.TempDir()
	prefillQueue(b, dir, n)
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	m0 := mallocs()
	c0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	consumeN(b, q, n, 8)
	d := time.Since(start)
	b.StopTimer()
	c1 := cpuTime()
	m1 := mallocs()
	if s, err := q.Stats(context.Background()); err != nil || s.Total != 0 {
		b.Fatalf("after the drain: %+v, %v; want an empty queue", s, err)
	}
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	return float64(n) / d.Seconds(), float64(m1-m0) / float64(n), float64((c1 - c0).Microseconds()) / float64(n)
}

// floorDrain is consumeDrain's floor: the same store, drained by raw
// statements (BenchmarkConsumeVsFloor).
func floorDrain(b *testing.B, n int) (rate, allocs, cpuUS float64) {
	b.StopTimer()
	dir := b.TempDir()
	prefillQueue(b, dir, n)
	f, err := openFloor(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer f.close()
	runtime.GC()
	m0 := mallocs()
	c0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	if err := f.drain(n); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	b.StopTimer()
	c1 := cpuTime()
	m1 := mallocs()
	var left int
	if err := f.conn.QueryRowContext(context.Background(), "SELECT count(*) FROM messages").Scan(&left); err != nil || left != 0 {
		b.Fatalf("after the drain: %d messages left, %v", left, err)
	}
	return float64(n) / d.Seconds(), float64(m1-m0) / float64(n), float64((c1 - c0).Microseconds()) / float64(n)
}

// floorStore is the floor's connection, statements and lock.
type floorStore struct {
	dsn                            string
	db                             *sql.DB
	conn                           *sql.Conn
	lockMu                         chan struct{}
	lock                           *os.File
	begin, commit, due, claim, del *sql.Stmt
}

func openFloor(dir string) (*floorStore, error) {
	path := filepath.Join(dir, sqlitequeue.FileName)
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqlstore.BusyTimeoutMillis))
	q.Add("_pragma", "synchronous(NORMAL)")
	dsn := (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	f := &floorStore{dsn: dsn, db: db, lockMu: make(chan struct{}, 1)}
	fail := func(err error) (*floorStore, error) { f.close(); return nil, err }
	if f.conn, err = db.Conn(ctx); err != nil {
		return fail(err)
	}
	var mode string
	if err := f.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		return fail(fmt.Errorf("journal_mode %q, %v; want wal", mode, err))
	}
	// The engine's writer: its checkpoint settings, and no busy wait in
	// SQLite (writers queue on the lock file instead).
	for _, p := range []string{"PRAGMA wal_autocheckpoint = 4000", "PRAGMA journal_size_limit = 16777216", "PRAGMA busy_timeout = 0"} {
		if _, err := f.conn.ExecContext(ctx, p); err != nil {
			return fail(err)
		}
	}
	if f.lock, err = os.OpenFile(filepath.Join(dir, sqlstore.LockFileName(sqlitequeue.FileName)), os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return fail(err)
	}
	for _, s := range []struct {
		st  **sql.Stmt
		sql string
	}{{&f.begin, "BEGIN IMMEDIATE"}, {&f.commit, "COMMIT"}, {&f.due, sqlitequeue.StmtDue}, {&f.claim, sqlitequeue.StmtClaim}, {&f.del, sqlitequeue.StmtAck}} {
		if *s.st, err = f.conn.PrepareContext(ctx, s.sql); err != nil {
			return fail(err)
		}
	}
	return f, nil
}

func (f *floorStore) close() {
	for _, st := range []*sql.Stmt{f.begin, f.commit, f.due, f.claim, f.del} {
		if st != nil {
			_ = st.Close()
		}
	}
	if f.conn != nil {
		_ = f.conn.Close()
	}
	_ = f.db.Close()
	if f.lock != nil {
		_ = f.lock.Close()
	}
}

// write runs fn in one write transaction behind the engine's lock-file
// protocol.
func (f *floorStore) write(fn func() error) error {
	f.lockMu <- struct{}{}
	defer func() { <-f.lockMu }()
	if err := syscall.Flock(int(f.lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return fmt.Errorf("lock file: %w", err)
	}
	defer func() { _ = syscall.Flock(int(f.lock.Fd()), syscall.LOCK_UN) }()
	ctx := context.Background()
	if _, err := f.begin.ExecContext(ctx); err != nil {
		return err
	}
	if err := fn(); err != nil {
		_, _ = f.conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	_, err := f.commit.ExecContext(ctx)
	return err
}

// floorMsg is one claimed message of the floor.
type floorMsg struct {
	id      int64
	receipt string
	typ     string
	data    string
	attempt int64
	attrs   sql.NullString // the engine's claim returns the message's attributes too (lc_attributes)
}

// drain claims up to 10 and deletes them in one transaction until n were
// deleted.
func (f *floorStore) drain(n int) error {
	ctx := context.Background()
	msgs := make([]floorMsg, 0, queue.MaxReceiveBatch)
	ids := make([]int64, 0, queue.MaxReceiveBatch)
	for done := 0; done < n; {
		msgs, ids = msgs[:0], ids[:0]
		err := f.write(func() error {
			now := time.Now()
			rows, err := f.due.QueryContext(ctx, now.UnixMilli(), min(queue.MaxReceiveBatch, n-done))
			if err != nil {
				return err
			}
			for rows.Next() {
				var id, enq int64
				if err := rows.Scan(&id, &enq); err != nil {
					_ = rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			lease := now.Add(30 * time.Second).UnixMilli()
			for _, id := range ids {
				m := floorMsg{id: id, receipt: uuid.NewString()}
				if err := f.claim.QueryRowContext(ctx, lease, m.receipt, id).Scan(&m.typ, &m.data, &m.attempt, &m.attrs); err != nil {
					return err
				}
				msgs = append(msgs, m)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		if len(msgs) == 0 {
			return fmt.Errorf("queue empty after %d of %d messages", done, n)
		}
		err = f.write(func() error {
			for _, m := range msgs {
				if _, err := f.del.ExecContext(ctx, m.id, m.receipt); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("delete: %w", err)
		}
		done += len(msgs)
	}
	return nil
}
