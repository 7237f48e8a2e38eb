package queue

import (
	"context"
	"fmt"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// MaxSendBatch is the most messages one SendBatch takes.
const MaxSendBatch = 100

// SendBatch enqueues 1..MaxSendBatch messages in one transaction: all of
// them or, if anything fails, none. Every payload is validated before the
// store is touched (an invalid one is INVALID_INPUT naming its index). The
// messages share one enqueued_at and get ascending ids, so they are
// delivered in slice order; opts (WithDelay) apply to each.
func (q *Queue) SendBatch(ctx context.Context, ps []Payload, opts ...SendOption) error {
	o, err := buildSendOptions(opts)
	if err != nil {
		return err
	}
	if len(ps) < 1 || len(ps) > MaxSendBatch {
		return bindings.Errorf(bindings.CodeInvalidInput, "batch: must hold between 1 and %d messages, got %d", MaxSendBatch, len(ps))
	}
	for i, p := range ps {
		if err := p.validate(fmt.Sprintf("payload %d", i)); err != nil {
			return err
		}
	}
	now := q.now().UnixMilli()
	var lastID int64
	err = q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		for i, p := range ps {
			id, err := insert(ctx, tx, p, now, o.delay)
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
