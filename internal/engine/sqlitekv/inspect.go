package sqlitekv

import (
	"context"
	"database/sql"
	"github.com/localcloud/localcloud/bindings/kv/driver"
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

// Stats counts the store's keys in one read.
func (s *Store) Stats(ctx context.Context) (driver.Stats, error) {
	var st driver.Stats
	if err := s.db.R.QueryRowContext(ctx, stmtStats, s.nowMillis()).Scan(&st.Live, &st.Expired); err != nil {
		return driver.Stats{}, err
	}
	return st, nil
}

// Lookup returns the value of key with its expiry, and whether it is live.
// Unlike Get it never writes: an expired key is reported absent and left
// as it is, so it works on a ReadOnly handle.
func (s *Store) Lookup(ctx context.Context, key string) (driver.Entry, bool, error) {
	var value []byte
	var exp sql.NullInt64
	err := s.db.R.QueryRowContext(ctx, stmtLookup, key).Scan(&value, &exp)
	switch {
	case err == sql.ErrNoRows:
		return driver.Entry{}, false, nil
	case err != nil:
		return driver.Entry{}, false, err
	}
	var e driver.Entry
	if exp.Valid {
		if exp.Int64 <= s.nowMillis() {
			return driver.Entry{}, false, nil
		}
		e.ExpiresAt = time.UnixMilli(exp.Int64)
	}
	e.Value = value
	if e.Value == nil {
		e.Value = []byte{}
	}
	return e, true, nil
}
