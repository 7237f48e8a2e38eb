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
	targets    []string // WithMoveTargets
	retry      RetrySchedule
	dedup      time.Duration // WithDedupWindow
}

// wakeOptions are the Open options about waking waiters.
type wakeOptions struct {
	url, token, subject string
	runtimeFile         string
	poll                time.Duration
	noLocalWake         bool
}

type deadLetterOptions struct {
	maxAttempts int
	dlq         string
	set         bool
}

func buildOptions(opts []Option) options {
	o := options{clock: time.Now, durability: bindings.DurabilityNormal, visibility: DefaultVisibility,
		retry: RetrySchedule{Base: DefaultRetryDelay, Max: DefaultMaxRetryDelay}, dedup: DefaultDedupWindow}
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

// WithLogger sets the logger for the queue's rare warnings and the default
// logger of Consume. Without it warnings are discarded and Consume logs to
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDurability chooses when commits reach the disk. Defaults to
// bindings.DurabilityNormal.
func WithDurability(d bindings.Durability) Option { return func(o *options) { o.durability = d } }

// WithDefaultVisibility sets the lease of a Receive without WithVisibility.
// Defaults to DefaultVisibility (30 s).
func WithDefaultVisibility(d time.Duration) Option { return func(o *options) { o.visibility = d } }

// WithReadOnly opens an existing store without creating or changing
// anything; every write fails. For inspection tools.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// WithNotifier sets the Notifier. Defaults to none.
func WithNotifier(n Notifier) Option { return func(o *options) { o.notifier = n } }

// ReceiveOption changes one Receive.
type ReceiveOption func(*receiveOptions)

type receiveOptions struct {
	visibility time.Duration
}

// ReceiveVisibility sets how long the messages of one Receive or
// ReceiveWait stay hidden (their lease), MinVisibility..MaxVisibility.
// Defaults to the queue's default visibility (WithDefaultVisibility).
func ReceiveVisibility(d time.Duration) ReceiveOption {
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
// (Location of its handle), with its origin recorded there. On the SQLite
// engine the move survives a crash at any point (docs/ARCHITECTURE.md
// describes how). Every handle that
// receives from the queue must carry the same policy (FromEnv reads it from
// the binding's JSON); a handle without it delivers past maxAttempts.
//
// The policy is checked at Open: maxAttempts out of range is INVALID_INPUT,
// and so is a dlq that is empty or names the queue itself.
func WithDeadLetter(maxAttempts int, dlq string) Option {
	return func(o *options) { o.dead = deadLetterOptions{maxAttempts: maxAttempts, dlq: dlq, set: true} }
}

// WithHints makes the handle take part in "message available" hints on the
// NATS server at natsURL (token may be ""): Send and a Nack that made a
// message due publish a hint on subject (localcloud.<stack>.<binding>.available),
// and ReceiveWait and Consume subscribe to subject so that a send from any
// process wakes them at once. An empty natsURL turns NATS hints off; waiters
// in this process are still woken directly by every Send and Nack of this
// process on the same store, whatever the options. Hints are the SQLite
// engine's wake-up signal; an engine with a signal of its own ignores them.
//
// Hints never carry data and are never needed for correctness: with NATS
// down or absent everything works, at the pace of the fallback poll. The
// connections are shared by every handle of the process: one publisher per
// (natsURL, token), dialed on the first hint, and one subscription per
// (natsURL, token, subject), made on the first wait; they reconnect forever
// and close with the last handle that uses them.
//
// Programs started by `localcloud run` find natsURL in $LOCALCLOUD_NATS_URL
// and subject in the binding's JSON; FromEnv passes them here.
func WithHints(natsURL, token, subject string) Option {
	return func(o *options) {
		o.wake.url, o.wake.token, o.wake.subject = natsURL, token, subject
	}
}

// WithHintsRuntime makes the hint connections of WithHints follow the
// `localcloud up` whose runtime.json is runtimeFile: before every
// (re)connection they read its natsUrl (notify.FollowRuntime), so a
// restarted up on another port (a stack on port 0, or one whose default
// port was taken) wakes this handle again, and WithHints' natsURL may be
// "" (up not running yet). Programs started by `localcloud run` find
// runtimeFile in $LOCALCLOUD_RUNTIME_FILE; FromEnv passes it here. ""
// keeps the URL fixed.
func WithHintsRuntime(runtimeFile string) Option {
	return func(o *options) { o.wake.runtimeFile = runtimeFile }
}

// WithPollInterval sets the fallback poll of ReceiveWait on this handle and
// the default of Consume's ConsumePollInterval; 0 means the default,
// DefaultPollInterval (1 s).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.wake.poll = d }
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

// WithRetryDelay sets the delay after a handler's first failed delivery in
// Consume, doubled for each further failure (+-20% jitter) up to
// WithMaxRetryDelay: 0..MaxDelay, 0 retries at once. Defaults to
// DefaultRetryDelay (1 s); FromEnv reads the binding's retryDelay. A plain
// Nack is not affected.
func WithRetryDelay(d time.Duration) Option { return func(o *options) { o.retry.Base = d } }

// WithMaxRetryDelay caps Consume's retry delay, 0..MaxDelay. Defaults to
// DefaultMaxRetryDelay (5 m); FromEnv reads the binding's maxRetryDelay.
func WithMaxRetryDelay(d time.Duration) Option { return func(o *options) { o.retry.Max = d } }

// WithDedupWindow sets how long a dedup key (WithDedupKey) is remembered,
// MinDedupWindow..MaxDedupWindow. Defaults to DefaultDedupWindow (5 m);
// FromEnv reads the binding's dedupWindow. Every handle of a queue should
// use the same window.
func WithDedupWindow(d time.Duration) Option { return func(o *options) { o.dedup = d } }
