package sqlitequeue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// AttributesDDL is localcloud's own table of message attributes
// (queue.WithAttributes), part of the format's Extra: a spec-exact reader
// ignores it. A row is keyed by its message's id; the spec's AUTOINCREMENT
// never hands an id out twice, so a row left behind by a message that is
// gone (acked by another program) can never be read as the attributes of
// a later message. localcloud deletes the row with its message (ack,
// purge, move out) once the handle knows the store has attributes, and
// sends with attributes delete the rows below the oldest message's id.
const AttributesDDL = `CREATE TABLE IF NOT EXISTS lc_attributes (
message_id INTEGER PRIMARY KEY, -- messages.id
attributes TEXT NOT NULL -- the JSON of queue.Attributes: {"name":{"type":"String","string":"v"},"b":{"type":"Binary","binary":"<base64>"}}
);`

// Statements of attributes. The claims read a message's attributes in
// their RETURNING clause (claimAttrs), a primary-key probe of this table:
// no statement of its own, on stores with attributes or without.
const (
	stmtSetAttrs    = `INSERT OR REPLACE INTO lc_attributes (message_id, attributes) VALUES (?1, ?2)`
	stmtGetAttrs    = `SELECT attributes FROM lc_attributes WHERE message_id = ?1`
	stmtDeleteAttrs = `DELETE FROM lc_attributes WHERE message_id = ?1`
	stmtClearAttrs  = `DELETE FROM lc_attributes`
	stmtAnyAttrs    = `SELECT EXISTS (SELECT 1 FROM lc_attributes)`
	stmtHasAttrs    = `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'lc_attributes'`
	// The rows below the oldest message's id, per send with attributes
	// (in its transaction, after its insert: messages is not empty): their
	// messages are gone, and a range of the primary key finds only them,
	// however many live rows the table holds.
	stmtPruneAttrs = `DELETE FROM lc_attributes WHERE message_id < (SELECT MIN(id) FROM messages)`
	// claimAttrs is the attributes column of a claim's RETURNING; its
	// empty name costs the driver no string per statement.
	claimAttrs = `(SELECT a.attributes FROM lc_attributes a WHERE a.message_id = messages.id) AS ""`
)

// noteAttrs reads, at a read-write open, whether the store holds any
// attributes: only then do acks delete them.
func (q *Queue) noteAttrs(ctx context.Context) error {
	var any bool
	if err := q.db.R.QueryRowContext(ctx, stmtAnyAttrs).Scan(&any); err != nil {
		return fmt.Errorf("look for message attributes: %w", err)
	}
	if any {
		q.hasAttrs.Store(true)
	}
	return nil
}

// setAttrs stores the attributes of the message id just inserted, if p has
// any.
func (q *Queue) setAttrs(ctx context.Context, tx *sqlstore.Tx, id int64, attrs []byte) error {
	if len(attrs) == 0 {
		return nil
	}
	q.hasAttrs.Store(true)
	if _, err := tx.Exec(ctx, stmtSetAttrs, id, string(attrs)); err != nil {
		return fmt.Errorf("store the attributes of message %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, stmtPruneAttrs); err != nil {
		return fmt.Errorf("prune attributes: %w", err)
	}
	return nil
}

// attrsOf is a claim's attributes column: nil for none.
func (q *Queue) attrsOf(v sql.NullString) []byte {
	if !v.Valid || v.String == "" {
		return nil
	}
	q.hasAttrs.Store(true)
	return []byte(v.String)
}

// readAttrs reads the attributes of message id (for a move); nil for none.
func readAttrs(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, id int64) ([]byte, error) {
	var s string
	err := db.QueryRowContext(ctx, stmtGetAttrs, id).Scan(&s)
	switch {
	case err == sql.ErrNoRows:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the attributes of message %d: %w", id, err)
	}
	return []byte(s), nil
}

// ackAttrs is Ack on a store with attributes: the spec's delete and the
// message's attributes, in one transaction.
func (q *Queue) ackAttrs(ctx context.Context, id int64, u, receipt string) error {
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtAck, id, u)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			_, err = tx.Exec(ctx, stmtDeleteAttrs, id)
			return err
		}
		return q.staleIfExists(ctx, tx, res, id)
	})
	return q.receiptErr(err, "ack", receipt)
}
