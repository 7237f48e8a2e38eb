package jsengine

// Settling a delivery other than by an ack (Nack, Extend), and waiting
// on a replicated stream until an ack's removal is visible.

import (
	"context"
	"fmt"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// ackSettle bounds waitGone.
const ackSettle = 5 * time.Second

// readTry bounds one read of the stream in waitGone.
const readTry = time.Second

// waitGone waits until the stream no longer holds seq. On a replicated
// stream the ack's reply comes from the consumer's leader before the
// stream's leader has removed the message (measured: Peek right after an
// acknowledged ack still showed it); an Ack returns once the removal is
// visible, so the caller reads its own ack. The removal is a second Raft
// round (the stream leader proposes it once it applied the consumer's ack):
// measured on the loopback cluster, the first check found the message still
// stored for most acks (1.8 checks an ack), so the first pause is 250 µs,
// not 1 ms (Ack on R3 about 3.9 -> 1.8 ms in a loaded probe).
//
// Each read has its own timeout (readTry) and a failed read is tried again
// until ackSettle or, if later, the caller's deadline: a read sent while
// the stream has no leader (an election) is answered by no one, and was
// waited for the caller's whole deadline before (TestAckWhileStreamElects).
func (q *Queue) waitGone(ctx context.Context, seq uint64) error {
	settle := time.Now().Add(ackSettle) // for a message still stored, from the last failed read
	deadline := settle                  // for reads that fail
	if d, ok := ctx.Deadline(); ok && d.After(deadline) {
		deadline = d
	}
	for wait := 250 * time.Microsecond; ; wait = min(2*wait, 50*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, readTry)
		ok, err := q.exists(rctx, seq)
		cancel()
		if err == nil && !ok {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("ack message %d: %w", seq, ctx.Err())
		}
		if err != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("ack message %d: the ack was confirmed, the stream not read since: %w", seq, err)
			}
			settle = time.Now().Add(ackSettle) // counts from a read that works
		}
		if err == nil && time.Now().After(settle) {
			return fmt.Errorf("ack message %d: still stored %s after the ack was confirmed", seq, ackSettle)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// gone reports whether receipt r's message is no longer stored. A read
// that fails (the stream has no leader: no one answers) is tried again,
// each with its own timeout (readTry), until ctx's deadline or, without
// one, for electionWait.
func (q *Queue) gone(ctx context.Context, r receipt) (bool, error) {
	deadline := time.Now().Add(electionWait)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, readTry)
		ok, err := q.exists(rctx, r.seq)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return !ok, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (q *Queue) Nack(ctx context.Context, s string, delay time.Duration) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if !ok {
		return nil
	}
	q.confirmServer(ctx)
	if !q.live(ctx, s, r) {
		gone, err := q.gone(ctx, r)
		if err != nil || gone {
			return err
		}
		return driver.ErrStaleReceipt
	}
	// A request, not a publish and flush: the consumer takes acks and naks
	// from a queue of its own, so a pull sent right after a flushed Nak
	// could be served before it and hand out later messages first (seen
	// once in CI: Order/RedeliveryKeepsPlace received [m2,m3,m1]). The
	// consumer replies once it has applied the Nak.
	if _, err := q.nc.RequestWithContext(ctx, r.reply, nakDelay(delay)); err != nil {
		return fmt.Errorf("nack message %d: %w", r.seq, err)
	}
	q.mu.Lock()
	dl := r.deadline
	if e, ok := q.extended[s]; ok {
		dl = e
	}
	q.dead[s] = dl // an ack after this handle's own nack is refused
	delete(q.extended, s)
	if delay <= 0 {
		q.nacked[r.seq] = time.Now()
	} else {
		delete(q.nacked, r.seq) // not due yet: nothing to wait for
	}
	q.pruneLocked()
	q.mu.Unlock()
	q.woke()
	return nil
}

func (q *Queue) Extend(ctx context.Context, s string, d time.Duration) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if !ok {
		return bindings.Errorf(bindings.CodeInvalidInput, "receipt: %q is not a receipt of jetstream queue %q", s, q.name)
	}
	q.confirmServer(ctx)
	exists, err := q.exists(ctx, r.seq)
	if err != nil {
		return err
	}
	if !exists {
		return driver.ErrMessageGone
	}
	if !q.live(ctx, s, r) {
		return driver.ErrStaleReceipt
	}
	deadline := time.Now().Add(d)
	if err := q.nc.Publish(r.reply, nakDelay(d)); err != nil {
		return fmt.Errorf("extend message %d: %w", r.seq, err)
	}
	if err := q.flush(ctx); err != nil {
		return fmt.Errorf("extend message %d: %w", r.seq, err)
	}
	q.mu.Lock()
	q.extended[s] = deadline
	q.pruneLocked()
	q.mu.Unlock()
	return nil
}
