package queue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// DefaultPollInterval is the fallback poll of ReceiveWait and Consume: how
// long a waiter sleeps, at most, when no wake-up arrives. Each wait is
// jittered by +-20% so that many consumers do not poll in step.
const DefaultPollInterval = time.Second

// Log attribute keys of this package.
const (
	logKeyErr       = "err"
	logKeyStore     = "store"
	logKeyID        = "id"
	logKeyAttempt   = "attempt"
	logKeyRetryIn   = "retry_in"
	logKeyStack     = "stack"
	logKeyBinding   = "binding"
	logKeyNext      = "next"
	logKeyNextDelay = "next_delay"
)

// pollWait returns d jittered by +-20%.
func pollWait(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// ReceiveWait is a long poll: it claims up to max due messages like Receive,
// and when none is due it waits until one is, at most wait, then returns
// what it claimed (an empty slice when wait passed with nothing due). A wait
// of 0 is one Receive.
//
// It looks at the queue again as soon as any of these happens (on the
// SQLite engine; an engine whose server can hold a receive open,
// driver.WaitReceiver such as JetStream's, waits there instead): a Send or
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
	if wr, ok := q.drv.(driver.WaitReceiver); ok {
		ro := receiveOptions{visibility: q.visibility}
		for _, fn := range opts {
			fn(&ro)
		}
		if max < 1 || max > MaxReceiveBatch {
			return nil, bindings.Errorf(bindings.CodeInvalidInput,
				"max: must be between 1 and %d, got %d", MaxReceiveBatch, max)
		}
		if err := validVisibility("visibility", ro.visibility); err != nil {
			return nil, err
		}
		return q.serverWait(ctx, wr, max, ro.visibility, wait)
	}
	end := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		local, hint := q.drv.WaitChans()
		before := q.now()
		msgs, err := q.Receive(ctx, max, opts...)
		if err != nil || len(msgs) > 0 {
			return msgs, err
		}
		left := time.Until(end)
		if left <= 0 {
			return msgs, nil
		}
		timer.Reset(min(time.Until(q.wakeAt(ctx, before, q.poll)), left))
		q.waiting.Add(1)
		select {
		case <-ctx.Done():
		case <-local:
		case <-hint:
		case <-timer.C:
		case <-q.drv.Done(): // closed: the next Receive reports it
		}
		q.waiting.Add(-1)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// serverWait is a receive that waits on the engine's server (WaitReceiver)
// up to wait, given up when ctx ends or the handle is closed. When ctx
// ends it returns ctx.Err() and has claimed nothing.
func (q *Queue) serverWait(ctx context.Context, wr driver.WaitReceiver, max int, visibility, wait time.Duration) ([]Message, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-q.drv.Done():
			cancel()
		case <-wctx.Done():
		}
	}()
	q.waiting.Add(1)
	dms, err := wr.ReceiveWait(wctx, max, visibility, wait)
	q.waiting.Add(-1)
	if err != nil {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, opErr(err, "receive")
	}
	return messagesOf(dms), nil
}

// wakeAt returns when a waiter that found nothing due at before should look
// again without any wake-up: at the next visible_at after before (a lease
// ending, a delayed message), or after the jittered poll interval, whichever
// is first. It is in wall-clock time; before is in the queue's clock.
func (q *Queue) wakeAt(ctx context.Context, before time.Time, poll time.Duration) time.Time {
	at := time.Now().Add(pollWait(poll))
	next, ok, err := q.drv.NextDue(ctx, before)
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
