package queue

import (
	"log/slog"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// Option configures a Queue at Open.
type Option func(*options)

type options struct {
	clock      func() time.Time
	logger     *slog.Logger
	durability bindings.Durability
	visibility time.Duration
	readOnly   bool
	notifier   Notifier
	wake       wakeOptions // hints.go
	binding    string      // the binding name, recorded as the origin of dead letters
	dead       deadLetterOptions
	internal   bool // a handle a transfer opened on its destination (deadletter.go)
	targets    []string
}

func buildOptions(opts []Option) options {
	o := options{clock: time.Now, durability: bindings.DurabilityNormal, visibility: DefaultVisibility}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// WithClock replaces time.Now, for tests of leases and ordering.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}

// WithLogger sets the logger for the queue's rare warnings. Defaults to
// discarding them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDurability chooses when commits reach the disk. Defaults to
// bindings.DurabilityNormal.
func WithDurability(d bindings.Durability) Option { return func(o *options) { o.durability = d } }

// WithDefaultVisibility sets the lease of a Receive without WithVisibility.
// Defaults to DefaultVisibility (30 s).
func WithDefaultVisibility(d time.Duration) Option { return func(o *options) { o.visibility = d } }

// ReadOnly opens an existing store without creating or changing anything;
// every write fails. For inspection tools.
func ReadOnly() Option { return func(o *options) { o.readOnly = true } }

// Notifier is told after every commit that made a message due now (a send,
// a nack) or scheduled one for later (a send or nack WithDelay: waiters
// must re-arm their timers on the earliest visible_at). Wake-up hints hang
// off it; it must not block.
type Notifier interface {
	MessageDue()
}

// WithNotifier sets the Notifier. Defaults to none.
func WithNotifier(n Notifier) Option { return func(o *options) { o.notifier = n } }

// ReceiveOption changes one Receive.
type ReceiveOption func(*receiveOptions)

type receiveOptions struct {
	visibility time.Duration
}

// WithVisibility sets how long received messages stay hidden (their lease),
// MinVisibility..MaxVisibility. Defaults to the queue's default visibility.
func WithVisibility(d time.Duration) ReceiveOption {
	return func(o *receiveOptions) { o.visibility = d }
}

// WithBindingName names the binding the handle serves (e.g. "orders"). It
// is recorded as the origin of the handle's dead letters (see
// WithDeadLetter) and shown by peek. FromEnv sets it. Defaults to "".
func WithBindingName(name string) Option { return func(o *options) { o.binding = name } }

// WithDeadLetter gives the queue a dead-letter policy: a message that has
// been delivered maxAttempts times (1..MaxAttemptsLimit) is not delivered
// again when it next comes due; it is moved to the dead-letter queue at dlq,
// a store directory (made absolute) or "memory:NAME" for an in-memory store
// (Location of its handle), with its origin recorded there. See
// deadletter.go for how the move survives a crash. Every handle that
// receives from the queue must carry the same policy (FromEnv reads it from
// the binding's JSON); a handle without it delivers past maxAttempts.
func WithDeadLetter(maxAttempts int, dlq string) Option {
	return func(o *options) { o.dead = deadLetterOptions{maxAttempts: maxAttempts, dlq: dlq, set: true} }
}

// WithMoveTargets names further queues (store directories, made absolute,
// or "memory:NAME") toward which the handle finishes redrives out of its
// store that a killed process left unfinished, and the only ones a Redrive
// without RedriveTo sends recorded origins to. A move out of a store is
// recorded in the store file, which may have come from anywhere (a
// restore), so the handle finishes it only toward a location it names
// itself: a dead letter only toward its WithDeadLetter queue, a redrive
// only toward the running Redrive's target or one of these. Other moves
// are left in place (the message stays hidden in this store) and logged.
// The stack tools pass the queues whose dead-letter queue this one is.
func WithMoveTargets(locs ...string) Option {
	return func(o *options) { o.targets = append([]string(nil), locs...) }
}
