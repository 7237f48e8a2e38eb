package sqlitequeue

// Recovery of moves (deadletter.go): the intents a killed process left are
// finished at open, and by later claims once they are older than
// moveGrace.

import (
	"context"
	"database/sql"
	"math"
	"time"
)

// pendingMoves reads up to moveBatch intents started at or before
// startedBefore (queue clock, unix ms), with their messages.
func (q *Queue) pendingMoves(ctx context.Context, startedBefore, afterID int64) ([]move, error) {
	st, err := q.db.ReadStmt(ctx, stmtPendingMoves)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(ctx, startedBefore, afterID, moveBatch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []move
	for rows.Next() {
		var mv move
		var r storedRow
		var origin sql.NullString
		if err := rows.Scan(&mv.id, &mv.token, &mv.dest, &mv.kind, &mv.binding, &mv.attempts, &mv.lastReceipt, &mv.startedAt,
			&mv.present, &r.typ, &r.data, &r.enq, &origin); err != nil {
			return nil, err
		}
		mv.origin = origin.String
		if mv.present {
			d := decodeRow(r) // total: rows another program wrote (rows.go)
			mv.typ, mv.data, mv.enqueuedAt, mv.reason = string(d.payload.Type), d.payload.Data, d.enqueuedAt, d.undeliverable
		}
		out = append(out, mv)
	}
	return out, rows.Err()
}

// recoverMoves finishes every intent started at or before startedBefore
// that this handle may finish (mayFinish with sc); the others stay.
func (q *Queue) recoverMoves(ctx context.Context, startedBefore int64, sc scope) error {
	var stuck []move
	defer func() { q.reportStuck(stuck) }()
	after := int64(0)
	for range 1000 { // bounded: intents others keep adding are theirs to finish
		moves, err := q.pendingMoves(ctx, startedBefore, after)
		if err != nil {
			return opErr(err, "read unfinished moves")
		}
		if len(moves) == 0 {
			return nil
		}
		after = moves[len(moves)-1].id
		left, err := q.transfer(ctx, moves, sc)
		stuck = append(stuck, left...)
		if err != nil {
			return err
		}
		if len(moves) < moveBatch {
			return nil
		}
	}
	return nil
}

// recoverAtOpen finishes every unfinished move of the store.
func (q *Queue) recoverAtOpen(ctx context.Context) {
	if err := q.recoverMoves(ctx, math.MaxInt64, scope{}); err != nil {
		q.hints.log.Warn("queue: cannot finish the moves a previous process left; retrying on receive",
			logKeyStore, q.Path(), logKeyErr, err)
	}
}

// maybeRecover finishes moves whose mover seems to have died, looking for
// them at most once per recoverEvery. Called by Receive.
func (q *Queue) maybeRecover(ctx context.Context) {
	if q.internal || q.readOnly {
		return
	}
	now := int64(time.Since(procStart))
	next := q.nextRecover.Load()
	if now < next || !q.nextRecover.CompareAndSwap(next, now+int64(recoverEvery)) {
		return
	}
	before := q.now().Add(-moveGrace).UnixMilli()
	st, err := q.db.ReadStmt(ctx, stmtStaleMove)
	if err != nil {
		return
	}
	var one int
	if err := st.QueryRowContext(ctx, before).Scan(&one); err != nil {
		return // none (or a failing store, which Receive reports)
	}
	mctx, cancel := moveCtx(ctx)
	defer cancel()
	if err := q.recoverMoves(mctx, before, scope{}); err != nil {
		q.hints.log.Warn("queue: cannot finish an interrupted move; retrying", logKeyStore, q.Path(), logKeyErr, err)
	}
}

// maxMovesPerClaim caps the dead letters one claim transaction starts: a
// claim then touches at most twice as many rows as a plain claim of
// MaxReceiveBatch and holds the write lock briefly even on a slow machine;
// a claim that reached the cap wakes the waiters to claim again. A variable for the crash test,
// which wants even smaller moves.
var maxMovesPerClaim = 10

// procStart anchors maybeRecover's monotonic clock.
var procStart = time.Now()
