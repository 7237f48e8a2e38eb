package jsengine

// Inspecting and clearing a queue: Purge, Peek, Stats.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

func (q *Queue) Purge(ctx context.Context) error {
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
func (q *Queue) waitPurged(ctx context.Context) error {
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
func (q *Queue) Peek(ctx context.Context, limit int) ([]driver.PeekedMessage, error) {
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
				Payload: payloadOf(m.Header, m.Data)}
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
func (q *Queue) Stats(ctx context.Context) (driver.Stats, error) {
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
