package sqlitequeue

// Rows another program wrote.
//
// SQLite stores any value in any column, so a program that writes the
// spec's SQL can leave rows localcloud never writes: Python's sqlite3
// storing time.time()*1000 gives a REAL enqueued_at, a json payload may not
// be JSON, payload_type may be neither "text" nor "json", a BLOB may sit in
// a TEXT column, TEXT in an INTEGER one, and a table created without the
// spec's NOT NULLs may hold NULLs. Every read of a messages row goes
// through decodeRow, which is total: it never fails, it says what it had to
// coerce (odd) and whether the row can be delivered at all
// (undeliverable).
//
//   - enqueued_at, visible_at, attempt: INTEGER as is; REAL truncated toward
//     zero (clamped to the int64 range, as SQLite's CAST does); TEXT that is
//     a decimal number (only a table without the spec's column types keeps
//     one: SQLite converts it in an INTEGER column) read as that number.
//   - payload: delivered exactly as stored, type and data, whatever they
//     are: an unknown payload_type keeps its name, invalid JSON stays type
//     "json" (Payload.Decode then fails with INVALID_INPUT), a BLOB is
//     delivered as its bytes, a number as its decimal text.
//   - A row whose enqueued_at is not a number (TEXT, BLOB, NULL), or whose
//     payload or attempt is NULL, cannot be delivered as a Message without
//     inventing a value. A receive never claims it: with a dead-letter
//     policy it is moved to the dead-letter queue with the reason (one whose
//     payload is NULL is left in place: the dead-letter queue's format
//     cannot hold it either); without one it is left as it is, logged once
//     per handle, and reported by localcloud check. The rows behind it are
//     delivered.
//   - A visible_at that is not a number compares above every number in
//     SQLite, so the row is never due (for a spec-exact reader neither);
//     check reports it.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// storedRow is one messages row as stored: each column as the driver gives
// it (int64, float64, string, []byte or nil).
type storedRow struct {
	id                             int64
	typ, data, enq, vis, attempt   any
	receipt                        any
	attrs                          sql.NullString // a claim's attributes column (attrs.go)
	hasVis, hasAttempt, hasReceipt bool           // the columns were read
}

// decodedRow is what localcloud reads from a storedRow.
type decodedRow struct {
	payload    Payload
	enqueuedAt int64 // unix ms; 0 when the stored value is not a number
	enqOK      bool
	visibleAt  int64 // unix ms; valid when visOK
	visOK      bool
	attempt    int
	receipt    sql.NullString
	// odd says what is odd about the row, one note per column; empty for a
	// row localcloud or a spec-exact writer wrote.
	odd []string
	// undeliverable is why the row cannot be delivered as a Message, ""
	// when it can.
	undeliverable string
	// payloadNull: the dead-letter queue cannot hold the row either.
	payloadNull bool
}

// quoted shows a stored value in a note: short, quoted, kind first.
func quoted(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return "INTEGER " + strconv.FormatInt(v, 10)
	case float64:
		return "REAL " + strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		return "TEXT " + strconv.Quote(cut(v))
	case []byte:
		return fmt.Sprintf("a BLOB of %d bytes", len(v))
	}
	return fmt.Sprintf("%T", v)
}

func cut(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// intOf reads an INTEGER column (sqlstore.IntValue). ok is false when v
// is no number; note is "" when v was an INTEGER.
func intOf(col string, v any) (n int64, note string, ok bool) {
	n, ok = sqlstore.IntValue(v, false)
	switch {
	case !ok:
		return 0, fmt.Sprintf("%s is %s, not a number", col, quoted(v)), false
	case isInt(v):
		return n, "", true
	}
	return n, fmt.Sprintf("%s is %s, read as %d", col, quoted(v), n), true
}

func isInt(v any) bool { _, ok := v.(int64); return ok }

// textOf reads a TEXT column as the string a caller gets. null reports a
// NULL.
func textOf(col string, v any) (s, note string, null bool) {
	switch x := v.(type) {
	case string:
		return x, "", false
	case []byte:
		return string(x), fmt.Sprintf("%s is %s, read as its bytes", col, quoted(v)), false
	case int64:
		return strconv.FormatInt(x, 10), fmt.Sprintf("%s is %s, read as its decimal text", col, quoted(v)), false
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), fmt.Sprintf("%s is %s, read as its decimal text", col, quoted(v)), false
	}
	return "", col + " is NULL", true
}

// decodeRow reads r. It never fails; see the top of the file.
func decodeRow(r storedRow) decodedRow {
	var d decodedRow
	note := func(s string) {
		if s != "" {
			d.odd = append(d.odd, s)
		}
	}
	bad := func(s string) {
		if d.undeliverable == "" {
			d.undeliverable = s
		}
	}
	typ, n, typNull := textOf("payload_type", r.typ)
	note(n)
	data, n, dataNull := textOf("payload_data", r.data)
	note(n)
	if typNull || dataNull {
		d.payloadNull = true
		bad(strings.Join(d.odd, "; "))
	}
	d.payload = Payload{Type: PayloadType(typ), Data: data}
	switch {
	case typNull:
	case d.payload.Type != TypeText && d.payload.Type != TypeJSON:
		note(fmt.Sprintf("payload_type %q is neither %q nor %q; delivered as stored", cut(typ), TypeText, TypeJSON))
	case d.payload.Type == TypeJSON && !dataNull && !json.Valid([]byte(data)):
		note(fmt.Sprintf("payload_type is json but payload_data is not valid JSON (%d bytes); delivered as stored", len(data)))
	}
	if len(data) > MaxPayloadBytes {
		note(fmt.Sprintf("payload_data is %d bytes, more than the %d a send accepts; delivered as stored", len(data), MaxPayloadBytes))
	}
	enq, n, ok := intOf("enqueued_at", r.enq)
	note(n)
	if ok {
		d.enqueuedAt, d.enqOK = enq, true
	} else {
		bad(n)
	}
	if r.hasVis {
		vis, n, ok := intOf("visible_at", r.vis)
		if !ok {
			n += ": the message is never due"
		}
		note(n)
		d.visibleAt, d.visOK = vis, ok
	}
	if r.hasAttempt {
		a, n, ok := intOf("attempt", r.attempt)
		switch {
		case r.attempt == nil:
			note(n)
			bad(n)
		case !ok:
			note(n + ", counted from 0 (as the claim's attempt + 1 does)")
		default:
			note(n)
		}
		d.attempt = int(max(min(a, math.MaxInt32), math.MinInt32))
	}
	if r.hasReceipt && r.receipt != nil {
		s, n, _ := textOf("receipt_handle", r.receipt)
		note(n)
		if n == "" {
			if u, err := uuid.Parse(s); err != nil || u.String() != s {
				note(fmt.Sprintf("receipt_handle %q is not a lower-case UUID", cut(s)))
			}
		}
		d.receipt = sql.NullString{String: s, Valid: true}
	}
	return d
}

// scanRow reads the columns payload_type, payload_data, enqueued_at,
// visible_at, attempt, receipt_handle of one row (after id).
func scanRow(sc interface{ Scan(...any) error }) (storedRow, error) {
	r := storedRow{hasVis: true, hasAttempt: true, hasReceipt: true}
	err := sc.Scan(&r.id, &r.typ, &r.data, &r.enq, &r.vis, &r.attempt, &r.receipt)
	return r, err
}

// MaxOddRowsReported caps the rows Format().CheckRows names one by one.
const MaxOddRowsReported = 50

// stmtAllRows reads every message for CheckRows.
const stmtAllRows = `SELECT id, payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle FROM messages ORDER BY id`

// checkRows finds the messages rows localcloud had to coerce or cannot
// deliver, one problem per row (the first MaxOddRowsReported, then one
// line with the count of the rest). It is Format().CheckRows.
func checkRows(ctx context.Context, conn *sql.Conn) ([]sqlstore.Problem, error) {
	rows, err := conn.QueryContext(ctx, stmtAllRows)
	if err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	defer rows.Close()
	var out []sqlstore.Problem
	more := 0
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("read messages: %w", err)
		}
		d := decodeRow(r)
		if len(d.odd) == 0 {
			continue
		}
		if len(out) == MaxOddRowsReported {
			more++
			continue
		}
		what := "coerced on delivery"
		if d.undeliverable != "" {
			what = "cannot be delivered (a receive moves it to the dead-letter queue if the queue has one, else leaves it in place)"
			if d.payloadNull {
				what = "cannot be delivered, nor moved to a dead-letter queue: left in place"
			}
		}
		out = append(out, sqlstore.Problem{Kind: sqlstore.ProblemRow, Object: fmt.Sprintf("messages row %d", r.id),
			Message: fmt.Sprintf("row %d: %s (%s)", r.id, strings.Join(d.odd, "; "), what)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read messages: %w", err)
	}
	if more > 0 {
		out = append(out, sqlstore.Problem{Kind: sqlstore.ProblemRow, Object: "table messages",
			Message: fmt.Sprintf("%d more odd rows not listed", more)})
	}
	return out, nil
}
