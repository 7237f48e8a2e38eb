package sqlitequeue

import (
	"context"
	"errors"
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

var _ driver.AckReceiver = (*Queue)(nil)

// AckBatch is Ack of several receipts in one transaction, with each
// receipt's outcome: current (deleted), gone (no such message, or not a
// receipt of the form "{id}:{uuid}") or stale (redelivered since: not
// deleted). A stale receipt does not fail the others.
func (q *Queue) AckBatch(ctx context.Context, receipts []string) ([]driver.AckOutcome, error) {
	out := make([]driver.AckOutcome, len(receipts))
	// Each run sets every outcome, so the acks may join a group commit.
	err := q.db.WriteGroup(ctx, func(tx *sqlstore.Tx) error { return q.ackIn(ctx, tx, receipts, out) })
	if err != nil {
		return nil, opErr(err, "ack %d messages", len(receipts))
	}
	return out, nil
}

// AckReceive (driver.AckReceiver) is AckBatch of receipts and Receive of
// up to max messages in one transaction: the acks first, so the claim's
// select does not walk past the rows they delete. Consume writes the acks
// of a batch its dispatcher ran with the claim that follows it.
func (q *Queue) AckReceive(ctx context.Context, receipts []string, max int, lease time.Duration) ([]driver.AckOutcome, []Message, error) {
	return q.receive(ctx, receipts, max, lease)
}

// ackIn acks receipts in tx, setting out[i] to receipt i's outcome.
func (q *Queue) ackIn(ctx context.Context, tx *sqlstore.Tx, receipts []string, out []driver.AckOutcome) error {
	for i, r := range receipts {
		out[i] = driver.AckGone
		id, u, ok := parseReceipt(r)
		if !ok {
			continue
		}
		res, err := tx.Exec(ctx, stmtAck, id, u)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			out[i] = driver.AckCurrent
			if q.hasAttrs.Load() {
				if _, err := tx.Exec(ctx, stmtDeleteAttrs, id); err != nil {
					return err
				}
			}
			continue
		}
		if err := q.staleIfExists(ctx, tx, res, id); errors.Is(err, ErrStaleReceipt) {
			out[i] = driver.AckStale
		} else if err != nil {
			return err
		}
	}
	return nil
}
