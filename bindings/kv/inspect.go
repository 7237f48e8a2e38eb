package kv

import (
	"context"
	"database/sql"
	"time"
)

// Read-only statements of the inspection tools (the explorer, status). They
// run on the reader pool, so they work on a ReadOnly handle and never
// delete an expired row.
const (
	stmtStats = `SELECT
COALESCE(SUM(CASE WHEN expires_at IS NULL OR expires_at > ?1 THEN 1 ELSE 0 END), 0),
COALESCE(SUM(CASE WHEN expires_at IS NOT NULL AND expires_at <= ?1 THEN 1 ELSE 0 END), 0)
FROM kv`
	stmtLookup = `SELECT value, expires_at FROM kv WHERE key = ?1`
)

// Stats are a KV store's counts at one moment.
type Stats struct {
	Live int64 // keys without a TTL or whose TTL has not passed
	// Expired counts rows whose TTL has passed but that are still stored
	// (they read as absent and are deleted when read or overwritten).
	Expired int64
}

// Stats counts the store's keys in one read.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	if err := s.db.R.QueryRowContext(ctx, stmtStats, s.nowMillis()).Scan(&st.Live, &st.Expired); err != nil {
		return Stats{}, opErr(err, "count keys")
	}
	return st, nil
}

// Entry is a live key's value with its expiry, as Lookup sees it.
type Entry struct {
	Value []byte
	// ExpiresAt is when the key expires; zero when it has no TTL.
	ExpiresAt time.Time
}

// Lookup returns the value of key with its expiry, and whether it is live.
// Unlike Get it never writes: an expired key is reported absent and left
// as it is, so it works on a ReadOnly handle.
func (s *Store) Lookup(ctx context.Context, key string) (Entry, bool, error) {
	if err := validKey("key", key); err != nil {
		return Entry{}, false, err
	}
	var value []byte
	var exp sql.NullInt64
	err := s.db.R.QueryRowContext(ctx, stmtLookup, key).Scan(&value, &exp)
	switch {
	case err == sql.ErrNoRows:
		return Entry{}, false, nil
	case err != nil:
		return Entry{}, false, opErr(err, "look up %q", key)
	}
	var e Entry
	if exp.Valid {
		if exp.Int64 <= s.nowMillis() {
			return Entry{}, false, nil
		}
		e.ExpiresAt = time.UnixMilli(exp.Int64)
	}
	e.Value = value
	if e.Value == nil {
		e.Value = []byte{}
	}
	return e, true, nil
}
