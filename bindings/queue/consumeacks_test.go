package queue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// pipeEngine is the SQLite engine with a gate on AckBatch: the first
// AckBatch waits until the gate opens, so the test sees what Consume does
// while an ack is in flight.
type pipeEngine struct{ p *pipeState }

type pipeState struct {
	mu                sync.Mutex
	ackSizes          []int // receipts per AckBatch, in call order
	acked             int   // receipts whose AckBatch returned
	inAck             atomic.Int32
	claimsWhileAcking atomic.Int32
	gate              chan struct{} // the first AckBatch waits for it
	first             atomic.Bool
	begun             chan struct{} // closed when the first AckBatch began
}

func (e pipeEngine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	q, err := sqlitequeue.Engine{}.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &pipeQueue{Queue: q, p: e.p}, nil
}

type pipeQueue struct {
	driver.Queue
	p *pipeState
}

func (q *pipeQueue) Receive(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
	if q.p.inAck.Load() > 0 {
		q.p.claimsWhileAcking.Add(1)
	}
	return q.Queue.Receive(ctx, max, lease)
}

func (q *pipeQueue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	q.p.inAck.Add(1)
	defer q.p.inAck.Add(-1)
	q.p.mu.Lock()
	q.p.ackSizes = append(q.p.ackSizes, len(receipts))
	q.p.mu.Unlock()
	if q.p.first.CompareAndSwap(false, true) {
		close(q.p.begun)
		select {
		case <-q.p.gate:
		case <-time.After(2 * hwTimeout): // after the tests' own waits
		}
	}
	out, err := q.Queue.AckBatch(ctx, receipts)
	q.p.mu.Lock()
	q.p.acked += len(receipts)
	q.p.mu.Unlock()
	return out, err
}

// TestConsumePipelinedAcks: Consume claims and runs the next messages
// while an AckBatch is in flight, and returns only once every ack was
// written. The first AckBatch is held until every message was handled:
// if Consume waited in it, no claim would follow (the test then fails
// after hwTimeout). That the acks finished meanwhile go in one batch after
// it is TestBatchAckerWritesOnFlushOrFullBatch's.
func TestConsumePipelinedAcks(t *testing.T) {
	t.Parallel()
	const n, workers = 60, 4
	p, q, stop, handled := consumePiped(t, n, workers)
	if all, k := handled(); !all {
		t.Errorf("handled %d of %d messages while the first AckBatch was held", k, n)
	}
	close(p.gate)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acked != n {
		t.Fatalf("Consume returned with %d of %d receipts acked (AckBatch sizes %v)", p.acked, n, p.ackSizes)
	}
	if c := p.claimsWhileAcking.Load(); c == 0 {
		t.Errorf("no claim while an AckBatch was in flight")
	}
	if st, err := q.Stats(context.Background()); err != nil || st.Total != 0 {
		t.Errorf("after Consume: %+v, %v; want an empty queue", st, err)
	}
}

// TestConsumeStopAcksBesideInFlight: when Consume stops while an AckBatch
// is in flight, the acks still waiting are written beside it, not after it.
// The first AckBatch is held until a second one has started (the test
// fails after hwTimeout if that waits for the first), then released.
func TestConsumeStopAcksBesideInFlight(t *testing.T) {
	t.Parallel()
	const n, workers = 40, 4
	p, _, stop, handled := consumePiped(t, n, workers)
	if all, k := handled(); !all {
		t.Fatalf("handled %d of %d messages while the first AckBatch was held", k, n)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	deadline := time.Now().Add(hwTimeout)
	for {
		p.mu.Lock()
		calls := len(p.ackSizes)
		p.mu.Unlock()
		if calls >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("Consume stopping: no AckBatch beside the held one after %s (%d calls)", hwTimeout, calls)
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(p.gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.acked != n {
		t.Fatalf("Consume returned with %d of %d receipts acked (AckBatch sizes %v)", p.acked, n, p.ackSizes)
	}
}

// consumePiped fills a queue on a pipeEngine with n messages and starts
// Consume on it with workers; handled waits up to hwTimeout for all n to be
// handled and says whether they were, and how many were.
func consumePiped(t *testing.T, n, workers int) (*pipeState, *queue.Queue, func() error, func() (bool, int64)) {
	t.Helper()
	p := &pipeState{gate: make(chan struct{}), begun: make(chan struct{})}
	q, err := queue.OpenEngine(context.Background(), pipeEngine{p: p}, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	ps := make([]queue.Payload, n)
	for i := range ps {
		ps[i] = queue.Text("m")
	}
	if err := q.SendBatch(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	var handled, started atomic.Int64
	all := make(chan struct{})
	stop := hwConsume(t, q, func(context.Context, queue.Message) error {
		// Past the workers' first claim, wait for the first AckBatch to
		// begin, so the claims that follow run while it is in flight.
		if started.Add(1) > int64(workers) {
			select {
			case <-p.begun:
			case <-time.After(hwTimeout):
			}
		}
		if handled.Add(1) == int64(n) {
			close(all)
		}
		return nil
	}, queue.ConsumeWorkers(workers))
	return p, q, stop, func() (bool, int64) {
		select {
		case <-all:
			return true, handled.Load()
		case <-time.After(hwTimeout):
			return false, handled.Load()
		}
	}
}
