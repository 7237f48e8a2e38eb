package sqlitequeue

import (
	"context"
	"database/sql"
	"time"
)

// Read-only statements of the inspection tools. They run on the reader
// pool, so they work on a handle opened with ReadOnly and never claim,
// change or wait for the write lock.
const (
	stmtPeek = `SELECT id, attempt, enqueued_at, visible_at, payload_type, payload_data, receipt_handle IS NOT NULL
FROM messages ORDER BY enqueued_at, id LIMIT ?1`
	stmtStats = `SELECT COUNT(*), COALESCE(SUM(CASE WHEN visible_at <= ?1 THEN 1 ELSE 0 END), 0), MIN(enqueued_at)
FROM messages`
	// With localcloud's own tables (deadletter.go), which a store written
	// only by a spec-exact implementation and opened read-only lacks.
	stmtHasMoveTables = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('lc_moves', 'lc_arrivals')`
	stmtPeekOrigin    = `SELECT m.id, m.attempt, m.enqueued_at, m.visible_at, m.payload_type, m.payload_data, m.receipt_handle IS NOT NULL,
d.origin_store, d.origin_binding, d.origin_id, d.attempts, d.last_receipt, d.origin_enqueued_at, d.arrived_at,
mv.message_id IS NOT NULL
FROM messages m LEFT JOIN lc_arrivals d ON d.message_id = m.id AND d.kind = 'dead-letter' LEFT JOIN lc_moves mv ON mv.message_id = m.id
ORDER BY m.enqueued_at, m.id LIMIT ?1`
	stmtStatsOrigins = `SELECT d.origin_binding, d.origin_store, COUNT(*) FROM lc_arrivals d JOIN messages m ON m.id = d.message_id AND d.kind = 'dead-letter'
GROUP BY d.origin_store, d.origin_binding ORDER BY COUNT(*) DESC, d.origin_binding, d.origin_store`
	stmtStatsMoving = `SELECT COUNT(*) FROM lc_moves`
	// With localcloud's table of last errors (failures.go), which a store
	// opened read-only since before this localcloud lacks.
	stmtHasErrorTable = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'lc_errors'`
	stmtPeekErrors    = `SELECT m.id, m.attempt, m.enqueued_at, m.visible_at, m.payload_type, m.payload_data, m.receipt_handle IS NOT NULL,
d.origin_store, d.origin_binding, d.origin_id, d.attempts, d.last_receipt, d.origin_enqueued_at, d.arrived_at,
mv.message_id IS NOT NULL, e.error
FROM messages m LEFT JOIN lc_arrivals d ON d.message_id = m.id AND d.kind = 'dead-letter' LEFT JOIN lc_moves mv ON mv.message_id = m.id
LEFT JOIN lc_errors e ON e.message_id = m.id
ORDER BY m.enqueued_at, m.id LIMIT ?1`
)

// Peek returns up to limit (checked by the caller) messages in delivery order
// ((enqueued_at, id)), due or not, without claiming them: attempt counts,
// leases and receipts stay as they are.
func (q *Queue) Peek(ctx context.Context, limit int) ([]PeekedMessage, error) {
	own, err := q.hasMoveTables(ctx)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	var errs int
	if own {
		if err := q.db.R.QueryRowContext(ctx, stmtHasErrorTable).Scan(&errs); err != nil {
			return nil, opErr(err, "peek")
		}
	}
	stmt := stmtPeek
	switch {
	case own && errs == 1:
		stmt = stmtPeekErrors
	case own:
		stmt = stmtPeekOrigin
	}
	rows, err := q.db.R.QueryContext(ctx, stmt, limit)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	defer rows.Close()
	var out []PeekedMessage
	for rows.Next() {
		var m PeekedMessage
		var enq, vis int64
		var typ, data string
		dest := []any{&m.ID, &m.Attempt, &enq, &vis, &typ, &data, &m.Delivered}
		var o struct {
			store, binding, receipt  sql.NullString
			id, attempts, enq, moved sql.NullInt64
		}
		if own {
			dest = append(dest, &o.store, &o.binding, &o.id, &o.attempts, &o.receipt, &o.enq, &o.moved, &m.Moving)
		}
		var lastErr sql.NullString
		if own && errs == 1 {
			dest = append(dest, &lastErr)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, opErr(err, "peek")
		}
		if o.store.Valid {
			m.Origin = &Origin{Store: o.store.String, Binding: o.binding.String, ID: o.id.Int64, Attempts: int(o.attempts.Int64),
				EnqueuedAt: time.UnixMilli(o.enq.Int64), MovedAt: time.UnixMilli(o.moved.Int64), LastReceipt: o.receipt.String}
		}
		m.LastError = lastErr.String
		m.EnqueuedAt, m.VisibleAt = time.UnixMilli(enq), time.UnixMilli(vis)
		m.Payload = Payload{Type: PayloadType(typ), Data: data}
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
	var oldest sql.NullInt64
	if err := q.db.R.QueryRowContext(ctx, stmtStats, q.now().UnixMilli()).Scan(&s.Total, &s.Due, &oldest); err != nil {
		return Stats{}, opErr(err, "stats")
	}
	s.InFlight = s.Total - s.Due
	if oldest.Valid {
		s.Oldest = time.UnixMilli(oldest.Int64)
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
