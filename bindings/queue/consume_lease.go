package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// leaseKeeper extends the lease of the message its goroutine is handling
// by the visibility timeout every third of it. Each worker has one, and the
// inline runner one for its batches, reused for every message: no context,
// timer or closure per message. While armed, its timer fires every third
// of the visibility and extends the lease of the message running then (if
// any). A worker arms it per message; the inline runner once per batch,
// whose messages share a claim time and lease, so each extension of a
// batch's message comes no later than it would per message.
type leaseKeeper struct {
	every time.Duration
	timer timer
	// extend renews the lease of one receipt (Queue.Extend by the
	// visibility timeout).
	extend func(ctx context.Context, receipt string) error
	hctx   context.Context // never cancelled: the extensions' parent
	log    *slog.Logger
	// waiting, when set (the inline runner's keeper), calls fn on each
	// message of the batch not started yet while holding the batch's lock,
	// so none of them starts (and is acked or nacked) during its extension.
	waiting func(fn func(Message))
	// ticked, when set, is called at every tick while armed.
	ticked func()
	// mu is held by an extension in progress; end takes it, so no
	// extension is written after the ack or nack that follows (one would
	// undo a nack).
	mu    sync.Mutex
	armed bool    // the timer is to keep firing (guarded by mu)
	cur   Message // the message running now, when running (guarded by mu)
	// running is set between begin and end (guarded by mu).
	running bool
	// cmu guards cancel and ending: end cuts an extension in progress
	// short without waiting for mu.
	cmu    sync.Mutex
	ending bool
	cancel context.CancelFunc
}

// newLeaseKeeper returns a disarmed keeper that renews leases by extend
// every third of visibility, timed by clk.
func newLeaseKeeper(clk clock, visibility time.Duration, hctx context.Context, log *slog.Logger,
	extend func(ctx context.Context, receipt string) error) *leaseKeeper {
	l := &leaseKeeper{every: visibility / 3, extend: extend, hctx: hctx, log: log}
	l.timer = clk.AfterFunc(time.Hour, l.tick)
	l.timer.Stop()
	return l
}

// arm starts the extensions: the first one every third of the visibility
// from now.
func (l *leaseKeeper) arm() {
	l.mu.Lock()
	l.armed = true
	l.mu.Unlock()
	l.timer.Reset(l.every)
}

// disarm stops the extensions. Call it after end.
func (l *leaseKeeper) disarm() {
	l.mu.Lock()
	l.armed = false
	l.mu.Unlock()
	l.timer.Stop()
}

// begin makes m the message whose lease the next extensions renew.
func (l *leaseKeeper) begin(m Message) {
	l.mu.Lock()
	l.cmu.Lock()
	l.ending = false
	l.cmu.Unlock()
	l.cur, l.running = m, true
	l.mu.Unlock()
}

// end stops extending the lease of the message begun last. It cuts an
// extension in progress short and waits for it.
func (l *leaseKeeper) end() {
	l.cmu.Lock()
	l.ending = true
	if l.cancel != nil {
		l.cancel()
	}
	l.cmu.Unlock()
	l.mu.Lock()
	l.cur, l.running = Message{}, false // drop the payload
	l.mu.Unlock()
}

// tick is the timer's function. A stale receipt or a message that is gone
// ends the extensions of that message; other failures are logged and
// tried again at the next tick.
func (l *leaseKeeper) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed {
		return
	}
	defer l.timer.Reset(l.every)
	if l.ticked != nil {
		l.ticked()
	}
	if l.waiting != nil {
		l.waiting(func(m Message) {
			if err := l.extend(l.hctx, m.ReceiptHandle); err != nil {
				l.log.Warn("consume: extending the lease of a waiting message failed", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
			}
		})
	}
	if !l.running {
		return // between two messages of an inline batch
	}
	l.cmu.Lock()
	if l.ending {
		l.cmu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(l.hctx)
	l.cancel = cancel
	l.cmu.Unlock()
	m := l.cur
	err := l.extend(ctx, m.ReceiptHandle)
	l.cmu.Lock()
	l.cancel = nil
	l.cmu.Unlock()
	cut := ctx.Err() != nil // by end, before our own cancel below
	cancel()
	switch {
	case err == nil:
	case cut:
		l.running = false
	case errors.Is(err, ErrStaleReceipt), errors.Is(err, ErrMessageGone):
		l.log.Warn("consume: lease lost while the handler runs; its ack will fail", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
		l.running = false
	default:
		l.log.Warn("consume: extending the lease failed; retrying", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
	}
}
