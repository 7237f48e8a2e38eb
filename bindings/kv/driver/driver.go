// Package driver is the interface between the public kv package and a KV
// engine, in the way database/sql/driver sits under database/sql. Apps use
// package kv; an engine implements Engine and Store, and an outside module
// can implement them too and run the conformance suite kvtest against its
// engine (see kvtest.Run).
//
// The kv package checks every argument before it calls an engine: keys and
// prefixes are 1..kv.MaxKeyBytes bytes of A-Z a-z 0-9 - _ : ., values at
// most kv.MaxValueBytes, TTLs 0 or more, scan limits 1..kv.MaxScanLimit, and
// scan cursors are decoded by kv. An engine therefore sees only valid input,
// and must give the semantics the kv package documents: an expired key reads
// as absent everywhere, a put-if-absent over an expired key wins, and of any
// number of racing put-if-absent callers on one key exactly one wins.
//
// Errors an engine returns are wrapped by kv with KV_OPERATION_FAILED and
// the operation; an error that already carries a bindings.Error code (from
// Open, for example) keeps it.
package driver

import (
	"context"
	"encoding/json"
	"github.com/localcloud/localcloud/bindings"
	"log/slog"
	"time"
)

// Engine opens stores.
type Engine interface {
	// Open opens or creates the store cfg describes.
	Open(ctx context.Context, cfg Config) (Store, error)
}

// Config is what kv hands an engine at Open.
type Config struct {
	// Location names the store: for the SQLite engine a directory or
	// "memory:NAME"; other engines define their own form.
	Location string
	// Binding is the binding's JSON from the environment when the store is
	// opened by kv.FromEnv, nil otherwise. Engines read their own fields
	// from it.
	Binding json.RawMessage
	// Clock is the time source for expiry. An engine that cannot follow a
	// caller's clock (it runs on server time) ignores it; kvtest asks the
	// engine's harness whether it follows it (kvtest.Capabilities).
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
}

// Put is one Put's options.
type Put struct {
	// TTL is the time to live when HasTTL; 0 stores an expired key.
	TTL    time.Duration
	HasTTL bool
	// IfAbsent writes only when the key is absent or expired.
	IfAbsent bool
}

// Item is one key and its value.
type Item struct {
	Key   string
	Value []byte
	// ExpiresAt is when the key expires; zero when it never does (or the
	// engine does not say).
	ExpiresAt time.Time
}

// Store is one open store. It must be safe for concurrent use.
type Store interface {
	// Get returns the value of key and whether it is live. A value that
	// exists is never nil.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	// Exists reports whether key is live.
	Exists(ctx context.Context, key string) (bool, error)
	// Put stores value under key and reports whether it wrote (always true
	// without IfAbsent).
	Put(ctx context.Context, key string, value []byte, opts Put) (bool, error)
	// Delete removes key; a missing key is no error.
	Delete(ctx context.Context, key string) error
	// Scan returns up to limit live keys that start with prefix and sort
	// after after ("" for the first), in byte order of the key, and whether
	// more such keys remain.
	Scan(ctx context.Context, prefix, after string, limit int) (items []Item, more bool, err error)
	// Stats counts the keys in one read, without changing anything.
	Stats(ctx context.Context) (Stats, error)
	// Lookup returns a live key's value and expiry without changing
	// anything (an expired key is absent and left as it is).
	Lookup(ctx context.Context, key string) (Entry, bool, error)
	// Path is what tools show for the store: a file, "memory:NAME", a URL.
	Path() string
	// Close releases the handle; a second Close is a no-op.
	Close() error
}

// The limits of keys and values, the same for every engine (kv.MaxKeyBytes,
// kv.MaxValueBytes).
const (
	MaxKeyBytes   = 512
	MaxValueBytes = 24576
)

// ValidKey checks a key or scan prefix: 1..512 bytes (MaxKeyBytes) of
// A-Z a-z 0-9 - _ : . It is the one rule: package kv checks every argument
// with it before calling an engine, and an engine that reports stored keys
// another program wrote uses it to tell them apart.
func ValidKey(field, key string) error {
	if len(key) == 0 || len(key) > MaxKeyBytes {
		return bindings.Errorf(bindings.CodeInvalidInput,
			"%s: must be 1 to %d bytes, got %d bytes", field, MaxKeyBytes, len(key))
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == ':', c == '.':
		default:
			return bindings.Errorf(bindings.CodeInvalidInput,
				"%s: may hold only A-Z a-z 0-9 - _ : . but byte %d is %q in %q", field, i, c, truncate(key, 64))
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Stats are a KV store's counts at one moment.
type Stats struct {
	Live int64 // keys without a TTL or whose TTL has not passed
	// Expired counts rows whose TTL has passed but that are still stored
	// (they read as absent and are deleted when read or overwritten).
	Expired int64
}

// Entry is a live key's value with its expiry, as Lookup sees it.
type Entry struct {
	Value []byte
	// ExpiresAt is when the key expires; zero when it has no TTL.
	ExpiresAt time.Time
}
