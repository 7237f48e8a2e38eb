package jsengine

// Dead letters on the JetStream engine.
//
// The consumer has no delivery limit (MaxDeliver -1): the server's
// MaxDeliver drops a message from the consumer with an advisory only its
// current subscribers see, so a move built on it can lose messages. The
// client moves instead: a delivery whose count exceeds the handle's
// maxAttempts is not handed out by Receive but moved:
//
//  1. the delivery is hidden for moveLease (a Nak with that delay, which
//     counts no delivery), so a mover that dies brings it back soon;
//  2. it is published to the dead-letter queue's stream with the header
//     Nats-Msg-Id "lcdl:<source stream>:<stream sequence>" and the origin
//     headers, and the stream's PubAck is awaited;
//  3. the source delivery is acked (a request: the reply confirms it) and,
//     on a replicated stream, Receive waits until the stream no longer holds
//     it (waitGone).
//
// A mover killed between 2 and 3 leaves the message in the source; it comes
// due after moveLease, the next Receive of a handle with the policy moves it
// again, and the dead-letter stream drops the second copy by its msg-id as
// long as the retry falls inside that stream's Duplicates window (its
// binding's dedupWindow, default 5 minutes: dedup.go). A queue nobody
// receives from for longer than that after such a crash can get its dead
// letter twice; that is the remaining window.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Headers of a dead letter: where it came from.
const (
	hdrMsgID         = "Nats-Msg-Id"
	hdrOriginStore   = "Lc-Origin-Store"       // the source queue's name
	hdrOriginBinding = "Lc-Origin-Binding"     // its binding name, absent if unknown
	hdrOriginID      = "Lc-Origin-Id"          // its stream sequence there
	hdrOriginAtt     = "Lc-Origin-Attempts"    // deliveries there
	hdrOriginEnq     = "Lc-Origin-Enqueued-Ms" // its send time there, Unix ms
	hdrMovedAt       = "Lc-Moved-Ms"           // when it was moved, Unix ms
	hdrOriginReceipt = "Lc-Origin-Last-Receipt"
)

// metaDeadLetters is the stream metadata key a queue's stream gets once a
// queue names it as its dead-letter queue: only such streams are read
// message by message for Stats' DeadLetters and Origins.
const metaDeadLetters = "lc-dead-letter-queue"

// moveLease hides a delivery being moved (dead letter or redrive) so that a
// mover that dies brings it back soon.
const moveLease = 2 * time.Second

// afterMovePublish, if set (tests), runs after a move's publish to its
// destination was acknowledged and before the source is acked: kind is
// "dead-letter" or "redrive". The crash tests exit the process there.
var afterMovePublish func(kind string)

// deadLetters is what a handle knows for moves: its engine (to open
// destinations), its policy and its move targets.
type deadLetters struct {
	eng         QueueEngine
	binding     string
	maxAttempts int    // 0: no policy
	dlq         string // the dead-letter queue's name
	targets     []string
	log         *slog.Logger

	mu    sync.Mutex
	dests map[string]bool // destination streams known to exist
}

// openDeadLetters checks cfg's policy and, for a read-write handle with a
// policy, provisions the dead-letter queue (a queue of this engine on the
// same server or cluster) and marks its stream as one.
func (e QueueEngine) openDeadLetters(ctx context.Context, js jetstream.JetStream, cfg driver.Config) (*deadLetters, error) {
	dl := &deadLetters{eng: e, binding: cfg.BindingName, maxAttempts: cfg.DeadLetter.MaxAttempts,
		dlq: cfg.DeadLetter.Location, targets: cfg.MoveTargets, log: cfg.Logger, dests: map[string]bool{}}
	if dl.log == nil {
		dl.log = slog.Default()
	}
	if dl.maxAttempts <= 0 {
		return dl, nil
	}
	switch {
	case dl.dlq == "":
		return nil, bindings.Errorf(bindings.CodeInvalidInput,
			"dead-letter queue: must not be empty: without one, a message past maxAttempts would have nowhere to go")
	case dl.dlq == cfg.Location:
		return nil, bindings.Errorf(bindings.CodeInvalidInput,
			"dead-letter queue: must be another queue than the queue itself, got %q", dl.dlq)
	case !nameRE.MatchString(dl.dlq):
		return nil, bindings.Errorf(bindings.CodeInvalidInput,
			"dead-letter queue: must be a jetstream queue name (1..64 of A-Z a-z 0-9 _ -), got %q", dl.dlq)
	}
	if cfg.ReadOnly {
		return dl, nil // a read-only handle moves nothing
	}
	if err := e.ensureQueue(ctx, js, dl.dlq, true, cfg.DedupWindow); err != nil {
		return nil, fmt.Errorf("dead-letter queue %q: %w", dl.dlq, err)
	}
	dl.dests[dl.dlq] = true
	return dl, nil
}

// ensureQueue provisions the queue name, the destination of moves (its
// stream and consumer, as Open does) and, if mark, marks its stream as a
// dead-letter queue. A missing stream is created with window, the
// Duplicates window of the queue whose handle asks (its binding's
// dedupWindow, which every binding has unless it sets another); an
// existing one keeps its own (its binding's, checked by its own Open).
func (e QueueEngine) ensureQueue(ctx context.Context, js jetstream.JetStream, name string, mark bool, window time.Duration) error {
	if _, err := js.Stream(ctx, "LCQ_"+name); err == nil {
		window = 0 // keep the existing stream's window
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	h, err := e.Open(ctx, driver.Config{Location: name, Clock: time.Now, Logger: slog.Default(), DedupWindow: window})
	if err != nil {
		return err
	}
	_ = h.Close()
	st, err := js.Stream(ctx, "LCQ_"+name)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	if !mark || info.Config.Metadata[metaDeadLetters] != "" {
		return nil
	}
	c := info.Config
	c.Metadata = map[string]string{}
	for k, v := range info.Config.Metadata {
		c.Metadata[k] = v
	}
	c.Metadata[metaDeadLetters] = "true"
	if _, err := js.UpdateStream(ctx, c); err != nil {
		return fmt.Errorf("update stream %q as a destination of moves: %w", c.Name, err)
	}
	return nil
}

// spent reports whether delivery d is past the handle's maxAttempts: it is
// moved, not delivered.
func (q *Queue) spent(d delivery) bool {
	return q.dl != nil && q.dl.maxAttempts > 0 && int(d.delivered) > q.dl.maxAttempts
}

// lastReceipts remembers, process-wide, the receipt of a delivery that used
// up the last attempt of its message (by "<stream>/<seq>"), so that the
// move that follows records it as Origin.LastReceipt. The server keeps no
// such thing: a move in another process than the last delivery records "".
var lastReceipts = struct {
	sync.Mutex
	m map[string]lastReceipt
}{m: map[string]lastReceipt{}}

type lastReceipt struct {
	receipt string
	at      time.Time
}

// lastReceiptKeep bounds how long a remembered last receipt is kept (the
// longest lease, 12 h, and some).
const lastReceiptKeep = 13 * time.Hour

// noteDelivery remembers receipt when its delivery d used up the last
// attempt of a handle with a policy.
func (q *Queue) noteDelivery(d delivery, receipt string) {
	if q.dl == nil || q.dl.maxAttempts <= 0 || int(d.delivered) < q.dl.maxAttempts {
		return
	}
	key := q.stream + "/" + strconv.FormatUint(d.seq, 10)
	lastReceipts.Lock()
	defer lastReceipts.Unlock()
	if len(lastReceipts.m) > pruneLimit {
		for k, v := range lastReceipts.m {
			if time.Since(v.at) > lastReceiptKeep {
				delete(lastReceipts.m, k)
			}
		}
	}
	lastReceipts.m[key] = lastReceipt{receipt: receipt, at: time.Now()}
}

func (q *Queue) takeLastReceipt(seq uint64) string {
	key := q.stream + "/" + strconv.FormatUint(seq, 10)
	lastReceipts.Lock()
	defer lastReceipts.Unlock()
	r := lastReceipts.m[key]
	delete(lastReceipts.m, key)
	return r.receipt
}

// moveSpent moves the spent deliveries ms to the dead-letter queue (steps
// 1-3 above). A move that fails is logged and left to a later Receive: the
// message stays in the source, hidden for moveLease.
func (q *Queue) moveSpent(ctx context.Context, ms []*nats.Msg) {
	if len(ms) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	for _, m := range ms {
		if err := q.nc.Publish(m.Reply, nakDelay(moveLease)); err != nil {
			q.dl.log.Warn("jetstream queue: cannot hide a message for its dead-letter move; retrying later",
				"store", q.Path(), "err", err)
			return
		}
	}
	if err := q.flush(ctx); err != nil {
		q.dl.log.Warn("jetstream queue: cannot hide messages for their dead-letter move; retrying later",
			"store", q.Path(), "err", err)
		return
	}
	for _, m := range ms {
		if err := q.moveOne(ctx, m); err != nil {
			q.dl.log.Warn("jetstream queue: dead-letter move failed; the message stays and is moved by a later receive",
				"store", q.Path(), "dead_letter_queue", q.dl.dlq, "err", err)
		}
	}
}

// moveTimeout bounds a move, which runs on whether or not the caller's
// context ends.
const moveTimeout = 30 * time.Second

func (q *Queue) moveOne(ctx context.Context, m *nats.Msg) error {
	d, ok := q.deliveryOf(m)
	if !ok {
		return fmt.Errorf("a delivery with ack subject %q", m.Reply)
	}
	now := time.Now()
	enq := d.stored.UnixMilli()
	if v, err := strconv.ParseInt(m.Header.Get(hdrEnqueued), 10, 64); err == nil {
		enq = v
	}
	dm := nats.NewMsg("lcq." + q.dl.dlq)
	dm.Data = m.Data
	dm.Header.Set(hdrType, m.Header.Get(hdrType))
	copyAttrs(dm.Header, m.Header)
	dm.Header.Set(hdrEnqueued, strconv.FormatInt(now.UnixMilli(), 10))
	dm.Header.Set(hdrMsgID, "lcdl:"+q.stream+":"+strconv.FormatUint(d.seq, 10))
	dm.Header.Set(hdrOriginStore, q.name)
	if q.dl.binding != "" {
		dm.Header.Set(hdrOriginBinding, q.dl.binding)
	}
	dm.Header.Set(hdrOriginID, strconv.FormatUint(d.seq, 10))
	dm.Header.Set(hdrOriginAtt, strconv.FormatUint(d.delivered-1, 10))
	dm.Header.Set(hdrOriginEnq, strconv.FormatInt(enq, 10))
	dm.Header.Set(hdrMovedAt, strconv.FormatInt(now.UnixMilli(), 10))
	if r := q.takeLastReceipt(d.seq); r != "" {
		dm.Header.Set(hdrOriginReceipt, r)
	}
	q.carryLastError(ctx, m, dm) // lasterror.go
	ack, err := q.js.PublishMsg(ctx, dm, jetstream.WithExpectStream("LCQ_"+q.dl.dlq))
	if err != nil {
		return fmt.Errorf("publish message %d to dead-letter queue %q: %w", d.seq, q.dl.dlq, err)
	}
	noteWrite(q.ident, "LCQ_"+q.dl.dlq, ack.Sequence) // ryw.go
	if afterMovePublish != nil {
		afterMovePublish("dead-letter")
	}
	return q.ackMoved(ctx, m.Reply, d.seq)
}

// ackMoved acks the source delivery of a finished move and waits (on a
// replicated stream) until the stream no longer holds it.
func (q *Queue) ackMoved(ctx context.Context, reply string, seq uint64) error {
	if _, err := q.nc.RequestWithContext(ctx, reply, []byte("+ACK")); err != nil {
		return fmt.Errorf("ack moved message %d: %w", seq, err)
	}
	q.dropLastError(ctx, reply) // lasterror.go
	q.mu.Lock()
	delete(q.nacked, seq)
	q.mu.Unlock()
	if q.replicated {
		return q.waitGone(ctx, seq)
	}
	return nil
}

// originOf reads a dead letter's origin headers; nil for other messages.
func originOf(h nats.Header) *driver.Origin {
	store := h.Get(hdrOriginStore)
	if store == "" {
		return nil
	}
	o := &driver.Origin{Store: store, Binding: h.Get(hdrOriginBinding), LastReceipt: h.Get(hdrOriginReceipt)}
	if v, err := strconv.ParseInt(h.Get(hdrOriginID), 10, 64); err == nil {
		o.ID = v
	}
	if v, err := strconv.Atoi(h.Get(hdrOriginAtt)); err == nil {
		o.Attempts = v
	}
	if v, err := strconv.ParseInt(h.Get(hdrOriginEnq), 10, 64); err == nil {
		o.EnqueuedAt = time.UnixMilli(v)
	}
	if v, err := strconv.ParseInt(h.Get(hdrMovedAt), 10, 64); err == nil {
		o.MovedAt = time.UnixMilli(v)
	}
	return o
}

// deadLetterStats fills st.DeadLetters and st.Origins of a stream marked
// as a dead-letter queue, reading each of its messages (one request each:
// the cost grows with the queue).
func (q *Queue) deadLetterStats(ctx context.Context, si *jetstream.StreamInfo, st *driver.Stats) error {
	if si.Config.Metadata[metaDeadLetters] == "" || si.State.Msgs == 0 {
		return nil
	}
	type key struct{ store, binding string }
	counts := map[key]int64{}
	for seq := si.State.FirstSeq; ; {
		m, err := q.st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(q.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("count dead letters of %s: %w", q.stream, err)
		}
		seq = m.Sequence + 1
		if o := originOf(m.Header); o != nil {
			counts[key{o.Store, o.Binding}]++
			st.DeadLetters++
		}
	}
	for k, n := range counts {
		st.Origins = append(st.Origins, driver.OriginCount{Store: k.store, Binding: k.binding, Count: n})
	}
	slices.SortFunc(st.Origins, func(a, b driver.OriginCount) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		if a.Store != b.Store {
			if a.Store < b.Store {
				return -1
			}
			return 1
		}
		if a.Binding < b.Binding {
			return -1
		}
		if a.Binding > b.Binding {
			return 1
		}
		return 0
	})
	return nil
}
