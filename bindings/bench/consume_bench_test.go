package bench

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// consumeRounds is how many alternating rounds BenchmarkConsumeVsBareLoop
// runs of each contender.
const consumeRounds = 3

// BenchmarkConsumeVsBareLoop: the issue-16 floor, measured in one run. Each
// of consumeRounds rounds drains b.N pre-filled messages from a fresh store
// twice, alternating: a bare loop of Receive(10) + one AckBatch of the ten
// receipts, and Consume with 8 workers and a handler that does nothing.
// Reports the median rate of each (bare-msgs/s, consume-msgs/s) and the
// median of the per-round ratios (ratio, target >= 0.9); every round is
// also logged. One op is one message of one contender's round.
func BenchmarkConsumeVsBareLoop(b *testing.B) {
	var bare, cons, ratios []float64
	for r := range consumeRounds {
		br := timedDrain(b, b.N, drainBatchAck)
		cr := timedDrain(b, b.N, func(b *testing.B, q *queue.Queue, n int) { consumeN(b, q, n, 8) })
		bare, cons, ratios = append(bare, br), append(cons, cr), append(ratios, cr/br)
		b.Logf("round %d: bare %.0f msgs/s, consume %.0f msgs/s, ratio %.3f", r+1, br, cr, cr/br)
	}
	b.ReportMetric(median(bare), "bare-msgs/s")
	b.ReportMetric(median(cons), "consume-msgs/s")
	b.ReportMetric(median(ratios), "ratio")
}

// BenchmarkConsumeWithProducer: one goroutine sends b.N messages (Send, one
// message per call) as fast as it can while Consume with 8 workers and a
// handler that does nothing consumes them on the same handle. Reports
// sent/s over the send window, consumed/s over the same window (messages
// handled by the time the last send returned), their ratio (target >=
// 0.9) and the backlog left when the sends ended. One op is one message.
func BenchmarkConsumeWithProducer(b *testing.B) {
	q := openQueue(b, b.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int64
	all := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- q.Consume(ctx, func(context.Context, queue.Message) error {
			if handled.Add(1) == int64(b.N) {
				close(all)
			}
			return nil
		}, queue.ConsumeWorkers(8))
	}()
	p := queue.Text(payload100)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := q.Send(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
	window := time.Since(start)
	consumed := handled.Load()
	b.StopTimer()
	select {
	case <-all:
	case <-time.After(time.Minute):
		b.Fatalf("consumed %d of %d messages a minute after the sends ended", handled.Load(), b.N)
	}
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	sent := float64(b.N) / window.Seconds()
	got := float64(consumed) / window.Seconds()
	b.ReportMetric(sent, "sent/s")
	b.ReportMetric(got, "consumed/s")
	b.ReportMetric(got/sent, "ratio")
	b.ReportMetric(float64(int64(b.N)-consumed), "backlog")
	b.ReportMetric(float64(window.Milliseconds()), "window-ms")
	if n, err := q.Stats(context.Background()); err == nil && n.Total != 0 {
		b.Fatalf("%d messages left after the drain", n.Total)
	}
}

// timedDrain pre-fills a fresh store with n messages, opens it, drains it
// with drain and returns the messages per second of the drain alone. The
// store is closed and removed before it returns.
func timedDrain(b *testing.B, n int, drain func(*testing.B, *queue.Queue, int)) float64 {
	b.StopTimer()
	dir := b.TempDir()
	prefillQueue(b, dir, n)
	q, err := queue.Open(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start := time.Now()
	drain(b, q, n)
	rate := float64(n) / time.Since(start).Seconds()
	b.StopTimer()
	if s, err := q.Stats(context.Background()); err != nil || s.Total != 0 {
		b.Fatalf("after the drain: %+v, %v; want an empty queue", s, err)
	}
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	return rate
}

// drainBatchAck is the bare loop: Receive(10), then one AckBatch of the
// receipts, until n messages were acked.
func drainBatchAck(b *testing.B, q *queue.Queue, n int) {
	ctx := context.Background()
	receipts := make([]string, 0, queue.MaxReceiveBatch)
	for got := 0; got < n; {
		msgs, err := q.Receive(ctx, min(queue.MaxReceiveBatch, n-got))
		if err != nil {
			b.Fatal(err)
		}
		if len(msgs) == 0 {
			b.Fatalf("queue empty after %d of %d messages", got, n)
		}
		receipts = receipts[:0]
		for _, m := range msgs {
			receipts = append(receipts, m.ReceiptHandle)
		}
		out, err := q.AckBatch(ctx, receipts)
		if err != nil {
			b.Fatal(err)
		}
		for i, o := range out {
			if o != queue.AckCurrent {
				b.Fatalf("receipt %d: %v", i, o)
			}
		}
		got += len(msgs)
	}
}

// consumeN runs Consume with workers workers and a handler that does
// nothing until n messages were handled, and returns once Consume has
// returned (so the last acks are written).
func consumeN(b *testing.B, q *queue.Queue, n, workers int) {
	var done atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- q.Consume(ctx, func(context.Context, queue.Message) error {
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil
		}, queue.ConsumeWorkers(workers))
	}()
	select {
	case <-all:
	case err := <-errc:
		b.Fatalf("Consume returned %v after %d of %d messages", err, done.Load(), n)
	}
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
