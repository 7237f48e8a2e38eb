package sqlitequeue

import (
	"context"
	"database/sql"
)

// Kinds of moves, as UnfinishedMove.Kind and Reference.Kind give them.
const (
	MoveDeadLetter = kindDeadLetter
	MoveRedrive    = kindRedrive
)

// Reference is a store location that localcloud's own tables of a queue
// store name as somewhere a message may be written: the destination of an
// unfinished move (lc_moves), or the recorded origin of a dead letter still
// here, where a redrive without a target sends it (lc_arrivals, and
// lc_dead_letters of older versions). A store file localcloud did not
// write may name anything there; the stack tools compare these against the
// stack (check, status, up, restore).
type Reference struct {
	Table    string // lc_moves | lc_arrivals | lc_dead_letters
	Kind     string // MoveDeadLetter | MoveRedrive
	Location string // a store directory or "memory:NAME", as recorded
	Count    int64  // rows that name it
	// OldestMillis is the oldest started_at (lc_moves) or arrived_at of
	// those rows, unix ms.
	OldestMillis int64
}

// The reads of References, one per table; a table that is missing (a
// store only a spec-exact implementation wrote) is skipped.
var referenceQueries = []struct{ table, query string }{
	{"lc_moves", `SELECT kind, dest, COUNT(*), MIN(started_at) FROM lc_moves GROUP BY kind, dest ORDER BY kind, dest`},
	{"lc_arrivals", `SELECT a.kind, a.origin_store, COUNT(*), MIN(a.arrived_at) FROM lc_arrivals a JOIN messages m ON m.id = a.message_id
WHERE a.kind = 'dead-letter' GROUP BY a.kind, a.origin_store ORDER BY a.origin_store`},
	{"lc_dead_letters", `SELECT 'dead-letter', d.origin_store, COUNT(*), MIN(d.moved_at) FROM lc_dead_letters d JOIN messages m ON m.id = d.dlq_message_id
GROUP BY d.origin_store ORDER BY d.origin_store`},
}

// ReadReferences returns the References of the queue store open as db
// (any connection; it only reads).
func ReadReferences(ctx context.Context, db *sql.DB) ([]Reference, error) {
	var out []Reference
	for _, rq := range referenceQueries {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1`, rq.table).Scan(&n); err != nil {
			return nil, opErr(err, "read the locations %s names", rq.table)
		}
		if n == 0 {
			continue
		}
		rows, err := db.QueryContext(ctx, rq.query)
		if err != nil {
			return nil, opErr(err, "read the locations %s names", rq.table)
		}
		for rows.Next() {
			r := Reference{Table: rq.table}
			var kind, loc sql.NullString
			var oldest sql.NullInt64
			if err := rows.Scan(&kind, &loc, &r.Count, &oldest); err != nil {
				rows.Close()
				return nil, opErr(err, "read the locations %s names", rq.table)
			}
			r.Kind, r.Location, r.OldestMillis = kind.String, loc.String, oldest.Int64
			out = append(out, r)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, opErr(err, "read the locations %s names", rq.table)
		}
	}
	return out, nil
}

// References returns the locations the store's own tables name (see
// Reference). It only reads, so it works on a ReadOnly handle.
func (q *Queue) References(ctx context.Context) ([]Reference, error) {
	return ReadReferences(ctx, q.db.R)
}
