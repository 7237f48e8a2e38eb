package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
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
	// minGather and maxGather bound how long the dispatcher waits for more
	// workers to finish before a claim: the last claim's duration.
	minGather = 250 * time.Microsecond
	maxGather = 2 * time.Millisecond
	// fastHandler: while handlers take less than this on average (and all
	// workers are idle), the dispatcher runs a claimed batch itself instead
	// of handing it to the workers: no goroutine hand-off per message.
	fastHandler = 100 * time.Microsecond
	// slowHandler: a handler the dispatcher runs that takes longer than this
	// hands the rest of its batch to the workers, and ends inline running
	// until the average is short again.
	slowHandler = time.Millisecond
	// inlineAckClaims: while full batches of short handlers run inline one
	// claim after the other, their acks are written in one transaction per
	// this many claims (a claim's worth of short handlers takes well under
	// slowHandler per message, so the acks wait a few milliseconds).
	inlineAckClaims = 4
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
// 1..MaxReceiveBatch. A claim for the workers never takes more than there
// are idle workers. Defaults to min(workers, MaxReceiveBatch), and to
// MaxReceiveBatch for a batch Consume runs on its own goroutine (short
// handlers, see Consume); when set, it bounds those too.
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
// worker while its lease runs (but see the batches it runs itself,
// below). After a full claim, when the first of the busy workers
// finishes, Consume waits for the others that finish with it (at most
// about one claim's duration, and not again once a handler proved
// slow), so short handlers are fed one claim per batch instead of one per
// early finisher. Between wake-ups it does not poll the store, so an idle
// consumer uses no CPU.
//
// While handlers are short (under 100us on average) and no worker is busy,
// the goroutine that claims runs a claimed batch itself, one handler after
// the other, which saves a goroutine hand-off per message; once a batch
// ran there with no hand-off, the next such claim takes MaxReceiveBatch
// messages (unless ConsumeBatchSize is set). A
// handler there that runs past 1 ms hands the rest of its batch to the
// workers, at most ConsumeWorkers-1 of them; any beyond those wait, their
// leases extended, until that handler returns and then go to the first
// workers that free up. The workers take over until handlers are short
// again (while that handler runs, nothing new is claimed). At most
// ConsumeWorkers handlers run at once either way.
//
// Acks of handled messages are written by the goroutine that claims, in one
// transaction for everything finished since the previous claim, right after
// the next claim (while its handlers run) or before it waits for a wake-up;
// behind batches it ran itself back to back, once per four claims. On an
// engine whose acks batch well (driver.AckPipeliner: JetStream, where an
// AckBatch is round trips to the server and one stream read for the batch,
// and a claim beside it takes no lock it holds) they are handed instead, at
// those same points but without the four-claim wait, to an ack goroutine
// that writes one AckBatch at a time while the claims go on, each of
// everything finished while the one before it ran (up to MaxAckBatch); the
// claiming goroutine waits only while a full batch is already waiting.
// Consume returns after the last of them was written either way.
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
		jobs: make(chan Message, o.workers+MaxReceiveBatch), done: make(chan finished, o.workers+MaxReceiveBatch),
		acks: make([]Message, 0, min(o.workers, MaxAckBatch))}
	if ap, ok := q.drv.(driver.AckPipeliner); ok && ap.PipelineAcks() {
		c.pipe = c.startAcker()
	}
	c.wg.Add(o.workers)
	for range o.workers {
		go c.work()
	}
	err = c.dispatch(ctx)
	close(c.jobs)
	c.wg.Wait()
	// Every worker has stopped: what they finished since is in done.
	for len(c.done) > 0 {
		c.collect(<-c.done)
	}
	c.flushAcks()
	if c.pipe != nil {
		c.pipe.close() // every ack written
	}
	return err
}

// consumer is one running Consume. One goroutine, the dispatcher, does all
// of its claims and acks; workers only run handlers (and nack failures), so
// claims and acks do not compete for the store's write lock and each claim
// goes with at most one ack transaction for everything finished before it.
// On an engine whose acks batch well (driver.AckPipeliner) the dispatcher
// hands its acks to an acker goroutine instead (pipe, consumeacks.go), so
// the next claim does not wait for the previous AckBatch.
type consumer struct {
	q       *Queue
	o       consumeOptions
	handler Handler
	hctx    context.Context // handlers' context: never cancelled
	jobs    chan Message    // claimed messages, one per idle worker (and the rest of an inline batch)
	done    chan finished   // a worker finished a message; one slot per worker
	acks    []Message       // handled messages not acked yet (dispatcher's)
	pipe    *acker          // writes the acks beside the claims (driver.AckPipeliner); nil: the dispatcher does
	wg      sync.WaitGroup  // workers
	// want is how many idle workers a claim after a full one waits for
	// (at most gatherFor): the number that recently became idle together.
	want      int
	gatherFor time.Duration // the last claim's duration, clamped
	avg       time.Duration // moving average of handler durations; -1 before the first
	watch     *time.Timer   // hands the rest of an inline batch to the workers
	lease     *leaseKeeper  // extends the leases of the inline batch
	inl       struct {      // the batch the dispatcher runs itself
		mu     sync.Mutex
		msgs   []Message
		next   int // msgs[next:] are not started
		handed int // how many went to the workers
		// deferred are acks of earlier inline batches carried into this
		// one; handOff writes them if a handler here turns slow.
		deferred []Message
		// slow: a handler here turned slow and handed messages on. Until
		// it returns the dispatcher writes no acks, and a handled
		// message's lease is no longer extended, so the workers put what
		// they finish in slowAcks and flushSlow writes them every quarter
		// of the lease; the rest join the dispatcher's acks when the slow
		// handler returns. endSlow stops flushSlow.
		slow     bool
		slowAcks []Message
		endSlow  chan struct{}
	}
}

// finished is a message a worker is done with; ack is set when its handler
// succeeded (a failed one was nacked by the worker).
type finished struct {
	m   Message
	ack bool
	d   time.Duration // how long the handler ran
}

// errConsumeClosed is returned by Consume when its queue handle is closed.
var errConsumeClosed = errors.New("queue handle closed while consuming")

// dispatch claims messages for idle workers and acks what they finished
// until ctx ends.
//
// Acks are pipelined behind claims: when workers are idle and the store may
// hold more, the claim runs first, so the workers start on the new batch
// while the acks of the previous one are written. Acks are written before
// the dispatcher blocks, so a finished message is acked at once when there
// is nothing to claim.
func (c *consumer) dispatch(ctx context.Context) error {
	q := c.q
	idle := c.o.workers
	look := true // the store may hold due messages we have not claimed
	var local, hint <-chan struct{}
	var wakeAt time.Time
	backoff := time.Duration(0)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	clean := false    // the last batch ran inline with no hand-off
	cleanRun := false // likewise, kept across waits until a batch is not
	c.want = min(c.o.batch, idle)
	c.gatherFor = minGather
	c.avg = -1
	c.watch = time.AfterFunc(time.Hour, c.handOff)
	c.watch.Stop()
	defer c.watch.Stop()
	c.lease = c.newLeaseKeeper()
	c.lease.inline = true
	for {
		clean = false
		if look && idle > 0 {
			// Take the wake channels first: a commit after this point
			// wakes us even if the claim below misses it.
			local, hint = q.drv.WaitChans()
			before := q.now()
			k := min(c.o.batch, idle)
			c.want = max(c.want, k)
			inline := idle == c.o.workers && c.avg >= 0 && c.avg < fastHandler
			if inline && cleanRun && !c.o.batchSet {
				// The dispatcher runs this batch, and ran the last one
				// with no hand-off: a full claim (the workers take what
				// a handler there that turns slow leaves).
				k = MaxReceiveBatch
			}
			began := time.Now()
			msgs, err := q.Receive(ctx, k, ReceiveVisibility(c.o.visibility))
			c.gatherFor = min(max(time.Since(began), minGather), maxGather)
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
				if inline {
					// Short handlers and nobody busy: run the batch here,
					// one handler at a time (within the worker limit).
					handed := c.runInline(msgs)
					clean = handed == 0
					cleanRun = clean
					if handed > 0 {
						// Its handler turned slow: the rest run on workers,
						// likely to finish together with it.
						idle -= handed
						if err := c.settle(ctx, len(msgs) == k, &idle, gather); err != nil || ctx.Err() != nil {
							return err
						}
					}
				} else {
					cleanRun = false
					for _, m := range msgs {
						idle--
						c.jobs <- m // never blocks: one slot per worker
					}
				}
				if len(msgs) < k {
					look = false
					wakeAt = q.wakeAt(ctx, before, c.o.poll)
				}
				// else full: there may be more, claimed when workers free up.
			}
		}
		// Acks of what finished before this point, written while the
		// workers handle the batch just claimed.
		if clean && look && c.pipe == nil && len(c.acks) < inlineAckClaims*c.o.batch {
			// A full batch of short handlers ran here and the next claim
			// follows at once: its batch carries these acks, so one ack
			// transaction covers up to inlineAckClaims claims (handOff
			// writes them if a handler there turns slow). With an acker
			// (pipe) they go to it now: it batches what arrives while its
			// AckBatch runs, and holding them here would only delay them.
			continue
		}
		c.flushAcks()
		if look && idle > 0 {
			continue // a full claim left idle workers: claim again
		}
		// Wait. With no idle worker only a freed worker matters: a claim
		// follows it if look is set, which a full claim always leaves set.
		if wr, ok := q.drv.(driver.WaitReceiver); ok && idle+len(c.done) == c.o.workers && !look && backoff == 0 {
			// Every worker idle (acks written first): the engine's server
			// holds the claim open until a message is due (no wake
			// channels, no timer, no poll). With a worker busy the wait
			// below wakes when it finishes, so its ack is not held for the
			// length of a server wait.
			idle += c.drainFree()
			c.flushAcks()
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
		ev, f := c.wait(ctx, lc, hc, tc)
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
			c.collect(f)
			if err := c.settle(ctx, look, &idle, gather); err != nil || ctx.Err() != nil {
				return err
			}
		case evWake:
			look = true
		}
	}
}

// drainFree counts (and takes) the finished-worker events waiting in
// c.done, noting each for the next ack.
func (c *consumer) drainFree() int {
	n := 0
	for {
		select {
		case f := <-c.done:
			n++
			c.collect(f)
		default:
			return n
		}
	}
}

// settle runs after a worker finished: it counts every worker that finished
// meanwhile, so the next claim takes a batch for all of them instead of one
// message each (first letting workers that are about to finish, runnable as
// after a short handler, do so), and when the store may hold more (look)
// gathers the workers finishing with them. It returns an error only when
// the handle was closed; a nil return with ctx ended means stop.
func (c *consumer) settle(ctx context.Context, look bool, idle *int, gather *time.Timer) error {
	runtime.Gosched()
	for drained := false; !drained; {
		select {
		case f := <-c.done:
			*idle++
			c.collect(f)
		default:
			drained = true
		}
	}
	if look && *idle < c.want {
		if c.gather(ctx, idle, gather) == evClosed {
			return bindings.Wrap(bindings.CodeQueueOperationFailed, errConsumeClosed, "consume")
		}
	}
	return nil
}

// gather waits up to gatherFor for more workers to finish, until want are
// idle: with short handlers the workers of one claim finish within
// microseconds of each other, and one claim (and one ack) for all of them
// costs a transaction where a claim per early finisher costs several. When
// the time runs out first, the busy workers are slow ones: want drops to
// the idle count, so a lasting slow handler costs one such wait, not one per
// claim.
func (c *consumer) gather(ctx context.Context, idle *int, t *time.Timer) int {
	t.Reset(c.gatherFor)
	defer t.Stop()
	for *idle < c.want {
		select {
		case <-ctx.Done():
			return evStop
		case <-c.q.drv.Done():
			return evClosed
		case f := <-c.done:
			*idle++
			c.collect(f)
		case <-t.C:
			c.want = *idle
			return evFree
		}
	}
	return evFree
}

// collect notes a finished message for the next ack.
func (c *consumer) collect(f finished) {
	c.note(f.d)
	if !f.ack {
		return
	}
	c.acks = append(c.acks, f.m)
	if len(c.acks) == MaxAckBatch {
		c.flushAcks()
	}
}

// note adds a handler's duration d to the moving average.
func (c *consumer) note(d time.Duration) {
	switch {
	case d >= slowHandler || c.avg < 0:
		c.avg = d
	default:
		c.avg += (d - c.avg) / 8
	}
}

// flushAcks acks the collected messages in one transaction, or hands
// them to the acker (c.pipe), which writes them while the dispatcher goes
// on.
func (c *consumer) flushAcks() {
	if len(c.acks) == 0 {
		return
	}
	if c.pipe != nil {
		c.pipe.add(c.acks)
	} else {
		c.ackBatch(c.acks)
	}
	clear(c.acks) // drop the payloads
	c.acks = c.acks[:0]
}

// Events that end a wait of the dispatcher.
const (
	evStop   = iota // ctx ended
	evClosed        // the queue handle was closed
	evFree          // a worker finished
	evWake          // a reason to look at the store
)

// wait blocks until something the dispatcher reacts to happens; for evFree
// it returns what the worker finished. Nil channels are never ready.
func (c *consumer) wait(ctx context.Context, lc, hc <-chan struct{}, tc <-chan time.Time) (int, finished) {
	select {
	case <-ctx.Done():
		return evStop, finished{}
	case <-c.q.drv.Done():
		return evClosed, finished{}
	case f := <-c.done:
		return evFree, f
	case <-lc:
		return evWake, finished{}
	case <-hc:
		return evWake, finished{}
	case <-tc:
		return evWake, finished{}
	}
}

// runInline runs the handlers of msgs on the dispatcher, one after the
// other, and returns how many of them it handed to the workers instead:
// when a handler is still running after slowHandler, the watch timer gives
// the messages not started yet to the workers (all idle when runInline
// began), so a handler that turns slow delays the rest of its batch by at
// most that. The dispatcher counts as one of the workers meanwhile: it runs
// only when all are idle, and hands on at most len(msgs)-1 messages.
func (c *consumer) runInline(msgs []Message) (handed int) {
	in := &c.inl
	in.mu.Lock()
	in.msgs, in.next, in.handed = msgs, 0, 0
	in.deferred = append(in.deferred[:0], c.acks...)
	clear(c.acks)
	c.acks = c.acks[:0]
	in.mu.Unlock()
	// One lease keeper for the batch: its messages share a claim time and
	// lease, so the timer armed now extends each in time.
	c.lease.arm()
	defer c.lease.disarm()
	for {
		in.mu.Lock()
		if in.handed > 0 {
			// A handler here turned slow and handed workers-1 messages
			// on: what is left of a batch larger than that waits for the
			// first of them to be done (the dispatcher runs no handler
			// while workers are busy).
			for ; in.next < len(in.msgs); in.next++ {
				c.jobs <- in.msgs[in.next] // never blocks: MaxReceiveBatch slots beyond the workers
				in.handed++
			}
		}
		if in.next == len(in.msgs) {
			handed = in.handed
			in.msgs, in.next = nil, 0
			if in.slow {
				in.slow = false
				close(in.endSlow)
				c.acks = append(c.acks, in.slowAcks...)
				clear(in.slowAcks)
				in.slowAcks = in.slowAcks[:0]
			}
			c.acks = append(c.acks, in.deferred...) // not written by handOff
			clear(in.deferred)
			in.deferred = in.deferred[:0]
			in.mu.Unlock()
			return handed
		}
		m := in.msgs[in.next]
		in.next++
		in.mu.Unlock()
		c.watch.Reset(slowHandler)
		began := time.Now()
		ok := c.process(c.lease, m)
		d := time.Since(began)
		c.watch.Stop()
		c.note(d)
		if ok {
			// With the acks carried in: handOff writes them if a handler
			// of this batch turns slow.
			in.mu.Lock()
			in.deferred = append(in.deferred, m)
			in.mu.Unlock()
		}
	}
}

// handOff gives the messages of the inline batch not started yet to the
// workers. It is the watch timer's function; a late call finds nothing
// left or no batch.
func (c *consumer) handOff() {
	in := &c.inl
	in.mu.Lock()
	// At most workers-1 go to the workers (the dispatcher is one): the
	// rest, of a batch larger than that, wait, their leases extended,
	// until the slow handler returns; runInline then queues them for the
	// workers.
	for in.next < len(in.msgs) && in.handed < c.o.workers-1 {
		c.jobs <- in.msgs[in.next] // never blocks: the workers are idle, one slot each
		in.next++
		in.handed++
	}
	if in.msgs != nil && in.handed > 0 && !in.slow { // a late call finds no batch
		in.slow = true
		in.endSlow = make(chan struct{})
		c.wg.Add(1)
		go c.flushSlow(in.endSlow)
	}
	if in.msgs == nil || len(in.deferred) == 0 {
		in.mu.Unlock()
		return
	}
	// The acks carried into this batch must not wait for its slow
	// handler. Consume waits for this write like for a worker.
	acks := slices.Clone(in.deferred)
	clear(in.deferred)
	in.deferred = in.deferred[:0]
	c.wg.Add(1)
	in.mu.Unlock()
	defer c.wg.Done()
	c.ackBatch(acks)
}

// slowAck takes m for flushSlow if the dispatcher runs a handler that
// turned slow (and so writes no acks meanwhile); false: the dispatcher
// acks m as usual.
func (c *consumer) slowAck(m Message) bool {
	c.inl.mu.Lock()
	defer c.inl.mu.Unlock()
	if !c.inl.slow {
		return false
	}
	c.inl.slowAcks = append(c.inl.slowAcks, m)
	return true
}

// flushSlow writes the acks the workers finish while the dispatcher runs a
// slow handler, every quarter of the lease (well before a handled
// message's lease ends), until end is closed; what is left then goes with
// the dispatcher's next ack.
func (c *consumer) flushSlow(end <-chan struct{}) {
	defer c.wg.Done()
	t := time.NewTicker(max(c.o.visibility/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-end:
			return
		case <-t.C:
		}
		c.inl.mu.Lock()
		if !c.inl.slow || len(c.inl.slowAcks) == 0 {
			c.inl.mu.Unlock()
			continue
		}
		acks := slices.Clone(c.inl.slowAcks)
		clear(c.inl.slowAcks)
		c.inl.slowAcks = c.inl.slowAcks[:0]
		c.inl.mu.Unlock()
		c.ackBatch(acks)
	}
}

// work runs handlers until jobs is closed and drained.
func (c *consumer) work() {
	defer c.wg.Done()
	l := c.newLeaseKeeper()
	for m := range c.jobs {
		began := time.Now()
		l.arm()
		ok := c.process(l, m)
		l.disarm()
		d := time.Since(began)
		if ok {
			ok = !c.slowAck(m)
		}
		// Never blocks: one slot per worker, and MaxReceiveBatch for the
		// rest of an inline batch queued beyond them.
		c.done <- finished{m: m, ack: ok, d: d}
	}
}

// process runs the handler on m, its lease extended by l (armed by the
// caller), and reports whether it succeeded, so m is
// to be acked; a failed m is nacked here. The nack is not cancelled with
// Consume's ctx, so a finished message is settled.
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

// leaseKeeper extends the lease of the message its goroutine is handling
// by the visibility timeout every third of it. Each worker has one, and the
// dispatcher one for the batches it runs inline, reused for every message:
// no context, timer or closure per message. While armed, its timer fires
// every third of the visibility and extends the lease of the message
// running then (if any). A worker arms it per message; the dispatcher once
// per inline batch, whose messages share a claim time and lease, so each
// extension of a batch's message comes no later than it would per message.
type leaseKeeper struct {
	c     *consumer
	every time.Duration
	timer *time.Timer
	// inline: the dispatcher's, which also extends the messages of its
	// batch not started yet (they wait only when the batch is larger than
	// the workers besides the dispatcher and a handler there turned slow).
	inline bool
	// mu is held by an extension in progress; end takes it, so no
	// extension is written after the ack or nack that follows (one would
	// undo a nack).
	mu    sync.Mutex
	armed bool    // the timer is to keep firing (guarded by mu)
	cur   Message // the message running now, when running (guarded by mu)
	// running is set between begin and end (guarded by mu and cmu).
	running bool
	// cmu guards cancel and ending: end cuts an extension in progress
	// short without waiting for mu.
	cmu    sync.Mutex
	ending bool
	cancel context.CancelFunc
}

func (c *consumer) newLeaseKeeper() *leaseKeeper {
	l := &leaseKeeper{c: c, every: c.o.visibility / 3}
	l.timer = time.AfterFunc(time.Hour, l.extend)
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

// extend is the timer's function. A stale receipt or a message that is
// gone ends the extensions of that message; other failures are logged and
// tried again at the next tick.
func (l *leaseKeeper) extend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.armed {
		return
	}
	defer l.timer.Reset(l.every)
	if l.inline {
		l.extendWaiting()
	}
	if !l.running {
		return // between two messages of an inline batch
	}
	l.cmu.Lock()
	if l.ending {
		l.cmu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(l.c.hctx)
	l.cancel = cancel
	l.cmu.Unlock()
	m, c := l.cur, l.c
	err := c.q.Extend(ctx, m.ReceiptHandle, c.o.visibility)
	l.cmu.Lock()
	l.cancel = nil
	l.cmu.Unlock()
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		l.running = false
	case errors.Is(err, ErrStaleReceipt), errors.Is(err, ErrMessageGone):
		c.o.log.Warn("consume: lease lost while the handler runs; its ack will fail", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
		l.running = false
	default:
		c.o.log.Warn("consume: extending the lease failed; retrying", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
	}
}

// extendWaiting extends the leases of the inline batch's messages not
// started yet. It holds the batch's lock, so none of them starts (and is
// acked or nacked) during its extension.
func (l *leaseKeeper) extendWaiting() {
	c, in := l.c, &l.c.inl
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.msgs == nil {
		return
	}
	for _, m := range in.msgs[in.next:] {
		if err := c.q.Extend(c.hctx, m.ReceiptHandle, c.o.visibility); err != nil {
			c.o.log.Warn("consume: extending the lease of a waiting message failed", logKeyID, m.ID, logKeyAttempt, m.Attempt, logKeyErr, err)
		}
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
