package sqlitequeue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/internal/engine/moverec"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// What `localcloud migrate` reads and writes of a queue store (through
// internal/engine's Handle). An import is idempotent: lc_imports records,
// in the commit that adds the message, which message of which source store
// it is, and a message already recorded is not added again.

// ImportsDDL is the table of imports, made by the first import into a
// store (a table of localcloud's namespace, which a spec-exact reader and
// an older localcloud ignore). It has no index beside its rowid (opening a
// store refuses indexes the format does not define); an import reads the
// rows of its source once per batch.
const ImportsDDL = `CREATE TABLE IF NOT EXISTS lc_imports (
id INTEGER PRIMARY KEY,
source TEXT NOT NULL, -- the store the message was exported from ("sqlite:DIR", "jetstream:STREAM")
source_id INTEGER NOT NULL, -- its id there
message_id INTEGER NOT NULL -- messages.id here
)`

const (
	stmtExport = `SELECT m.id, m.payload_type, m.payload_data, m.enqueued_at, m.visible_at, m.attempt,
(SELECT e.error FROM lc_errors e WHERE e.message_id = m.id),
d.origin_store, d.origin_binding, d.origin_id, d.attempts, d.last_receipt, d.origin_enqueued_at, d.arrived_at,
(SELECT r.reason FROM lc_dead_letter_reasons r WHERE r.dlq_message_id = m.id),
(SELECT a.attributes FROM lc_attributes a WHERE a.message_id = m.id)
FROM messages m LEFT JOIN lc_arrivals d ON d.message_id = m.id AND d.kind = 'dead-letter'
WHERE m.id > ?1 AND NOT (m.attempt > 0 AND m.visible_at > ?3) AND NOT EXISTS (SELECT 1 FROM lc_moves mv WHERE mv.message_id = m.id)
ORDER BY m.id LIMIT ?2`
	stmtLeased = `SELECT COUNT(*), COALESCE(MAX(visible_at), 0) FROM messages WHERE attempt > 0 AND visible_at > ?1`
	stmtMoves  = `SELECT COUNT(*) FROM lc_moves`
	stmtDedups = `SELECT dedup_key, sent_at, message_id FROM lc_dedup ORDER BY dedup_key`
	stmtRemove = `DELETE FROM messages WHERE id = ?1`
	// The rows beside a removed message.
	stmtRemoveError   = `DELETE FROM lc_errors WHERE message_id = ?1`
	stmtRemoveArrival = `DELETE FROM lc_arrivals WHERE message_id = ?1`
	stmtRemoveReason  = `DELETE FROM lc_dead_letter_reasons WHERE dlq_message_id = ?1`
	stmtClearDedup    = `DELETE FROM lc_dedup`
	stmtImported      = `SELECT source_id, message_id FROM lc_imports WHERE source = ?1`
	stmtImportMsg     = `INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle)
VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id`
	stmtImportMark    = `INSERT INTO lc_imports (source, source_id, message_id) VALUES (?1, ?2, ?3)`
	stmtImportArrival = `INSERT INTO lc_arrivals (move_token, kind, origin_store, origin_id, origin_binding, attempts, last_receipt, origin_enqueued_at, arrived_at, message_id)
VALUES (?1, 'dead-letter', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`
	stmtImportDedup = `INSERT INTO lc_dedup (dedup_key, message_id, sent_at) VALUES (?1, ?2, ?3)
ON CONFLICT (dedup_key) DO UPDATE SET sent_at = MAX(sent_at, excluded.sent_at)`
)

// Leased counts the messages a consumer holds now (delivered, their lease
// not over: a message nacked with a delay counts too, as the store cannot
// tell it apart) and the messages being moved to another store; until is
// when the last lease ends.
func (q *Queue) Leased(ctx context.Context) (n int64, until time.Time, err error) {
	var last, moves int64
	if err := q.db.R.QueryRowContext(ctx, stmtLeased, q.now().UnixMilli()).Scan(&n, &last); err != nil {
		return 0, time.Time{}, opErr(err, "count leased messages")
	}
	if err := q.db.R.QueryRowContext(ctx, stmtMoves).Scan(&moves); err != nil {
		return 0, time.Time{}, opErr(err, "count moving messages")
	}
	if n == 0 && moves == 0 {
		return 0, time.Time{}, nil
	}
	return n + moves, time.UnixMilli(last), nil
}

// Export returns up to max messages with an id above after, by id,
// leaving out those Leased counts. A message never delivered whose
// visible_at is later than now is delayed: DueAt carries it.
func (q *Queue) Export(ctx context.Context, after int64, max int) ([]moverec.Message, error) {
	now := q.now().UnixMilli()
	rows, err := q.db.R.QueryContext(ctx, stmtExport, after, max, now)
	if err != nil {
		return nil, opErr(err, "export")
	}
	defer rows.Close()
	var out []moverec.Message
	for rows.Next() {
		var m moverec.Message
		var enq, vis, att sql.NullInt64
		var typ, data, lastErr, oStore, oBinding, oReceipt, reason, attrs sql.NullString
		var oID, oAtt, oEnq, oMoved sql.NullInt64
		if err := rows.Scan(&m.ID, &typ, &data, &enq, &vis, &att, &lastErr, &oStore, &oBinding, &oID, &oAtt, &oReceipt, &oEnq, &oMoved, &reason, &attrs); err != nil {
			return nil, opErr(fmt.Errorf("message %d: %w (a row another program wrote? localcloud check shows it)", m.ID, err), "export")
		}
		if !typ.Valid || !data.Valid || !enq.Valid || !vis.Valid || !att.Valid {
			return nil, opErr(fmt.Errorf("message %d has a NULL column; localcloud check shows it", m.ID), "export")
		}
		m.Payload.Type, m.Payload.Data = typ.String, data.String
		if attrs.String != "" {
			m.Payload.Attrs = []byte(attrs.String)
		}
		m.EnqueuedAt, m.Attempts, m.LastError = time.UnixMilli(enq.Int64), int(att.Int64), lastErr.String
		if vis.Int64 > now {
			m.DueAt = time.UnixMilli(vis.Int64)
		}
		if oStore.Valid {
			m.Origin = &Origin{Store: oStore.String, Binding: oBinding.String, ID: oID.Int64, Attempts: int(oAtt.Int64),
				EnqueuedAt: time.UnixMilli(oEnq.Int64), MovedAt: time.UnixMilli(oMoved.Int64), LastReceipt: oReceipt.String, Reason: reason.String}
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, opErr(err, "export")
	}
	return out, nil
}

// Dedups returns the dedup keys the store remembers.
func (q *Queue) Dedups(ctx context.Context) ([]moverec.Dedup, error) {
	rows, err := q.db.R.QueryContext(ctx, stmtDedups)
	if err != nil {
		return nil, opErr(err, "export dedup keys")
	}
	defer rows.Close()
	var out []moverec.Dedup
	for rows.Next() {
		var d moverec.Dedup
		var at int64
		if err := rows.Scan(&d.Key, &at, &d.ID); err != nil {
			return nil, opErr(err, "export dedup keys")
		}
		d.SentAt = time.UnixMilli(at)
		out = append(out, d)
	}
	return out, opErr(rows.Err(), "export dedup keys")
}

// Remove deletes the messages of ids with their last errors and origins,
// in one commit; a message already gone is skipped. With clearDedup it
// forgets every dedup key as well.
func (q *Queue) Remove(ctx context.Context, ids []int64, clearDedup bool) error {
	return opErr(q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		for _, id := range ids {
			for _, s := range []string{stmtRemove, stmtRemoveError, stmtRemoveArrival, stmtRemoveReason, stmtDeleteAttrs} {
				if _, err := tx.Exec(ctx, s, id); err != nil {
					return err
				}
			}
		}
		if clearDedup {
			_, err := tx.Exec(ctx, stmtClearDedup)
			return err
		}
		return nil
	}), "remove exported messages")
}

// Imported returns the messages of source already imported, by their id
// there, with their id here.
func (q *Queue) Imported(ctx context.Context, source string) (map[int64]int64, error) {
	out := map[int64]int64{}
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		if _, err := tx.Exec(ctx, ImportsDDL); err != nil {
			return err
		}
		return readImported(ctx, tx, source, out)
	})
	return out, opErr(err, "read imports")
}

func readImported(ctx context.Context, tx *sqlstore.Tx, source string, out map[int64]int64) error {
	rows, err := tx.Query(ctx, stmtImported, source)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var s, m int64
		if err := rows.Scan(&s, &m); err != nil {
			return err
		}
		out[s] = m
	}
	return rows.Err()
}

// Import adds the messages ms of store source that are not imported yet,
// in one commit, each with its send time, due time, attempts (a delivered
// message gets a receipt nobody holds), last error and origin, and records
// them in lc_imports.
func (q *Queue) Import(ctx context.Context, source string, ms []moverec.Message) error {
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		if _, err := tx.Exec(ctx, ImportsDDL); err != nil {
			return err
		}
		done := map[int64]int64{}
		if err := readImported(ctx, tx, source, done); err != nil {
			return err
		}
		now := q.now().UnixMilli()
		for _, m := range ms {
			if _, ok := done[m.ID]; ok {
				continue
			}
			vis := m.EnqueuedAt.UnixMilli()
			if !m.DueAt.IsZero() {
				vis = m.DueAt.UnixMilli()
			}
			var receipt any
			if m.Attempts > 0 {
				receipt = uuid.NewString()
			}
			var id int64
			if err := tx.QueryRow(ctx, stmtImportMsg, m.Payload.Type, m.Payload.Data, m.EnqueuedAt.UnixMilli(), vis, m.Attempts, receipt).Scan(&id); err != nil {
				return fmt.Errorf("message %d of %s: %w", m.ID, source, err)
			}
			if len(m.Payload.Attrs) > 0 {
				q.hasAttrs.Store(true)
				if _, err := tx.Exec(ctx, stmtSetAttrs, id, string(m.Payload.Attrs)); err != nil {
					return err
				}
			}
			if m.LastError != "" {
				if _, err := tx.Exec(ctx, stmtSetError, id, m.LastError, now); err != nil {
					return err
				}
			}
			if o := m.Origin; o != nil {
				var last any
				if o.LastReceipt != "" {
					last = o.LastReceipt
				}
				token := "import:" + source + ":" + fmt.Sprint(m.ID)
				if _, err := tx.Exec(ctx, stmtImportArrival, token, o.Store, o.ID, o.Binding, o.Attempts, last, o.EnqueuedAt.UnixMilli(), o.MovedAt.UnixMilli(), id); err != nil {
					return err
				}
				if o.Reason != "" {
					if _, err := tx.Exec(ctx, stmtDeadReason, id, o.Reason); err != nil {
						return err
					}
				}
			}
			if _, err := tx.Exec(ctx, stmtImportMark, source, m.ID, id); err != nil {
				return err
			}
			done[m.ID] = id
		}
		return nil
	})
	return opErr(err, "import")
}

// ImportDedup remembers the dedup keys ds (a key already remembered keeps
// the later send time); ids maps their message ids in the source to the
// ids here.
func (q *Queue) ImportDedup(ctx context.Context, ds []moverec.Dedup, ids map[int64]int64) error {
	return opErr(q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		for _, d := range ds {
			if _, err := tx.Exec(ctx, stmtImportDedup, d.Key, ids[d.ID], d.SentAt.UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	}), "import dedup keys")
}
