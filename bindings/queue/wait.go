package queue

import (
	"context"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// stmtNextVisible finds when the next message that is not due yet becomes
// due: a lease that ends or a delayed message. The spec's index
// idx_messages_visible leads with visible_at, so this is one index seek.
const stmtNextVisible = `SELECT MIN(visible_at) FROM messages WHERE visible_at > ?1`

// ReceiveWait is a long poll: it claims up to max due messages like Receive,
// and when none is due it waits until one is, at most wait, then returns
// what it claimed (an empty slice when wait passed with nothing due). A wait
// of 0 is one Receive.
//
// It looks at the store again as soon as any of these happens: a Send or
// Nack on the same store by any handle of this process; a hint on the NATS
// subject of WithHints (a send in another process, or localcloud up noticing
// a foreign writer, an expired lease or a delayed message coming due); the
// earliest future visible_at of the queue (a lease ending, a delayed message
// coming due); the fallback poll (WithPollInterval, jittered); the end of
// wait. Hints are only wake-ups: what is due is always read from the store.
//
// When ctx ends first, ReceiveWait returns ctx.Err() and has claimed nothing.
func (q *Queue) ReceiveWait(ctx context.Context, max int, wait time.Duration, opts ...ReceiveOption) ([]Message, error) {
	if wait < 0 {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "wait: must not be negative, got %s", wait)
	}
	if wait == 0 {
		return q.Receive(ctx, max, opts...)
	}
	end := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		local, hint := q.hints.waitChans()
		before := q.now()
		msgs, err := q.Receive(ctx, max, opts...)
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
		left := time.Until(end)
		if left <= 0 {
			return msgs, nil
		}
		timer.Reset(min(time.Until(q.wakeAt(ctx, before, q.hints.opts.poll)), left))
		q.hints.waiting.Add(1)
		select {
		case <-ctx.Done():
		case <-local:
		case <-hint:
		case <-timer.C:
		case <-q.hints.done: // closed: the next Receive reports it
		}
		q.hints.waiting.Add(-1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// wakeAt returns when a waiter that found nothing due at before should look
// again without any wake-up: at the next visible_at after before (a lease
// ending, a delayed message), or after the jittered poll interval, whichever
// is first. It is in wall-clock time; before is in the queue's clock.
func (q *Queue) wakeAt(ctx context.Context, before time.Time, poll time.Duration) time.Time {
	at := time.Now().Add(pollWait(poll))
	next, ok, err := q.nextVisible(ctx, before)
	if err != nil {
		// The poll still comes; a failing store shows in Receive's errors.
		return at
	}
	if ok {
		if t := time.Now().Add(next.Sub(q.now())); t.Before(at) {
			return t
		}
	}
	return at
}

// nextVisible returns the earliest visible_at later than after. ok is false
// when no message is waiting for a future visible_at.
func (q *Queue) nextVisible(ctx context.Context, after time.Time) (next time.Time, ok bool, err error) {
	st, err := q.db.ReadStmt(ctx, stmtNextVisible)
	if err != nil {
		return time.Time{}, false, err
	}
	var v any // a REAL from another program (rows.go) is rounded up: the row is not due before
	if err := st.QueryRowContext(ctx, after.UnixMilli()).Scan(&v); err != nil {
		return time.Time{}, false, err
	}
	ms, ok := sqlstore.IntValue(v, true)
	if !ok { // none, or only visible_at values that are no number: never due
		return time.Time{}, false, nil
	}
	return time.UnixMilli(ms), true, nil
}
