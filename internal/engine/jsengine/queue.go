package jsengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Headers of a queue message.
const (
	hdrType     = "Lc-Type"        // "text" or "json"
	hdrEnqueued = "Lc-Enqueued-Ms" // send time, Unix milliseconds
)

// consumerName is the queue's one durable pull consumer.
const consumerName = "lc"

// defaultAckWait is the AckWait of a consumer created by a handle whose
// driver.Config has no Visibility (queue.DefaultVisibility).
const defaultAckWait = 30 * time.Second

// receiptPrefix starts every receipt this engine issues.
const receiptPrefix = "js1:"

// Queue is the JetStream engine of the queue binding. Location is the queue
// name; the queue is the stream "LCQ_<name>" (work-queue retention) with
// subject "lcq.<name>" for due messages and "lcqs.<name>.<id>" for delayed
// sends (message schedules), and one durable pull consumer "lc" with
// explicit acks and no delivery limit.
type Queue struct {
	// Conn is the connection to the JetStream server or cluster; the
	// engine never closes it.
	Conn *nats.Conn
	// Replicas is the stream's replica count; 0 means 1.
	Replicas int
}

// Open opens or creates the queue cfg.Location names.
func (e Queue) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	if e.Conn == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "jetstream queue: Conn must not be nil")
	}
	if !nameRE.MatchString(cfg.Location) {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"jetstream queue: location %q: must be 1..64 of A-Z a-z 0-9 _ -", cfg.Location)
	}
	js, err := jetstream.New(e.Conn)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	dl, err := e.openDeadLetters(ctx, js, cfg) // deadletter.go
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	replicas := e.Replicas
	if replicas == 0 {
		replicas = 1
	}
	subject := "lcq." + cfg.Location
	want := jetstream.StreamConfig{
		Name:               "LCQ_" + cfg.Location,
		Subjects:           []string{subject, "lcqs." + cfg.Location + ".>", markerPrefix + cfg.Location},
		Retention:          jetstream.WorkQueuePolicy,
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		AllowDirect:        false,
		AllowAtomicPublish: true,
		AllowMsgSchedules:  true,
		AllowMsgTTL:        true, // the dedup markers' (dedup.go)
	}
	if !cfg.ReadOnly {
		// The binding's dedup window (dedup.go), which also bounds how
		// long a move's msg-id keeps a retry out (deadletter.go).
		want.Duplicates = duplicatesWindow(cfg.DedupWindow)
	}
	st, err := provision(ctx, js, want, cfg.ReadOnly, checkQueueStream)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	ackWait := cfg.Visibility
	if ackWait <= 0 {
		ackWait = defaultAckWait
	}
	var cons jetstream.Consumer
	if cfg.ReadOnly {
		cons, err = st.Consumer(ctx, consumerName)
	} else {
		cons, err = openConsumer(ctx, st, jetstream.ConsumerConfig{
			Durable:       consumerName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       ackWait,
			MaxDeliver:    -1,
			FilterSubject: subject,
			MaxAckPending: -1,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: consumer %q: %w", cfg.Location, consumerName, err)
	}
	ackWait = cons.CachedInfo().Config.AckWait
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	if err := waitStreamLeader(ctx, st); err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	if err := waitLeader(ctx, "consumer", func() (*jetstream.ClusterInfo, error) {
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		return ci.Cluster, nil
	}); err != nil {
		return nil, fmt.Errorf("open jetstream queue %q: %w", cfg.Location, err)
	}
	q := &jsQueue{replicated: info.Config.Replicas > 1, ackWait: ackWait, nc: e.Conn, js: js, st: st, cons: cons, name: cfg.Location, subject: subject,
		stream: want.Name, dedupWindow: info.Config.Duplicates, notifier: cfg.Notifier, dl: dl, readOnly: cfg.ReadOnly,
		url: e.Conn.ConnectedUrlRedacted(), ident: serverIdentity(e.Conn), done: make(chan struct{}), wake: make(chan struct{}),
		dead: map[string]time.Time{}, extended: map[string]time.Time{}, nacked: map[uint64]time.Time{}}
	return q, nil
}

// openConsumer creates the queue's consumer with want, or brings an
// existing one to want except for its AckWait, which it keeps: the server
// measures every pending delivery's lease end from the current AckWait
// (a Nak with a delay stores "now + delay - AckWait"), so changing it would
// move the lease ends of receipts already handed out. A handle whose
// default lease differs from the consumer's AckWait sets its leases with a
// Nak (see pull).
func openConsumer(ctx context.Context, st jetstream.Stream, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	cons, err := st.Consumer(ctx, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = st.CreateConsumer(ctx, want)
		if errors.Is(err, jetstream.ErrConsumerExists) {
			return openConsumer(ctx, st, want) // created meanwhile, with another AckWait
		}
		return cons, err
	case err != nil:
		return nil, err
	}
	want.AckWait = cons.CachedInfo().Config.AckWait
	return st.CreateOrUpdateConsumer(ctx, want)
}

// checkQueueStream fails closed on an existing stream whose settings
// contradict the queue's.
func checkQueueStream(have, want jetstream.StreamConfig) error {
	switch {
	case strings.Join(have.Subjects, ",") != strings.Join(want.Subjects, ","):
		return fmt.Errorf("subjects are %q, want %q", have.Subjects, want.Subjects)
	case have.Retention != jetstream.WorkQueuePolicy:
		return fmt.Errorf("retention is %s, want workqueue", have.Retention)
	case !have.AllowAtomicPublish:
		return errors.New("allow_atomic is off, want on")
	case !have.AllowMsgSchedules:
		return errors.New("allow_msg_schedules is off, want on")
	case !have.AllowMsgTTL:
		return errors.New("allow_msg_ttl is off, want on")
	case want.Duplicates != 0 && have.Duplicates != want.Duplicates:
		return fmt.Errorf("duplicate_window is %s, want %s (the binding's dedupWindow)", have.Duplicates, want.Duplicates)
	}
	return nil
}

type jsQueue struct {
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

func (q *jsQueue) Location() string { return q.name }
func (q *jsQueue) Path() string     { return "jetstream:" + q.url + "/" + q.stream }

func (q *jsQueue) check(write bool) error {
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
func (q *jsQueue) woke() {
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
func (q *jsQueue) message(p driver.Payload, subject string, enqueuedMs int64) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(p.Data)
	m.Header.Set(hdrType, p.Type)
	m.Header.Set(hdrEnqueued, strconv.FormatInt(enqueuedMs, 10))
	return m
}

// Send publishes one message, or an atomic batch (all or none, server
// 2.12+) of several; a delay makes each a message schedule ("@at" with
// sub-second precision) that the server publishes to the queue's subject
// when due.
func (q *jsQueue) Send(ctx context.Context, ps []driver.Payload, delay time.Duration) error {
	if err := q.check(true); err != nil {
		return err
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
			return fmt.Errorf("publish to %s: %w", q.stream, err)
		}
	} else if ack, err = q.publishBatch(ctx, msgs); err != nil {
		return err
	}
	if delay == 0 {
		noteWrite(q.ident, q.stream, ack.Sequence) // ryw.go
		q.woke()
	}
	return nil
}

// publishBatch publishes msgs as one atomic batch: the server stores all of
// them at the commit or none.
func (q *jsQueue) publishBatch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
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

// receipt is a parsed receipt: "js1:<deadline ms>:<lease ms>:<ack subject>".
type receipt struct {
	deadline time.Time
	lease    time.Duration
	reply    string
	seq      uint64
}

// parseReceipt reads a receipt of this queue; ok is false for anything this
// queue could not have issued.
func (q *jsQueue) parseReceipt(s string) (receipt, bool) {
	rest, ok := strings.CutPrefix(s, receiptPrefix)
	if !ok {
		return receipt{}, false
	}
	parts := strings.SplitN(rest, ":", 3)
	if len(parts) != 3 || strings.ContainsAny(parts[2], " \t\r\n") {
		return receipt{}, false // a subject has no white space: not one we issued
	}
	dl, err1 := strconv.ParseInt(parts[0], 10, 64)
	ls, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || ls <= 0 {
		return receipt{}, false
	}
	d, ok := q.parseAck(parts[2])
	if !ok {
		return receipt{}, false
	}
	return receipt{deadline: time.UnixMilli(dl), lease: time.Duration(ls) * time.Millisecond,
		reply: parts[2], seq: d.seq}, true
}

// delivery is what an ack subject says about its delivery.
type delivery struct {
	seq       uint64    // stream sequence: the message id
	delivered uint64    // deliveries so far, this one included
	stored    time.Time // when the stream stored the message
}

// parseAck reads an ack subject of this queue's consumer:
// $JS.ACK[.<domain>.<account hash>].<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<token>]
func (q *jsQueue) parseAck(subject string) (delivery, bool) {
	toks := strings.Split(subject, ".")
	if len(toks) < 9 || toks[0] != "$JS" || toks[1] != "ACK" {
		return delivery{}, false
	}
	i := 2
	if len(toks) >= 12 {
		i = 4
	}
	if toks[i] != q.stream || toks[i+1] != consumerName {
		return delivery{}, false
	}
	dc, err1 := strconv.ParseUint(toks[i+2], 10, 64)
	seq, err2 := strconv.ParseUint(toks[i+3], 10, 64)
	ts, err3 := strconv.ParseInt(toks[i+5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || seq == 0 || dc == 0 {
		return delivery{}, false
	}
	return delivery{seq: seq, delivered: dc, stored: time.Unix(0, ts)}, true
}

// staleMargin is how long before its deadline a receipt is refused: a
// quarter of its lease, at most 250 ms. It covers the time between our
// stamp of the deadline and the server's (ours is taken first, so it is the
// earlier one) and clock skew between the processes using one receipt; skew
// beyond it can let an old receipt ack a redelivered message.
func staleMargin(lease time.Duration) time.Duration {
	return min(lease/4, 250*time.Millisecond)
}

// live reports whether r may still act on its delivery.
func (q *jsQueue) live(s string, r receipt) bool {
	dl, dead := q.deadline(s, r)
	return !dead && time.Now().Before(dl.Add(-staleMargin(r.lease)))
}

// deadline is the end of receipt s's lease (parsed: r), an Extend by this
// handle included; dead: this handle acked or nacked it.
func (q *jsQueue) deadline(s string, r receipt) (dl time.Time, dead bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, dead := q.dead[s]; dead {
		return time.Time{}, true
	}
	if dl, ok := q.extended[s]; ok {
		return dl, false
	}
	return r.deadline, false
}

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
func (q *jsQueue) Receive(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
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
func (q *jsQueue) catchUpNacks(ctx context.Context, out []driver.Message, max int, lease time.Duration) []driver.Message {
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
func (q *jsQueue) pullRetry(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
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
func (q *jsQueue) pull(ctx context.Context, max int, lease time.Duration) ([]driver.Message, error) {
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
			ReceiptHandle: receiptPrefix + strconv.FormatInt(deadline.UnixMilli(), 10) + ":" + strconv.FormatInt(lease.Milliseconds(), 10) + ":" + m.Reply,
			Attempt:       int(d.delivered),
			Payload:       driver.Payload{Type: m.Header.Get(hdrType), Data: string(m.Data)},
			EnqueuedAt:    enq,
		})
		q.noteDelivery(d, out[len(out)-1].ReceiptHandle)
	}
	if nak && len(out) > 0 {
		if err := q.flush(ctx); err != nil {
			return nil, fmt.Errorf("set leases: %w", err)
		}
	}
	q.moveSpent(ctx, spent)
	return out, nil
}

// nakDelay is the body of a Nak that redelivers after d.
func nakDelay(d time.Duration) []byte {
	if d <= 0 {
		return []byte("-NAK")
	}
	return []byte(`-NAK {"delay": ` + strconv.FormatInt(int64(d), 10) + `}`)
}

func (q *jsQueue) Ack(ctx context.Context, s string) error {
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
func (q *jsQueue) ackLive(ctx context.Context, s string, r receipt) error {
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
func (q *jsQueue) requestAck(ctx context.Context, s string, r receipt) error {
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
func (q *jsQueue) waitGone(ctx context.Context, seq uint64) error {
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

func (q *jsQueue) gone(ctx context.Context, r receipt) (bool, error) {
	ok, err := q.exists(ctx, r.seq)
	return !ok, err
}

// pruneLimit is the size of the handle's receipt maps above which entries
// past their deadline (refused by the deadline alone) are dropped.
const pruneLimit = 1024

// A prune that leaves n entries sets the next one at 2n (at least
// pruneLimit): while receipts are live (a 30 s lease holds thousands under
// load) every ack would otherwise walk them all.
func (q *jsQueue) pruneLocked() {
	if len(q.dead)+len(q.extended)+len(q.nacked) <= max(pruneLimit, q.pruneAt) {
		return
	}
	defer func() { q.pruneAt = 2 * (len(q.dead) + len(q.extended) + len(q.nacked)) }()
	now := time.Now()
	for k, dl := range q.dead {
		if now.After(dl) {
			delete(q.dead, k)
		}
	}
	for k, dl := range q.extended {
		if now.After(dl) {
			delete(q.extended, k)
		}
	}
	for seq, at := range q.nacked {
		if now.Sub(at) > catchUpWait {
			delete(q.nacked, seq)
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
func (q *jsQueue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
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

func (q *jsQueue) Nack(ctx context.Context, s string, delay time.Duration) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if !ok {
		return nil
	}
	if !q.live(s, r) {
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

func (q *jsQueue) Extend(ctx context.Context, s string, d time.Duration) error {
	if err := q.check(true); err != nil {
		return err
	}
	r, ok := q.parseReceipt(s)
	if !ok {
		return bindings.Errorf(bindings.CodeInvalidInput, "receipt: %q is not a receipt of jetstream queue %q", s, q.name)
	}
	exists, err := q.exists(ctx, r.seq)
	if err != nil {
		return err
	}
	if !exists {
		return driver.ErrMessageGone
	}
	if !q.live(s, r) {
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

func (q *jsQueue) Purge(ctx context.Context) error {
	if err := q.check(true); err != nil {
		return err
	}
	last := lastWrite(q.ident, q.stream)
	// The messages and the delayed sends, not the dedup markers
	// (dedup.go): a purge forgets no dedup key, as on the SQLite engine.
	for _, subj := range []string{q.subject, "lcqs." + q.name + ".>"} {
		if err := q.st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			return fmt.Errorf("purge %s: %w", q.stream, err)
		}
	}
	if err := q.purgeLastErrors(ctx); err != nil { // lasterror.go
		return err
	}
	forgetWrite(q.ident, q.stream, last) // a write since the purge began stays
	if q.replicated {
		return q.waitPurged(ctx)
	}
	return nil
}

// waitPurged waits (up to ackSettle) until the consumer has nothing pending
// or in flight. On a replicated stream the purge's reply comes from the
// stream's leader, and the consumer's leader, on another node, was seen to
// deliver a purged message right after it (Purge/InFlightToo on the 3-node
// cluster, under load). Sends that race the purge may keep the counts above
// zero; the wait then ends at its bound, as it would without them.
func (q *jsQueue) waitPurged(ctx context.Context) error {
	deadline := time.Now().Add(ackSettle)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		ci, err := q.cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("purge %s: read consumer: %w", q.stream, err)
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Peek reads the stream without touching the consumer: the queue's
// messages in stream order, then the delayed sends (message schedules) in
// the order they were sent. What the server does not expose per message is
// approximated, and said so here: Attempt is 0 before the first delivery
// and 1 after it (the consumer's redelivery counts are not readable per
// message), and a delivered message's VisibleAt is zero (its lease end is
// the server's).
func (q *jsQueue) Peek(ctx context.Context, limit int) ([]driver.PeekedMessage, error) {
	if err := q.check(false); err != nil {
		return nil, err
	}
	ci, err := q.cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read consumer of %s: %w", q.stream, err)
	}
	delivered := ci.Delivered.Stream
	var out []driver.PeekedMessage
	for _, subj := range []string{q.subject, "lcqs." + q.name + ".>"} {
		for seq := uint64(1); len(out) < limit; {
			m, err := q.st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("peek %s: %w", q.stream, err)
			}
			seq = m.Sequence + 1
			pm := driver.PeekedMessage{ID: int64(m.Sequence), EnqueuedAt: m.Time,
				Payload: driver.Payload{Type: m.Header.Get(hdrType), Data: string(m.Data)}}
			if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
				pm.EnqueuedAt = time.UnixMilli(v)
			}
			pm.Origin = originOf(m.Header)           // deadletter.go
			pm.LastError = headerLastError(m.Header) // lasterror.go
			switch {
			case subj != q.subject: // delayed: due at its schedule
				if at, ok := strings.CutPrefix(m.Header.Get("Nats-Schedule"), "@at "); ok {
					pm.VisibleAt, _ = time.Parse(time.RFC3339Nano, at)
				}
			case m.Sequence <= delivered:
				pm.Attempt, pm.Delivered = 1, true
			default:
				pm.VisibleAt = pm.EnqueuedAt
			}
			if n := attemptsBefore(m.Header); n > 0 { // migrate.go
				pm.Attempt, pm.Delivered = pm.Attempt+int(n), true
			}
			out = append(out, pm)
		}
	}
	if err := q.peekLastErrors(ctx, out); err != nil { // lasterror.go
		return nil, fmt.Errorf("peek %s: %w", q.stream, err)
	}
	return out, nil
}

// Stats counts from the stream's state (its leader: what this process sent
// is counted) and the consumer's (deliveries are counted when they happen):
// Total is every message, delayed ones included; Delayed the message
// schedules not yet fired; InFlight the delivered messages not yet acked
// and not queued for redelivery, plus the delayed ones; Due the rest. A message whose lease ran out counts as in flight
// until the server queues it for redelivery (the server holds the lease
// ends).
func (q *jsQueue) Stats(ctx context.Context) (driver.Stats, error) {
	if err := q.check(false); err != nil {
		return driver.Stats{}, err
	}
	// "*.<name>" counts the due subject and the dedup markers' (dedup.go),
	// which are not messages.
	si, err := q.st.Info(ctx, jetstream.WithSubjectFilter("*."+q.name))
	if err != nil {
		return driver.Stats{}, fmt.Errorf("read %s: %w", q.stream, err)
	}
	ci, err := q.cons.Info(ctx)
	if err != nil {
		return driver.Stats{}, fmt.Errorf("read consumer of %s: %w", q.stream, err)
	}
	total := int64(si.State.Msgs) - int64(si.State.Subjects[markerPrefix+q.name])
	onSubject := int64(si.State.Subjects[q.subject])
	due := onSubject - int64(ci.NumAckPending) + int64(ci.NumRedelivered)
	due = min(max(due, 0), onSubject)
	st := driver.Stats{Due: due, InFlight: total - due, Delayed: total - onSubject, Total: total}
	if err := q.deadLetterStats(ctx, si, &st); err != nil { // deadletter.go
		return driver.Stats{}, err
	}
	if total > 0 {
		if m, err := q.st.GetMsg(ctx, si.State.FirstSeq); err == nil {
			st.Oldest = m.Time
			if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
				st.Oldest = time.UnixMilli(v)
			}
		}
	}
	return st, nil
}

// WaitChans: local is closed by this handle's sends and nacks; there is no
// remote signal: ReceiveWait and Consume wait on the server instead
// (ReceiveWait in wait.go, driver.WaitReceiver).
func (q *jsQueue) WaitChans() (local, remote <-chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake, nil
}

// NextDue is not known to the client (the server holds lease ends and
// schedules).
func (q *jsQueue) NextDue(ctx context.Context, after time.Time) (time.Time, bool, error) {
	return time.Time{}, false, nil
}

func (q *jsQueue) Done() <-chan struct{} { return q.done }

func (q *jsQueue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
	return nil
}

// flushTimeout bounds a flush when ctx has no deadline of its own.
const flushTimeout = 10 * time.Second

// flush waits until the server has processed everything this connection
// sent (the lease Naks, a nack): a round trip.
func (q *jsQueue) flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, flushTimeout)
		defer cancel()
	}
	return q.nc.FlushWithContext(ctx)
}
