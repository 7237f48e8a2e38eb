package jsengine

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

var _ driver.WaitReceiver = (*Queue)(nil)

// longPollChunk bounds one long-poll pull request: a request the server
// lost (its consumer's leader moved) costs at most this long a wake-up.
const longPollChunk = 5 * time.Second

// ReceiveWait (driver.WaitReceiver) is Receive that, when nothing is due,
// sends a pull request for one message with an expiry (no no_wait): the
// server answers it as soon as a message is due for the consumer, sent by
// any handle or process, nacked, or its lease or schedule ended. The
// message gets its lease as in Receive (a past-maxAttempts delivery is
// moved and the wait goes on); a no-wait pull then adds up to max-1 more.
// A request expires after at most longPollChunk and is renewed until wait
// has passed.
//
// When ctx ends while a request is pending, the request cannot be taken
// back: a goroutine keeps its inbox until the request expires and releases
// (a plain Nak) what the server delivers to it meanwhile, so nothing stays
// hidden; that release counts a delivery the caller never saw.
func (q *Queue) ReceiveWait(ctx context.Context, max int, lease, wait time.Duration) ([]driver.Message, error) {
	end := time.Now().Add(wait)
	for {
		out, err := q.Receive(ctx, max, lease)
		if err != nil || len(out) > 0 {
			return out, err
		}
		left := time.Until(end)
		if left <= 0 {
			return nil, nil
		}
		inc := q.incarnation(ctx) // before the request: its delivery's (incarnation.go)
		m, err := q.longPoll(ctx, min(left, longPollChunk))
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue // expired, or a status: look again
		}
		d, ok := q.deliveryOf(m)
		if !ok {
			return nil, fmt.Errorf("fetch from %s: a delivery with ack subject %q", q.stream, m.Reply)
		}
		if q.spent(d) {
			q.moveSpent(ctx, []*nats.Msg{m})
			continue
		}
		first, err := q.leaseOne(ctx, m, d, lease, inc)
		if err != nil {
			return nil, err
		}
		out = []driver.Message{first}
		if max > 1 {
			if more, err := q.pull(ctx, max-1, lease); err == nil {
				out = append(out, more...)
			}
		}
		return out, nil
	}
}

// longPoll sends one pull request for one message expiring after d and
// waits for its answer: the delivery, or nil when it expired (or the
// server answered with another status).
func (q *Queue) longPoll(ctx context.Context, d time.Duration) (*nats.Msg, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	inbox := nats.NewInbox()
	sub, err := q.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	req := fmt.Sprintf(`{"batch":1,"expires":%d}`, d.Nanoseconds())
	if err := q.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.stream+"."+consumerName, inbox, []byte(req)); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	expires := time.Now().Add(d)
	// The server's expiry answer (408) comes at d; a second more covers a
	// late one before we stop listening.
	wctx, cancel := context.WithDeadline(ctx, expires.Add(time.Second))
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil {
				go q.releaseAbandoned(sub, expires)
				return nil, ctx.Err()
			}
			_ = sub.Unsubscribe()
			if wctx.Err() != nil {
				return nil, nil // no answer by the expiry: renew
			}
			return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
		}
		if status := m.Header.Get("Status"); status != "" || len(m.Data) == 0 && m.Reply == "" {
			if status == "100" { // heartbeat or flow control
				continue
			}
			_ = sub.Unsubscribe()
			if status == "503" { // no responders: the consumer has no leader yet
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(50 * time.Millisecond):
				}
			}
			return nil, nil // 408 expired, 409 leadership change, ...: renew
		}
		_ = sub.Unsubscribe() // a batch of one: the request is done
		return m, nil
	}
}

// releaseAbandoned keeps the inbox of a pull request whose waiter gave up
// until the request expires, and Naks (redelivers at once) a message the
// server delivers to it meanwhile.
func (q *Queue) releaseAbandoned(sub *nats.Subscription, expires time.Time) {
	defer sub.Unsubscribe()
	ctx, cancel := context.WithDeadline(context.Background(), expires.Add(time.Second))
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return
		}
		if status := m.Header.Get("Status"); status != "" || m.Reply == "" {
			if status == "100" {
				continue
			}
			return
		}
		if err := q.nc.Publish(m.Reply, nakDelay(0)); err == nil {
			_ = q.flush(ctx)
			q.woke()
		}
		return
	}
}

// leaseOne gives the delivery m its own lease, as pull does for each.
func (q *Queue) leaseOne(ctx context.Context, m *nats.Msg, d delivery, lease time.Duration, inc string) (driver.Message, error) {
	deadline := time.Now().Add(lease)
	if err := q.nc.Publish(m.Reply, nakDelay(lease)); err != nil {
		return driver.Message{}, fmt.Errorf("set lease of message %d: %w", d.seq, err)
	}
	// Not cut by ctx: the server handed the message over, so it goes to
	// the caller with its lease.
	if err := q.flush(context.WithoutCancel(ctx)); err != nil {
		return driver.Message{}, fmt.Errorf("set lease of message %d: %w", d.seq, err)
	}
	enq := d.stored
	if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
		enq = time.UnixMilli(v)
	}
	if !q.stillIncarnation(ctx, inc) {
		inc = noIncarnation // a reconnect or an election since the request: never acks
	}
	msg := driver.Message{
		ID:            int64(d.seq),
		ReceiptHandle: formatReceipt(deadline, lease, inc, m.Reply),
		Attempt:       int(d.delivered),
		Payload:       payloadOf(m.Header, m.Data),
		EnqueuedAt:    enq,
	}
	q.noteDelivery(d, msg.ReceiptHandle)
	return msg, nil
}
