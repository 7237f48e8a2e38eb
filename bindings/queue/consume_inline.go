package queue

import (
	"sync"
	"sync/atomic"
	"time"
)

// inlineRunner runs a claimed batch on the dispatcher's goroutine, one
// handler after the other, which saves a goroutine hand-off per message
// while handlers are short and no worker is busy (the dispatcher decides
// when). When a handler is still running slowHandler after it began, the
// watch timer hands the messages not started yet to the workers (all idle
// when the batch began), so a handler that turns slow delays the rest of
// its batch by at most that. The dispatcher counts as one of the workers
// meanwhile: at most workers-1 messages are handed on at once; the rest
// wait, their leases extended, until the slow handler returns and then go
// to the first workers that free up.
//
// The acks of a batch go to the ack writer in one add when the batch ends
// (the dispatcher flushes them before its next claim), or, on an engine
// that writes acks and a claim in one go (driver.AckReceiver), to the
// dispatcher, which writes them with its next claim. From a hand-off to
// the end of the batch the runner is slow: the ones finished before the
// hand-off are flushed with it, and, as the dispatcher flushes nothing
// while it is in the slow handler, the batch's lease keeper flushes at
// every tick (a third of the lease) what the workers finished meanwhile:
// their leases are no longer extended, so their acks must not wait for the
// slow handler.
type inlineRunner struct {
	clk     clock
	workers int
	jobs    chan<- Message                   // the workers' queue; room for MaxReceiveBatch beyond the workers
	process func(*leaseKeeper, Message) bool // runs the handler, nacks a failure; true: ack
	acks    ackWriter
	note    func(d time.Duration) // a handler's duration, for the dispatcher's average
	lease   *leaseKeeper          // extends the batch's leases, the waiting ones included
	watch   timer                 // hands the rest of a batch on (handOff)
	out     []Message             // run's buffer for the acks it adds
	// kept, when set, takes the acks of a batch that ran with no hand-off
	// instead of the ack writer: the dispatcher writes them with its next
	// claim (driver.AckReceiver), or adds them to the ack writer before it
	// waits.
	kept *[]Message

	mu     sync.Mutex
	msgs   []Message // the batch running; nil between batches
	next   int       // msgs[next:] are not started
	handed int       // how many went to the workers
	done   []Message // handled, ack not added yet
	// slow is set by a hand-off until the batch ends (written under mu).
	slow atomic.Bool
}

// newInlineRunner returns the inline runner of c, timed by clk.
func newInlineRunner(c *consumer, clk clock) *inlineRunner {
	r := &inlineRunner{clk: clk, workers: c.o.workers, jobs: c.jobs, process: c.process, acks: c.acks, note: c.note}
	r.lease = c.newLeaseKeeper(clk)
	r.lease.waiting = r.eachWaiting
	r.lease.ticked = r.flushIfSlow
	r.watch = clk.AfterFunc(time.Hour, r.handOff)
	r.watch.Stop()
	if c.ackRecv != nil {
		r.kept = &c.carry
	}
	return r
}

// run handles msgs and returns how many of them it handed to the workers.
func (r *inlineRunner) run(msgs []Message) (handed int) {
	r.mu.Lock()
	r.msgs, r.next, r.handed = msgs, 0, 0
	r.mu.Unlock()
	// One lease keeper for the batch: its messages share a claim time and
	// lease, so the timer armed now extends each in time.
	r.lease.arm()
	defer r.lease.disarm()
	for {
		r.mu.Lock()
		if r.handed > 0 {
			// A handler here turned slow and handed workers-1 messages
			// on: what is left waits no longer (the dispatcher runs no
			// handler while workers are busy). Each goes with a lease
			// renewed now: it may wait in the queue for a worker, whose
			// lease keeper first extends a third of the lease after it
			// starts.
			for ; r.next < len(r.msgs); r.next++ {
				m := r.msgs[r.next]
				if err := r.lease.extend(r.lease.hctx, m.ReceiptHandle); err != nil {
					r.lease.log.Warn("consume: extending the lease of a waiting message failed", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
				}
				r.jobs <- m // never blocks: MaxReceiveBatch slots beyond the workers
				r.handed++
			}
		}
		if r.next == len(r.msgs) {
			handed = r.handed
			r.msgs, r.next = nil, 0
			if r.kept != nil {
				*r.kept = append(*r.kept, r.done...)
			} else {
				r.out = append(r.out[:0], r.done...)
			}
			clear(r.done)
			r.done = r.done[:0]
			r.slow.Store(false)
			r.mu.Unlock()
			r.acks.add(r.out...)
			clear(r.out) // drop the payloads
			r.out = r.out[:0]
			return handed
		}
		m := r.msgs[r.next]
		r.next++
		r.mu.Unlock()
		r.watch.Reset(slowHandler)
		began := r.clk.Now()
		ok := r.process(r.lease, m)
		d := r.clk.Now().Sub(began)
		r.watch.Stop()
		r.note(d)
		if !ok {
			continue
		}
		r.mu.Lock()
		if !r.slow.Load() {
			r.done = append(r.done, m)
			r.mu.Unlock()
			continue
		}
		r.mu.Unlock()
		r.acks.add(m) // beside the workers' acks; flushed with them after the batch
	}
}

// handOff gives the messages of the batch not started yet to the workers,
// at most workers-1 of them, and the acks of the batch's handled ones to
// the ack writer. It is the watch timer's function; a late call finds
// nothing left or no batch.
func (r *inlineRunner) handOff() {
	r.mu.Lock()
	for r.next < len(r.msgs) && r.handed < r.workers-1 {
		r.jobs <- r.msgs[r.next] // never blocks: the workers are idle, one slot each
		r.next++
		r.handed++
	}
	defer r.mu.Unlock()
	if r.msgs == nil {
		return // late: the batch ended
	}
	r.slow.Store(true)
	// Added under the lock: the batch cannot end (and Consume close its
	// ack writer) before they are in.
	r.acks.add(r.done...)
	clear(r.done)
	r.done = r.done[:0]
	r.acks.flush()
}

// eachWaiting calls fn on each message of the batch not started yet,
// holding the batch's lock (the lease keeper's waiting).
func (r *inlineRunner) eachWaiting(fn func(Message)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs[r.next:] {
		fn(m)
	}
}

// flushIfSlow flushes the acks added while a handler here is slow (the
// lease keeper's ticked).
func (r *inlineRunner) flushIfSlow() {
	if r.slow.Load() {
		r.acks.flush()
	}
}
