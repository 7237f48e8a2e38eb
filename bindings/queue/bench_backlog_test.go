package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/testutil"
)

// The queues of BenchmarkBacklog (issue 22): backlogDue due messages, and
// in the "backlog" queue that many more delayed ones sent before them (so
// they sit ahead of the due ones in delivery order).
const (
	backlogDue           = 20_000
	backlogDelayedSQLite = 1_000_000
	backlogDelayedJS     = 100_000 // JetStream: loading 1M schedules takes minutes
	backlogConsumeRound  = 1_000   // messages consumed per queue per Consume iteration
)

// BenchmarkBacklog measures receive(10) and Consume on a queue of 20,000
// due messages with and without a backlog of delayed messages ahead of them
// (1,000,000 on SQLite, 100,000 on JetStream), interleaved: every iteration
// runs on the plain queue and then on the backlog queue. Reported: the
// per-queue figures and backlog/plain as "ratio" (receive: time per call;
// consume: time per message). The goal is a ratio within 2.
//
// Receive: one Receive(10) per queue per iteration, timed alone; its
// messages are then acked and as many new due ones sent (untimed), so the
// due count stays 20,000. Consume: one Consume per queue per iteration
// until backlogConsumeRound messages were handled, then as many sent again.
//
// The SQLite backlog is written directly (one transaction of prepared
// inserts of the spec's delayed send), which takes some seconds; run e.g.
//
//	go test ./bindings/queue -run '^$' -bench Backlog -benchtime 300x
func BenchmarkBacklog(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		plain := sqliteBacklogQueue(b, 0)
		backlog := sqliteBacklogQueue(b, backlogDelayedSQLite)
		runBacklog(b, plain, backlog)
	})
	b.Run("jetstream", func(b *testing.B) {
		url := testutil.StartJetStream(b, "")
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		plain := jsBacklogQueue(b, nc, "plain", 0)
		backlog := jsBacklogQueue(b, nc, "backlog", backlogDelayedJS)
		runBacklog(b, plain, backlog)
	})
}

func runBacklog(b *testing.B, plain, backlog *queue.Queue) {
	b.Run("receive", func(b *testing.B) {
		var took [2]time.Duration
		for i := range b.N {
			for k, q := range []*queue.Queue{plain, backlog} {
				if i%2 == 1 { // alternate which queue goes first
					q = []*queue.Queue{backlog, plain}[k]
					k = 1 - k
				}
				start := time.Now()
				ms, err := q.Receive(ctx, queue.MaxReceiveBatch)
				took[k] += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if len(ms) != queue.MaxReceiveBatch {
					b.Fatalf("receive(10) got %d messages", len(ms))
				}
				settle(b, q, ms)
			}
		}
		b.StopTimer()
		reportRatio(b, "us/receive", took, float64(b.N))
	})
	b.Run("consume", func(b *testing.B) {
		var took [2]time.Duration
		for i := range b.N {
			for k, q := range []*queue.Queue{plain, backlog} {
				if i%2 == 1 {
					q = []*queue.Queue{backlog, plain}[k]
					k = 1 - k
				}
				took[k] += consumeRound(b, q)
			}
		}
		b.StopTimer()
		reportRatio(b, "us/msg", took, float64(b.N*backlogConsumeRound))
	})
}

// reportRatio reports took[0] (plain) and took[1] (backlog) divided by n in
// microseconds, and their ratio.
func reportRatio(b *testing.B, unit string, took [2]time.Duration, n float64) {
	p := float64(took[0].Microseconds()) / n
	d := float64(took[1].Microseconds()) / n
	b.ReportMetric(0, "ns/op") // the sum of both queues' work says nothing
	b.ReportMetric(p, "plain-"+unit)
	b.ReportMetric(d, "backlog-"+unit)
	if p > 0 {
		b.ReportMetric(d/p, "ratio")
	}
}

// settle acks ms and sends as many new due messages, keeping the due count.
func settle(b *testing.B, q *queue.Queue, ms []queue.Message) {
	b.StopTimer()
	defer b.StartTimer()
	receipts := make([]string, len(ms))
	batch := make([]queue.Payload, len(ms))
	for i, m := range ms {
		receipts[i] = m.ReceiptHandle
		batch[i] = queue.Text("again")
	}
	if _, err := q.AckBatch(ctx, receipts); err != nil {
		b.Fatal(err)
	}
	if err := q.SendBatch(ctx, batch); err != nil {
		b.Fatal(err)
	}
}

// consumeRound runs Consume on q until backlogConsumeRound messages were
// handled and returns how long that took; then it sends as many again.
func consumeRound(b *testing.B, q *queue.Queue) time.Duration {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var n atomic.Int64
	start := time.Now()
	var took time.Duration
	err := q.Consume(cctx, func(context.Context, queue.Message) error {
		if n.Add(1) == backlogConsumeRound {
			took = time.Since(start)
			cancel()
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	if took == 0 {
		b.Fatalf("Consume returned after %d messages", n.Load())
	}
	b.StopTimer()
	defer b.StartTimer()
	sendDue(b, q, int(n.Load()))
	return took
}

// sendDue sends n due text messages in batches.
func sendDue(b *testing.B, q *queue.Queue, n int) {
	batch := make([]queue.Payload, 0, queue.MaxSendBatch)
	for i := range n {
		batch = append(batch, queue.Text(fmt.Sprintf("due-%d", i)))
		if len(batch) == cap(batch) || i == n-1 {
			if err := q.SendBatch(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// sqliteBacklogQueue opens a new SQLite queue holding delayed messages due
// in 12 h (written directly: one transaction of the spec's delayed send,
// enqueued a minute ago) and then backlogDue due ones.
func sqliteBacklogQueue(b *testing.B, delayed int) *queue.Queue {
	dir := b.TempDir()
	q, err := queue.Open(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	if delayed > 0 {
		if err := q.Close(); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		loadDelayed(b, filepath.Join(dir, "localqueue.sqlite"), delayed)
		b.Logf("wrote %d delayed rows in %s", delayed, time.Since(start).Round(time.Millisecond))
		start = time.Now()
		if q, err = queue.Open(ctx, dir); err != nil { // with the backlog in place
			b.Fatal(err)
		}
		b.Logf("reopened in %s", time.Since(start).Round(time.Millisecond))
	}
	b.Cleanup(func() { _ = q.Close() })
	sendDue(b, q, backlogDue)
	return q
}

func loadDelayed(b *testing.B, path string, n int) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	st, err := tx.PrepareContext(ctx, `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES (?1, ?2, ?3, ?4, 0)`)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	enq := now.Add(-time.Minute).UnixMilli()
	vis := now.Add(12 * time.Hour).UnixMilli()
	for i := range n {
		if _, err := st.ExecContext(ctx, "text", "delayed-"+fmt.Sprint(i), enq, vis); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// jsBacklogQueue opens the JetStream queue name with delayed messages due
// in 12 h (message schedules, sent in batches) and then backlogDue due ones.
func jsBacklogQueue(b *testing.B, nc *nats.Conn, name string, delayed int) *queue.Queue {
	q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, name)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	if delayed > 0 {
		start := time.Now()
		batch := make([]queue.Payload, 0, queue.MaxSendBatch)
		for i := range delayed {
			batch = append(batch, queue.Text(fmt.Sprintf("delayed-%d", i)))
			if len(batch) == cap(batch) || i == delayed-1 {
				if err := q.SendBatch(ctx, batch, queue.WithDelay(12*time.Hour)); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		b.Logf("sent %d delayed messages in %s", delayed, time.Since(start).Round(time.Millisecond))
	}
	sendDue(b, q, backlogDue)
	return q
}
