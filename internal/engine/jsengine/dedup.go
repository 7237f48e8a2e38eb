package jsengine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// minDuplicates is the shortest duplicates window the server accepts.
const minDuplicates = 100 * time.Millisecond

// duplicatesWindow is the stream's Duplicates setting for a binding's
// dedup window: the same, but at least the server's 100 ms minimum; 0 (a
// driver caller that set none) leaves the server's default (2 minutes).
func duplicatesWindow(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(d, minDuplicates)
}

// Error codes of the server's dedup.
const (
	// errCodeDupInProcess: a message with this Nats-Msg-Id is proposed
	// but not yet applied (a cluster; a concurrent send of the same key).
	errCodeDupInProcess jetstream.ErrorCode = 10158
	// errCodeBatchHasDup: an atomic batch holds a Nats-Msg-Id the stream
	// has seen within its window; the server stores none of the batch and
	// does not say which message it was.
	errCodeBatchHasDup jetstream.ErrorCode = 10201
)

// dupConflictWait bounds how long a keyed send retries while the server
// reports the same key in process (errCodeDupInProcess).
const dupConflictWait = 5 * time.Second

// SendDedup is Send with dedup keys, mapped to the server's own dedup: each
// keyed message carries its key as Nats-Msg-Id, the stream's Duplicates
// window is the binding's dedup window (Open), and a PubAck marked
// duplicate means the key was stored within the window, so nothing was
// added. What the server gives, exactly (docs/ARCHITECTURE.md): the window
// runs from when the stream stored the first message of the key, on the
// server's clock; the server keeps the keys in memory and after a restart
// rebuilds them from the messages still stored, so a key whose message was
// acked (or whose schedule fired, or that was purged) is forgotten by a
// server restart. A batch is one atomic batch; if the server refuses it
// because one of its keys is a duplicate (it does not say which), the
// messages are sent one at a time, so duplicates are left out but the rest
// is no longer all-or-none (a retry with the same keys completes it).
func (q *jsQueue) SendDedup(ctx context.Context, ps []driver.Payload, keys []string, delay time.Duration) ([]bool, error) {
	if err := q.check(true); err != nil {
		return nil, err
	}
	dup := make([]bool, len(ps))
	seen := map[string]bool{}
	var idx []int // the messages to publish: not repeated within this call
	for i := range ps {
		k := ""
		if i < len(keys) {
			k = keys[i]
		}
		if k != "" && seen[k] {
			dup[i] = true
			continue
		}
		seen[k] = k != ""
		idx = append(idx, i)
	}
	now := time.Now().UnixMilli()
	msgs := make([]*nats.Msg, len(idx))
	for j, i := range idx {
		msgs[j] = q.buildMsg(ps[i], delay, now)
		if i < len(keys) && keys[i] != "" {
			msgs[j].Header.Set(jetstream.MsgIDHeader, keys[i])
		}
	}
	var lastSeq uint64
	if len(msgs) > 1 {
		ack, err := q.publishBatch(ctx, msgs)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			lastSeq = ack.Sequence
			msgs = nil // all stored
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeBatchHasDup || apiErr.ErrorCode == errCodeDupInProcess):
			// one at a time below (the batch stored nothing)
		default:
			return nil, err
		}
	}
	for j, m := range msgs {
		ack, err := q.publishKeyed(ctx, m)
		if err != nil {
			return nil, fmt.Errorf("publish message %d of %d to %s: %w", idx[j]+1, len(ps), q.stream, err)
		}
		dup[idx[j]] = ack.Duplicate
		if !ack.Duplicate {
			lastSeq = max64(lastSeq, ack.Sequence)
		}
	}
	if delay == 0 && lastSeq > 0 {
		q.lastSent.Store(max64(q.lastSent.Load(), lastSeq))
		q.woke()
	}
	return dup, nil
}

// publishKeyed publishes one message, retrying (a fresh copy each time, as
// the client may keep the first) while the server reports its key in
// process on a cluster: once the other send of the key is applied, the
// server answers duplicate.
func (q *jsQueue) publishKeyed(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(dupConflictWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		c := nats.NewMsg(m.Subject)
		c.Data = m.Data
		for k, v := range m.Header {
			if !strings.HasPrefix(k, "Nats-Batch-") { // left by a refused batch
				c.Header[k] = append([]string(nil), v...)
			}
		}
		ack, err := q.js.PublishMsg(ctx, c)
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeDupInProcess || time.Now().After(deadline) {
			return ack, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// buildMsg is one message of a send, due now or, with a delay, a message
// schedule (as Send builds them).
func (q *jsQueue) buildMsg(p driver.Payload, delay time.Duration, enqueuedMs int64) *nats.Msg {
	if delay <= 0 {
		return q.message(p, q.subject, enqueuedMs)
	}
	m := q.message(p, "lcqs."+q.name+"."+uuid.NewString(), enqueuedMs)
	m.Header.Set("Nats-Schedule", "@at "+time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	m.Header.Set("Nats-Schedule-Target", q.subject)
	return m
}
