package jsengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Headers of a queue message.
const (
	hdrType     = "Lc-Type"        // "text" or "json"
	hdrEnqueued = "Lc-Enqueued-Ms" // send time, Unix milliseconds
	// hdrAttrs holds the message's attributes (queue.WithAttributes), the
	// JSON of queue.Attributes; absent when it has none.
	hdrAttrs = "Lc-Attributes"
)

// payloadOf is the payload of a stored message: its data, its type and
// attributes from its headers.
func payloadOf(h nats.Header, data []byte) driver.Payload {
	p := driver.Payload{Type: h.Get(hdrType), Data: string(data)}
	if a := h.Get(hdrAttrs); a != "" {
		p.Attrs = []byte(a)
	}
	return p
}

// copyAttrs carries the attributes header of from, if any, to to (a dead
// letter, a redrive).
func copyAttrs(to, from nats.Header) {
	if a := from.Get(hdrAttrs); a != "" {
		to.Set(hdrAttrs, a)
	}
}

// Queue is an open queue of the JetStream engine (QueueEngine.Open returns
// it as a driver.Queue): a handle, as *sqlitequeue.Queue is the SQLite
// engine's. Its methods are spread by concern: provisioning in
// provision.go, receipts and the handle's receipt state in receipt.go,
// Receive and read-your-writes in receive.go and ryw.go, Ack and AckBatch
// in ack.go, Nack, Extend and the wait for a replicated ack in settle.go,
// Purge, Peek and Stats in inspect.go; sends, the handle's state and
// lifecycle here.
type Queue struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	st      jetstream.Stream
	cons    jetstream.Consumer
	name    string
	subject string
	stream  string
	// replicated: the stream has more than one replica (see waitGone and
	// Receive).
	replicated bool
	// dedupWindow is the stream's duplicates window (dedup.go).
	dedupWindow time.Duration
	// ackWait is the consumer's AckWait: a receive with this lease needs
	// no Nak (see pull).
	ackWait time.Duration
	// ident names the server or cluster: with stream, the key of the
	// process's record of its last write (ryw.go).
	ident string
	// presence: how AckBatch reads the stream (presence.go).
	presence presenceState
	// direct: whether AckBatch may read with direct gets (direct.go).
	direct directState
	// inc: the consumer's incarnation, which receipts carry
	// (incarnation.go).
	inc      incarnations
	notifier interface{ MessageDue() }
	readOnly bool
	dl       *deadLetters // the policy and move targets (deadletter.go)
	url      string
	done     chan struct{}

	mu       sync.Mutex
	closed   bool
	wake     chan struct{}        // closed and replaced by each local send or nack
	dead     map[string]time.Time // receipts this handle nacked: until their deadline
	extended map[string]time.Time // receipts this handle extended: their new deadline
	// nacked holds the messages this handle nacked without a delay and has
	// not seen redelivered since: when, by stream sequence (see Receive).
	nacked map[uint64]time.Time
	// pruneAt is the size of the receipt maps at which pruneLocked next
	// walks them.
	pruneAt int
}

func (q *Queue) Location() string { return q.name }
func (q *Queue) Path() string     { return "jetstream:" + q.url + "/" + q.stream }

func (q *Queue) check(write bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return errors.New("queue is closed")
	}
	if write && q.readOnly {
		return errors.New("queue is read-only")
	}
	return nil
}

// woke tells this process's waiters and the notifier that a message may be
// due.
func (q *Queue) woke() {
	q.mu.Lock()
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
	if q.notifier != nil {
		q.notifier.MessageDue()
	}
}

// message builds one message of a send; every message of one send carries
// the same send time (enqueuedMs), as a batch is enqueued at one moment.
func (q *Queue) message(p driver.Payload, subject string, enqueuedMs int64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(p.Data)
	m.Header.Set(hdrType, p.Type)
	m.Header.Set(hdrEnqueued, strconv.FormatInt(enqueuedMs, 10))
	if len(p.Attrs) > 0 {
		m.Header.Set(hdrAttrs, string(p.Attrs))
	}
	return m
}

// Send publishes one message, or an atomic batch (all or none, server
// 2.12+) of several; a delay makes each a message schedule ("@at" with
// sub-second precision) that the server publishes to the queue's subject
// when due. The ids are the stream sequences of the messages (an atomic
// batch is stored in one run of sequences, ending at the commit's); a
// delayed message has none yet (0): the server stores it when it is due.
func (q *Queue) Send(ctx context.Context, ps []driver.Payload, delay time.Duration) ([]int64, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	msgs := make([]*nats.Msg, len(ps))
	now := time.Now().UnixMilli()
	for i, p := range ps {
		if delay > 0 {
			m := q.message(p, "lcqs."+q.name+"."+uuid.NewString(), now)
			at := time.Now().Add(delay).UTC().Format(time.RFC3339Nano)
			m.Header.Set("Nats-Schedule", "@at "+at)
			m.Header.Set("Nats-Schedule-Target", q.subject)
			msgs[i] = m
		} else {
			msgs[i] = q.message(p, q.subject, now)
		}
	}
	var ack *jetstream.PubAck
	var err error
	if len(msgs) == 1 {
		if ack, err = q.js.PublishMsg(ctx, msgs[0]); err != nil {
			return nil, fmt.Errorf("publish to %s: %w", q.stream, err)
		}
	} else if ack, err = q.publishBatch(ctx, msgs); err != nil {
		return nil, err
	}
	ids := make([]int64, len(ps))
	if delay == 0 {
		noteWrite(q.ident, q.stream, ack.Sequence) // ryw.go
		q.woke()
		for i := range ids {
			ids[i] = int64(ack.Sequence) - int64(len(ids)-1-i)
		}
	}
	return ids, nil
}

// publishBatch publishes msgs as one atomic batch: the server stores all of
// them at the commit or none.
func (q *Queue) publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	id := uuid.NewString()
	for i, m := range msgs {
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(msgs)-1 {
			if err := q.nc.PublishMsg(m); err != nil {
				return nil, fmt.Errorf("publish batch to %s: message %d: %w", q.stream, i+1, err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
	}
	ack, err := q.js.PublishMsg(ctx, msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("publish batch to %s: commit: %w", q.stream, err)
	}
	return ack, nil
}

// WaitChans returns local, closed by this handle's sends and nacks; there is no
// remote signal: ReceiveWait and Consume wait on the server instead
// (ReceiveWait in wait.go, driver.WaitReceiver).
func (q *Queue) WaitChans() (local, remote <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake, nil
}

// NextDue is not known to the client (the server holds lease ends and
// schedules).
func (q *Queue) NextDue(ctx context.Context, after time.Time) (time.Time, bool, error) {
	return time.Time{}, false, nil
}

func (q *Queue) Done() <-chan struct{} { return q.done }

func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
		if q.inc.sub != nil {
			_ = q.inc.sub.Unsubscribe()
		}
	}
	return nil
}

// flushTimeout bounds a flush when ctx has no deadline of its own.
const flushTimeout = 10 * time.Second

// flush waits until the server has processed everything this connection
// sent (the lease Naks, a nack): a round trip.
func (q *Queue) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	return q.nc.FlushWithContext(ctx)
}

// nakDelay is the body of a Nak that redelivers after d.
func nakDelay(d time.Duration) []byte {
	if d <= 0 {
		return []byte("-NAK")
	}
	return []byte(`-NAK {"delay": ` + strconv.FormatInt(int64(d), 10) + `}`)
}
