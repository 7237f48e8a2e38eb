package sqlitequeue

import (
	"context"
	"database/sql"
	"math"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

const stmtRedriveSelect = `SELECT m.id, m.enqueued_at, m.attempt, m.payload_type, m.payload_data, m.receipt_handle, d.origin_store
FROM messages m LEFT JOIN lc_arrivals d ON d.message_id = m.id AND d.kind = 'dead-letter'
WHERE m.visible_at <= ?1 AND (m.enqueued_at > ?2 OR (m.enqueued_at = ?2 AND m.id > ?3))
ORDER BY m.enqueued_at, m.id LIMIT ?4`

// Redrive moves the due messages of this queue - a dead-letter queue - back
// to the queue each came from (its origin, as recorded when it was moved
// here) or to the queue To names, in delivery order. A redriven message
// starts afresh there: attempt 0, due at once, enqueued now. Messages in
// flight (held by a consumer of this queue) stay.
//
// The move is the two-store move of dead letters (deadletter.go), with the
// arrival recorded in the target's lc_redriven: a Redrive cut short by a
// crash or an error is finished by the next Redrive, Receive or read-write
// Open of this store, and every message ends up in exactly one of the two
// queues.
func (q *Queue) Redrive(ctx context.Context, ro driver.Redrive) (RedriveResult, error) {
	o := struct {
		to  string
		max int // -1: all
	}{ro.To, ro.Max}
	var res RedriveResult
	if o.to != "" {
		loc, err := normLocation(o.to)
		if err != nil {
			return res, err
		}
		if same, how := sameStore(loc, q.Location()); same {
			return res, bindings.Errorf(bindings.CodeInvalidInput, "redrive target: must be another queue than the dead-letter queue itself, got %s, which %s %s", loc, how, q.Location())
		}
		if strings.HasPrefix(loc, MemoryPrefix) && q.db.Dir != "" {
			return res, bindings.Errorf(bindings.CodeInvalidInput,
				"redrive target: a dead-letter queue stored in a file redrives only into queues stored in files, got %s: the moves it records outlive this process, an in-memory queue does not", loc)
		}
		o.to = loc
	}
	mctx, cancel := moveCtx(ctx)
	defer cancel()
	// Finish an earlier redrive (or move) cut short first.
	sc := scope{redriveTo: o.to, origins: o.to == ""}
	if err := q.recoverMoves(mctx, math.MaxInt64, sc); err != nil {
		return res, err
	}
	var afterEnq any = int64(math.MinInt64)
	afterID := int64(0)
	for o.max < 0 || res.Moved < o.max {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		limit := moveBatch
		if o.max > 0 {
			limit = min(limit, o.max-res.Moved)
		}
		var moves []move
		var skipped, scanned int
		var lastEnq any // as stored, so the next page starts exactly after it
		var lastID int64
		err := q.db.Write(ctx, func(tx *sqlstore.Tx) error {
			moves, skipped, scanned = moves[:0], 0, 0
			now := q.now()
			cands, err := redriveCandidates(ctx, tx, now.UnixMilli(), afterEnq, afterID, limit)
			if err != nil {
				return err
			}
			scanned = len(cands)
			for _, c := range cands {
				lastEnq, lastID = c.enq, c.mv.id
				if c.payloadNull { // neither deliverable nor movable (rows.go)
					skipped++
					continue
				}
				dest := o.to
				if dest == "" {
					if !c.origin.Valid || c.origin.String == q.Location() {
						skipped++
						continue
					}
					if why := q.originOK(c.origin.String); why != "" {
						q.hints.log.Warn("queue: redrive leaves a message here: its recorded origin is not a queue it may move to",
							logKeyStore, q.Path(), "message", c.mv.id, "origin", c.origin.String, "reason", why)
						skipped++
						continue
					}
					dest = c.origin.String
				}
				mv := c.mv
				mv.origin = c.origin.String
				mv.dest, mv.kind, mv.binding = dest, kindRedrive, q.binding
				if err := q.beginMove(ctx, tx, now, &mv); err != nil {
					return err
				}
				moves = append(moves, mv)
			}
			return nil
		})
		if err != nil {
			return res, opErr(err, "redrive")
		}
		afterEnq, afterID = lastEnq, lastID
		res.Skipped += skipped
		if len(moves) > 0 {
			stuck, err := q.transfer(mctx, moves, sc)
			if err != nil {
				return res, err
			}
			res.Moved += len(moves) - len(stuck)
			res.Skipped += len(stuck)
		}
		if scanned < limit {
			break
		}
	}
	return res, nil
}

type redriveCandidate struct {
	mv          move
	origin      sql.NullString
	enq         any // enqueued_at as stored
	payloadNull bool
}

func redriveCandidates(ctx context.Context, tx *sqlstore.Tx, now int64, afterEnq any, afterID int64, limit int) ([]redriveCandidate, error) {
	rows, err := tx.Query(ctx, stmtRedriveSelect, now, afterEnq, afterID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []redriveCandidate
	for rows.Next() {
		var c redriveCandidate
		r := storedRow{hasAttempt: true, hasReceipt: true}
		if err := rows.Scan(&c.mv.id, &r.enq, &r.attempt, &r.typ, &r.data, &r.receipt, &c.origin); err != nil {
			return nil, err
		}
		d := decodeRow(r) // total: rows another program wrote (rows.go)
		c.enq, c.payloadNull = r.enq, d.payloadNull
		c.mv.enqueuedAt, c.mv.attempts, c.mv.typ, c.mv.data = d.enqueuedAt, d.attempt, string(d.payload.Type), d.payload.Data
		receipt := d.receipt
		if receipt.Valid {
			c.mv.lastReceipt = sql.NullString{String: formatReceipt(c.mv.id, receipt.String), Valid: true}
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
