package sqlitequeue

import (
	"context"
	"database/sql"
	"time"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// The reads of `localcloud queue tail`. ids grow (AUTOINCREMENT), so
// "id > after" is exactly what arrived since the message after. They read
// like Peek: nothing is claimed or changed.
const (
	stmtTail = `SELECT id, attempt, enqueued_at, visible_at, payload_type, payload_data FROM messages
WHERE id > ?1 ORDER BY id LIMIT ?2`
	stmtTailLast = `SELECT COALESCE(MAX(id), 0) FROM messages`
)

// Tail returns up to limit messages with an id above after, in id order
// (the order they arrived in), without claiming them. A message another
// program wrote is shown as stored (a REAL time truncated, one that is no
// number as zero).
func (q *Queue) Tail(ctx context.Context, after int64, limit int) ([]PeekedMessage, error) {
	rows, err := q.db.R.QueryContext(ctx, stmtTail, after, limit)
	if err != nil {
		return nil, opErr(err, "tail")
	}
	defer rows.Close()
	var out []PeekedMessage
	for rows.Next() {
		var m PeekedMessage
		var attempt, enq, vis any
		var typ, data sql.RawBytes
		if err := rows.Scan(&m.ID, &attempt, &enq, &vis, &typ, &data); err != nil {
			return out, opErr(err, "tail")
		}
		n, _ := sqlstore.IntValue(attempt, false)
		m.Attempt, m.Delivered = int(n), n > 0
		if ms, ok := sqlstore.IntValue(enq, false); ok {
			m.EnqueuedAt = time.UnixMilli(ms)
		}
		if ms, ok := sqlstore.IntValue(vis, true); ok {
			m.VisibleAt = time.UnixMilli(ms)
		}
		m.Payload = Payload{Type: string(typ), Data: string(data)}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return out, opErr(err, "tail")
	}
	return out, nil
}

// LastID returns the newest message's id, 0 when there is none: Tail after
// it reads what arrives from then on.
func (q *Queue) LastID(ctx context.Context) (int64, error) {
	var last int64
	if err := q.db.R.QueryRowContext(ctx, stmtTailLast).Scan(&last); err != nil {
		return 0, opErr(err, "read the last message id")
	}
	return last, nil
}
