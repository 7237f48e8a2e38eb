package queue_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// arEngine is the SQLite engine with every handle counting the receipts it
// is asked to ack, by AckReceive (carried with a claim) and by the ack
// writer's AckBatch and Ack; the first failFirst AckReceive calls with
// receipts fail without writing anything.
type arEngine struct{ s *arState }

type arState struct {
	mu         sync.Mutex
	carried    int // receipts acked by AckReceive calls that succeeded
	carries    int // AckReceive calls with receipts that succeeded
	batched    int // receipts of AckBatch and Ack calls
	failFirst  int
	failed     int
	notCurrent int // outcomes other than current
}

func (e arEngine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	q, err := sqlitequeue.Engine{}.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &arQueue{Queue: q, ar: q.(driver.AckReceiver), s: e.s}, nil
}

type arQueue struct {
	driver.Queue
	ar driver.AckReceiver
	s  *arState
}

func (q *arQueue) AckReceive(ctx context.Context, receipts []string, max int, lease time.Duration) ([]driver.AckOutcome, []driver.Message, error) {
	q.s.mu.Lock()
	if len(receipts) > 0 && q.s.failed < q.s.failFirst {
		q.s.failed++
		q.s.mu.Unlock()
		return nil, nil, errors.New("injected: the write failed")
	}
	q.s.mu.Unlock()
	out, ms, err := q.ar.AckReceive(ctx, receipts, max, lease)
	q.s.mu.Lock()
	defer q.s.mu.Unlock()
	if err == nil && len(receipts) > 0 {
		q.s.carries++
		q.s.carried += len(receipts)
		for _, o := range out {
			if o != driver.AckCurrent {
				q.s.notCurrent++
			}
		}
	}
	return out, ms, err
}

func (q *arQueue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	q.s.mu.Lock()
	q.s.batched += len(receipts)
	q.s.mu.Unlock()
	return q.Queue.AckBatch(ctx, receipts)
}

func (q *arQueue) Ack(ctx context.Context, receipt string) error {
	q.s.mu.Lock()
	q.s.batched++
	q.s.mu.Unlock()
	return q.Queue.Ack(ctx, receipt)
}

// TestConsumeCarriesAcksWithClaims: on an engine that writes acks and a
// claim in one commit (driver.AckReceiver), the acks of the batches
// Consume's dispatcher runs itself (short handlers) go with its next
// claim; every receipt is acked exactly once (carried or by the ack
// writer), every message handled once, and the queue is empty when
// Consume returns. When a carrying claim fails, its acks are written by
// the ack writer instead.
func TestConsumeCarriesAcksWithClaims(t *testing.T) {
	for _, failFirst := range []int{0, 2} {
		t.Run(map[int]string{0: "steady", 2: "failing claims"}[failFirst], func(t *testing.T) {
			t.Parallel()
			const n = 400
			s := &arState{failFirst: failFirst}
			q, err := queue.OpenEngine(context.Background(), arEngine{s: s}, t.TempDir(),
				queue.WithPollInterval(hwNoPoll), queue.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = q.Close() })
			ps := make([]queue.Payload, 100)
			for i := range ps {
				ps[i] = queue.Text("m")
			}
			for range n / len(ps) {
				if err := q.SendBatch(context.Background(), ps); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			seen := map[int64]int{}
			var handled atomic.Int64
			all := make(chan struct{})
			stop := hwConsume(t, q, func(_ context.Context, m queue.Message) error {
				mu.Lock()
				seen[m.ID]++
				mu.Unlock()
				if handled.Add(1) == n {
					close(all)
				}
				return nil
			}, queue.ConsumeWorkers(8), queue.ConsumeRetryDelay(0))
			select {
			case <-all:
			case <-time.After(hwTimeout):
				t.Fatalf("handled %d of %d messages", handled.Load(), n)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if st, err := q.Stats(context.Background()); err != nil || st.Total != 0 {
				t.Fatalf("after Consume returned: %+v, %v; want an empty queue", st, err)
			}
			mu.Lock()
			for id, k := range seen {
				if k != 1 {
					t.Errorf("message %d handled %d times", id, k)
				}
			}
			mu.Unlock()
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.carried+s.batched != n || s.notCurrent != 0 {
				t.Fatalf("%d receipts acked with claims, %d by the ack writer, %d not current: want %d in all, each current once",
					s.carried, s.batched, s.notCurrent, n)
			}
			if s.carries == 0 {
				t.Fatalf("no acks went with a claim (%d by the ack writer)", s.batched)
			}
			if s.failed != failFirst {
				t.Fatalf("%d carrying claims failed, want %d", s.failed, failFirst)
			}
		})
	}
}
