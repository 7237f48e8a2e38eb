package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// fastHandler: while handlers take less than this on average (and all
	// workers are idle), the dispatcher runs a claimed batch itself
	// (inlineRunner) instead of handing it to the workers: no goroutine
	// hand-off per message.
	fastHandler = 100 * time.Microsecond
	// slowHandler: a handler the inline runner runs that takes longer than
	// this hands the rest of its batch to the workers, which take over
	// until the average is short again.
	slowHandler = time.Millisecond
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

// ConsumeBatchSize sets the most messages one claim takes,
// 1..MaxReceiveBatch. A claim for the workers never takes more than there
// are idle workers. Defaults to min(workers, MaxReceiveBatch), and to
// MaxReceiveBatch for a batch Consume runs on its own goroutine (short
// handlers, see Consume); when set, it bounds those too.
func ConsumeBatchSize(n int) ConsumeOption {
	return func(o *consumeOptions) { o.batch, o.batchSet = n, true }
}

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
// messages as there are idle workers (every worker that finished by the
// time of the claim counts), so nothing it claims waits for a worker while
// its lease runs (but see the batches it runs itself, below). Between
// wake-ups it does not poll the store, so an idle consumer uses no CPU.
//
// While handlers are short (under 100us on average) and no worker is busy,
// the goroutine that claims runs a claimed batch itself, one handler after
// the other, which saves a goroutine hand-off per message; once a batch
// ran there with no hand-off, the next such claim takes MaxReceiveBatch
// messages (unless ConsumeBatchSize is set). While handlers are short, a
// claim also waits for the busy workers to finish, up to 1 ms, so that it
// is one such batch rather than a message per early finisher. A handler there that runs
// past 1 ms hands the rest of its batch to the workers, at most
// ConsumeWorkers-1 of them; any beyond those wait, their leases extended,
// until that handler returns and then go to the first workers that free
// up. The workers take over until handlers are short again (while that
// handler runs, nothing new is claimed). At most ConsumeWorkers handlers
// run at once either way.
//
// Acks of handled messages are written by one ack goroutine, one AckBatch
// at a time, each of everything that finished while the one before it ran
// (up to MaxAckBatch): a batch run on the claiming goroutine is handed to
// it in one go, so the claims go on while its acks are written. The
// claiming goroutine waits only while a full batch of acks is already
// waiting. On an engine that writes acks and a claim in one commit (the
// SQLite engine, driver.AckReceiver) the acks of a batch run on the
// claiming goroutine go with its next claim instead, when one follows at
// once. Consume returns after the last ack was written.
//
// While a handler runs, its message's lease is extended (Extend) every third
// of the visibility timeout, until the handler returns; the ack or nack is
// written after the last extension. A handler that hangs therefore holds
// its message until its process exits: give handlers their own timeouts.
//
// When ctx ends, Consume stops claiming (a claim in flight is not cut
// short: it finishes, and its messages are handled), waits for the handlers
// in flight to return and acks or nacks their messages, then returns nil.
// Handlers receive context.WithoutCancel(ctx): its values, never its
// cancellation, so that a shutdown does not abort work half done; a handler
// that must stop early has to watch a signal of its own. Consume returns an
// error for invalid options or a nil handler (INVALID_INPUT, before
// claiming anything) and when the queue handle is closed under it; failing
// store operations are logged and retried with a backoff up to the poll
// interval.
func (q *Queue) Consume(ctx context.Context, handler Handler, opts ...ConsumeOption) error {
	o, err := q.consumeOptions(opts)
	if err != nil {
		return err
	}
	if handler == nil {
		return bindings.Errorf(bindings.CodeInvalidInput, "handler: must not be nil")
	}
	c := newConsumer(q, o, handler, context.WithoutCancel(ctx), wallClock{})
	c.wg.Add(o.workers)
	for range o.workers {
		go c.work(c.newLeaseKeeper(c.clk))
	}
	err = c.dispatch(ctx)
	c.acks.add(c.carry...) // acks no claim took along
	c.inline.watch.Stop()
	c.gather.Stop()
	close(c.jobs)
	c.wg.Wait()
	c.acks.close() // every ack written
	return err
}

// consumer is one running Consume, in parts: the dispatcher (dispatch,
// consume_dispatch.go) claims and decides who runs a batch; the inline
// runner (consume_inline.go) runs one on the dispatcher's goroutine;
// workers run the rest (work) and nack failures; a lease keeper per
// goroutine that runs handlers (consume_lease.go) extends the leases; the
// ack writer (consume_acks.go) writes every ack.
type consumer struct {
	q       *Queue
	o       consumeOptions
	handler Handler
	hctx    context.Context // handlers', acks' and claims' context: never cancelled
	clk     clock
	jobs    chan Message       // claimed messages, one per idle worker (and the rest of an inline batch)
	done    chan time.Duration // a worker finished a message (its handler's duration)
	acks    ackWriter
	inline  *inlineRunner
	wg      sync.WaitGroup // workers
	avg     time.Duration  // moving average of handler durations; -1 before the first (dispatcher's)
	gather  timer          // ends the dispatcher's wait for busy short handlers (signals slow)
	slow    chan struct{}  // gather fired
	claimed []Message      // the dispatcher's claim buffer, reused
	// ackRecv is the engine's AckReceiver, nil if it has none. With one,
	// the acks of a batch the dispatcher ran wait in carry for its next
	// claim, which writes them in the same commit (claim); the dispatcher
	// adds them to the ack writer instead when it waits (dispatch).
	ackRecv  driver.AckReceiver
	carry    []Message
	receipts []string // claim's buffer for carry's receipts
}

// newConsumer returns the parts of a Consume, its ack goroutine started.
func newConsumer(q *Queue, o consumeOptions, handler Handler, hctx context.Context, clk clock) *consumer {
	c := &consumer{q: q, o: o, handler: handler, hctx: hctx, clk: clk, avg: -1,
		jobs: make(chan Message, o.workers+MaxReceiveBatch), done: make(chan time.Duration, o.workers+MaxReceiveBatch)}
	c.ackRecv, _ = q.drv.(driver.AckReceiver)
	c.acks = newBatchAcker(c.ackBatch)
	c.inline = newInlineRunner(c, clk)
	c.slow = make(chan struct{}, 1)
	c.gather = clk.AfterFunc(time.Hour, func() { c.slow <- struct{}{} })
	c.gather.Stop()
	return c
}

// newLeaseKeeper returns a lease keeper for one goroutine of c.
func (c *consumer) newLeaseKeeper(clk clock) *leaseKeeper {
	return newLeaseKeeper(clk, c.o.visibility, c.hctx, c.o.log, func(ctx context.Context, receipt string) error {
		return c.q.Extend(ctx, receipt, c.o.visibility)
	})
}

// errConsumeClosed is returned by Consume when its queue handle is closed.
var errConsumeClosed = errors.New("queue handle closed while consuming")

// note adds a handler's duration d to the moving average.
func (c *consumer) note(d time.Duration) {
	switch {
	case d >= slowHandler || c.avg < 0:
		c.avg = d
	default:
		c.avg += (d - c.avg) / 8
	}
}

// work runs handlers until jobs is closed and drained, its leases kept by l.
func (c *consumer) work(l *leaseKeeper) {
	defer c.wg.Done()
	for m := range c.jobs {
		began := c.clk.Now()
		l.arm()
		ok := c.process(l, m)
		l.disarm()
		d := c.clk.Now().Sub(began)
		if ok {
			c.acks.add(m) // flushed by the dispatcher (or, while it runs a slow handler, by its lease ticks)
		}
		// Never blocks: one slot per worker, and MaxReceiveBatch for the
		// rest of an inline batch queued beyond them.
		c.done <- d
	}
}

// process runs the handler on m, its lease extended by l (armed by the
// caller), and reports whether it succeeded, so m is to be acked; a failed
// m is nacked here. The nack is not cancelled with Consume's ctx, so a
// finished message is settled.
func (c *consumer) process(l *leaseKeeper, m Message) (ok bool) {
	log := c.o.log
	l.begin(m)
	err := c.call(m)
	l.end()
	if err == nil {
		return true
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
	return false
}

// nackFailed nacks a failed delivery after delay, recording lastError where
// the engine can.
func (q *Queue) nackFailed(ctx context.Context, receipt string, delay time.Duration, lastError string) error {
	if fr, ok := q.drv.(driver.FailureRecorder); ok {
		return opErr(fr.NackFailed(ctx, receipt, delay, lastError), "nack receipt %q", receipt)
	}
	return opErr(q.drv.Nack(ctx, receipt, delay), "nack receipt %q", receipt)
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
