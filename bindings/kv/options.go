package kv

import (
	"log/slog"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// Option configures a Store at Open.
type Option func(*options)

type options struct {
	clock      func() time.Time
	logger     *slog.Logger
	durability bindings.Durability
	readOnly   bool
}

func buildOptions(opts []Option) options {
	o := options{clock: time.Now, durability: bindings.DurabilityNormal}
	for _, fn := range opts {
		fn(&o)
	}
	return o
}

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.clock = now
		}
	}
}

// WithLogger sets the logger for the store's rare warnings. Defaults to
// discarding them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDurability chooses when commits reach the disk. Defaults to
// bindings.DurabilityNormal.
func WithDurability(d bindings.Durability) Option { return func(o *options) { o.durability = d } }

// WithReadOnly opens an existing store without creating or changing
// anything; every write fails. For inspection tools.
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// PutOption changes one Put.
type PutOption func(*putOptions)

type putOptions struct {
	ttl         time.Duration
	hasTTL      bool
	ifNotExists bool
}

// WithTTL makes the key expire ttl after the put (millisecond precision). A
// TTL of 0 stores a key that is already expired.
func WithTTL(ttl time.Duration) PutOption {
	return func(o *putOptions) { o.ttl, o.hasTTL = ttl, true }
}

// IfNotExists makes Put write only when the key is absent or expired; Put
// then reports whether it won.
func IfNotExists() PutOption { return func(o *putOptions) { o.ifNotExists = true } }
