package jsengine

// Receive: no-wait pulls, each delivery's lease, and the catch-up that
// makes a receive see the process's own sends and nacks (ryw.go).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// catchUpWait bounds how long a Receive waits for the consumer to see the
// process's last write to the queue (see Receive).
const catchUpWait = 500 * time.Millisecond

// Receive pulls up to max messages (a raw no-wait pull request). A lease
// equal to the consumer's AckWait is the server's own; any other is given
// to each message with a Nak-with-delay (which counts no delivery), sent raw
// to the ack subject and flushed before the receipts are handed out (see
// pull).
//
// Read-your-writes: the consumer learns of stored messages asynchronously
// (on a replicated queue its leader may also be a follower of the stream
// that has not yet applied a send the stream's leader acknowledged);
// measured: a receive right after an acknowledged send found nothing, on a
// single node too, or one of two on a cluster. So when a pull gives fewer
// than max and the consumer has not yet delivered the last sequence this
// process wrote to the queue (by any handle: a send, a batch send, a
// redrive or dead-letter move into it; ryw.go) to anyone, Receive pulls
// again (1 ms, doubling, up to catchUpWait in all).
func (q *Queue) Receive(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	out, err := q.pullRetry(ctx, max, lease)
	if err != nil {
		return out, err
	}
	if len(out) == max {
		return q.catchUpNacks(ctx, out, max, lease), nil // only forgets what came
	}
	last := lastWrite(q.ident, q.stream) // ryw.go
	deadline := time.Now().Add(catchUpWait)
	for wait := time.Millisecond; len(out) < max && last > 0; wait = min(2*wait, 50*time.Millisecond) {
		seen := uint64(0)
		for _, m := range out {
			seen = max64(seen, uint64(m.ID))
		}
		if !q.catchUp(ctx, last, seen, deadline, wait) {
			break
		}
		more, err := q.pull(ctx, max-len(out), lease)
		if err != nil {
			return out, nil
		}
		out = append(out, more...)
	}
	return q.catchUpNacks(ctx, out, max, lease), nil
}

// catchUpNacks is read-your-nacks: the server applies an ack-subject
// message (our Nak) asynchronously, after the flush that confirmed it
// arrived; measured under the suite's parallel load: a receive right after
// a flushed no-delay nack did not get the nacked message. So while a
// message this handle nacked without a delay, under catchUpWait ago, is
// still stored and not yet received again, Receive pulls again (1 ms,
// doubling) until it comes, max are in, or catchUpWait passes.
func (q *Queue) catchUpNacks(ctx context.Context, out []driver.Message, max int, lease time.Duration) []driver.Message {
	deadline := time.Now().Add(catchUpWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		q.mu.Lock()
		for _, m := range out {
			delete(q.nacked, uint64(m.ID))
		}
		var waiting []uint64
		for seq, at := range q.nacked {
			if time.Since(at) > catchUpWait {
				delete(q.nacked, seq)
				continue
			}
			waiting = append(waiting, seq)
		}
		q.mu.Unlock()
		if len(waiting) == 0 || len(out) >= max || time.Now().After(deadline) {
			return out
		}
		for _, seq := range waiting {
			if ok, err := q.exists(ctx, seq); err == nil && !ok {
				q.mu.Lock()
				delete(q.nacked, seq) // acked or purged meanwhile
				q.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(wait):
		}
		more, err := q.pull(ctx, max-len(out), lease)
		if err != nil {
			return out
		}
		out = append(out, more...)
	}
}

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// electionWait bounds how long a call waits for a consumer leader (just
// after the consumer was created, or while its leader moves).
const electionWait = 5 * time.Second

// pullRetry is pull, retried while the consumer has no leader ("no
// responders": just created, or its leader moving).
func (q *Queue) pullRetry(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
	deadline := time.Now().Add(electionWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		out, err := q.pull(ctx, max, lease)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// pull is one no-wait pull request for up to max messages. A delivery's
// lease starts at the server when it hands the message out: if lease is the consumer's AckWait, that is the
// receive's lease, and the receipt's deadline is stamped before the pull
// request is sent (so it is never later than the server's). Otherwise each
// delivery gets its lease by a Nak with a delay, stamped before the Nak;
// the Naks of one pull are flushed once.
func (q *Queue) pull(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
	// A subscription per pull: JetStream sends a pull's deliveries with
	// their stream subject, so one wildcard inbox could not tell which
	// pull (and so which lease start) a late delivery belongs to. A
	// channel subscription, not a sync one: NextMsg on a sync subscription
	// took about 1 ms a message here, a channel about 0.1 ms (measured on
	// the embedded node). The channel holds every delivery of the pull and
	// the statuses that may follow, so the client never drops one.
	reply := nats.NewInbox()
	ch := make(chan *nats.Msg, max+4)
	sub, err := q.nc.ChanSubscribe(reply, ch)
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	defer sub.Unsubscribe()
	req := `{"batch":` + strconv.Itoa(max) + `,"no_wait":true}`
	inc := q.incarnation(ctx) // before the request: the deliveries' (incarnation.go)
	sent := time.Now()
	if err := q.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.stream+"."+consumerName, reply, []byte(req)); err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	nak := lease != q.ackWait
	var out []driver.Message
	var spent []*nats.Msg // past maxAttempts: moved, not delivered (deadletter.go)
recv:
	for len(out)+len(spent) < max {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-wctx.Done():
			if len(out)+len(spent) > 0 {
				break recv
			}
			return nil, fmt.Errorf("fetch from %s: %w", q.stream, wctx.Err())
		}
		q.answered() // incarnation.go's confirmServer
		if status := m.Header.Get("Status"); status != "" || len(m.Data) == 0 && m.Reply == "" {
			switch {
			case status == "100": // heartbeat or flow control
				continue
			case status == "503" && len(out) == 0: // what NextMsg made ErrNoResponders
				return nil, fmt.Errorf("fetch from %s: %w", q.stream, nats.ErrNoResponders)
			}
			break recv // 404 no messages, 408 request expired or pending, 409 ...
		}
		d, ok := q.deliveryOf(m)
		if !ok {
			return nil, fmt.Errorf("fetch from %s: a delivery with ack subject %q", q.stream, m.Reply)
		}
		if q.spent(d) {
			spent = append(spent, m)
			continue
		}
		deadline := sent.Add(lease)
		if nak {
			deadline = time.Now().Add(lease)
			if err := q.nc.Publish(m.Reply, nakDelay(lease)); err != nil {
				return nil, fmt.Errorf("set lease of message %d: %w", d.seq, err)
			}
		}
		enq := d.stored
		if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
			enq = time.UnixMilli(v)
		}
		out = append(out, driver.Message{
			ID:            int64(d.seq),
			ReceiptHandle: formatReceipt(deadline, lease, inc, m.Reply),
			Attempt:       int(d.delivered),
			Payload:       payloadOf(m.Header, m.Data),
			EnqueuedAt:    enq,
		})
	}
	if nak && len(out) > 0 {
		if err := q.flush(ctx); err != nil {
			return nil, fmt.Errorf("set leases: %w", err)
		}
	}
	if len(out) > 0 && !q.stillIncarnation(ctx, inc) {
		// A reconnect or an election during the pull: which life of the
		// consumer delivered is not known, so the receipts never ack.
		for i := range out {
			out[i].ReceiptHandle = strings.Replace(out[i].ReceiptHandle, ":"+inc+":", ":"+noIncarnation+":", 1)
		}
	}
	for _, m := range out {
		q.noteDelivery(delivery{seq: uint64(m.ID), delivered: uint64(m.Attempt)}, m.ReceiptHandle)
	}
	q.moveSpent(ctx, spent)
	return out, nil
}
