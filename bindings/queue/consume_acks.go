package queue

import (
	"context"
	"slices"
	"sync"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// ackWriter is the one way a handled message of Consume gets acked: the
// inline runner and the workers add what their handlers finished, and the
// writer writes it in batches (AckBatch) until close, which returns after
// everything added was written. Nothing else in Consume writes an ack.
type ackWriter interface {
	// add queues msgs for acking (the caller keeps the slice). It may
	// block while the writer is a full batch behind.
	add(msgs ...Message)
	// flush has what was added written now; adds alone wait for a
	// flush (or a full batch), so the acks of one claim's handlers go in
	// one write.
	flush()
	// close writes what was added and returns when all of it is written.
	close()
}

// batchAcker is Consume's ackWriter: one goroutine that writes one
// AckBatch at a time, each of everything added while the one before it
// ran (up to MaxAckBatch). When acks are the slower half the batches grow,
// so each costs the engine's per-batch work (a transaction on SQLite,
// which may share a group commit with the next claim; a stream read on
// JetStream) once for more messages; when they are not, a message is acked
// right after its handler returns, whichever goroutine ran it.
//
// An add wakes the goroutine only when a full batch is waiting; flush
// wakes it for whatever is there. A flushed message waits for its ack at
// most while one AckBatch runs plus its own: add blocks while a full batch
// is already waiting, so Consume claims no faster than the acks are
// written.
type batchAcker struct {
	write   func([]Message) // one AckBatch (consumer.ackBatch)
	mu      sync.Mutex
	cond    *sync.Cond // signalled by add, by a batch taken and by close
	pending []Message  // added, not taken yet
	idle    bool       // run waits (guarded by mu)
	flushed bool       // flush was called since run last took a batch (guarded by mu)
	closed  bool
	done    chan struct{} // closed when run returns
}

// newBatchAcker starts a batchAcker that writes with write.
func newBatchAcker(write func([]Message)) *batchAcker {
	a := &batchAcker{write: write, done: make(chan struct{}), pending: make([]Message, 0, 2*MaxAckBatch)}
	a.cond = sync.NewCond(&a.mu)
	go a.run()
	return a
}

func (a *batchAcker) add(msgs ...Message) {
	if len(msgs) == 0 {
		return
	}
	a.mu.Lock()
	for len(a.pending) >= MaxAckBatch {
		a.cond.Wait() // a full batch waits already: let the acks catch up
	}
	a.pending = append(a.pending, msgs...)
	wake := a.idle && len(a.pending) >= MaxAckBatch
	a.mu.Unlock()
	if wake {
		a.cond.Broadcast()
	}
}

func (a *batchAcker) flush() {
	a.mu.Lock()
	a.flushed = true
	wake := a.idle && len(a.pending) > 0
	a.mu.Unlock()
	if wake {
		a.cond.Broadcast()
	}
}

// run writes the added acks, one AckBatch at a time, until close.
func (a *batchAcker) run() {
	defer close(a.done)
	batch := make([]Message, 0, MaxAckBatch)
	for {
		a.mu.Lock()
		for !a.closed && (len(a.pending) == 0 || !a.flushed && len(a.pending) < MaxAckBatch) {
			a.idle = true
			a.cond.Wait()
		}
		a.idle = false
		if len(a.pending) == 0 {
			a.mu.Unlock()
			return // closed, and everything written
		}
		a.flushed = a.flushed && len(a.pending) > MaxAckBatch // the rest was flushed too
		full := len(a.pending) >= MaxAckBatch
		n := min(len(a.pending), MaxAckBatch)
		batch = append(batch[:0], a.pending[:n]...)
		rest := copy(a.pending, a.pending[n:])
		clear(a.pending[rest:]) // drop the payloads
		a.pending = a.pending[:rest]
		a.mu.Unlock()
		if full {
			a.cond.Broadcast() // an add may wait for room
		}
		a.write(batch)
		clear(batch)
	}
}

// close writes what was added and stops the goroutine. What is still
// waiting (up to MaxAckBatch) is written here, beside the AckBatch in
// flight, so Consume's return does not wait for two batches one after the
// other. Two AckBatches at once are fine: their messages differ.
func (a *batchAcker) close() {
	a.mu.Lock()
	a.closed = true
	var rest []Message
	if n := min(len(a.pending), MaxAckBatch); n > 0 {
		rest = slices.Clone(a.pending[:n])
		k := copy(a.pending, a.pending[n:])
		clear(a.pending[k:])
		a.pending = a.pending[:k]
	}
	a.mu.Unlock()
	a.cond.Broadcast()
	if len(rest) > 0 {
		a.write(rest)
	}
	<-a.done
}

// ackBatch acks msgs in one AckBatch, or one by one if that fails.
func (c *consumer) ackBatch(msgs []Message) {
	log := c.o.log
	outcomes, err := c.q.ackMany(c.hctx, msgs)
	if err != nil {
		for _, m := range msgs {
			if aerr := c.q.Ack(c.hctx, m.ReceiptHandle); aerr != nil {
				log.Warn("consume: ack failed; the message will be delivered again", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, aerr)
			}
		}
		return
	}
	c.logStale(msgs, outcomes)
}

// logStale logs each of msgs whose ack outcome was stale: its lease ended
// and it was delivered again before the ack.
func (c *consumer) logStale(msgs []Message, outcomes []driver.AckOutcome) {
	for i, o := range outcomes {
		if o == AckStale {
			m := msgs[i]
			c.o.log.Warn("consume: ack failed: the lease ended and the message was delivered again", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, ErrStaleReceipt)
		}
	}
}

// ackMany is Ack of several messages in one go (AckBatch), with each one's
// outcome. A stale receipt does not fail the others.
func (q *Queue) ackMany(ctx context.Context, msgs []Message) ([]driver.AckOutcome, error) {
	receipts := make([]string, len(msgs))
	for i, m := range msgs {
		receipts[i] = m.ReceiptHandle
	}
	outcomes, err := q.drv.AckBatch(ctx, receipts)
	if err != nil {
		return nil, opErr(err, "ack %d messages", len(msgs))
	}
	return outcomes, nil
}
