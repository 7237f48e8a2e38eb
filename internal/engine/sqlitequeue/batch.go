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
func (q *Queue) sendBatch(ctx context.Context, ps []Payload, delay time.Duration) ([]int64, error) {
	now := q.now().UnixMilli()
	ids := make([]int64, len(ps))
	// Each run sets ids anew, so the batch may join a group commit.
	err := q.db.WriteGroup(ctx, func(tx *sqlstore.Tx) error {
		for i, p := range ps {
			id, err := q.insert(ctx, tx, p, now, delay)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			ids[i] = id
		}
		return nil
	})
	if err != nil {
		return nil, opErr(err, "send batch of %d", len(ps))
	}
	q.notifySent(ids[len(ids)-1])
	return ids, nil
}
