package sqlitequeue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// DeliveryDDL is localcloud's own DDL for failures and idempotent sends,
// part of the format's Extra: a spec-exact reader ignores these tables.
// lc_errors keeps the error of a message's last failed delivery (Consume's
// NackFailed), carried along when the message moves to its dead-letter
// queue; a row whose message is gone is pruned by later failures.
// lc_dedup remembers the dedup keys of sends for the dedup window, pruned by
// later keyed sends.
const DeliveryDDL = `CREATE TABLE IF NOT EXISTS lc_errors (
message_id INTEGER PRIMARY KEY, -- messages.id of the message whose delivery failed
error TEXT NOT NULL, -- the handler's error text, at most 1024 bytes
failed_at INTEGER NOT NULL -- unix epoch MILLISECONDS
);
CREATE TABLE IF NOT EXISTS lc_dedup (
dedup_key TEXT PRIMARY KEY, -- the sender's dedup key
message_id INTEGER NOT NULL, -- messages.id of the message the key added
sent_at INTEGER NOT NULL -- unix epoch MILLISECONDS; a send of the key after sent_at + window adds again
);
CREATE INDEX IF NOT EXISTS lc_dedup_sent ON lc_dedup (sent_at);`

// Statements of failures and dedup keys.
const (
	stmtSetError = `INSERT INTO lc_errors (message_id, error, failed_at) VALUES (?1, ?2, ?3)
ON CONFLICT (message_id) DO UPDATE SET error = excluded.error, failed_at = excluded.failed_at`
	// A few rows whose message is gone (acked, purged, moved), per failure.
	stmtPruneErrors = `DELETE FROM lc_errors WHERE message_id IN (SELECT e.message_id FROM lc_errors e
WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = e.message_id) LIMIT 16)`
	stmtGetError    = `SELECT error FROM lc_errors WHERE message_id = ?1`
	stmtDeleteError = `DELETE FROM lc_errors WHERE message_id = ?1`
	stmtClearErrors = `DELETE FROM lc_errors`
	// A few expired keys, per keyed send.
	stmtPruneDedup = `DELETE FROM lc_dedup WHERE dedup_key IN (SELECT dedup_key FROM lc_dedup WHERE sent_at <= ?1 ORDER BY sent_at LIMIT 64)`
	// Claims the key for this send unless a send within the window holds it.
	stmtClaimKey = `INSERT INTO lc_dedup (dedup_key, message_id, sent_at) VALUES (?1, 0, ?2)
ON CONFLICT (dedup_key) DO UPDATE SET message_id = 0, sent_at = excluded.sent_at WHERE lc_dedup.sent_at <= ?3`
	stmtKeyMessage = `UPDATE lc_dedup SET message_id = ?2 WHERE dedup_key = ?1`
)

// NackFailed is Nack that also records lastError as the message's last
// error, in the same transaction.
func (q *Queue) NackFailed(ctx context.Context, receipt string, delay time.Duration, lastError string) error {
	id, u, ok := parseReceipt(receipt)
	if !ok {
		return nil
	}
	changed := false
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		now := q.now().UnixMilli()
		res, err := tx.Exec(ctx, stmtNack, id, u, now+delayMillis(delay))
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		changed = n == 1
		if err := q.staleIfExists(ctx, tx, res, id); err != nil || !changed {
			return err
		}
		if _, err := tx.Exec(ctx, stmtSetError, id, lastError, now); err != nil {
			return fmt.Errorf("record the last error: %w", err)
		}
		if _, err := tx.Exec(ctx, stmtPruneErrors); err != nil {
			return fmt.Errorf("prune last errors: %w", err)
		}
		return nil
	})
	if err == nil && changed {
		q.notify()
	}
	return q.receiptErr(err, "nack", receipt)
}

// lastErrors reads the recorded last errors of moves, and the attributes
// of every move (for their arrival).
func (q *Queue) lastErrors(ctx context.Context, moves []move) error {
	for i := range moves {
		if !moves[i].present {
			continue
		}
		a, err := readAttrs(ctx, q.db.R, moves[i].id)
		if err != nil {
			return err
		}
		moves[i].attrs = a
		if moves[i].kind != kindDeadLetter {
			continue
		}
		var s string
		err = q.db.R.QueryRowContext(ctx, stmtGetError, moves[i].id).Scan(&s)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read the last error of message %d: %w", moves[i].id, err)
		default:
			moves[i].lastError = s
		}
	}
	return nil
}

// SendDedup is Send with dedup keys (driver.DedupSender), in one
// transaction: expired keys are pruned (a few per send), each key is
// claimed unless a send within the window holds it, and only the messages
// whose key was free (or that have none) are added.
func (q *Queue) SendDedup(ctx context.Context, ps []Payload, keys []string, delay time.Duration) ([]int64, []bool, error) {
	dup := make([]bool, len(ps))
	ids := make([]int64, len(ps))
	var lastID int64
	added := 0
	err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		added, lastID = 0, 0
		clear(dup)
		clear(ids)
		now := q.now().UnixMilli()
		cutoff := now - q.dedupWindow.Milliseconds()
		if _, err := tx.Exec(ctx, stmtPruneDedup, cutoff); err != nil {
			return fmt.Errorf("prune dedup keys: %w", err)
		}
		for i, p := range ps {
			if keys[i] != "" {
				res, err := tx.Exec(ctx, stmtClaimKey, keys[i], now, cutoff)
				if err != nil {
					return fmt.Errorf("message %d: claim dedup key: %w", i, err)
				}
				if n, err := res.RowsAffected(); err != nil || n == 0 {
					dup[i] = true
					continue
				}
			}
			id, err := q.insert(ctx, tx, p, now, delay)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			if keys[i] != "" {
				if _, err := tx.Exec(ctx, stmtKeyMessage, keys[i], id); err != nil {
					return fmt.Errorf("message %d: record dedup key: %w", i, err)
				}
			}
			lastID, ids[i] = id, id
			added++
		}
		return nil
	})
	if err != nil {
		return nil, nil, opErr(err, "send %d messages with dedup keys", len(ps))
	}
	if added > 0 {
		q.notifySent(lastID)
	}
	return ids, dup, nil
}
