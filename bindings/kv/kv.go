// Package kv is localcloud's key-value binding, safe to share between any
// number of handles and OS processes. It is one API over pluggable engines
// (bindings/kv/driver): Open and OpenMemory use the SQLite engine (the
// localkv.v1 store format, one SQLite file <dir>/localkv.sqlite, or a shared
// in-memory database), FromEnv picks the engine the binding's JSON names,
// and OpenEngine opens a store of any engine, including one from another
// module.
//
// Keys are 1..512 bytes of A-Z a-z 0-9 - _ : . and values at most 24,576
// bytes, binary safe. A key may carry a TTL; expired keys read as absent.
// This package checks every argument and decodes scan cursors, so every
// engine gets the same validation and the same INVALID_INPUT errors.
package kv

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

// Limits of the KV binding, the same for every engine.
const (
	MaxKeyBytes   = driver.MaxKeyBytes
	MaxValueBytes = driver.MaxValueBytes
	// DefaultScanLimit is the page size callers should use when they have no
	// preference; it is also the largest page Scan returns.
	DefaultScanLimit = 1000
	MaxScanLimit     = 1000
)

// MemoryPrefix starts the location of an in-memory store of the SQLite
// engine: "memory:NAME" (what Path returns for one).
const MemoryPrefix = "memory:"

// Store is a handle on one KV store. It is safe for concurrent use.
type Store struct {
	drv driver.Store
}

// Item is one key and its value.
type Item struct {
	Key   string
	Value []byte
	// ExpiresAt is when the key expires (its TTL); zero when it never does.
	ExpiresAt time.Time
}

// Page is one page of a Scan. NextCursor is empty when no more live keys
// with the prefix remain.
type Page struct {
	Items      []Item
	NextCursor string
}

// Open opens or creates the SQLite store in dir (created 0700; the file
// 0600).
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	return OpenEngine(ctx, sqlitekv.Engine{}, dir, opts...)
}

// OpenMemory opens the in-memory store called name, shared by every handle
// of this process that names it and gone when the last one closes. For
// tests of apps: same semantics, no files. Its Path is "memory:NAME".
func OpenMemory(ctx context.Context, name string, opts ...Option) (*Store, error) {
	return OpenEngine(ctx, sqlitekv.Engine{}, MemoryPrefix+name, opts...)
}

// OpenEngine opens the store at location (in the form the engine defines)
// with the engine e: the way to use an engine of another module, and what a
// kvtest harness calls.
func OpenEngine(ctx context.Context, e driver.Engine, location string, opts ...Option) (*Store, error) {
	return openEngine(ctx, e, driver.Config{Location: location}, opts)
}

// EngineConfig returns the driver.Config that OpenEngine hands an engine
// for location with opts, every option checked as OpenEngine checks it.
// With New it splits OpenEngine in two, as sql.OpenDB wraps a connector: a
// tool opens the engine's store itself with this config, keeps the
// engine's own handle for what only that engine has, and wraps it with New
// for the public API.
func EngineConfig(location string, opts ...Option) (driver.Config, error) {
	o := buildOptions(opts)
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return driver.Config{}, err
	}
	return o.config(driver.Config{Location: location}), nil
}

// New returns the public handle on d, a store an engine opened (with
// EngineConfig). Close the returned Store, which closes d; d stays usable
// meanwhile for what only its engine has.
func New(d driver.Store) (*Store, error) {
	if d == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "kv: New: the engine's store must not be nil")
	}
	return &Store{drv: d}, nil
}

func openEngine(ctx context.Context, e driver.Engine, cfg driver.Config, opts []Option) (*Store, error) {
	o := buildOptions(opts)
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed, "engine: must not be nil")
	}
	d, err := e.Open(ctx, o.config(cfg))
	if err != nil {
		return nil, err
	}
	return New(d)
}

// config fills cfg in from the options.
func (o options) config(cfg driver.Config) driver.Config {
	cfg.Clock, cfg.Durability, cfg.ReadOnly = o.clock, string(o.durability), o.readOnly
	cfg.Logger = o.logger
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Path returns where the store is, for people: the SQLite engine's database
// file, or "memory:<name>".
func (s *Store) Path() string { return s.drv.Path() }

// Close releases the handle. Safe to call twice.
func (s *Store) Close() error { return s.drv.Close() }

func opErr(err error, format string, args ...any) error {
	return bindings.Wrap(bindings.CodeKVOperationFailed, err, format, args...)
}

// Get returns the value of key and whether it exists. An expired key is
// absent.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := validKey("key", key); err != nil {
		return nil, false, err
	}
	v, found, err := s.drv.Get(ctx, key)
	if err != nil {
		return nil, false, opErr(err, "get %q", key)
	}
	return v, found, nil
}

// Exists reports whether key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := validKey("key", key); err != nil {
		return false, err
	}
	ok, err := s.drv.Exists(ctx, key)
	if err != nil {
		return false, opErr(err, "exists %q", key)
	}
	return ok, nil
}

// Put stores value under key. Without options it always writes and returns
// true. With IfNotExists it writes only if the key is absent or expired and
// returns whether it did; of any number of racing callers, across handles
// and processes, exactly one wins.
func (s *Store) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (bool, error) {
	var o putOptions
	for _, fn := range opts {
		fn(&o)
	}
	if err := validKey("key", key); err != nil {
		return false, err
	}
	if len(value) > MaxValueBytes {
		return false, bindings.Errorf(bindings.CodeInvalidInput,
			"value: must be at most %d bytes, got %d bytes", MaxValueBytes, len(value))
	}
	if o.hasTTL && o.ttl < 0 {
		return false, bindings.Errorf(bindings.CodeInvalidInput, "ttl: must be 0 or more, got %s", o.ttl)
	}
	if value == nil {
		value = []byte{}
	}
	won, err := s.drv.Put(ctx, key, value, driver.Put{TTL: o.ttl, HasTTL: o.hasTTL, IfAbsent: o.ifNotExists})
	if err != nil {
		return false, opErr(err, "put %q", key)
	}
	return won, nil
}

// Delete removes key. Deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := validKey("key", key); err != nil {
		return err
	}
	return opErr(s.drv.Delete(ctx, key), "delete %q", key)
}

// Scan returns up to limit (0..MaxScanLimit) live keys starting with prefix
// ("" for every key), in key order, after the position cursor names ("" for
// the first page), each with its expiry.
//
// The cursor is opaque: it names the last key returned and the prefix it
// belongs to, so a key deleted between two pages never makes the next page
// skip one (the spec's offset cursor would), and a cursor used with another
// prefix is INVALID_INPUT.
func (s *Store) Scan(ctx context.Context, prefix string, limit int, cursor string) (Page, error) {
	if prefix != "" {
		if err := validKey("prefix", prefix); err != nil {
			return Page{}, err
		}
	}
	if limit < 0 || limit > MaxScanLimit {
		return Page{}, bindings.Errorf(bindings.CodeInvalidInput,
			"limit: must be between 0 and %d, got %d", MaxScanLimit, limit)
	}
	after, err := decodeCursor(prefix, cursor)
	if err != nil {
		return Page{}, err
	}
	if limit == 0 {
		return Page{}, nil
	}
	items, more, err := s.drv.Scan(ctx, prefix, after, limit)
	if err != nil {
		return Page{}, opErr(err, "scan %q", prefix)
	}
	var page Page
	if len(items) > 0 {
		page.Items = make([]Item, len(items))
		for i, it := range items {
			page.Items[i] = Item(it)
		}
	}
	if more && len(page.Items) > 0 {
		page.NextCursor = encodeCursor(prefix, page.Items[len(page.Items)-1].Key)
	}
	return page, nil
}

const cursorVersion = "c1."

func encodeCursor(prefix, last string) string {
	// The last key starts with the prefix, so the key alone binds the cursor
	// to it; the prefix length makes the binding exact.
	return cursorVersion + base64.RawURLEncoding.EncodeToString([]byte(prefix+"\x00"+last))
}

// decodeCursor returns the key to start after ("" to start at the prefix).
func decodeCursor(prefix, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	bad := bindings.Errorf(bindings.CodeInvalidInput,
		"cursor: not a cursor returned by Scan for prefix %q, got %q", prefix, truncate(cursor, 64))
	raw, ok := strings.CutPrefix(cursor, cursorVersion)
	if !ok {
		return "", bad
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return "", bad
	}
	p, last, ok := strings.Cut(string(b), "\x00")
	// Base64 decoding ignores line breaks and the unused bits of the last
	// character, so a cursor is accepted only in the one form Scan issues.
	if !ok || p != prefix || !strings.HasPrefix(last, prefix) || encodeCursor(prefix, last) != cursor {
		return "", bad
	}
	return last, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// validKey checks a key or scan prefix: the rule is driver.ValidKey, which
// engines use too.
func validKey(field, key string) error { return driver.ValidKey(field, key) }
