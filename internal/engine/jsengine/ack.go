package jsengine

// Ack and AckBatch: a live receipt's +ACK, confirmed before its lease
// ends; a stale one refused.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	q.confirmServer(ctx)
	if !q.live(ctx, s, r) {
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
	if refusedAck(q.stream, r.seq) {
		<-ctx.Done() // as if the consumer's reply were lost
		return fmt.Errorf("ack message %d: no reply (injected fault): %w", r.seq, ctx.Err())
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		_, err := q.nc.RequestWithContext(ctx, r.reply, []byte("+ACK"))
		if err == nil {
			q.answered()
		}
		if !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		ictx, cancel := context.WithTimeout(ctx, readTry)
		tok, ierr := q.readIncarnation(ictx)
		cancel()
		if errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("no server took the ack of message %d: the queue's consumer is gone: %w", r.seq, ierr)
		}
		if ierr == nil && tok != r.inc {
			// A new leader answers: nothing took the ack, and the
			// receipt is of the last one (incarnation.go).
			return fmt.Errorf("%w: no server took the ack of message %d before the consumer's leader changed (%v)", driver.ErrStaleReceipt, r.seq, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		if !q.live(ctx, s, r) {
			// Certain: nothing took an ack, the message is delivered again.
			return fmt.Errorf("%w: no server took the ack of message %d before the lease ended or the consumer's incarnation changed (%v)", driver.ErrStaleReceipt, r.seq, err)
		}
		if ctx.Err() != nil {
			// The caller's deadline, not the lease: nothing took the ack
			// and the receipt is still good for another.
			return fmt.Errorf("no server took the ack of message %d (%v): %w", r.seq, err, ctx.Err())
		}
	}
}

// refusedAcks holds the "<stream> <seq>" whose acks get no reply: the
// tests' fault injection (export_test.go's RefuseAck), as if the
// consumer's answer were lost. refusing counts them, so an ack reads the
// map only while a test set one.
var (
	refusedAcks sync.Map
	refusing    atomic.Int32
)

func refusedAck(stream string, seq uint64) bool {
	if refusing.Load() == 0 {
		return false
	}
	_, ok := refusedAcks.Load(stream + " " + strconv.FormatUint(seq, 10))
	return ok
}
