// Package kv is localcloud's key-value binding: the localkv.v1 store format
// (one SQLite file, <dir>/localkv.sqlite), safe to share between any number
// of handles and OS processes.
//
// Keys are 1..512 bytes of A-Z a-z 0-9 - _ : . and values at most 24,576
// bytes, binary safe. A key may carry a TTL; expired keys read as absent.
package kv

import (
	"context"
	"database/sql/driver"
	"encoding/base64"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Limits of the localkv.v1 binding.
const (
	MaxKeyBytes   = 512
	MaxValueBytes = 24576
	// DefaultScanLimit is the page size callers should use when they have no
	// preference; it is also the largest page Scan returns.
	DefaultScanLimit = 1000
	MaxScanLimit     = 1000
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
	stmtScan = `SELECT key, value FROM kv
WHERE key >= ?1 AND key < ?2 AND key > ?3 AND (expires_at IS NULL OR expires_at > ?4)
ORDER BY key LIMIT ?5`
)

// Store is a handle on one KV store. It is safe for concurrent use.
type Store struct {
	db  *sqlstore.DB
	now func() time.Time
}

// Item is one key and its value.
type Item struct {
	Key   string
	Value []byte
}

// Page is one page of a Scan. NextCursor is empty when no more live keys
// with the prefix remain.
type Page struct {
	Items      []Item
	NextCursor string
}

// Open opens or creates the store in dir (created 0700; the file 0600).
func Open(ctx context.Context, dir string, opts ...Option) (*Store, error) {
	o := buildOptions(opts)
	if _, err := bindings.ParseDurability(string(o.durability)); err != nil {
		return nil, err
	}
	db, err := sqlstore.Open(ctx, dir, format, sqlstore.Options{Durability: o.durability, Logger: o.logger, ReadOnly: o.readOnly})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, now: o.clock}, nil
}

// OpenMemory opens the in-memory store called name, shared by every handle
// of this process that names it and gone when the last one closes. For
// tests of apps: same semantics, no files.
func OpenMemory(ctx context.Context, name string, opts ...Option) (*Store, error) {
	o := buildOptions(opts)
	db, err := sqlstore.OpenMemory(ctx, name, format, sqlstore.Options{Logger: o.logger})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, now: o.clock}, nil
}

// Path returns the database file (or "memory:<name>").
func (s *Store) Path() string { return s.db.Path }

// Close releases the handle. Safe to call twice.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) nowMillis() int64 { return s.now().UnixMilli() }

func opErr(err error, format string, args ...any) error {
	return bindings.Wrap(bindings.CodeKVOperationFailed, err, format, args...)
}

// Get returns the value of key and whether it exists. An expired key is
// absent (and its row is deleted).
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if err := validKey("key", key); err != nil {
		return nil, false, err
	}
	now := s.nowMillis()
	var row [2]driver.Value // value, expires_at
	found, err := s.db.ReadRow(ctx, stmtGet, []driver.NamedValue{{Ordinal: 1, Value: key}}, row[:])
	if err != nil {
		return nil, false, opErr(err, "get %q", key)
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

// Exists reports whether key holds a live value.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := validKey("key", key); err != nil {
		return false, err
	}
	now := s.nowMillis()
	var row [1]driver.Value // expires_at
	found, err := s.db.ReadRow(ctx, stmtExists, []driver.NamedValue{{Ordinal: 1, Value: key}}, row[:])
	if err != nil {
		return false, opErr(err, "exists %q", key)
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
	_, err := s.db.Exec(ctx, stmtDeleteIfExp, key, now)
	return opErr(err, "delete expired key %q", key)
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
		value = []byte{} // value is NOT NULL
	}
	now := s.nowMillis()
	var exp any
	if o.hasTTL {
		exp = now + o.ttl.Milliseconds()
	}
	// One statement each, so each runs as its own transaction.
	if !o.ifNotExists {
		_, err := s.db.Exec(ctx, stmtPut, key, value, exp)
		if err != nil {
			return false, opErr(err, "put %q", key)
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
		return false, opErr(err, "put %q", key)
	}
	return won, nil
}

// Delete removes key. Deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := validKey("key", key); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, stmtDelete, key)
	return opErr(err, "delete %q", key)
}

// Scan returns up to limit (0..MaxScanLimit) live keys starting with prefix,
// in key order, after the position cursor names ("" for the first page).
//
// The cursor is opaque: it names the last key returned and the prefix it
// belongs to, so a key deleted between two pages never makes the next page
// skip one (the spec's offset cursor would), and a cursor used with another
// prefix is INVALID_INPUT.
func (s *Store) Scan(ctx context.Context, prefix string, limit int, cursor string) (Page, error) {
	if err := validKey("prefix", prefix); err != nil {
		return Page{}, err
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
	st, err := s.db.ReadStmt(ctx, stmtScan)
	if err != nil {
		return Page{}, opErr(err, "scan %q", prefix)
	}
	upper := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
	rows, err := st.QueryContext(ctx, prefix, upper, after, s.nowMillis(), limit+1)
	if err != nil {
		return Page{}, opErr(err, "scan %q", prefix)
	}
	defer rows.Close()
	var page Page
	more := false
	for rows.Next() {
		if len(page.Items) == limit {
			more = true
			break
		}
		var it Item
		if err := rows.Scan(&it.Key, &it.Value); err != nil {
			return Page{}, opErr(err, "scan %q", prefix)
		}
		if it.Value == nil {
			it.Value = []byte{}
		}
		page.Items = append(page.Items, it)
	}
	if err := rows.Err(); err != nil {
		return Page{}, opErr(err, "scan %q", prefix)
	}
	if more {
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

// validKey checks a key or scan prefix: 1..512 bytes of A-Z a-z 0-9 - _ : .
func validKey(field, key string) error {
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

// DB returns the store plumbing, for localcloud's own tools and tests.
func (s *Store) DB() *sqlstore.DB { return s.db }
