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
// a nack). Wake-up hints hang off it; it must not block.
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
