package sqlitekv

// Rows another program wrote.
//
// SQLite stores any value in any column, and the spec's kv table gives value
// BLOB affinity (nothing is converted), so a program writing the spec's SQL
// can leave values localcloud never writes. Python's sqlite3 stores a str as
// TEXT, an int as INTEGER, and time.time()*1000 as a REAL expires_at. What
// localcloud reads from them:
//
//   - value: a BLOB as is; TEXT as its bytes; an INTEGER or REAL as its
//     decimal text (what SQLite's CAST(value AS BLOB) gives, and what a scan
//     returns); NULL (only a table without the spec's NOT NULL holds one) as
//     an empty value.
//   - expires_at: compared as the spec's SQL compares it (expires_at <=
//     now): an INTEGER or REAL as a number, so a REAL in the past is
//     expired; TEXT or BLOB compare above every number, so such a key never
//     expires; NULL is no expiry.
//
// localcloud check reports every such row (Format().CheckRows).

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"strconv"
	"strings"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// expired reports whether a stored expires_at is at or before now, as the
// spec's SQL decides it.
func expired(exp any, now int64) bool {
	switch v := exp.(type) {
	case int64:
		return v <= now
	case float64:
		return v <= float64(now)
	}
	return false
}

// valueBytes is the value a caller gets for a stored value.
func valueBytes(v any) []byte {
	switch x := v.(type) {
	case []byte:
		if x != nil {
			return x
		}
	case string:
		return []byte(x)
	case int64:
		return strconv.AppendInt(nil, x, 10)
	case float64:
		return strconv.AppendFloat(nil, x, 'g', -1, 64)
	}
	return []byte{}
}

// MaxOddRowsReported caps the rows Format().CheckRows names one by one.
const MaxOddRowsReported = 50

const stmtAllRows = `SELECT key, value, expires_at FROM kv ORDER BY key`

func kind(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return "INTEGER " + strconv.FormatInt(x, 10)
	case float64:
		return "REAL " + strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		s := x
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return "TEXT " + strconv.Quote(s)
	case []byte:
		return fmt.Sprintf("a BLOB of %d bytes", len(x))
	}
	return fmt.Sprintf("%T", v)
}

// checkRows finds the kv rows another program wrote that localcloud reads
// with a conversion, one problem per row. It is Format().CheckRows.
func checkRows(ctx context.Context, conn *sql.Conn) ([]sqlstore.Problem, error) {
	rows, err := conn.QueryContext(ctx, stmtAllRows)
	if err != nil {
		return nil, fmt.Errorf("read kv: %w", err)
	}
	defer rows.Close()
	var out []sqlstore.Problem
	more := 0
	for rows.Next() {
		var key, value, exp any
		if err := rows.Scan(&key, &value, &exp); err != nil {
			return nil, fmt.Errorf("read kv: %w", err)
		}
		var odd []string
		k, isText := key.(string)
		if !isText {
			k = string(valueBytes(key))
			odd = append(odd, fmt.Sprintf("key is %s, not TEXT: no get or scan finds it", kind(key)))
		} else if err := driver.ValidKey("key", k); err != nil {
			odd = append(odd, "key is not one localcloud accepts, only a scan with a matching prefix finds it")
		}
		switch value.(type) {
		case []byte:
		case string:
			odd = append(odd, "value is TEXT, read as its bytes")
		case nil:
			odd = append(odd, "value is NULL, read as an empty value")
		default:
			odd = append(odd, fmt.Sprintf("value is %s, read as its decimal text", kind(value)))
		}
		if n := len(valueBytes(value)); n > driver.MaxValueBytes {
			odd = append(odd, fmt.Sprintf("value is %d bytes, more than the %d a put accepts", n, driver.MaxValueBytes))
		}
		switch exp.(type) {
		case nil, int64:
		case float64:
			odd = append(odd, fmt.Sprintf("expires_at is %s, compared as a number", kind(exp)))
		default:
			odd = append(odd, fmt.Sprintf("expires_at is %s, not a number: the key never expires", kind(exp)))
		}
		if len(odd) == 0 {
			continue
		}
		if len(out) == MaxOddRowsReported {
			more++
			continue
		}
		out = append(out, sqlstore.Problem{Kind: sqlstore.ProblemRow, Object: fmt.Sprintf("kv key %q", k),
			Message: fmt.Sprintf("key %q: %s", k, strings.Join(odd, "; "))})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read kv: %w", err)
	}
	if more > 0 {
		out = append(out, sqlstore.Problem{Kind: sqlstore.ProblemRow, Object: "table kv",
			Message: fmt.Sprintf("%d more odd rows not listed", more)})
	}
	return out, nil
}
