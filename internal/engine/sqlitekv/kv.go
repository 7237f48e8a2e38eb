// Package sqlitekv is the SQLite engine of the KV binding: the localkv.v1
// store format (one SQLite file, <dir>/localkv.sqlite, or a shared
// in-memory database "memory:NAME"), safe to share between any number of
// handles and OS processes. It implements bindings/kv/driver; apps reach it
// through package kv, which validates every argument first. The SQLite-only
// operations (the *sqlstore.DB for check, backup, restore and raw reads)
// are for localcloud's own tools: internal/engine/sqlitetools opens the
// engine with OpenConfig and keeps this handle beside the public one
// (kv.New).
package sqlitekv

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// FileName is the database file inside a KV store directory.
const FileName = "localkv.sqlite"

// Marker is the format identifier in the meta table.
const Marker = "localkv.v1"

// Schema is the provider DDL of localkv.v1, exactly as the spec writes it.
const Schema = `CREATE TABLE IF NOT EXISTS kv (
key TEXT PRIMARY KEY,
value BLOB NOT NULL,
expires_at INTEGER -- unix epoch MILLISECONDS, NULL = no expiry
);`

var format = sqlstore.Format{
	Marker: Marker,
	File:   FileName,
	Schema: Schema,
	OpCode: bindings.CodeKVOperationFailed,
	// Rows another program wrote (rows.go).
	CheckRows: checkRows,
}

// Format returns the description of localkv.v1 used by the store plumbing.
func Format() sqlstore.Format { return format }

// MemoryPrefix starts the location of an in-memory store: "memory:NAME".
const MemoryPrefix = "memory:"

// The spec's statements.
const (
	stmtGet         = `SELECT value, expires_at FROM kv WHERE key = ?1`
	stmtExists      = `SELECT expires_at FROM kv WHERE key = ?1`
	stmtDeleteIfExp = `DELETE FROM kv WHERE key = ?1 AND expires_at IS NOT NULL AND expires_at <= ?2`
	stmtPut         = `INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3`
	stmtPutIfAbsent = `INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3)
ON CONFLICT(key) DO UPDATE SET value = ?2, expires_at = ?3
WHERE kv.expires_at IS NOT NULL AND kv.expires_at <= ?4`
	stmtDelete = `DELETE FROM kv WHERE key = ?1`
	// The prefix range [prefix, upper) holds exactly the keys that start
	// with prefix (prefix bytes are ASCII below 0x7f, see validKey).
	stmtScan = `SELECT key, value, expires_at FROM kv
WHERE key >= ?1 AND key < ?2 AND key > ?3 AND (expires_at IS NULL OR expires_at > ?4)
ORDER BY key LIMIT ?5`
	// The scan of every key (prefix ""): no upper bound, so keys a foreign
	// writer stored with bytes outside validKey's set are listed too.
	stmtScanAll = `SELECT key, value, expires_at FROM kv
WHERE key > ?1 AND (expires_at IS NULL OR expires_at > ?2)
ORDER BY key LIMIT ?3`
)

// Store is a handle on one KV store. It is safe for concurrent use.
type Store struct {
	db  *sqlstore.DB
	now func() time.Time
}

// Engine is the SQLite engine; its zero value is ready to use.
type Engine struct{}

// Open opens the store at cfg.Location: "memory:NAME" or a directory.
func (Engine) Open(ctx context.Context, cfg driver.Config) (driver.Store, error) {
	s, err := OpenConfig(ctx, cfg)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

// OpenConfig is Open returning the engine's own type, for localcloud's
// tools, which keep it beside the public handle (kv.New).
func OpenConfig(ctx context.Context, cfg driver.Config) (*Store, error) {
	if cfg.Location == "" && cfg.Binding != nil {
		var err error
		if cfg, err = bindingConfig(cfg); err != nil { // env.go
			return nil, err
		}
	}
	if cfg.NoCreate {
		if err := needStore(cfg.Location); err != nil {
			return nil, err
		}
	}
	if name, ok := strings.CutPrefix(cfg.Location, MemoryPrefix); ok {
		return OpenMemory(ctx, name, cfg)
	}
	return Open(ctx, cfg.Location, cfg)
}

// Open opens or creates the store in dir (created 0700; the file 0600).
func Open(ctx context.Context, dir string, o driver.Config) (*Store, error) {
	d, err := bindings.ParseDurability(o.Durability)
	if err != nil {
		return nil, err
	}
	db, err := sqlstore.Open(ctx, dir, format, sqlstore.Options{Durability: d, Logger: o.Logger, ReadOnly: o.ReadOnly})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, now: clock(o.Clock)}, nil
}

func clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}

// OpenMemory opens the in-memory store called name, shared by every handle
// of this process that names it and gone when the last one closes. For
// tests of apps: same semantics, no files.
func OpenMemory(ctx context.Context, name string, o driver.Config) (*Store, error) {
	db, err := sqlstore.OpenMemory(ctx, name, format, sqlstore.Options{Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, now: clock(o.Clock)}, nil
}

// Path returns the database file (or "memory:<name>").
func (s *Store) Path() string { return s.db.Path }

// Close releases the handle. Safe to call twice.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) nowMillis() int64 { return s.now().UnixMilli() }

// Get returns the value of key and whether it exists. An expired key is
// absent (and its row is deleted).
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	now := s.nowMillis()
	var row [2]sqldriver.Value // value, expires_at
	found, err := s.db.ReadRow(ctx, stmtGet, []sqldriver.NamedValue{{Ordinal: 1, Value: key}}, row[:])
	if err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, nil
	}
	if expired(row[1], now) { // a REAL from another program too (rows.go)
		return nil, false, s.deleteExpired(ctx, key, now)
	}
	// TEXT, a number or NULL written by another program into the BLOB
	// column: rows.go.
	return valueBytes(row[0]), true, nil
}

// expiryOf is an expires_at value as a time: zero for NULL and for values
// that are not numbers (written by another program).
func expiryOf(v any) time.Time {
	switch ms := v.(type) {
	case int64:
		return time.UnixMilli(ms)
	case float64: // REAL written by another program, compared as a number
		return time.UnixMilli(int64(ms))
	}
	return time.Time{}
}

// Exists reports whether key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	now := s.nowMillis()
	var row [1]sqldriver.Value // expires_at
	found, err := s.db.ReadRow(ctx, stmtExists, []sqldriver.NamedValue{{Ordinal: 1, Value: key}}, row[:])
	if err != nil {
		return false, err
	}
	if !found {
		return false, nil
	}
	if expired(row[0], now) {
		return false, s.deleteExpired(ctx, key, now)
	}
	return true, nil
}

func (s *Store) deleteExpired(ctx context.Context, key string, now int64) error {
	if _, err := s.db.Exec(ctx, stmtDeleteIfExp, key, now); err != nil {
		return fmt.Errorf("delete expired key: %w", err)
	}
	return nil
}

// Put stores value under key. Without IfAbsent it always writes and returns
// true. With IfAbsent it writes only if the key is absent or expired and
// returns whether it did; of any number of racing callers, across handles
// and processes, exactly one wins.
func (s *Store) Put(ctx context.Context, key string, value []byte, o driver.Put) (bool, error) {
	if value == nil {
		value = []byte{} // value is NOT NULL
	}
	now := s.nowMillis()
	var exp any
	if o.HasTTL {
		exp = now + o.TTL.Milliseconds()
	}
	// One statement each, so each runs as its own transaction.
	if !o.IfAbsent {
		_, err := s.db.Exec(ctx, stmtPut, key, value, exp)
		if err != nil {
			return false, err
		}
		return true, nil
	}
	res, err := s.db.Exec(ctx, stmtPutIfAbsent, key, value, exp, now)
	var won bool
	if err == nil {
		var n int64
		n, err = res.RowsAffected()
		won = n == 1
	}
	if err != nil {
		return false, err
	}
	return won, nil
}

// Delete removes key. Deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.db.Exec(ctx, stmtDelete, key)
	return err
}

// Scan returns up to limit (1 or more) live keys starting with prefix, in
// key order, after the key after ("" for the first page), and whether more
// remain.
func (s *Store) Scan(ctx context.Context, prefix, after string, limit int) ([]driver.Item, bool, error) {
	stmt, args := stmtScanAll, []any{after, s.nowMillis(), limit + 1}
	if prefix != "" {
		upper := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
		stmt, args = stmtScan, []any{prefix, upper, after, s.nowMillis(), limit + 1}
	}
	st, err := s.db.ReadStmt(ctx, stmt)
	if err != nil {
		return nil, false, err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var items []driver.Item
	more := false
	for rows.Next() {
		if len(items) == limit {
			more = true
			break
		}
		var it driver.Item
		var exp any
		if err := rows.Scan(&it.Key, &it.Value, &exp); err != nil {
			return nil, false, err
		}
		it.ExpiresAt = expiryOf(exp)
		if it.Value == nil {
			it.Value = []byte{}
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return items, more, nil
}

// DB returns the store plumbing, for localcloud's own tools and tests.
func (s *Store) DB() *sqlstore.DB { return s.db }
