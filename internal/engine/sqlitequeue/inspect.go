package sqlitequeue

import (
	"context"
	"database/sql"
	"strings"
	"time"
)

// Read-only statements of the inspection tools. They run on the reader
// pool, so they work on a handle opened with ReadOnly and never claim,
// change or wait for the write lock.
const (
	stmtPeek = `SELECT id, payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle
FROM messages ORDER BY enqueued_at, id LIMIT ?1`
	stmtStats = `SELECT COUNT(*), COALESCE(SUM(CASE WHEN visible_at <= ?1 THEN 1 ELSE 0 END), 0), MIN(enqueued_at),
COALESCE(SUM(CASE WHEN visible_at > ?1 AND attempt = 0 THEN 1 ELSE 0 END), 0)
FROM messages`
	// With localcloud's own tables (deadletter.go), which a store written
	// only by a spec-exact implementation and opened read-only lacks.
	stmtHasMoveTables = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('lc_moves', 'lc_arrivals')`
	stmtHasReasons    = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'lc_dead_letter_reasons'`
	// REASON is replaced by the reason column (LASTERROR by the last error),
	// or NULL on a store that
	// has no lc_dead_letter_reasons (opened read-only, never opened
	// read-write since an older localcloud made it).
	stmtPeekOrigin = `SELECT m.id, m.payload_type, m.payload_data, m.enqueued_at, m.visible_at, m.attempt, m.receipt_handle,
d.origin_store, d.origin_binding, d.origin_id, d.attempts, d.last_receipt, d.origin_enqueued_at, d.arrived_at,
mv.message_id IS NOT NULL, REASON, LASTERROR, ATTRS
FROM messages m LEFT JOIN lc_arrivals d ON d.message_id = m.id AND d.kind = 'dead-letter' LEFT JOIN lc_moves mv ON mv.message_id = m.id
ORDER BY m.enqueued_at, m.id LIMIT ?1`
	peekReason       = `(SELECT r.reason FROM lc_dead_letter_reasons r WHERE r.dlq_message_id = m.id)`
	stmtStatsOrigins = `SELECT d.origin_binding, d.origin_store, COUNT(*) FROM lc_arrivals d JOIN messages m ON m.id = d.message_id AND d.kind = 'dead-letter'
GROUP BY d.origin_store, d.origin_binding ORDER BY COUNT(*) DESC, d.origin_binding, d.origin_store`
	stmtStatsMoving = `SELECT COUNT(*) FROM lc_moves`
	// With localcloud's table of last errors (failures.go), which a store
	// opened read-only since before this localcloud lacks.
	stmtHasErrorTable = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'lc_errors'`
	// LASTERROR in stmtPeekOrigin is replaced by this, or NULL without lc_errors.
	peekLastError = `(SELECT e.error FROM lc_errors e WHERE e.message_id = m.id)`
	// ATTRS in stmtPeekOrigin is replaced by this, or NULL without lc_attributes.
	peekAttrs = `(SELECT a.attributes FROM lc_attributes a WHERE a.message_id = m.id)`
)

// Peek returns up to limit (checked by the caller) messages in delivery order
// ((enqueued_at, id)), due or not, without claiming them: attempt counts,
// leases and receipts stay as they are.
func (q *Queue) Peek(ctx context.Context, limit int) ([]PeekedMessage, error) {
	own, err := q.hasMoveTables(ctx)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	stmt := stmtPeek
	if own {
		var errs int
		if err := q.db.R.QueryRowContext(ctx, stmtHasErrorTable).Scan(&errs); err != nil {
			return nil, opErr(err, "peek")
		}
		reason, lastError := "NULL", "NULL"
		var n int
		if err := q.db.R.QueryRowContext(ctx, stmtHasReasons).Scan(&n); err != nil {
			return nil, opErr(err, "peek")
		}
		if n == 1 {
			reason = peekReason
		}
		if errs == 1 {
			lastError = peekLastError
		}
		attrs := "NULL"
		if err := q.db.R.QueryRowContext(ctx, stmtHasAttrs).Scan(&n); err != nil {
			return nil, opErr(err, "peek")
		}
		if n == 1 {
			attrs = peekAttrs
		}
		stmt = strings.NewReplacer("REASON", reason, "LASTERROR", lastError, "ATTRS", attrs).Replace(stmtPeekOrigin)
	}
	rows, err := q.db.R.QueryContext(ctx, stmt, limit)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	defer rows.Close()
	var out []PeekedMessage
	for rows.Next() {
		var m PeekedMessage
		r := storedRow{hasVis: true, hasAttempt: true, hasReceipt: true}
		dest := []any{&r.id, &r.typ, &r.data, &r.enq, &r.vis, &r.attempt, &r.receipt}
		var o struct {
			store, binding, receipt, reason sql.NullString
			id, attempts, enq, moved        sql.NullInt64
		}
		if own {
			dest = append(dest, &o.store, &o.binding, &o.id, &o.attempts, &o.receipt, &o.enq, &o.moved, &m.Moving, &o.reason)
		}
		var lastErr, attrs sql.NullString
		if own {
			dest = append(dest, &lastErr, &attrs)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, opErr(err, "peek")
		}
		if o.store.Valid {
			m.Origin = &Origin{Store: o.store.String, Binding: o.binding.String, ID: o.id.Int64, Attempts: int(o.attempts.Int64),
				EnqueuedAt: time.UnixMilli(o.enq.Int64), MovedAt: time.UnixMilli(o.moved.Int64), LastReceipt: o.receipt.String,
				Reason: o.reason.String}
		}
		m.LastError = lastErr.String
		d := decodeRow(r) // total: rows another program wrote (rows.go)
		m.ID, m.Attempt, m.Delivered, m.Odd = r.id, d.attempt, d.receipt.Valid, d.odd
		if d.enqOK {
			m.EnqueuedAt = time.UnixMilli(d.enqueuedAt)
		}
		if d.visOK {
			m.VisibleAt = time.UnixMilli(d.visibleAt)
		}
		m.Payload = d.payload
		if attrs.Valid && attrs.String != "" {
			m.Payload.Attrs = []byte(attrs.String)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, opErr(err, "peek")
	}
	return out, nil
}

// Stats counts the queue's messages in one read.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var oldest any // MIN over numbers first: REAL from another program (rows.go), TEXT only if no number
	if err := q.db.R.QueryRowContext(ctx, stmtStats, q.now().UnixMilli()).Scan(&s.Total, &s.Due, &oldest, &s.Delayed); err != nil {
		return Stats{}, opErr(err, "stats")
	}
	s.InFlight = s.Total - s.Due
	if ms, _, ok := intOf("enqueued_at", oldest); ok {
		s.Oldest = time.UnixMilli(ms)
	}
	if err := q.moveStats(ctx, &s); err != nil {
		return Stats{}, opErr(err, "stats")
	}
	return s, nil
}

// moveStats fills the counts of dead letters and moves. They are read
// apart from the message counts, so under concurrent moves the two may
// disagree by the messages moved in between.
func (q *Queue) moveStats(ctx context.Context, s *Stats) error {
	own, err := q.hasMoveTables(ctx)
	if err != nil || !own {
		return err
	}
	if err := q.db.R.QueryRowContext(ctx, stmtStatsMoving).Scan(&s.Moving); err != nil {
		return err
	}
	rows, err := q.db.R.QueryContext(ctx, stmtStatsOrigins)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c OriginCount
		if err := rows.Scan(&c.Binding, &c.Store, &c.Count); err != nil {
			return err
		}
		s.Origins = append(s.Origins, c)
		s.DeadLetters += c.Count
	}
	return rows.Err()
}

// hasMoveTables reports whether the store has localcloud's tables of moves
// (a read-only handle on a store no read-write localcloud handle opened
// since it was created by a spec-exact implementation has not).
func (q *Queue) hasMoveTables(ctx context.Context) (bool, error) {
	var n int
	err := q.db.R.QueryRowContext(ctx, stmtHasMoveTables).Scan(&n)
	return n == 2, err
}
