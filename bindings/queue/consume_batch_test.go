package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// cbEngine is the SQLite engine with every handle counting its claims
// (Receive calls and the messages they returned) and its ack transactions.
type cbEngine struct{ c *cbCounts }

type cbCounts struct {
	mu       sync.Mutex
	claims   []int // messages per claim that returned any
	ackTx    int   // Ack calls plus AckBatch calls
	acked    int   // receipts acked
	ackSizes []int
}

func (e cbEngine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	q, err := sqlitequeue.Engine{}.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &cbQueue{Queue: q, c: e.c}, nil
}

type cbQueue struct {
	driver.Queue
	c *cbCounts
}

func (q *cbQueue) Receive(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
	ms, err := q.Queue.Receive(ctx, max, lease)
	if len(ms) > 0 {
		q.c.mu.Lock()
		q.c.claims = append(q.c.claims, len(ms))
		q.c.mu.Unlock()
	}
	return ms, err
}

func (q *cbQueue) Ack(ctx context.Context, receipt string) error {
	q.c.mu.Lock()
	q.c.ackTx++
	q.c.acked++
	q.c.ackSizes = append(q.c.ackSizes, 1)
	q.c.mu.Unlock()
	return q.Queue.Ack(ctx, receipt)
}

func (q *cbQueue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	q.c.mu.Lock()
	q.c.ackTx++
	q.c.acked += len(receipts)
	q.c.ackSizes = append(q.c.ackSizes, len(receipts))
	q.c.mu.Unlock()
	return q.Queue.AckBatch(ctx, receipts)
}

// TestConsumeClaimsAndAcksTogether: Consume writes at most one ack
// transaction per claim (the acks of everything its handlers finished
// since the last claim) plus one when it stops. 8 workers, handlers that
// are held until all 8 run, then released together.
func TestConsumeClaimsAndAcksTogether(t *testing.T) {
	t.Parallel()
	const workers, rounds = 8, 12
	counts := &cbCounts{}
	q, err := queue.OpenEngine(context.Background(), cbEngine{c: counts}, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	ps := make([]queue.Payload, workers*rounds)
	for i := range ps {
		ps[i] = queue.Text("m")
	}
	if err := q.SendBatch(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	// A barrier per round: the 8th handler of a round releases all 8.
	var mu sync.Mutex
	arrived := 0
	release := make(chan struct{})
	var handled atomic.Int64
	all := make(chan struct{})
	stop := hwConsume(t, q, func(context.Context, queue.Message) error {
		mu.Lock()
		arrived++
		r := release
		if arrived == workers {
			arrived = 0
			release = make(chan struct{})
			close(r)
		}
		mu.Unlock()
		select {
		case <-r:
		case <-time.After(hwTimeout):
			t.Error("a round's handlers were not all started together")
		}
		if handled.Add(1) == int64(len(ps)) {
			close(all)
		}
		return nil
	}, queue.ConsumeWorkers(workers))
	select {
	case <-all:
	case <-time.After(hwTimeout):
		t.Fatalf("handled %d of %d messages", handled.Load(), len(ps))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	if counts.acked != len(ps) {
		t.Fatalf("acked %d receipts, want %d", counts.acked, len(ps))
	}
	if counts.ackTx > len(counts.claims)+1 {
		t.Errorf("%d ack transactions %v for %d claims %v: want at most one per claim plus one at the end",
			counts.ackTx, counts.ackSizes, len(counts.claims), counts.claims)
	}
}

// TestConsumeShortHandlersThenASlowOne: after many short handlers Consume
// runs a claimed batch on its own goroutine; a handler there that turns
// slow must not hold up the rest of its batch. The first message of the
// last batch blocks until another message of the same batch was handled:
// that only finishes if the rest went to the workers.
func TestConsumeShortHandlersThenASlowOne(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	ctx := context.Background()
	const fast = 100
	ps := make([]queue.Payload, fast)
	for i := range ps {
		ps[i] = queue.Text("fast")
	}
	var handled atomic.Int64
	other := make(chan struct{}, 8)
	blockDone := make(chan error, 1)
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		switch m.Payload.Data {
		case "block":
			select {
			case <-other:
				blockDone <- nil
			case <-time.After(hwTimeout):
				blockDone <- errors.New("the rest of the batch waited for the slow handler")
			}
		case "other":
			other <- struct{}{}
		}
		handled.Add(1)
		return nil
	}, queue.ConsumeWorkers(8))
	if err := q.SendBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(hwTimeout); handled.Load() < fast; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d short messages", handled.Load(), fast)
		}
	}
	batch := []queue.Payload{queue.Text("block")}
	for range 7 {
		batch = append(batch, queue.Text("other"))
	}
	if err := q.SendBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := <-blockDone; err != nil {
		t.Fatal(err)
	}
}

// TestConsumeAcksNotHeldBySlowInlineHandler: acks of a batch of short
// handlers may ride with the next batch's; when a handler of that next
// batch turns slow, they are written anyway, not after it returns. While
// the slow handler runs only its own batch of 8 may be left in the store.
func TestConsumeAcksNotHeldBySlowInlineHandler(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	ctx := context.Background()
	fast := make([]queue.Payload, 96)
	for i := range fast {
		fast[i] = queue.Text("fast")
	}
	last := []queue.Payload{queue.Text("block")}
	for range 7 {
		last = append(last, queue.Text("other"))
	}
	for _, ps := range [][]queue.Payload{fast, last} {
		if err := q.SendBatch(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	blockDone := make(chan error, 1)
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		if m.Payload.Data != "block" {
			return nil
		}
		deadline := time.Now().Add(hwTimeout)
		for {
			n := hwCount(t, q)
			if n <= 8 {
				blockDone <- nil
				return nil
			}
			if time.Now().After(deadline) {
				blockDone <- fmt.Errorf("%d messages still in the store while the slow handler runs, want at most its batch of 8", n)
				return nil
			}
			time.Sleep(time.Millisecond)
		}
	}, queue.ConsumeWorkers(8))
	if err := <-blockDone; err != nil {
		t.Fatal(err)
	}
}
