package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// Limits and defaults of Consume.
const (
	// MaxWorkers is the largest Workers value.
	MaxWorkers = 256
	// DefaultWorkers is the number of handler goroutines without Workers.
	DefaultWorkers = 1
	// minErrorBackoff is the first pause after a failed claim; it doubles up
	// to the poll interval.
	minErrorBackoff = 10 * time.Millisecond
)

// Handler processes one message for Consume. Returning nil acks the
// message; returning an error (or panicking) nacks it, so it is delivered
// again after the retry back-off (ConsumeRetryDelay) with Attempt one
// higher; return RetryAfter(err, d) to choose the delay.
type Handler func(ctx context.Context, m Message) error

// ConsumeOption configures Consume.
type ConsumeOption func(*consumeOptions)

type consumeOptions struct {
	workers    int
	batch      int
	batchSet   bool
	visibility time.Duration
	poll       time.Duration
	log        *slog.Logger
	retry      RetrySchedule
	rnd        func() float64 // jitter of retry delays
}

// ConsumeWorkers sets how many handlers run at once, 1..MaxWorkers.
// Defaults to DefaultWorkers (1).
func ConsumeWorkers(n int) ConsumeOption { return func(o *consumeOptions) { o.workers = n } }

// Workers is ConsumeWorkers.
//
// Deprecated: use ConsumeWorkers; Consume options are all named Consume....
func Workers(n int) ConsumeOption { return ConsumeWorkers(n) }

// ConsumeBatchSize sets the most messages one claim takes,
// 1..MaxReceiveBatch. A claim never takes more than there are idle
// workers. Defaults to min(workers, MaxReceiveBatch).
func ConsumeBatchSize(n int) ConsumeOption {
	return func(o *consumeOptions) { o.batch, o.batchSet = n, true }
}

// BatchSize is ConsumeBatchSize.
//
// Deprecated: use ConsumeBatchSize; Consume options are all named Consume....
func BatchSize(n int) ConsumeOption { return ConsumeBatchSize(n) }

// ConsumeVisibility sets the lease of every message Consume claims,
// MinVisibility..MaxVisibility. While a handler runs, Consume extends its
// message's lease by this much every third of it, so a slow handler keeps
// its message; the lease only runs out when the process stops extending it
// (it died, or the store was unwritable for a whole lease). Defaults to the
// queue's default visibility.
func ConsumeVisibility(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.visibility = d }
}

// ConsumePollInterval sets the fallback poll: the longest Consume waits
// without a wake-up before it looks at the store, jittered by +-20%.
// Defaults to the handle's WithPollInterval, itself defaulting to
// DefaultPollInterval (1 s).
func ConsumePollInterval(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.poll = d }
}

// PollInterval is ConsumePollInterval.
//
// Deprecated: use ConsumePollInterval; WithPollInterval is the Open option,
// Consume options are all named Consume....
func PollInterval(d time.Duration) ConsumeOption { return ConsumePollInterval(d) }

// ConsumeRetryDelay sets the delay after a handler's first failure,
// doubled per further failure (+-20% jitter) up to ConsumeMaxRetryDelay;
// 0..MaxDelay, 0 retries at once. Defaults to the handle's WithRetryDelay
// (the binding's retryDelay, DefaultRetryDelay 1 s).
func ConsumeRetryDelay(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retry.Base = d }
}

// ConsumeMaxRetryDelay caps the retry delay, 0..MaxDelay. Defaults to the
// handle's WithMaxRetryDelay (the binding's maxRetryDelay,
// DefaultMaxRetryDelay 5 m).
func ConsumeMaxRetryDelay(d time.Duration) ConsumeOption {
	return func(o *consumeOptions) { o.retry.Max = d }
}

// ConsumeLogger sets where Consume reports handler errors, panics and
// store errors. Defaults to the queue's logger (WithLogger) or, when the
// app set none, slog.Default(), so failures are never silent.
func ConsumeLogger(l *slog.Logger) ConsumeOption { return func(o *consumeOptions) { o.log = l } }

// WithConsumeLogger is ConsumeLogger.
//
// Deprecated: use ConsumeLogger; the With... names are Open options.
func WithConsumeLogger(l *slog.Logger) ConsumeOption { return ConsumeLogger(l) }

func (q *Queue) consumeOptions(opts []ConsumeOption) (consumeOptions, error) {
	o := consumeOptions{workers: DefaultWorkers, visibility: q.visibility, poll: q.poll, retry: q.retry, rnd: defaultRand}
	for _, fn := range opts {
		fn(&o)
	}
	if o.workers < 1 || o.workers > MaxWorkers {
		return o, bindings.Errorf(bindings.CodeInvalidInput, "workers: must be between 1 and %d, got %d", MaxWorkers, o.workers)
	}
	if !o.batchSet {
		o.batch = min(o.workers, MaxReceiveBatch)
	}
	if o.batch < 1 || o.batch > MaxReceiveBatch {
		return o, bindings.Errorf(bindings.CodeInvalidInput, "batch size: must be between 1 and %d, got %d", MaxReceiveBatch, o.batch)
	}
	if err := validVisibility("visibility", o.visibility); err != nil {
		return o, err
	}
	if o.poll <= 0 {
		return o, bindings.Errorf(bindings.CodeInvalidInput, "poll interval: must be positive, got %s", o.poll)
	}
	if err := validRetry("retry delay", o.retry.Base); err != nil {
		return o, err
	}
	if err := validRetry("max retry delay", o.retry.Max); err != nil {
		return o, err
	}
	switch {
	case o.log != nil:
	case q.userLog:
		o.log = q.log
	default:
		o.log = slog.Default()
	}
	return o, nil
}

// Consume runs handler on every message of the queue, on up to ConsumeWorkers
// goroutines, until ctx ends. A handler that returns nil acks its message;
// one that returns an error or panics (the panic is recovered) nacks it, so
// it comes back with Attempt one higher after the retry back-off: the
// retry delay (ConsumeRetryDelay, default the binding's retryDelay, 1 s)
// doubled per failed attempt, +-20% jitter, at most ConsumeMaxRetryDelay
// (5 m); RetryAfter(err, d) chooses d instead. Under a dead-letter policy a
// message that failed its last attempt comes back at once, to be moved. The
// error text (at most MaxLastErrorBytes) is kept with the message on
// engines that can (Peek's LastError, carried into the dead-letter queue).
// Every handler error and panic is logged with the binding, message id,
// attempt and next delay.
//
// Consume claims when there is reason to: at start, when woken (exactly the
// wake-ups of ReceiveWait: a Send or Nack in this process, a NATS hint, the
// earliest future visible_at so a dead consumer's lease is re-offered the
// moment it ends, the jittered fallback poll), and when a worker frees up
// after a claim that came back full. On an engine whose server can hold a
// claim open (driver.WaitReceiver, the JetStream engine) an idle Consume
// waits in that claim instead, renewed every poll interval, and wakes when
// the server hands it a message. Each claim takes at most as many
// messages as there are idle workers, so nothing it claims waits for a
// worker while its lease runs. Between wake-ups it does not poll the store,
// so an idle consumer uses no CPU.
//
// While a handler runs, its message's lease is extended (Extend) every third
// of the visibility timeout, until the handler returns; the ack or nack is
// written after the last extension. A handler that hangs therefore holds
// its message until its process exits: give handlers their own timeouts.
//
// When ctx ends, Consume stops claiming, waits for the handlers in flight to
// return and acks or nacks their messages, then returns nil. Handlers
// receive context.WithoutCancel(ctx): its values, never its cancellation,
// so that a shutdown does not abort work half done; a handler that must stop
// early has to watch a signal of its own. Consume returns an error for
// invalid options or a nil handler (INVALID_INPUT, before claiming
// anything) and when the queue handle is closed under it; failing store
// operations are logged and retried with a backoff up to the poll interval.
func (q *Queue) Consume(ctx context.Context, handler Handler, opts ...ConsumeOption) error {
	o, err := q.consumeOptions(opts)
	if err != nil {
		return err
	}
	if handler == nil {
		return bindings.Errorf(bindings.CodeInvalidInput, "handler: must not be nil")
	}
	c := &consumer{q: q, o: o, handler: handler, hctx: context.WithoutCancel(ctx),
		jobs: make(chan Message, o.workers), free: make(chan struct{}, o.workers),
		acks: make(chan Message, o.workers)}
	c.wg.Add(o.workers)
	for range o.workers {
		go c.work()
	}
	ackerDone := make(chan struct{})
	go func() {
		defer close(ackerDone)
		c.acker()
	}()
	err = c.dispatch(ctx)
	close(c.jobs)
	c.wg.Wait()
	close(c.acks)
	<-ackerDone
	return err
}

// consumer is one running Consume.
type consumer struct {
	q       *Queue
	o       consumeOptions
	handler Handler
	hctx    context.Context // handlers' context: never cancelled
	jobs    chan Message    // claimed messages, at most one per idle worker
	free    chan struct{}   // a worker finished a message
	acks    chan Message    // handled messages to ack
	wg      sync.WaitGroup  // workers
}

// errConsumeClosed is returned by Consume when its queue handle is closed.
var errConsumeClosed = errors.New("queue handle closed while consuming")

// dispatch claims messages for idle workers until ctx ends.
func (c *consumer) dispatch(ctx context.Context) error {
	q := c.q
	idle := c.o.workers
	look := true // the store may hold due messages we have not claimed
	var local, hint <-chan struct{}
	var wakeAt time.Time
	backoff := time.Duration(0)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if look && idle > 0 {
			// Take the wake channels first: a commit after this point
			// wakes us even if the claim below misses it.
			local, hint = q.drv.WaitChans()
			before := q.now()
			k := min(c.o.batch, idle)
			msgs, err := q.Receive(ctx, k, ReceiveVisibility(c.o.visibility))
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil && q.isClosed():
				return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
			case err != nil:
				backoff = min(max(2*backoff, minErrorBackoff), c.o.poll)
				c.o.log.Warn("consume: claim failed; retrying", logKeyStore, q.Path(), logKeyErr, err, logKeyRetryIn, backoff)
				look = false
				wakeAt = time.Now().Add(backoff)
			default:
				backoff = 0
				for _, m := range msgs {
					idle--
					c.jobs <- m // never blocks: one slot per worker
				}
				if len(msgs) == k {
					continue // full: there may be more
				}
				look = false
				wakeAt = q.wakeAt(ctx, before, c.o.poll)
			}
		}
		// Wait. With no idle worker only a freed worker matters: a claim
		// follows it if look is set, which a full claim always leaves set.
		if wr, ok := q.drv.(driver.WaitReceiver); ok && idle > 0 && !look && backoff == 0 {
			// The engine's server holds the claim open until a message is
			// due: no wake channels, no timer, no poll.
			idle += c.drainFree()
			k := min(c.o.batch, idle)
			msgs, err := q.serverWait(ctx, wr, k, c.o.visibility, c.o.poll)
			switch {
			case err == nil:
				// Claimed messages are handled even if ctx ended meanwhile:
				// the workers settle them before Consume returns.
				for _, m := range msgs {
					idle--
					c.jobs <- m // never blocks: one slot per worker
				}
				if ctx.Err() != nil {
					return nil
				}
				look = len(msgs) == k // full: there may be more
				continue
			case ctx.Err() != nil:
				return nil
			case q.isClosed():
				return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
			default:
				backoff = min(max(2*backoff, minErrorBackoff), c.o.poll)
				c.o.log.Warn("consume: claim failed; retrying", logKeyStore, q.Path(), logKeyErr, err, logKeyRetryIn, backoff)
				wakeAt = time.Now().Add(backoff) // the wait below, on its timer
			}
		}
		var lc, hc <-chan struct{}
		var tc <-chan time.Time
		waiting := idle > 0 && !look
		if waiting {
			lc, hc = local, hint
			timer.Reset(time.Until(wakeAt))
			tc = timer.C
			q.waiting.Add(1)
		}
		ev := c.wait(ctx, lc, hc, tc)
		if waiting {
			q.waiting.Add(-1)
		}
		switch ev {
		case evStop:
			return nil
		case evClosed:
			return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
		case evFree:
			idle++
			// Count every worker that finished meanwhile, so the next claim
			// takes a batch for all of them instead of one message each;
			// first let workers that are about to finish (runnable, as after
			// a short handler) do so.
			runtime.Gosched()
			idle += c.drainFree()
		case evWake:
			look = true
		}
	}
}

// drainFree counts (and takes) the freed-worker events waiting in c.free.
func (c *consumer) drainFree() int {
	n := 0
	for {
		select {
		case <-c.free:
			n++
		default:
			return n
		}
	}
}

// Events that end a wait of the dispatcher.
const (
	evStop   = iota // ctx ended
	evClosed        // the queue handle was closed
	evFree          // a worker finished
	evWake          // a reason to look at the store
)

// wait blocks until something the dispatcher reacts to happens. Nil
// channels are never ready.
func (c *consumer) wait(ctx context.Context, lc, hc <-chan struct{}, tc <-chan time.Time) int {
	select {
	case <-ctx.Done():
		return evStop
	case <-c.q.drv.Done():
		return evClosed
	case <-c.free:
		return evFree
	case <-lc:
		return evWake
	case <-hc:
		return evWake
	case <-tc:
		return evWake
	}
}

// work runs handlers until jobs is closed and drained.
func (c *consumer) work() {
	defer c.wg.Done()
	for m := range c.jobs {
		c.process(m)
		c.free <- struct{}{} // never blocks: one slot per worker
	}
}

// process runs the handler on m, then acks or nacks m. The ack and nack
// are not cancelled with Consume's ctx, so a finished message is settled.
func (c *consumer) process(m Message) {
	log := c.o.log
	stop := c.keepLease(m)
	err := c.call(m)
	stop()
	if err == nil {
		c.acks <- m
		return
	}
	delay, chosen := retryAfterOf(err)
	next := "retry"
	switch {
	case chosen:
	case c.q.maxAttempt > 0 && m.Attempt >= c.q.maxAttempt:
		next = "dead-letter"
	default:
		delay = c.o.retry.Delay(m.Attempt, c.o.rnd)
	}
	attrs := []any{logKeyBinding, c.q.binding, logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyNext, next, logKeyNextDelay, delay, logKeyErr, err}
	var pe *panicError
	if errors.As(err, &pe) {
		log.Error("consume: handler panicked; message nacked", append(attrs, logKeyStack, string(pe.stack))...)
	} else {
		log.Warn("consume: handler failed; message nacked", attrs...)
	}
	if nerr := c.q.nackFailed(c.hctx, m.ReceiptHandle, delay, lastErrorText(err)); nerr != nil {
		log.Warn("consume: nack failed; the message comes back when its lease ends", logKeyBinding, c.q.binding, logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, nerr)
	}
}

// nackFailed nacks a failed delivery after delay, recording lastError where
// the engine can.
func (q *Queue) nackFailed(ctx context.Context, receipt string, delay time.Duration, lastError string) error {
	if fr, ok := q.drv.(driver.FailureRecorder); ok {
		return opErr(fr.NackFailed(ctx, receipt, delay, lastError), "nack receipt %q", receipt)
	}
	return opErr(q.drv.Nack(ctx, receipt, delay), "nack receipt %q", receipt)
}

// keepLease extends m's lease by the visibility timeout every third of it
// until stop is called. stop cuts an extension in progress short and waits
// for it, so no extension is written after the ack or nack that follows
// (one would undo a nack). A stale receipt or a message that is gone ends
// the extensions; other failures are logged and tried again at the next
// tick.
func (c *consumer) keepLease(m Message) (stop func()) {
	every := c.o.visibility / 3
	ctx, cancel := context.WithCancel(c.hctx)
	var (
		mu      sync.Mutex
		stopped bool
		timer   *time.Timer
	)
	extend := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		err := c.q.Extend(ctx, m.ReceiptHandle, c.o.visibility)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrStaleReceipt), errors.Is(err, ErrMessageGone):
			c.o.log.Warn("consume: lease lost while the handler runs; its ack will fail", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
			return
		default:
			c.o.log.Warn("consume: extending the lease failed; retrying", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
		}
		timer.Reset(every)
	}
	mu.Lock()
	timer = time.AfterFunc(every, extend)
	mu.Unlock()
	return func() {
		cancel()
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
	}
}

// acker acks handled messages until acks is closed and drained. Acks that
// queue up while one is being written go in one transaction: under load
// (and against a foreign writer holding the lock) that halves the write
// transactions per message; alone, an ack is written at once.
func (c *consumer) acker() {
	batch := make([]Message, 0, MaxReceiveBatch)
	for m := range c.acks {
		batch = append(batch[:0], m)
	more:
		for len(batch) < cap(batch) {
			select {
			case m, ok := <-c.acks:
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		c.ackBatch(batch)
	}
}

// ackBatch acks msgs in one transaction, or one by one if that fails.
func (c *consumer) ackBatch(msgs []Message) {
	log := c.o.log
	var stale []Message
	stale, err := c.q.ackMany(c.hctx, msgs)
	if err != nil {
		for _, m := range msgs {
			if aerr := c.q.Ack(c.hctx, m.ReceiptHandle); aerr != nil {
				log.Warn("consume: ack failed; the message will be delivered again", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, aerr)
			}
		}
		return
	}
	for _, m := range stale {
		log.Warn("consume: ack failed: the lease ended and the message was delivered again", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, ErrStaleReceipt)
	}
}

// ackMany is Ack of several messages in one go (AckBatch). A stale receipt
// does not fail the others; it is returned in stale.
func (q *Queue) ackMany(ctx context.Context, msgs []Message) (stale []Message, err error) {
	receipts := make([]string, len(msgs))
	for i, m := range msgs {
		receipts[i] = m.ReceiptHandle
	}
	outcomes, err := q.drv.AckBatch(ctx, receipts)
	if err != nil {
		return nil, opErr(err, "ack %d messages", len(msgs))
	}
	for i, o := range outcomes {
		if o == AckStale {
			stale = append(stale, msgs[i])
		}
	}
	return stale, nil
}

// call runs the handler; a panic becomes a *panicError.
func (c *consumer) call(m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	return c.handler(c.hctx, m)
}

// panicError is a recovered handler panic.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }
