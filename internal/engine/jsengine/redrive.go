package jsengine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// redriveBatch is how many messages one pull of a Redrive takes.
const redriveBatch = 100

// Redrive moves the due messages of this queue (a dead-letter queue) to
// their origin (the Lc-Origin-Store header) or to o.To, in delivery order,
// up to o.Max (-1: all). It takes them through the queue's consumer like a
// receive: each is hidden for moveLease, published to its destination with
// Nats-Msg-Id "lcrd:<this stream>:<stream sequence>" (a redrive retried
// after a crash between the publish and the ack adds no second copy inside
// the destination's Duplicates window, its dedupWindow), then acked here. A
// redriven message starts afresh: a new message there, attempt 1 on its
// first delivery, enqueued now. Messages in flight stay. Messages with no
// origin and no o.To, or whose origin is no queue stream of this server (a
// redrive to origins never creates one) or none of the handle's move
// targets, are Skipped: held by the Redrive while it runs and released
// (a Nak) at its end, so each such message counts one more delivery here.
// Read-your-writes as in Receive: while the last write of this process
// into this queue is not delivered yet, an empty pull is retried (up to
// catchUpWait in all).
func (q *Queue) Redrive(ctx context.Context, o driver.Redrive) (driver.RedriveResult, error) {
	var res driver.RedriveResult
	if err := q.check(true); err != nil {
		return res, err
	}
	if o.To != "" {
		switch {
		case o.To == q.name:
			return res, bindings.Errorf(bindings.CodeInvalidInput,
				"redrive target: must be another queue than the dead-letter queue itself, got %q", o.To)
		case !nameRE.MatchString(o.To):
			return res, bindings.Errorf(bindings.CodeInvalidInput,
				"redrive target: must be a jetstream queue name (1..64 of A-Z a-z 0-9 _ -), got %q", o.To)
		}
		if err := q.dl.eng.ensureQueue(ctx, q.js, o.To, false, q.dedupWindow); err != nil {
			return res, fmt.Errorf("redrive target %q: %w", o.To, err)
		}
		q.dl.mu.Lock()
		q.dl.dests[o.To] = true
		q.dl.mu.Unlock()
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	var held []string // ack subjects of skipped messages, released at the end
	defer func() {
		for _, r := range held {
			_ = q.nc.Publish(r, nakDelay(0))
		}
		if len(held) > 0 {
			_ = q.flush(mctx)
			q.woke()
		}
	}()
	var catchUntil time.Time // read-your-writes, as in Receive (ryw.go)
	catchWait := time.Millisecond
	for o.Max < 0 || res.Moved < o.Max {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := redriveBatch
		if o.Max >= 0 {
			n = min(n, o.Max-res.Moved)
		}
		msgs, err := q.pullRaw(ctx, n)
		if err != nil {
			return res, err
		}
		if len(msgs) == 0 {
			// A write of this process into the dead-letter queue (a move,
			// a send) that its consumer has not seen yet is waited for.
			last := lastWrite(q.ident, q.stream)
			if catchUntil.IsZero() {
				catchUntil = time.Now().Add(catchUpWait)
			}
			if last > 0 && q.catchUp(ctx, last, 0, catchUntil, catchWait) {
				catchWait = min(2*catchWait, 50*time.Millisecond)
				continue
			}
			break
		}
		var moving []*nats.Msg
		var dests []string
		for _, m := range msgs {
			to := o.To
			if to == "" {
				to = q.redriveOrigin(ctx, m.Header.Get(hdrOriginStore))
			}
			if to == "" {
				res.Skipped++
				held = append(held, m.Reply)
				continue
			}
			if err := q.nc.Publish(m.Reply, nakDelay(moveLease)); err != nil {
				return res, fmt.Errorf("hide message for its redrive: %w", err)
			}
			moving = append(moving, m)
			dests = append(dests, to)
		}
		if len(moving) > 0 {
			if err := q.flush(mctx); err != nil {
				return res, fmt.Errorf("hide messages for their redrive: %w", err)
			}
		}
		for i, m := range moving {
			if err := q.redriveOne(mctx, m, dests[i]); err != nil {
				return res, err
			}
			res.Moved++
		}
	}
	return res, nil
}

// redriveOrigin returns origin if a redrive to origins may send a message
// there: a queue of this engine whose stream exists and, if the handle has
// move targets, one of them; else "".
func (q *Queue) redriveOrigin(ctx context.Context, origin string) string {
	if origin == "" || origin == q.name || !nameRE.MatchString(origin) {
		return ""
	}
	if len(q.dl.targets) > 0 && !slices.Contains(q.dl.targets, origin) {
		return ""
	}
	q.dl.mu.Lock()
	known := q.dl.dests[origin]
	q.dl.mu.Unlock()
	if known {
		return origin
	}
	if _, err := q.js.Stream(ctx, "LCQ_"+origin); err != nil {
		return ""
	}
	q.dl.mu.Lock()
	q.dl.dests[origin] = true
	q.dl.mu.Unlock()
	return origin
}

// redriveOne publishes m to the queue to and acks it here.
func (q *Queue) redriveOne(ctx context.Context, m *nats.Msg, to string) error {
	d, ok := q.parseAck(m.Reply)
	if !ok {
		return fmt.Errorf("redrive: a delivery with ack subject %q", m.Reply)
	}
	rm := nats.NewMsg("lcq." + to)
	rm.Data = m.Data
	rm.Header.Set(hdrType, m.Header.Get(hdrType))
	copyAttrs(rm.Header, m.Header)
	rm.Header.Set(hdrEnqueued, strconv.FormatInt(time.Now().UnixMilli(), 10))
	rm.Header.Set(hdrMsgID, "lcrd:"+q.stream+":"+strconv.FormatUint(d.seq, 10))
	ack, err := q.js.PublishMsg(ctx, rm, jetstream.WithExpectStream("LCQ_"+to))
	if err != nil {
		return fmt.Errorf("redrive message %d to %q: %w", d.seq, to, err)
	}
	noteWrite(q.ident, "LCQ_"+to, ack.Sequence) // ryw.go
	if afterMovePublish != nil {
		afterMovePublish("redrive")
	}
	return q.ackMoved(ctx, m.Reply, d.seq)
}

// pullRaw is one no-wait pull of up to max deliveries, returned as they
// came (no lease set), retried while the consumer has no leader.
func (q *Queue) pullRaw(ctx context.Context, max int) ([]*nats.Msg, error) {
	deadline := time.Now().Add(electionWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		out, err := q.pullRawOnce(ctx, max)
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

func (q *Queue) pullRawOnce(ctx context.Context, max int) ([]*nats.Msg, error) {
	inbox := nats.NewInbox()
	sub, err := q.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	defer sub.Unsubscribe()
	req := fmt.Sprintf(`{"batch":%d,"no_wait":true}`, max)
	if err := q.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.stream+"."+consumerName, inbox, []byte(req)); err != nil {
		return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
	}
	wctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	var out []*nats.Msg
	for len(out) < max {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if len(out) > 0 {
				break
			}
			return nil, fmt.Errorf("fetch from %s: %w", q.stream, err)
		}
		if status := m.Header.Get("Status"); status != "" || len(m.Data) == 0 && m.Reply == "" {
			if status == "100" {
				continue
			}
			break
		}
		if _, ok := q.parseAck(m.Reply); !ok {
			return nil, fmt.Errorf("fetch from %s: a delivery with ack subject %q", q.stream, m.Reply)
		}
		out = append(out, m)
	}
	return out, nil
}
