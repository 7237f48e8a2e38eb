package sqlitequeue

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// stmtClaimBatch returns the claim of n ids in one statement: the spec's
// claim statement (stmtClaim) for each pair (?2k, ?2k+1) = (id, fresh
// UUID) of a VALUES list, ?1 the lease end. One statement instead of n
// saves, per message, a statement's run through database/sql and the
// driver, the statement journal SQLite keeps for an UPDATE that may abort
// (a copy of each page it changes) and the table RETURNING collects its
// rows in: the pages of one claim are mostly the same few, copied once.
func stmtClaimBatch(n int) string {
	if n >= 1 && n <= len(claimBatchStmts) {
		return claimBatchStmts[n-1]
	}
	return buildClaimBatch(n)
}

// maxClaimBatch is queue.MaxReceiveBatch, the most one claim asks for.
const maxClaimBatch = 10

var claimBatchStmts = func() (s [maxClaimBatch]string) {
	for i := range s {
		s[i] = buildClaimBatch(i + 1)
	}
	return s
}()

func buildClaimBatch(n int) string {
	var b strings.Builder
	b.WriteString("UPDATE messages\nSET visible_at = ?1, attempt = attempt + 1,\nreceipt_handle = v.column2 FROM (VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?" + strconv.Itoa(2+2*i) + ", ?" + strconv.Itoa(3+2*i) + ")")
	}
	b.WriteString(") AS v WHERE id = v.column1 AND payload_type IS NOT NULL AND payload_data IS NOT NULL AND attempt IS NOT NULL\nRETURNING id, payload_type, payload_data, attempt, " + claimAttrs)
	return b.String()
}

// claimBatch claims the messages of batch (due, distinct, none odd) in one
// statement and appends them to msgs in batch's order. A message the
// statement did not claim (a NULL payload or attempt another program
// wrote) is left in place, logged and added to skipped.
func (q *Queue) claimBatch(ctx context.Context, tx *sqlstore.Tx, leaseEnd int64, batch []dueMessage, msgs []Message, skipped map[int64]bool) ([]Message, error) {
	args := make([]any, 1, 1+2*len(batch))
	args[0] = leaseEnd
	receipts := make([]string, len(batch))
	for i, m := range batch {
		receipt, u := newReceipt(m.ID)
		receipts[i] = receipt
		args = append(args, m.ID, u)
	}
	rows, err := tx.Query(ctx, stmtClaimBatch(len(batch)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make([]storedRow, len(batch))
	attrs := make([]sql.NullString, len(batch))
	// The scan targets, once per statement rather than per row, in one
	// struct (one heap allocation).
	var sc struct {
		id                 int64
		typ, data, attempt any
		attrs              sql.NullString
	}
	for rows.Next() {
		sc.typ, sc.data, sc.attempt, sc.attrs = nil, nil, nil, sql.NullString{}
		if err := rows.Scan(&sc.id, &sc.typ, &sc.data, &sc.attempt, &sc.attrs); err != nil {
			return nil, err
		}
		for i, m := range batch {
			if m.ID == sc.id {
				got[i] = storedRow{id: sc.id, typ: sc.typ, data: sc.data, enq: int64(0), attempt: sc.attempt, hasAttempt: true}
				attrs[i] = sc.attrs
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i, m := range batch {
		if !got[i].hasAttempt {
			q.skipUndeliverable(m.ID, "payload_type, payload_data or attempt is NULL")
			skipped[m.ID] = true
			continue
		}
		d := decodeRow(got[i])
		m.ReceiptHandle = receipts[i]
		m.Payload, m.Attempt = d.payload, d.attempt
		m.Payload.Attrs = q.attrsOf(attrs[i])
		msgs = append(msgs, m.Message)
	}
	return msgs, nil
}
