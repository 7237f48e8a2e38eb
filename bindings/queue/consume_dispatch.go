package queue

import (
	"context"
	"runtime"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// dispatch claims messages for idle workers until ctx ends: it runs a
// claimed batch itself (c.inline) while handlers are short and every
// worker is idle, and otherwise hands each message to a worker. Its claims
// run under c.hctx, a context that is never cancelled: a claim is short
// and never abandoned half way, and a context without Done starts no
// goroutine per statement in the store. ctx is looked at between claims.
func (c *consumer) dispatch(ctx context.Context) error {
	q := c.q
	idle := c.o.workers
	look := true // the store may hold due messages we have not claimed
	var local, hint <-chan struct{}
	var wakeAt time.Time
	backoff := time.Duration(0)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	cleanRun := false  // the last batch ran inline with no hand-off
	unflushed := false // a worker finished since the last flush
	for {
		short := c.avg >= 0 && c.avg < fastHandler
		// With short handlers a claim waits for every worker: the busy
		// ones are about to finish, and a claim for all of them runs
		// inline (below) instead of feeding workers one at a time. A
		// worker still busy after slowHandler ends the wait (evSlow).
		if look && idle > 0 && (idle == c.o.workers || !short) {
			if ctx.Err() != nil {
				return nil
			}
			// Take the wake channels first: a commit after this point
			// wakes us even if the claim below misses it.
			local, hint = q.drv.WaitChans()
			before := q.now()
			k := min(c.o.batch, idle)
			inline := idle == c.o.workers && short
			if inline && cleanRun && !c.o.batchSet {
				// The dispatcher runs this batch, and ran the last one
				// with no hand-off: a full claim (the workers take what
				// a handler there that turns slow leaves).
				k = MaxReceiveBatch
			}
			msgs, err := c.claim(k)
			switch {
			case err != nil && q.isClosed():
				return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
			case err != nil:
				backoff = min(max(2*backoff, minErrorBackoff), c.o.poll)
				c.o.log.Warn("consume: claim failed; retrying", logKeyStore, q.Path(), logKeyErr, err, logKeyRetryIn, backoff)
				look = false
				wakeAt = time.Now().Add(backoff)
			default:
				backoff = 0
				cleanRun = false
				if inline {
					// Short handlers and nobody busy: run the batch here,
					// one handler at a time (within the worker limit).
					handed := c.inline.run(msgs)
					cleanRun = handed == 0
					idle -= handed // its handler turned slow: the rest run on workers
				} else {
					for _, m := range msgs {
						idle--
						c.jobs <- m // never blocks: one slot per worker
					}
				}
				clear(msgs) // drop the payloads
				if len(msgs) < k {
					look = false
					wakeAt = q.wakeAt(ctx, before, c.o.poll)
				}
				// else full: there may be more, claimed when workers free up.
			}
			idle += c.drainFree()
			c.acks.flush() // written while the next claim runs, or before the wait
			unflushed = false
			if look && idle > 0 {
				continue // a full claim left idle workers: claim again
			}
		}
		if len(c.carry) > 0 {
			// No claim follows at once to take these acks along.
			c.acks.add(c.carry...)
			clear(c.carry) // drop the payloads
			c.carry = c.carry[:0]
			c.acks.flush()
		}
		// Gathering: waiting for busy workers that are likely about to
		// finish, at most slowHandler. With look (short handlers) for the
		// claim; without, for the acks: workers that finish together get
		// one flush (one AckBatch), not one each.
		gathering := look && idle > 0 || !look && unflushed && idle < c.o.workers
		if gathering {
			c.gather.Reset(slowHandler)
		}
		// Wait. With no idle worker only a freed worker matters: a claim
		// follows it if look is set, which a full claim always leaves set.
		if wr, ok := q.drv.(driver.WaitReceiver); ok && idle == c.o.workers && !look && backoff == 0 {
			// Every worker idle: the engine's server holds the claim open
			// until a message is due (no wake channels, no timer, no
			// poll). With a worker busy the wait below wakes when it
			// finishes.
			k := min(c.o.batch, idle)
			msgs, err := q.serverWait(ctx, wr, k, c.o.visibility, c.o.poll)
			switch {
			case err == nil:
				// Claimed messages are handled even if ctx ended meanwhile:
				// the workers settle them before Consume returns.
				for _, m := range msgs {
					idle--
					c.jobs <- m // never blocks: one slot per worker
				}
				if ctx.Err() != nil {
					return nil
				}
				look = len(msgs) == k // full: there may be more
				continue
			case ctx.Err() != nil:
				return nil
			case q.isClosed():
				return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
			default:
				backoff = min(max(2*backoff, minErrorBackoff), c.o.poll)
				c.o.log.Warn("consume: claim failed; retrying", logKeyStore, q.Path(), logKeyErr, err, logKeyRetryIn, backoff)
				wakeAt = time.Now().Add(backoff) // the wait below, on its timer
			}
		}
		var lc, hc <-chan struct{}
		var tc <-chan time.Time
		waiting := idle > 0 && !look
		if waiting {
			lc, hc = local, hint
			timer.Reset(time.Until(wakeAt))
			tc = timer.C
			q.waiting.Add(1)
		}
		ev, d := c.wait(ctx, lc, hc, tc)
		if waiting {
			q.waiting.Add(-1)
			timer.Stop()
		}
		if gathering && !c.gather.Stop() && ev != evSlow {
			<-c.slow // fired meanwhile: take its signal
		}
		switch ev {
		case evStop:
			return nil
		case evClosed:
			return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
		case evFree:
			c.note(d)
			if look {
				// Workers of one claim tend to finish together: let the
				// ones already runnable do so, so the next claim takes a
				// batch for all of them instead of one message each.
				runtime.Gosched()
			}
			idle += 1 + c.drainFree()
			unflushed = true
			if !look && idle == c.o.workers {
				c.acks.flush() // no claim follows to flush them, and no worker is busy
				unflushed = false
			}
		case evWake:
			look = true
		case evSlow:
			c.note(slowHandler) // a busy worker ran past it: claim for the idle ones
			if !look {
				c.acks.flush() // what the others finished
				unflushed = false
			}
		}
	}
}

// claim is Receive of up to k messages under the never-cancelled hctx,
// into the dispatcher's reused buffer (valid until the next claim). The
// acks in c.carry are written in the same commit (AckReceive); if that
// fails they go to the ack writer, which tries again.
func (c *consumer) claim(k int) ([]Message, error) {
	var dms []driver.Message
	var err error
	if len(c.carry) > 0 {
		c.receipts = c.receipts[:0]
		for _, m := range c.carry {
			c.receipts = append(c.receipts, m.ReceiptHandle)
		}
		var outcomes []driver.AckOutcome
		outcomes, dms, err = c.ackRecv.AckReceive(c.hctx, c.receipts, k, c.o.visibility)
		if err != nil {
			c.acks.add(c.carry...) // flushed after the claim
		} else {
			c.logStale(c.carry, outcomes)
		}
		clear(c.carry) // drop the payloads
		c.carry = c.carry[:0]
		clear(c.receipts)
	} else {
		dms, err = c.q.drv.Receive(c.hctx, k, c.o.visibility)
	}
	if err != nil {
		return nil, opErr(err, "receive")
	}
	msgs := c.claimed[:0]
	for _, m := range dms {
		msgs = append(msgs, Message{ID: m.ID, ReceiptHandle: m.ReceiptHandle, Attempt: m.Attempt,
			Payload: payloadOf(m.Payload), EnqueuedAt: m.EnqueuedAt, Attributes: attrsOf(m.Payload.Attrs)})
	}
	c.claimed = msgs
	return msgs, nil
}

// drainFree counts (and takes) the finished-worker events waiting in
// c.done, noting each handler's duration.
func (c *consumer) drainFree() int {
	n := 0
	for {
		select {
		case d := <-c.done:
			n++
			c.note(d)
		default:
			return n
		}
	}
}

// Events that end a wait of the dispatcher.
const (
	evStop   = iota // ctx ended
	evClosed        // the queue handle was closed
	evFree          // a worker finished
	evWake          // a reason to look at the store
	evSlow          // a worker waited for ran past slowHandler
)

// wait blocks until something the dispatcher reacts to happens; for evFree
// it returns the finished handler's duration. Nil channels are never
// ready.
func (c *consumer) wait(ctx context.Context, lc, hc <-chan struct{}, tc <-chan time.Time) (int, time.Duration) {
	select {
	case <-ctx.Done():
		return evStop, 0
	case <-c.q.drv.Done():
		return evClosed, 0
	case d := <-c.done:
		return evFree, d
	case <-lc:
		return evWake, 0
	case <-hc:
		return evWake, 0
	case <-tc:
		return evWake, 0
	case <-c.slow:
		return evSlow, 0
	}
}
