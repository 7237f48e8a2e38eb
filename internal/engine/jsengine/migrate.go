package jsengine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/moverec"
)

// What `localcloud migrate` reads and writes of a queue stream (through
// internal/engine's Handle). An imported message carries the deliveries it
// had in the store it came from (Lc-Attempts-Before, added to the
// consumer's count wherever this engine counts deliveries) and where it
// came from (Lc-Imported-From: "<source>#<id>"), which makes an import
// idempotent: Imported reads them back, and a message already there is not
// published again.
const (
	hdrAttemptsBefore = "Lc-Attempts-Before"
	hdrImportedFrom   = "Lc-Imported-From"
)

// attemptsBefore is the deliveries an imported message had before.
func attemptsBefore(h nats.Header) uint64 {
	n, _ := strconv.ParseUint(h.Get(hdrAttemptsBefore), 10, 32)
	return n
}

// deliveryOf is parseAck of m's ack subject, its delivery count with the
// deliveries m had in the store it was imported from.
func (q *Queue) deliveryOf(m *nats.Msg) (delivery, bool) {
	d, ok := q.parseAck(m.Reply)
	if ok {
		d.delivered += attemptsBefore(m.Header)
	}
	return d, ok
}

// Exporter reads a queue stream for a migration: first every message the
// consumer hands out (held under the exporter's lease, its deliveries
// counted by the consumer), then the delayed ones (message schedules),
// read without claiming. Not safe for concurrent use.
type Exporter struct {
	q     *Queue
	lease time.Duration
	held  map[uint64]string // seq -> ack subject of a held delivery
	errs  map[uint64]bool   // seqs with an entry in the side stream of last errors
	sched uint64            // the next sequence to read schedules from; 0: pulls not done
	done  bool
}

// NewExporter returns an exporter of the queue d (this engine's), holding
// what it pulls for lease.
func NewExporter(d driver.Queue, lease time.Duration) (*Exporter, error) {
	q, ok := d.(*Queue)
	if !ok {
		return nil, fmt.Errorf("jetstream export: %T is not a queue of this engine", d)
	}
	return &Exporter{q: q, lease: lease, held: map[uint64]string{}, errs: map[uint64]bool{}}, nil
}

// Next returns up to max messages; none once every message was returned.
func (e *Exporter) Next(ctx context.Context, max int) ([]moverec.Message, error) {
	q := e.q
	if e.done { // the next round starts over
		e.sched, e.done = 0, false
		return nil, nil
	}
	if e.sched == 0 {
		ms, err := e.pull(ctx, max)
		if err != nil || len(ms) > 0 {
			return ms, err
		}
		e.sched = 1
	}
	var out []moverec.Message
	for len(out) < max {
		m, err := q.st.GetMsg(ctx, e.sched, jetstream.WithGetMsgSubject("lcqs."+q.name+".>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			e.done = true
			break
		}
		if err != nil {
			return nil, fmt.Errorf("export %s: %w", q.stream, err)
		}
		e.sched = m.Sequence + 1
		r := record(m.Sequence, m.Header, m.Data, m.Time)
		r.Attempts = int(attemptsBefore(m.Header))
		if at, ok := strings.CutPrefix(m.Header.Get("Nats-Schedule"), "@at "); ok {
			r.DueAt, _ = time.Parse(time.RFC3339Nano, at)
		}
		out = append(out, r)
	}
	return out, e.lastErrors(ctx, out)
}

func record(seq uint64, h nats.Header, data []byte, stored time.Time) moverec.Message {
	r := moverec.Message{ID: int64(seq), Payload: payloadOf(h, data), EnqueuedAt: stored}
	if v, err := strconv.ParseInt(h.Get(hdrEnqueued), 10, 64); err == nil {
		r.EnqueuedAt = time.UnixMilli(v)
	}
	r.Origin = originOf(h)
	r.LastError = headerLastError(h)
	return r
}

// lastErrors fills in the last errors the side stream keeps.
func (e *Exporter) lastErrors(ctx context.Context, ms []moverec.Message) error {
	pm := make([]driver.PeekedMessage, len(ms))
	for i, m := range ms {
		pm[i] = driver.PeekedMessage{ID: m.ID, LastError: m.LastError}
	}
	if err := e.q.peekLastErrors(ctx, pm); err != nil {
		return fmt.Errorf("export %s: %w", e.q.stream, err)
	}
	for i := range ms {
		if pm[i].LastError != ms[i].LastError {
			e.errs[uint64(ms[i].ID)] = true
		}
		ms[i].LastError = pm[i].LastError
	}
	return nil
}

// pull claims up to max due messages through the consumer for the
// exporter's lease.
func (e *Exporter) pull(ctx context.Context, max int) ([]moverec.Message, error) {
	q := e.q
	reply := nats.NewInbox()
	ch := make(chan *nats.Msg, max+4)
	sub, err := q.nc.ChanSubscribe(reply, ch)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", q.stream, err)
	}
	defer sub.Unsubscribe()
	req := `{"batch":` + strconv.Itoa(max) + `,"no_wait":true}`
	if err := q.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.stream+"."+consumerName, reply, []byte(req)); err != nil {
		return nil, fmt.Errorf("export %s: %w", q.stream, err)
	}
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	var out []moverec.Message
recv:
	for len(out) < max {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-wctx.Done():
			if len(out) > 0 {
				break recv
			}
			return nil, fmt.Errorf("export %s: %w", q.stream, wctx.Err())
		}
		if status := m.Header.Get("Status"); status != "" || len(m.Data) == 0 && m.Reply == "" {
			if status == "100" {
				continue
			}
			break recv
		}
		d, ok := q.deliveryOf(m)
		if !ok {
			return nil, fmt.Errorf("export %s: a delivery with ack subject %q", q.stream, m.Reply)
		}
		if e.lease != q.ackWait {
			if err := q.nc.Publish(m.Reply, nakDelay(e.lease)); err != nil {
				return nil, fmt.Errorf("export %s: hold message %d: %w", q.stream, d.seq, err)
			}
		}
		r := record(d.seq, m.Header, m.Data, d.stored)
		r.Attempts = int(d.delivered) - 1 // this delivery is the export's, not the message's
		e.held[d.seq] = m.Reply
		out = append(out, r)
	}
	if err := q.flush(ctx); err != nil {
		return nil, fmt.Errorf("export %s: %w", q.stream, err)
	}
	return out, e.lastErrors(ctx, out)
}

// Leased counts the messages leased to others (the consumer's pending
// deliveries that the exporter does not hold, nacked ones waiting for
// their delay included: the server does not tell them apart); until is
// when the last such lease ends at the latest, as far as this handle knows
// (now plus the consumer's AckWait, or the longest lease).
func (e *Exporter) Leased(ctx context.Context) (n int64, until time.Time, err error) {
	ci, err := e.q.cons.Info(ctx)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read consumer of %s: %w", e.q.stream, err)
	}
	n = int64(ci.NumAckPending) - int64(len(e.held))
	if n <= 0 {
		return 0, time.Time{}, nil
	}
	return n, time.Now().Add(max(e.q.ackWait, e.lease)), nil
}

// Remove deletes the exported messages ids from the stream: a held
// delivery is acked, a schedule deleted, and their last-error entries
// purged. A message already gone is skipped.
func (e *Exporter) Remove(ctx context.Context, ids []int64) error {
	q := e.q
	for _, id := range ids {
		seq := uint64(id)
		if reply, ok := e.held[seq]; ok {
			// Acks go out together, flushed below: one that is lost
			// leaves the message pending, Leased counts it, and the next
			// round gets it again, finds it imported and acks it again.
			if err := q.nc.Publish(reply, []byte("+ACK")); err != nil {
				return fmt.Errorf("remove message %d from %s: %w", seq, q.stream, err)
			}
			delete(e.held, seq)
		} else if err := q.st.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) && !strings.Contains(err.Error(), "no message found") {
			return fmt.Errorf("remove message %d from %s: %w", seq, q.stream, err)
		}
		if e.errs[seq] {
			if err := q.purgeErrStream(ctx, q.errSubject(seq)); err != nil {
				return fmt.Errorf("remove the last error of message %d from %s: %w", seq, q.stream, err)
			}
			delete(e.errs, seq)
		}
	}
	if err := q.flush(ctx); err != nil {
		return fmt.Errorf("remove messages from %s: %w", q.stream, err)
	}
	return nil
}

// Release gives back what the exporter holds, to be delivered again at
// once (a migration that stops early).
func (e *Exporter) Release() {
	for seq, reply := range e.held {
		_ = e.q.nc.Publish(reply, []byte("-NAK"))
		delete(e.held, seq)
	}
	_ = e.q.nc.FlushTimeout(flushTimeout)
}

// Dedups returns the dedup keys the queue remembers (its markers).
func Dedups(ctx context.Context, d driver.Queue) ([]moverec.Dedup, error) {
	q, ok := d.(*Queue)
	if !ok {
		return nil, fmt.Errorf("jetstream export: %T is not a queue of this engine", d)
	}
	var out []moverec.Dedup
	for seq := uint64(1); ; {
		m, err := q.st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(markerPrefix+q.name))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("export the dedup keys of %s: %w", q.stream, err)
		}
		seq = m.Sequence + 1
		out = append(out, moverec.Dedup{Key: m.Header.Get(jetstream.MsgIDHeader), SentAt: m.Time})
	}
}

// ClearDedup forgets every dedup key of the queue.
func ClearDedup(ctx context.Context, d driver.Queue) error {
	q, ok := d.(*Queue)
	if !ok {
		return fmt.Errorf("jetstream: %T is not a queue of this engine", d)
	}
	if err := q.st.Purge(ctx, jetstream.WithPurgeSubject(markerPrefix+q.name)); err != nil {
		return fmt.Errorf("clear the dedup keys of %s: %w", q.stream, err)
	}
	return nil
}

// Imported returns the messages of source in the stream, by their id
// there, with their sequence here. It reads every message once.
func Imported(ctx context.Context, d driver.Queue, source string) (map[int64]int64, error) {
	q, ok := d.(*Queue)
	if !ok {
		return nil, fmt.Errorf("jetstream import: %T is not a queue of this engine", d)
	}
	out := map[int64]int64{}
	prefix := source + "#"
	for seq := uint64(1); ; {
		m, err := q.st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read imports of %s: %w", q.stream, err)
		}
		seq = m.Sequence + 1
		if id, ok := strings.CutPrefix(m.Header.Get(hdrImportedFrom), prefix); ok {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				out[n] = int64(m.Sequence)
			}
		}
	}
}

// Import publishes the messages ms of store source that done does not
// hold, and adds them to done (source id -> sequence here): each with its
// send time, deliveries, due time (a message schedule), origin and last
// error, all in the one publish. A message's publish carries its source as Nats-Msg-Id too, so a
// publish repeated within the dedup window adds nothing.
func Import(ctx context.Context, d driver.Queue, source string, ms []moverec.Message, done map[int64]int64) error {
	q, ok := d.(*Queue)
	if !ok {
		return fmt.Errorf("jetstream import: %T is not a queue of this engine", d)
	}
	now := time.Now()
	for _, r := range ms {
		if _, ok := done[r.ID]; ok {
			continue
		}
		from := source + "#" + strconv.FormatInt(r.ID, 10)
		var m *nats.Msg
		if r.DueAt.After(now) {
			m = q.message(r.Payload, "lcqs."+q.name+"."+uuid.NewString(), r.EnqueuedAt.UnixMilli())
			m.Header.Set("Nats-Schedule", "@at "+r.DueAt.UTC().Format(time.RFC3339Nano))
			m.Header.Set("Nats-Schedule-Target", q.subject)
		} else {
			m = q.message(r.Payload, q.subject, r.EnqueuedAt.UnixMilli())
			m.Header.Set(hdrMsgID, "lcim:"+from)
		}
		m.Header.Set(hdrImportedFrom, from)
		if r.Attempts > 0 {
			m.Header.Set(hdrAttemptsBefore, strconv.Itoa(r.Attempts))
		}
		if o := r.Origin; o != nil {
			m.Header.Set(hdrOriginStore, o.Store)
			if o.Binding != "" {
				m.Header.Set(hdrOriginBinding, o.Binding)
			}
			m.Header.Set(hdrOriginID, strconv.FormatInt(o.ID, 10))
			m.Header.Set(hdrOriginAtt, strconv.Itoa(o.Attempts))
			m.Header.Set(hdrOriginEnq, strconv.FormatInt(o.EnqueuedAt.UnixMilli(), 10))
			m.Header.Set(hdrMovedAt, strconv.FormatInt(o.MovedAt.UnixMilli(), 10))
			if o.LastReceipt != "" {
				m.Header.Set(hdrOriginReceipt, o.LastReceipt)
			}
		}
		// The last error travels in the message's own header, in the
		// publish that adds it (an entry in the side stream would be a
		// second write a kill could separate from the first); a later
		// failure's entry replaces it, as for a dead letter.
		if r.LastError != "" {
			m.Header.Set(hdrOriginLastError, escapeHeader(r.LastError))
		}
		ack, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.stream))
		if err != nil {
			return fmt.Errorf("import message %d of %s into %s: %w", r.ID, source, q.stream, err)
		}
		done[r.ID] = int64(ack.Sequence)
	}
	q.woke()
	return nil
}

// ImportDedup remembers the dedup keys ds, each for what is left of the
// queue's window since it was sent (a key whose window is over is left
// out).
func ImportDedup(ctx context.Context, d driver.Queue, ds []moverec.Dedup) error {
	q, ok := d.(*Queue)
	if !ok {
		return fmt.Errorf("jetstream import: %T is not a queue of this engine", d)
	}
	w := q.dedupWindow
	if w <= 0 {
		w = 2 * time.Minute
	}
	for _, dd := range ds {
		left := time.Until(dd.SentAt.Add(w))
		if left < time.Second {
			continue
		}
		m := nats.NewMsg(markerPrefix + q.name)
		m.Header.Set(jetstream.MsgIDHeader, dd.Key)
		m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)+"s")
		if _, err := q.js.PublishMsg(ctx, m, jetstream.WithExpectStream(q.stream)); err != nil && !isDupErr(err) && !strings.Contains(err.Error(), "duplicate") {
			return fmt.Errorf("import dedup key %q into %s: %w", dd.Key, q.stream, err)
		}
	}
	return nil
}

// ReadBack returns the payloads of the messages at seqs (a message gone,
// or a schedule that fired meanwhile, is absent).
func ReadBack(ctx context.Context, d driver.Queue, seqs []int64) (map[int64]driver.Payload, error) {
	q, ok := d.(*Queue)
	if !ok {
		return nil, fmt.Errorf("jetstream: %T is not a queue of this engine", d)
	}
	out := map[int64]driver.Payload{}
	for _, s := range seqs {
		m, err := q.st.GetMsg(ctx, uint64(s))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read back message %d of %s: %w", s, q.stream, err)
		}
		out[s] = payloadOf(m.Header, m.Data)
	}
	return out, nil
}
