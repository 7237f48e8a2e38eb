// Package queue is localcloud's queue binding: leases, receipts that go
// stale on redelivery, FIFO order by send time, delayed messages, dead
// letters, and Consume, a worker pool that extends leases and acks for you.
// Any number of handles and OS processes may share one queue; each message
// is delivered to exactly one receiver per lease.
//
// It is one API over pluggable engines (bindings/queue/driver): Open and
// OpenMemory use the SQLite engine (the localqueue.v1 store format, one
// SQLite file <dir>/localqueue.sqlite, or a shared in-memory database),
// FromEnv picks the engine the binding's JSON names, and OpenEngine opens a
// queue of any engine, including one from another module. This package
// checks every argument (the same INVALID_INPUT errors on every engine) and
// runs Consume and ReceiveWait over the engine's wake-up signal.
//
// Option names: options of Open (and FromEnv, OpenMemory, OpenEngine) are
// With... (WithClock, WithHints, WithReadOnly); options of Consume are
// Consume... (ConsumeWorkers, ConsumeVisibility); options of one call are
// named for it (ReceiveVisibility for Receive and ReceiveWait, WithDelay for
// Send and Nack, RedriveTo and RedriveMax for Redrive).
package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// Limits and defaults of the queue binding, the same for every engine.
const (
	MaxPayloadBytes   = driver.MaxPayloadBytes
	MaxReceiveBatch   = 10
	DefaultVisibility = 30 * time.Second
	MinVisibility     = time.Millisecond
	MaxVisibility     = 12 * time.Hour
)

// MaxSendBatch is the most messages one SendBatch takes.
const MaxSendBatch = 100

// MaxPeekLimit is the most messages one Peek returns.
const MaxPeekLimit = 1000

// MaxAttemptsLimit is the largest maxAttempts of WithDeadLetter (the stack
// file's bound too).
const MaxAttemptsLimit = 1000

// MemoryPrefix starts the location of an in-memory store of the SQLite
// engine: "memory:NAME" (Location of its handle).
const MemoryPrefix = "memory:"

// ErrStaleReceipt is wrapped by the error of an Ack, Nack or Extend whose
// receipt was replaced by a later delivery of the same message. Its code is
// QUEUE_OPERATION_FAILED. It is driver.ErrStaleReceipt.
var ErrStaleReceipt = driver.ErrStaleReceipt

// ErrMessageGone is wrapped by the error of an Extend whose message no
// longer exists (acked, purged or moved to a dead-letter queue). Its code
// is QUEUE_OPERATION_FAILED. It is driver.ErrMessageGone.
var ErrMessageGone = driver.ErrMessageGone

// Message is one delivery of a message.
type Message struct {
	ID            int64
	ReceiptHandle string // opaque; its form is the engine's
	Attempt       int    // 1 on the first delivery
	Payload       Payload
	EnqueuedAt    time.Time
	// Attributes are the message's attributes (WithAttributes); nil if
	// it has none.
	Attributes Attributes
}

// Queue is a handle on one queue. It is safe for concurrent use.
type Queue struct {
	drv        driver.Queue
	now        func() time.Time
	visibility time.Duration // default lease
	poll       time.Duration // fallback poll of waiters
	log        *slog.Logger
	userLog    bool // the app set WithLogger
	binding    string
	maxAttempt int // of the dead-letter policy; 0 for none
	retry      RetrySchedule
	waiting    atomic.Int32 // goroutines blocked waiting for a wake-up, for tests
}

// Open opens or creates the SQLite queue store in dir (created 0700; the
// file 0600). A read-write open finishes the moves between stores (dead
// letters, redrives) that a killed process left unfinished.
func Open(ctx context.Context, dir string, opts ...Option) (*Queue, error) {
	return OpenEngine(ctx, sqlitequeue.Engine{}, dir, opts...)
}

// OpenMemory opens the in-memory queue called name, shared by every handle
// of this process that names it and gone when the last one closes. Its
// Location is "memory:NAME".
func OpenMemory(ctx context.Context, name string, opts ...Option) (*Queue, error) {
	return OpenEngine(ctx, sqlitequeue.Engine{}, MemoryPrefix+name, opts...)
}

// OpenEngine opens the queue at location (in the form the engine defines)
// with the engine e: the way to use an engine of another module, and what a
// queuetest harness calls.
func OpenEngine(ctx context.Context, e driver.Engine, location string, opts ...Option) (*Queue, error) {
	return openEngine(ctx, e, driver.Config{Location: location}, opts)
}

// EngineConfig returns the driver.Config that OpenEngine hands an engine
// for location with opts, every option checked as OpenEngine checks it.
// With New it splits OpenEngine in two, as sql.OpenDB wraps a connector: a
// tool opens the engine's queue itself with this config, keeps the engine's
// own handle for what only that engine has, and wraps it with New(d,
// opts...) for the public API.
func EngineConfig(location string, opts ...Option) (driver.Config, error) {
	o := buildOptions(opts)
	if err := o.validate(); err != nil {
		return driver.Config{}, err
	}
	return o.config(driver.Config{Location: location}), nil
}

// New returns the public handle on d, a queue an engine opened with
// EngineConfig(location, opts...), applying opts (the same ones) as
// OpenEngine would: the default visibility, the retry back-off, the
// dead-letter policy Consume follows, the logger, the poll interval. Close
// the returned Queue, which closes d; d stays usable meanwhile for what only
// its engine has.
func New(d driver.Queue, opts ...Option) (*Queue, error) {
	if d == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "queue: New: the engine's queue must not be nil")
	}
	o := buildOptions(opts)
	if err := o.validate(); err != nil {
		return nil, err
	}
	return newQueue(d, o, 0), nil
}

func openEngine(ctx context.Context, e driver.Engine, cfg driver.Config, opts []Option) (*Queue, error) {
	o := buildOptions(opts)
	if err := o.validate(); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "engine: must not be nil")
	}
	cfg = o.config(cfg)
	d, err := e.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return newQueue(d, o, cfg.DeadLetter.MaxAttempts), nil
}

// config fills cfg in from the options.
func (o options) config(cfg driver.Config) driver.Config {
	cfg.BindingName, cfg.Clock, cfg.Logger = o.binding, o.clock, o.log()
	cfg.Durability, cfg.ReadOnly = string(o.durability), o.readOnly
	cfg.Hints = driver.Hints{URL: o.wake.url, Token: o.wake.token, Subject: o.wake.subject, RuntimeFile: o.wake.runtimeFile, NoLocalWake: o.wake.noLocalWake}
	if o.notifier != nil {
		cfg.Notifier = o.notifier
	}
	if o.dead.set {
		cfg.DeadLetter = driver.DeadLetter{MaxAttempts: o.dead.maxAttempts, Location: o.dead.dlq}
	}
	cfg.MoveTargets = o.targets
	cfg.DedupWindow = o.dedup
	cfg.Visibility = o.visibility
	return cfg
}

// log is the handle's logger: the app's, or one that discards.
func (o options) log() *slog.Logger {
	if o.logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.logger
}

// newQueue is the public handle on d with options o. maxAttempts is the
// dead-letter policy the engine was opened with when no WithDeadLetter
// gave one (FromEnv reads it from the binding).
func newQueue(d driver.Queue, o options, maxAttempts int) *Queue {
	poll := o.wake.poll
	if poll == 0 {
		poll = DefaultPollInterval
	}
	q := &Queue{drv: d, now: o.clock, visibility: o.visibility, poll: poll, log: o.log(),
		userLog: o.logger != nil, binding: o.binding, retry: o.retry, maxAttempt: maxAttempts}
	if o.dead.set {
		q.maxAttempt = o.dead.maxAttempts
	}
	return q
}

func (o options) validate() error {
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return err
	}
	if o.wake.poll < 0 {
		return bindings.Errorf(bindings.CodeInvalidInput, "poll interval: must not be negative, got %s", o.wake.poll)
	}
	if o.dead.set && (o.dead.maxAttempts < 1 || o.dead.maxAttempts > MaxAttemptsLimit) {
		return bindings.Errorf(bindings.CodeInvalidInput, "maxAttempts: must be between 1 and %d, got %d", MaxAttemptsLimit, o.dead.maxAttempts)
	}
	if err := validRetry("retry delay", o.retry.Base); err != nil {
		return err
	}
	if err := validRetry("max retry delay", o.retry.Max); err != nil {
		return err
	}
	if err := validDedupWindow(o.dedup); err != nil {
		return err
	}
	return validVisibility("default visibility", o.visibility)
}

func validVisibility(field string, d time.Duration) error {
	if d < MinVisibility || d > MaxVisibility {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: must be between %s and %s, got %s", field, MinVisibility, MaxVisibility, d)
	}
	return nil
}

// Path returns where the queue is, for people: the SQLite engine's
// database file, or "memory:<name>".
func (q *Queue) Path() string { return q.drv.Path() }

// Location returns where the store is: for the SQLite engine its absolute
// directory, or "memory:NAME" for an in-memory store. It is what
// WithDeadLetter and RedriveTo take, and what dead letters record as their
// origin.
func (q *Queue) Location() string { return q.drv.Location() }

// Close releases the handle. Safe to call twice.
func (q *Queue) Close() error { return q.drv.Close() }

// isClosed reports whether Close was called.
func (q *Queue) isClosed() bool {
	select {
	case <-q.drv.Done():
		return true
	default:
		return false
	}
}

// opErr wraps an engine's error with QUEUE_OPERATION_FAILED and the
// operation, unless it carries a code already.
func opErr(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	var be *bindings.Error
	if errors.As(err, &be) {
		return err
	}
	return bindings.Wrap(bindings.CodeQueueOperationFailed, err, format, args...)
}

// Send enqueues one message, due at once or, with WithDelay, later.
// Payloads over MaxPayloadBytes (serialized) and invalid options are
// rejected before the store is touched.
func (q *Queue) Send(ctx context.Context, p Payload, opts ...SendOption) error {
	o, err := buildSendOptions(opts)
	if err != nil {
		return err
	}
	if err := p.validate("payload"); err != nil {
		return err
	}
	if o.keysBatch {
		return bindings.Errorf(bindings.CodeInvalidInput, "dedup keys: WithDedupKeys is for SendBatch; give Send WithDedupKey")
	}
	return q.send(ctx, []driver.Payload{p.driver()}, o, "send")
}

// send hands ps to the engine, with their attributes and dedup keys if o
// has any.
func (q *Queue) send(ctx context.Context, ps []driver.Payload, o sendOptions, op string) error {
	if o.attrsSet {
		data := make([]string, len(ps))
		for i, p := range ps {
			data[i] = p.Data
		}
		enc, err := encodeAttrs(o.attrs, data)
		if err != nil {
			return err
		}
		for i := range ps {
			ps[i].Attrs = enc[i]
		}
	}
	if !o.keysSet {
		ids, err := q.drv.Send(ctx, ps, o.delay)
		if err != nil {
			return opErr(err, "%s", op)
		}
		if o.result != nil {
			*o.result = SendResult{Duplicate: make([]bool, len(ps)), Added: len(ps), IDs: sendIDs(ids, len(ps))}
		}
		return nil
	}
	if len(o.keys) != len(ps) {
		return bindings.Errorf(bindings.CodeInvalidInput, "dedup keys: must be one per message, %d, got %d", len(ps), len(o.keys))
	}
	for i, k := range o.keys {
		if k == "" && o.keysBatch {
			continue
		}
		field := "dedup key"
		if o.keysBatch {
			field = fmt.Sprintf("dedup key %d", i)
		}
		if err := validDedupKey(field, k); err != nil {
			return err
		}
	}
	ds, ok := q.drv.(driver.DedupSender)
	if !ok {
		return bindings.Errorf(bindings.CodeInvalidInput, "dedup key: the engine of %s does not support dedup keys", q.Path())
	}
	ids, dup, err := ds.SendDedup(ctx, ps, o.keys, o.delay)
	if err != nil {
		return opErr(err, "%s", op)
	}
	if o.result != nil {
		r := SendResult{Duplicate: make([]bool, len(ps)), IDs: sendIDs(ids, len(ps))}
		for i := range ps {
			r.Duplicate[i] = i < len(dup) && dup[i]
			if !r.Duplicate[i] {
				r.Added++
			}
		}
		*o.result = r
	}
	return nil
}

// sendIDs is an engine's ids of a send of n messages, n of them: an
// engine that returned fewer gave no id (0) for the rest.
func sendIDs(ids []int64, n int) []int64 {
	if len(ids) == n {
		return ids
	}
	out := make([]int64, n)
	copy(out, ids)
	return out
}

// SendBatch enqueues 1..MaxSendBatch messages in one transaction: all of
// them or, if anything fails, none. Every payload is validated before the
// store is touched (an invalid one is INVALID_INPUT naming its index). The
// messages share one enqueued_at and get ascending ids, so they are
// delivered in slice order; opts (WithDelay) apply to each.
func (q *Queue) SendBatch(ctx context.Context, ps []Payload, opts ...SendOption) error {
	o, err := buildSendOptions(opts)
	if err != nil {
		return err
	}
	if len(ps) < 1 || len(ps) > MaxSendBatch {
		return bindings.Errorf(bindings.CodeInvalidInput, "batch: must hold between 1 and %d messages, got %d", MaxSendBatch, len(ps))
	}
	dps := make([]driver.Payload, len(ps))
	for i, p := range ps {
		if err := p.validate(fmt.Sprintf("payload %d", i)); err != nil {
			return err
		}
		dps[i] = p.driver()
	}
	if o.keysSet && !o.keysBatch && len(ps) != 1 {
		return bindings.Errorf(bindings.CodeInvalidInput, "dedup keys: a batch of %d messages needs WithDedupKeys (one key per message), not WithDedupKey", len(ps))
	}
	return q.send(ctx, dps, o, fmt.Sprintf("send batch of %d", len(ps)))
}

// Receive claims up to max (1..MaxReceiveBatch) due messages in send order
// ((enqueued_at, id) on the SQLite engine), hiding each for its lease. An
// empty queue gives an empty slice.
//
// With a dead-letter policy (WithDeadLetter), a due message that was
// delivered maxAttempts times already is not delivered: it is moved to the
// dead-letter queue, and Receive finishes the move before it returns (a
// move that fails is logged and finished later; the messages claimed are
// returned all the same).
func (q *Queue) Receive(ctx context.Context, max int, opts ...ReceiveOption) ([]Message, error) {
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
	dms, err := q.drv.Receive(ctx, max, ro.visibility)
	if err != nil {
		return nil, opErr(err, "receive")
	}
	return messagesOf(dms), nil
}

// messagesOf converts an engine's deliveries; nil for none.
func messagesOf(dms []driver.Message) []Message {
	if len(dms) == 0 {
		return nil
	}
	msgs := make([]Message, len(dms))
	for i, m := range dms {
		msgs[i] = Message{ID: m.ID, ReceiptHandle: m.ReceiptHandle, Attempt: m.Attempt,
			Payload: payloadOf(m.Payload), EnqueuedAt: m.EnqueuedAt, Attributes: attrsOf(m.Payload.Attrs)}
	}
	return msgs
}

// Ack deletes the message the receipt was issued for. A receipt that this
// queue could not have issued ("{id}:{uuid}" on the SQLite engine), or
// whose message is gone, is a no-op success. A stale receipt (the message
// was redelivered since) fails with ErrStaleReceipt and deletes nothing.
func (q *Queue) Ack(ctx context.Context, receipt string) error {
	return opErr(q.drv.Ack(ctx, receipt), "ack receipt %q", receipt)
}

// MaxAckBatch is the most receipts one AckBatch takes.
const MaxAckBatch = 100

// AckOutcome is what AckBatch did with one receipt: AckCurrent,
// AckGone or AckStale. It is driver.AckOutcome.
type AckOutcome = driver.AckOutcome

const (
	// AckCurrent: the receipt was current; its message is deleted.
	AckCurrent = driver.AckCurrent
	// AckGone: its message was already gone (acked, purged, moved), or
	// the receipt is none this queue could have issued; nothing changed
	// (Ack succeeds then).
	AckGone = driver.AckGone
	// AckStale: the message was redelivered under a newer receipt and was
	// not deleted (Ack fails with ErrStaleReceipt then).
	AckStale = driver.AckStale
)

// AckBatch acks 1..MaxAckBatch receipts at once (on the SQLite engine in
// one transaction, much cheaper than an Ack each) and returns each
// receipt's outcome, outcomes[i] for receipts[i]. A stale or gone receipt
// does not fail the others: it is an outcome, not an error. An error
// (INVALID_INPUT for a batch size out of range; QUEUE_OPERATION_FAILED)
// means none of them was acked.
func (q *Queue) AckBatch(ctx context.Context, receipts []string) ([]AckOutcome, error) {
	if len(receipts) < 1 || len(receipts) > MaxAckBatch {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "receipts: must hold between 1 and %d receipts, got %d", MaxAckBatch, len(receipts))
	}
	out, err := q.drv.AckBatch(ctx, receipts)
	if err != nil {
		return nil, opErr(err, "ack batch of %d receipts", len(receipts))
	}
	if len(out) != len(receipts) {
		return nil, bindings.Errorf(bindings.CodeQueueOperationFailed, "ack batch of %d receipts: the engine returned %d outcomes", len(receipts), len(out))
	}
	return out, nil
}

// Nack makes the message due again at once, or with WithDelay after a
// back-off (its attempt count is kept either way), so it is redelivered
// under a new receipt. Receipt rules are those of Ack; an invalid delay is
// INVALID_INPUT and changes nothing.
func (q *Queue) Nack(ctx context.Context, receipt string, opts ...NackOption) error {
	o, err := buildNackOptions(opts)
	if err != nil {
		return err
	}
	return opErr(q.drv.Nack(ctx, receipt, o.delay), "nack receipt %q", receipt)
}

// Extend moves the end of the lease of a message still held under receipt
// to d from now (MinVisibility..MaxVisibility): the message stays hidden
// until then, whatever its lease was, and the receipt stays valid.
//
// Unlike Ack and Nack, Extend cannot succeed by doing nothing: a receipt
// this queue could not have issued is INVALID_INPUT; a stale receipt (the
// lease ended and the message was delivered again) fails with
// ErrStaleReceipt, and a message that is gone with ErrMessageGone, both
// QUEUE_OPERATION_FAILED. An Extend after the lease ended but before a
// redelivery still succeeds: the message was not handed to anyone else.
func (q *Queue) Extend(ctx context.Context, receipt string, d time.Duration) error {
	if err := validVisibility("extend", d); err != nil {
		return err
	}
	return opErr(q.drv.Extend(ctx, receipt, d), "extend receipt %q", receipt)
}

// Purge deletes every message, due or in flight.
func (q *Queue) Purge(ctx context.Context) error {
	return opErr(q.drv.Purge(ctx), "purge")
}

// Origin is where a dead letter came from, as recorded when it was moved.
type Origin = driver.Origin

// OriginCount is how many dead letters of a queue came from one origin.
type OriginCount = driver.OriginCount

// Stats are a queue's counts at one moment.
type Stats = driver.Stats

// PeekedMessage is a message as stored, seen without claiming it.
type PeekedMessage struct {
	ID         int64
	Attempt    int // deliveries so far; 0 before the first
	EnqueuedAt time.Time
	// VisibleAt is when the message is (or was) due: at or before now it is
	// due; later it is in flight (Attempt > 0: its lease ends then) or
	// delayed (Attempt 0).
	VisibleAt time.Time
	Payload   Payload
	// Attributes are the message's attributes (WithAttributes); nil if
	// it has none.
	Attributes Attributes
	// Delivered reports that the message has a receipt (was received at
	// least once).
	Delivered bool
	// Origin is where a dead letter came from; nil for other messages.
	Origin *Origin
	// Moving reports that the message is being moved to another store (to
	// its dead-letter queue, or redriven); it is hidden meanwhile.
	Moving bool
	// LastError is the error of the message's last failed delivery in
	// Consume (at most MaxLastErrorBytes), kept when it moves to its
	// dead-letter queue; "" if none.
	LastError string
	// Odd says what is odd about a row another program wrote, one note per
	// column (a REAL enqueued_at, a json payload that is not JSON, ...):
	// what a receive coerces, or why it cannot deliver the row. Empty for
	// rows a spec-exact writer wrote.
	Odd []string
}

// Peek returns up to limit (1..MaxPeekLimit) messages in delivery order,
// due or not, without claiming them: attempt counts, leases and receipts
// stay as they are. It works on a handle opened WithReadOnly.
func (q *Queue) Peek(ctx context.Context, limit int) ([]PeekedMessage, error) {
	if limit < 1 || limit > MaxPeekLimit {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "limit: must be between 1 and %d, got %d", MaxPeekLimit, limit)
	}
	dms, err := q.drv.Peek(ctx, limit)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	var out []PeekedMessage
	for _, m := range dms {
		out = append(out, PeekedMessage{ID: m.ID, Attempt: m.Attempt, EnqueuedAt: m.EnqueuedAt, VisibleAt: m.VisibleAt,
			Payload: payloadOf(m.Payload), Attributes: attrsOf(m.Payload.Attrs), Delivered: m.Delivered, Origin: m.Origin, Moving: m.Moving, LastError: m.LastError, Odd: m.Odd})
	}
	return out, nil
}

// Stats counts the queue's messages in one read, without claiming any.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	s, err := q.drv.Stats(ctx)
	if err != nil {
		return Stats{}, opErr(err, "stats")
	}
	return s, nil
}

// RedriveOption changes one Redrive.
type RedriveOption func(*redriveOptions)

type redriveOptions struct {
	to  string
	max int // -1: all
}

// RedriveTo sends every redriven message to the queue at loc (a store
// directory or "memory:NAME") instead of its origin. Messages without a
// recorded origin (sent to the dead-letter queue directly) are redriven
// only with RedriveTo.
func RedriveTo(loc string) RedriveOption { return func(o *redriveOptions) { o.to = loc } }

// RedriveMax redrives at most n (>= 1) messages. Defaults to all.
func RedriveMax(n int) RedriveOption { return func(o *redriveOptions) { o.max = n } }

// RedriveResult counts what a Redrive did.
type RedriveResult = driver.RedriveResult

// Redrive moves the due messages of this queue - a dead-letter queue - back
// to the queue each came from (its origin, as recorded when it was moved
// here) or to the RedriveTo queue, in delivery order. A redriven message
// starts afresh there: attempt 0, due at once, enqueued now. Messages in
// flight (held by a consumer of this queue) stay.
//
// On the SQLite engine the move is the two-store move of dead letters: a
// Redrive cut short by a crash or an error is finished by the next Redrive,
// Receive or read-write Open of this store, and every message ends up in
// exactly one of the two queues.
func (q *Queue) Redrive(ctx context.Context, opts ...RedriveOption) (RedriveResult, error) {
	o := redriveOptions{max: -1}
	for _, fn := range opts {
		fn(&o)
	}
	if o.max == 0 || o.max < -1 {
		return RedriveResult{}, bindings.Errorf(bindings.CodeInvalidInput, "max: must be at least 1, got %d", o.max)
	}
	res, err := q.drv.Redrive(ctx, driver.Redrive{To: o.to, Max: o.max})
	return res, opErr(err, "redrive")
}

// Notifier is told after every commit that made a message due now (a send,
// a nack) or scheduled one for later (a send or nack WithDelay: waiters
// must re-arm their timers on the earliest visible_at). Wake-up hints hang
// off it; it must not block.
type Notifier interface {
	MessageDue()
}
