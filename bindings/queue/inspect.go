package queue

import (
	"context"
	"database/sql"
	"time"

	"github.com/localcloud/localcloud/bindings"
)

// MaxPeekLimit is the most messages one Peek returns.
const MaxPeekLimit = 1000

// Read-only statements of the inspection tools. They run on the reader
// pool, so they work on a handle opened with ReadOnly and never claim,
// change or wait for the write lock.
const (
	stmtPeek = `SELECT id, attempt, enqueued_at, visible_at, payload_type, payload_data, receipt_handle IS NOT NULL
FROM messages ORDER BY enqueued_at, id LIMIT ?1`
	stmtStats = `SELECT COUNT(*), COALESCE(SUM(CASE WHEN visible_at <= ?1 THEN 1 ELSE 0 END), 0), MIN(enqueued_at)
FROM messages`
)

// PeekedMessage is a message as stored, seen without claiming it.
type PeekedMessage struct {
	ID         int64
	Attempt    int // deliveries so far; 0 before the first
	EnqueuedAt time.Time
	// VisibleAt is when the message is (or was) due: at or before now it is
	// due; later it is in flight (Attempt > 0: its lease ends then) or
	// delayed (Attempt 0).
	VisibleAt time.Time
	Payload   Payload
	// Delivered reports that the message has a receipt (was received at
	// least once).
	Delivered bool
}

// Peek returns up to limit (1..MaxPeekLimit) messages in delivery order
// ((enqueued_at, id)), due or not, without claiming them: attempt counts,
// leases and receipts stay as they are.
func (q *Queue) Peek(ctx context.Context, limit int) ([]PeekedMessage, error) {
	if limit < 1 || limit > MaxPeekLimit {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "limit: must be between 1 and %d, got %d", MaxPeekLimit, limit)
	}
	rows, err := q.db.R.QueryContext(ctx, stmtPeek, limit)
	if err != nil {
		return nil, opErr(err, "peek")
	}
	defer rows.Close()
	var out []PeekedMessage
	for rows.Next() {
		var m PeekedMessage
		var enq, vis int64
		var typ, data string
		if err := rows.Scan(&m.ID, &m.Attempt, &enq, &vis, &typ, &data, &m.Delivered); err != nil {
			return nil, opErr(err, "peek")
		}
		m.EnqueuedAt, m.VisibleAt = time.UnixMilli(enq), time.UnixMilli(vis)
		m.Payload = Payload{Type: PayloadType(typ), Data: data}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, opErr(err, "peek")
	}
	return out, nil
}

// Stats are a queue's counts at one moment.
type Stats struct {
	Due      int64 // visible_at <= now
	InFlight int64 // visible_at > now: leased (or delayed)
	Total    int64
	// Oldest is the enqueue time of the oldest message; zero when empty.
	Oldest time.Time
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
	return s, nil
}
