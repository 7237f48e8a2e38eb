// Package driver is the interface between the public queue package and a
// queue engine, in the way database/sql/driver sits under database/sql.
// Apps use package queue; an engine implements Engine and Queue, and an
// outside module can implement them too and run the conformance suite
// queuetest against its engine (see queuetest.Run).
//
// What stays above this interface, the same for every engine: argument
// checks (payload types and sizes, batch sizes, leases, delays, receive
// counts) with their INVALID_INPUT errors, the error codes, Consume (its
// workers, lease extension, ack batching) and ReceiveWait. What an engine
// owns: storage, order, leases, receipts (their form is the engine's: the
// SQLite engine's "{id}:{uuid}", another engine may carry a lease deadline
// in them), attempts, delays, dead letters, peek and stats without
// consuming, and its wake-up signal (WaitChans, NextDue, or a server-side
// wait: WaitReceiver).
//
// The contract an engine must meet is the queue package's documentation and
// the queuetest suite: FIFO by send time among due messages, a receive
// hides each message for its lease and counts a delivery, a receipt goes
// stale when its message is delivered again (Ack, Nack, Extend with it then
// fail with ErrStaleReceipt and change nothing), an Ack of a receipt whose
// message is gone succeeds, a batch send is all-or-none.
//
// Errors an engine returns are wrapped by queue with QUEUE_OPERATION_FAILED
// and the operation, unless they already carry a bindings.Error code.
package driver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"
)

// ErrStaleReceipt is what an engine returns (or wraps) for an Ack, Nack or
// Extend whose receipt was replaced by a later delivery of its message.
// queue.ErrStaleReceipt is this error.
var ErrStaleReceipt = errors.New("stale receipt: the message was redelivered under a newer receipt")

// ErrMessageGone is what an engine returns (or wraps) for an Extend whose
// message no longer exists. queue.ErrMessageGone is this error.
var ErrMessageGone = errors.New("message not found: acked, purged or moved")

// AckOutcome is what a batch ack did with one receipt.
type AckOutcome uint8

const (
	// AckCurrent: the receipt was current and its message is deleted.
	AckCurrent AckOutcome = iota
	// AckGone: the message was already gone (acked, purged, moved), or
	// the receipt is none the engine could have issued; nothing changed,
	// as for Ack, which succeeds then.
	AckGone
	// AckStale: the message was redelivered under a newer receipt; it was
	// not deleted (Ack fails with ErrStaleReceipt then).
	AckStale
)

// String is "current", "gone" or "stale".
func (o AckOutcome) String() string {
	switch o {
	case AckCurrent:
		return "current"
	case AckGone:
		return "gone"
	case AckStale:
		return "stale"
	}
	return "AckOutcome(" + strconv.Itoa(int(o)) + ")"
}

// Engine opens queues.
type Engine interface {
	// Open opens or creates the queue cfg describes.
	Open(ctx context.Context, cfg Config) (Queue, error)
}

// Config is what queue hands an engine at Open. Every value is checked.
type Config struct {
	// Location names the queue: for the SQLite engine a directory or
	// "memory:NAME"; other engines define their own form.
	Location string
	// Binding is the binding's JSON when the queue is opened by
	// queue.FromEnv, nil otherwise. Engines read their own fields from it.
	Binding json.RawMessage
	// BindingName is the binding's name ("orders"), "" if unknown.
	BindingName string
	// Clock is the caller's time source, never nil. An engine that runs on
	// its own (server) time may ignore it; queuetest asks the harness
	// (queuetest.Capabilities).
	Clock func() time.Time
	// Logger receives the engine's rare warnings; never nil.
	Logger *slog.Logger
	// Durability is "normal" or "full" (bindings.Durability).
	Durability string
	// ReadOnly asks for a handle that creates and changes nothing.
	ReadOnly bool
	// NoCreate asks for a read-write handle on a store that exists: when
	// there is none, Open creates nothing and fails with an error that
	// wraps bindings.ErrNoStore and says what it looked for. FromEnv sets
	// it (an app opens only what its stack provisioned).
	NoCreate bool
	// DeadLetter is the dead-letter policy; MaxAttempts 0 means none.
	DeadLetter DeadLetter
	// MoveTargets are further queues toward which the handle may finish
	// moves out of its store (queue.WithMoveTargets).
	MoveTargets []string
	// Hints are the SQLite engine's NATS wake-up hints; engines with a
	// wake-up signal of their own ignore them.
	Hints Hints
	// Notifier, if not nil, is told after every commit that made a message
	// due now or scheduled one for later. It must not block.
	Notifier interface{ MessageDue() }
	// DedupWindow is how long a dedup key is remembered (DedupSender);
	// always set (queue.DefaultDedupWindow unless the binding says).
	DedupWindow time.Duration
	// Visibility is the handle's default lease (queue.WithDefaultVisibility,
	// the binding's visibilityTimeout); always set by package queue
	// (queue.DefaultVisibility unless the binding says). An engine may size
	// its own defaults by it, as the JetStream engine sizes its consumer's
	// AckWait; every Receive still passes its lease.
	Visibility time.Duration
}

// DeadLetter is a dead-letter policy: a message delivered MaxAttempts
// times is moved to the queue at Location instead of being delivered again.
type DeadLetter struct {
	MaxAttempts int
	Location    string
}

// Hints configure NATS wake-up hints (queue.WithHints).
type Hints struct {
	URL, Token, Subject string
	// RuntimeFile, when set, is the runtime.json of the up that serves
	// the hints: every (re)connection dials the server it names then
	// (notify.FollowRuntime), and URL may be "".
	RuntimeFile string
	// NoLocalWake stops Send and Nack from waking this process's waiters
	// directly (a test of the cross-process path).
	NoLocalWake bool
}

// The payload types and the payload limit, the same for every engine
// (queue.TypeText, queue.TypeJSON, queue.MaxPayloadBytes).
const (
	TypeText        = "text"
	TypeJSON        = "json"
	MaxPayloadBytes = 65536
)

// Payload is a message body: Type "text" (Data raw) or "json" (Data
// serialized JSON), and the message's attributes.
type Payload struct {
	Type string
	Data string
	// Attrs are the message's attributes (queue.WithAttributes) in their
	// stored form, the JSON of queue.Attributes, checked by package queue;
	// nil for none. An engine keeps them with the message (through dead
	// letters and redrives too) and returns them with every delivery and
	// peek of it; an engine that cannot keeps none and refuses a send that
	// has them.
	Attrs []byte
}

// Message is one delivery.
type Message struct {
	ID            int64
	ReceiptHandle string // opaque to callers; its form is the engine's
	Attempt       int    // 1 on the first delivery
	Payload       Payload
	EnqueuedAt    time.Time
}

// Origin is where a dead letter came from, as recorded when it was moved.
type Origin struct {
	Store      string    // Location of the queue it was moved from
	Binding    string    // that queue's binding name; "" if unknown
	ID         int64     // its message id there
	Attempts   int       // deliveries there
	EnqueuedAt time.Time // when it was sent there
	MovedAt    time.Time
	// LastReceipt is the receipt handle of its last delivery there; "" if
	// it had none.
	LastReceipt string
	// Reason is why it was moved although it was not spent: its row there,
	// written by another program, could not be delivered (say, an
	// enqueued_at that is not a number). "" for a message that used up its
	// attempts.
	Reason string
}

// OriginCount is how many dead letters of a queue came from one origin.
type OriginCount struct {
	Store   string
	Binding string
	Count   int64
}

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
	// Delivered reports that the message has a receipt (was received at
	// least once).
	Delivered bool
	// Origin is where a dead letter came from; nil for other messages.
	Origin *Origin
	// Moving reports that the message is being moved to another store (to
	// its dead-letter queue, or redriven); it is hidden meanwhile.
	Moving bool
	// LastError is the error text of the message's last failed delivery
	// (FailureRecorder), carried along into its dead-letter queue; "" if
	// none was recorded.
	LastError string
	// Odd says what is odd about a row another program wrote, one note per
	// column (a REAL enqueued_at, a json payload that is not JSON, ...):
	// what a receive coerces, or why it cannot deliver the row. Empty for
	// rows a spec-exact writer wrote.
	Odd []string
}

// FailureRecorder is implemented by an engine that keeps the last error of
// a failed delivery with its message (shown by Peek as LastError and
// carried into the dead-letter queue). Consume uses it instead of Nack for
// a failed handler when the engine has it.
type FailureRecorder interface {
	// NackFailed is Nack that also records lastError (at most
	// queue.MaxLastErrorBytes bytes) as the message's last error, in the
	// same commit.
	NackFailed(ctx context.Context, receipt string, delay time.Duration, lastError string) error
}

// DedupSender is implemented by an engine that supports dedup keys
// (queue.WithDedupKey). A queue without it refuses sends with keys.
type DedupSender interface {
	// SendDedup is Send where keys[i] ("" for none) is message i's dedup
	// key: a message whose key was sent to this queue less than
	// Config.DedupWindow ago (by any handle, process or earlier run) is not
	// added and dup[i] is true. Keys seen once in one call are duplicates
	// after the first. Checking and adding are one commit, so concurrent
	// senders of one key add it once. ids are Send's; ids[i] is 0 for a
	// duplicate.
	SendDedup(ctx context.Context, ps []Payload, keys []string, delay time.Duration) (ids []int64, dup []bool, err error)
}

// WaitReceiver is implemented by an engine whose server can hold a receive
// open until a message is due (on JetStream, a pull request with an
// expiry, which the server answers when a message arrives). ReceiveWait
// and Consume use it, when the engine has it, instead of WaitChans,
// NextDue and the fallback poll.
type WaitReceiver interface {
	// ReceiveWait is Receive that, when nothing is due, waits up to wait
	// for a message to become due (sent, nacked, its lease or its delay
	// ended, by any handle or process) and claims it then; an empty slice
	// when wait passed with nothing due. When ctx ends while it waits, it
	// returns ctx.Err() and hands out nothing: a message the server
	// delivers to the abandoned wait is released at once.
	ReceiveWait(ctx context.Context, max int, lease, wait time.Duration) ([]Message, error)
}

// AckReceiver is implemented by an engine that can write acks and a claim
// in one write (the SQLite engine: one transaction). Consume uses it, when
// the engine has it, to write the acks of a batch its dispatcher ran with
// the claim that follows: one write and no goroutine hand-off per batch.
type AckReceiver interface {
	// AckReceive is AckBatch of receipts (outcomes[i] for receipts[i])
	// then Receive of up to max messages, in one commit. An error means
	// nothing was acked and nothing claimed.
	AckReceive(ctx context.Context, receipts []string, max int, lease time.Duration) (outcomes []AckOutcome, msgs []Message, err error)
}

// Stats are a queue's counts at one moment.
type Stats struct {
	Due      int64 // due now
	InFlight int64 // not due now: leased (or delayed)
	// Delayed counts the InFlight messages never delivered yet: sent with a
	// delay that has not passed. InFlight - Delayed are leased.
	Delayed int64
	Total   int64
	// Oldest is the enqueue time of the oldest message; zero when empty.
	Oldest time.Time
	// DeadLetters counts the messages moved here from a queue whose
	// maxAttempts they used up; Origins splits them by origin, most first.
	DeadLetters int64
	Origins     []OriginCount
	// Moving counts the messages being moved out of this queue (to its
	// dead-letter queue, or redriven); they are part of InFlight.
	Moving int64
}

// Leased counts the InFlight messages that are not Delayed: received and
// not acked yet, or backing off after a nack. The CLI's status and queue
// stats and the explorer show Due, Leased (as "in flight") and Delayed
// apart, all three through this one method.
func (s Stats) Leased() int64 { return s.InFlight - s.Delayed }

// Redrive is one Redrive's options: To is the destination ("" for each
// message's origin), Max the most messages to move (-1 for all).
type Redrive struct {
	To  string
	Max int
}

// RedriveResult counts what a Redrive did.
type RedriveResult struct {
	Moved int // messages now in their origin (or the RedriveTo queue)
	// Skipped counts due messages left here: no recorded origin and no
	// RedriveTo, or a recorded origin the handle may not move to (one that
	// is not a queue store, or none of its WithMoveTargets).
	Skipped int
}

// Queue is one open queue. It must be safe for concurrent use.
type Queue interface {
	// Location is what a dead-letter policy names the queue by.
	Location() string
	// Path is what tools show for the queue: a file, "memory:NAME", a URL.
	Path() string
	// Send enqueues 1..queue.MaxSendBatch messages, all or none, in slice
	// order, each due delay from now (0: at once). ids[i] is message i's
	// id as every Receive and Peek of it shows it (Message.ID), or 0 when
	// the engine cannot know it at the send (the JetStream engine's
	// delayed sends: the server stores the message when it is due).
	Send(ctx context.Context, ps []Payload, delay time.Duration) (ids []int64, err error)
	// Receive claims up to max due messages, hiding each for lease.
	Receive(ctx context.Context, max int, lease time.Duration) ([]Message, error)
	// Ack deletes the message of receipt. A receipt the engine could not
	// have issued, or whose message is gone, is a success.
	Ack(ctx context.Context, receipt string) error
	// AckBatch acks several receipts at once (the SQLite engine: in one
	// transaction) and returns each receipt's outcome, outcomes[i] for
	// receipts[i]: a stale receipt does not fail the others. An error means
	// none of them was acked.
	AckBatch(ctx context.Context, receipts []string) (outcomes []AckOutcome, err error)
	// Nack makes the message of receipt due delay from now, keeping its
	// attempt count. Receipt rules are Ack's.
	Nack(ctx context.Context, receipt string, delay time.Duration) error
	// Extend moves the end of receipt's lease to d from now. A receipt the
	// engine could not have issued is INVALID_INPUT; a gone message is
	// ErrMessageGone.
	Extend(ctx context.Context, receipt string, d time.Duration) error
	// Purge deletes every message.
	Purge(ctx context.Context) error
	// Peek returns up to limit messages in delivery order without claiming.
	Peek(ctx context.Context, limit int) ([]PeekedMessage, error)
	// Stats counts the messages without claiming any.
	Stats(ctx context.Context) (Stats, error)
	// Redrive moves dead letters back.
	Redrive(ctx context.Context, o Redrive) (RedriveResult, error)
	// WaitChans returns channels closed by the next event that may have
	// made a message due: local for this process, remote for another one
	// (nil if the engine has none). Callers take them BEFORE looking at the
	// queue, so a commit after that moment is never missed.
	WaitChans() (local, remote <-chan struct{})
	// NextDue returns the earliest time after after (in the queue's clock)
	// at which a message that is not due now becomes due; ok is false when
	// none is waiting.
	NextDue(ctx context.Context, after time.Time) (next time.Time, ok bool, err error)
	// Done is closed by Close.
	Done() <-chan struct{}
	// Close releases the handle; a second Close is a no-op.
	Close() error
}
