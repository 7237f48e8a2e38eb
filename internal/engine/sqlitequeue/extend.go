package sqlitequeue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// ErrMessageGone is driver.ErrMessageGone, wrapped by the error of an
// Extend whose message no longer exists (acked, purged or moved).
var ErrMessageGone = driver.ErrMessageGone

// Extend moves the end of the lease of a message still held under receipt
// to d from now (checked by the caller): the message stays hidden
// until then, whatever its lease was. It is the spec's nack statement with
// a later visible_at, so the receipt stays valid.
//
// Unlike Ack and Nack, Extend cannot succeed by doing nothing: a receipt
// that is not of the form "{id}:{uuid}" is INVALID_INPUT; a stale receipt
// (the lease ended and the message was delivered again) fails with
// ErrStaleReceipt, and a message that is gone with ErrMessageGone, both
// QUEUE_OPERATION_FAILED. An Extend after the lease ended but before a
// redelivery still succeeds: the message was not handed to anyone else.
func (q *Queue) Extend(ctx context.Context, receipt string, d time.Duration) error {
	rc, err := ParseReceipt(receipt)
	if err != nil {
		return err
	}
	id, u := rc.ID, rc.UUID
	visibleAt := q.now().Add(d).UnixMilli()
	// The common case, a current receipt, is the update on its own (a
	// one-statement write, so it joins a group commit); only when it
	// changes nothing does the transaction below tell why.
	res, err := q.db.Exec(ctx, stmtNack, id, u, visibleAt)
	if err != nil {
		return q.receiptErr(err, "extend", receipt)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return nil
	}
	err = q.db.Write(ctx, func(tx *sqlstore.Tx) error {
		res, err := tx.Exec(ctx, stmtNack, id, u, visibleAt)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		if err := q.staleIfExists(ctx, tx, res, id); err != nil {
			return err
		}
		return ErrMessageGone
	})
	if errors.Is(err, ErrMessageGone) {
		return &bindings.Error{Code: bindings.CodeQueueOperationFailed,
			Msg: fmt.Sprintf("extend receipt %q", receipt), Err: ErrMessageGone}
	}
	return q.receiptErr(err, "extend", receipt)
}
