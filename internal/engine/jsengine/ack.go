package jsengine

// Ack and AckBatch: a live receipt's +ACK, confirmed before its lease
// ends; a stale one refused.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

func (q *Queue) Ack(ctx context.Context, s string) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if !ok {
		return nil // never issued: a no-op, as the format specifies
	}
	if !q.live(s, r) {
		gone, err := q.gone(ctx, r)
		if err != nil || gone {
			if err == nil && ackPath != nil {
				ackPath(r.seq, "gone")
			}
			return err
		}
		return driver.ErrStaleReceipt
	}
	if err := q.ackLive(ctx, s, r); err != nil {
		return err
	}
	if q.replicated {
		if err := q.waitGone(ctx, r.seq); err != nil {
			return err
		}
	}
	if ackPath != nil {
		ackPath(r.seq, "live")
	}
	return nil
}

// ackPath, when set (by the package's tests, before any Ack), is told how
// each Ack that returns nil got there: "live" (the receipt's lease was
// live: its ack was confirmed and, on a replicated stream, the removal
// seen) or "gone" (a receipt past its lease, or acked or nacked by this
// handle, whose message is no longer stored: nothing was acked). The fault
// test tells an id acked twice from one acked once and looked at again.
var ackPath func(seq uint64, path string)

// ackLive sends the ack of the live receipt s (parsed: r) and waits for the
// consumer's reply, then forgets the receipt's nack, extension and last
// error. On a replicated stream the message may still be stored when it
// returns (see waitGone).
//
// The consumer's reply must come before the receipt's lease ends: JetStream
// applies an ack to whatever delivery of the message is current when it
// arrives, so a +ACK that reaches the server later (sent while the
// connection was reconnecting, then flushed from nats.go's buffer; or held
// up by an election) may have acked a redelivery instead. Such an Ack
// returns an error (the message may be acked or delivered again), not nil;
// Ack again with the same receipt once the outcome shows: nil if the
// message is gone.
func (q *Queue) ackLive(ctx context.Context, s string, r receipt) error {
	dl, _ := q.deadline(s, r)
	actx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	if err := q.requestAck(actx, s, r); err != nil {
		if errors.Is(err, driver.ErrStaleReceipt) {
			return err
		}
		if ctx.Err() == nil && actx.Err() != nil {
			return fmt.Errorf("ack message %d: no reply before the receipt's lease ended (%s): the ack may have taken effect or the message be delivered again: %w",
				r.seq, dl.UTC().Format(time.RFC3339Nano), err)
		}
		return fmt.Errorf("ack message %d: %w", r.seq, err)
	}
	q.dropLastError(ctx, r.reply) // lasterror.go
	q.mu.Lock()
	q.dead[s] = dl // acked: a later nack or extend by this handle acts on nothing
	delete(q.extended, s)
	delete(q.nacked, r.seq)
	q.pruneLocked()
	q.mu.Unlock()
	return nil
}

// requestAck sends the +ACK of receipt s (parsed: r) and waits for the
// consumer's reply. "No responders" means no server took the ack (the
// consumer has no leader: a failover), so it is sent again, 50 ms doubling
// up to 500 ms apart, while the receipt is live; unless the server says
// the consumer is gone (the stream or consumer was deleted), which ends it
// at once.
func (q *Queue) requestAck(ctx context.Context, s string, r receipt) error {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		_, err := q.nc.RequestWithContext(ctx, r.reply, []byte("+ACK"))
		if !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		ictx, cancel := context.WithTimeout(ctx, readTry)
		_, ierr := q.cons.Info(ictx)
		cancel()
		if errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("no server took the ack of message %d: the queue's consumer is gone: %w", r.seq, ierr)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if !q.live(s, r) {
			// Certain: nothing took an ack, the message is delivered again.
			return fmt.Errorf("%w: no server took the ack of message %d before the lease ended (%v)", driver.ErrStaleReceipt, r.seq, err)
		}
		if ctx.Err() != nil {
			// The caller's deadline, not the lease: nothing took the ack
			// and the receipt is still good for another.
			return fmt.Errorf("no server took the ack of message %d (%v): %w", r.seq, err, ctx.Err())
		}
	}
}

// AckBatch decides each receipt's outcome as Ack decides it, with the
// requests of the batch in flight together (JetStream acks one delivery
// per request). Whether each message is still stored comes from one
// stream read for the whole batch (a presence, presence.go), or from a get
// each when the stream's deleted list is too long for that; then each live
// receipt's ack, concurrently; on a replicated stream AckBatch then waits
// until the stream no longer holds the acked messages, as Ack does (one
// stream read per check for all of them). A receipt twice in one batch, or
// two receipts of one message, ack it once: the later ones are AckGone. On
// an error some of the batch may be acked; Consume then acks each message
// on its own, and an acked one is AckGone/a no-op then.
func (q *Queue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	out := make([]driver.AckOutcome, len(receipts))
	rs := make([]receipt, len(receipts))
	live := make([]bool, len(receipts))
	var idx []int // parsed receipts
	for i, s := range receipts {
		r, ok := q.parseReceipt(s)
		if !ok {
			out[i] = driver.AckGone // never issued: a no-op, as the format specifies
			continue
		}
		rs[i], live[i] = r, q.live(s, r)
		idx = append(idx, i)
	}
	if len(idx) == 0 {
		return out, nil
	}
	// Is each message still stored: a live receipt acked already, by a
	// handle that shared it, or purged, is gone, and JetStream would take
	// a second +ACK without a word. The first live receipt of a message
	// acks it; later receipts of it in the batch are gone.
	first := make(map[uint64]int, len(idx))
	for _, i := range idx {
		if _, dup := first[rs[i].seq]; !dup && live[i] {
			first[rs[i].seq] = i
		}
	}
	var p *presence
	if len(idx) > 1 {
		var err error
		if p, err = q.readPresence(ctx); err != nil {
			return nil, err
		}
	}
	acked := make([]bool, len(receipts))
	if err := parallel(len(idx), func(k int) error {
		i := idx[k]
		var held bool
		if p != nil {
			held = p.holds(rs[i].seq)
		} else {
			var err error
			if held, err = q.exists(ctx, rs[i].seq); err != nil {
				return err
			}
		}
		switch {
		case !held:
			out[i] = driver.AckGone
			return nil
		case !live[i]:
			out[i] = driver.AckStale
			return nil
		case first[rs[i].seq] != i:
			// Acked by its first receipt in the batch (decided before
			// the re-check below: that ack, running in parallel, makes
			// this receipt dead in the handle).
			out[i] = driver.AckGone
			return nil
		case !q.live(receipts[i], rs[i]): // stale by now
			out[i] = driver.AckStale
			return nil
		}
		if err := q.ackLive(ctx, receipts[i], rs[i]); errors.Is(err, driver.ErrStaleReceipt) {
			out[i] = driver.AckStale // no server took it (requestAck)
			return nil
		} else if err != nil {
			return err
		}
		out[i], acked[i] = driver.AckCurrent, true
		return nil
	}); err != nil {
		return nil, err
	}
	if !q.replicated {
		return out, nil
	}
	var seqs []uint64
	for i, a := range acked {
		if a {
			seqs = append(seqs, rs[i].seq)
		}
	}
	if len(seqs) == 0 {
		return out, nil
	}
	if err := q.waitAllGone(ctx, seqs); err != nil {
		return nil, err
	}
	return out, nil
}

// parallel runs f(0..n-1) concurrently, at most 16 at a time, and returns
// the first error.
func parallel(n int, f func(k int) error) error {
	if n == 1 {
		return f(0)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 16)
	for k := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(k); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
