package sqlitequeue

import (
	"context"
	"fmt"

	"time"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// sendBatch enqueues ps in one transaction: all of them or, if anything
// fails, none. The messages share one enqueued_at and get ascending ids, so
// they are delivered in slice order; delay applies to each.
func (q *Queue) sendBatch(ctx context.Context, ps []Payload, delay time.Duration) error {
	now := q.now().UnixMilli()
	var lastID int64
	// Each run sets lastID anew, so the batch may join a group commit.
	err := q.db.WriteGroup(ctx, func(tx *sqlstore.Tx) error {
		for i, p := range ps {
			id, err := insert(ctx, tx, p, now, delay)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			lastID = id
		}
		return nil
	})
	if err != nil {
		return opErr(err, "send batch of %d", len(ps))
	}
	q.notifySent(lastID)
	return nil
}
