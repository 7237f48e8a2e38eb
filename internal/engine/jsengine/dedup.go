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

// markerPrefix starts the subject of a queue's dedup markers,
// "lcqd.<name>": no consumer reads it.
const markerPrefix = "lcqd."

// SendDedup is Send with dedup keys, on the server's own dedup: the stream's
// Duplicates window is the binding's dedup window (Open), and each keyed
// message is published in one atomic batch with a marker that carries the
// key as Nats-Msg-Id, on the subject "lcqd.<name>" that no consumer reads,
// with a server TTL of the window (whole seconds, rounded up). The server
// refuses a batch whose Nats-Msg-Id it has seen within the window (error
// 10201, storing nothing): that is a duplicate.
//
// Why a marker and not the key on the message itself: the server keeps
// the keys in memory and after a restart rebuilds them from the messages
// still stored (measured: TestDedupAcrossRestart, TestDedupClusterRestarts);
// an acked message leaves the work-queue stream, so its key would be
// forgotten by the next restart of a node that later leads. The marker
// stays stored for the window, so the key survives restarts.
//
// A batch is one atomic batch of all its messages and markers (at most
// 2 x queue.MaxSendBatch, under the server's 1,000). If the server refuses
// it for a duplicate (it does not say which), each message is sent again
// with its own marker: duplicates are left out, but the rest is then not
// all-or-none (a retry with the same keys completes it).
func (q *Queue) SendDedup(ctx context.Context, ps []driver.Payload, keys []string, delay time.Duration) ([]int64, []bool, error) {
	if err := q.check(true); err != nil {
		return nil, nil, err
	}
	dup := make([]bool, len(ps))
	ids := make([]int64, len(ps)) // stream sequences; 0 for duplicates and delayed sends
	seen := map[string]bool{}
	type unit struct {
		i    int
		msgs []*nats.Msg // marker (if keyed), then the message
		end  int         // the message's place in all, counted from 1
	}
	var units []unit // the messages to publish: not repeated within this call
	now := time.Now().UnixMilli()
	var all []*nats.Msg
	for i := range ps {
		k := ""
		if i < len(keys) {
			k = keys[i]
		}
		if k != "" && seen[k] {
			dup[i] = true
			continue
		}
		u := unit{i: i}
		if k != "" {
			seen[k] = true
			u.msgs = append(u.msgs, q.marker(k))
		}
		u.msgs = append(u.msgs, q.buildMsg(ps[i], delay, now))
		all = append(all, u.msgs...)
		u.end = len(all)
		units = append(units, u)
	}
	var lastSeq uint64
	if len(units) > 1 {
		ack, err := q.publishAll(ctx, all)
		switch {
		case err == nil:
			lastSeq = ack.Sequence
			for _, u := range units { // one atomic batch: one run of sequences
				ids[u.i] = int64(lastSeq) - int64(len(all)-u.end)
			}
			units = nil
		case !isDupErr(err):
			return nil, nil, err
		}
	}
	for _, u := range units { // one message, or those of a refused batch
		ack, err := q.publishUnit(ctx, u.msgs)
		switch {
		case err == nil:
			lastSeq = max64(lastSeq, ack.Sequence)
			ids[u.i] = int64(ack.Sequence) // the message is the unit's last
		case isDupErr(err):
			dup[u.i] = true
		case len(ps) > 1:
			return nil, nil, fmt.Errorf("message %d of %d: %w", u.i+1, len(ps), err)
		default:
			return nil, nil, err
		}
	}
	if delay > 0 {
		clear(ids) // the schedules' sequences, not the messages'
	}
	if delay == 0 && lastSeq > 0 {
		noteWrite(q.ident, q.stream, lastSeq) // ryw.go
		q.woke()
	}
	return ids, dup, nil
}

// marker is the dedup marker of key: no payload, the key as Nats-Msg-Id,
// the window (rounded up to whole seconds, the server's TTL unit) as TTL.
func (q *Queue) marker(key string) *nats.Msg {
	m := nats.NewMsg(markerPrefix + q.name)
	m.Header.Set(jetstream.MsgIDHeader, key)
	w := q.dedupWindow
	if w <= 0 {
		w = 2 * time.Minute // the server's default window
	}
	m.Header.Set(jetstream.MsgTTLHeader, strconv.FormatInt(int64((w+time.Second-1)/time.Second), 10)+"s")
	return m
}

// isDupErr: the server refused a batch for a Nats-Msg-Id seen within the
// window (10201), or one whose other send is not applied yet (10158, a
// cluster; publishUnit retries that one).
func isDupErr(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == errCodeBatchHasDup || apiErr.ErrorCode == errCodeDupInProcess)
}

// publishAll publishes msgs, one message alone or an atomic batch.
func (q *Queue) publishAll(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	if len(msgs) == 1 {
		ack, err := q.js.PublishMsg(ctx, msgs[0])
		if err != nil {
			return nil, fmt.Errorf("publish to %s: %w", q.stream, err)
		}
		return ack, nil
	}
	return q.publishBatch(ctx, msgs)
}

// publishUnit publishes one message (with its marker), also again after
// a refused batch, on fresh copies (without the batch's headers), retrying
// while the server reports its key in process: once the other send of the
// key is applied, the server refuses it as a duplicate.
func (q *Queue) publishUnit(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	deadline := time.Now().Add(dupConflictWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		cp := make([]*nats.Msg, len(msgs))
		for i, m := range msgs {
			c := nats.NewMsg(m.Subject)
			c.Data = m.Data
			for k, v := range m.Header {
				if !strings.HasPrefix(k, "Nats-Batch-") { // left by the refused batch
					c.Header[k] = append([]string(nil), v...)
				}
			}
			cp[i] = c
		}
		ack, err := q.publishAll(ctx, cp)
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
func (q *Queue) buildMsg(p driver.Payload, delay time.Duration, enqueuedMs int64) *nats.Msg {
	if delay <= 0 {
		return q.message(p, q.subject, enqueuedMs)
	}
	m := q.message(p, "lcqs."+q.name+"."+uuid.NewString(), enqueuedMs)
	m.Header.Set("Nats-Schedule", "@at "+time.Now().Add(delay).UTC().Format(time.RFC3339Nano))
	m.Header.Set("Nats-Schedule-Target", q.subject)
	return m
}
