package sqlitequeue

import (
	"context"
	"database/sql"
	"errors"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// ErrNoDirectory means a Probe was asked of an in-memory store: no other
// process can write it, so there is nothing to watch.
var ErrNoDirectory = errors.New("store has no directory (in-memory)")

// The statements a Probe runs. Both use the spec's index
// idx_messages_visible, which leads with visible_at.
const (
	stmtDataVersion = `PRAGMA data_version`
	stmtCountDue    = `SELECT COUNT(*) FROM (SELECT 1 FROM messages WHERE visible_at <= ?1 LIMIT ?2)`
	stmtLastID      = `SELECT seq FROM sqlite_sequence WHERE name = 'messages'`
)

// Probe answers the hint source's questions about a store on one dedicated
// reader connection: has another connection committed, how many messages
// are due, when is the next visible_at. It is the only place outside the
// queue's own operations that knows the schema's columns.
type Probe struct {
	conn *sql.Conn
	dir  string
}

// NewProbe takes a connection from the reader pool for the Probe; Close
// gives it back. An in-memory store gives ErrNoDirectory.
func (q *Queue) NewProbe(ctx context.Context) (*Probe, error) {
	if q.db.Dir == "" {
		return nil, ErrNoDirectory
	}
	conn, err := q.db.R.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &Probe{conn: conn, dir: q.db.Dir}, nil
}

// Dir returns the store's directory.
func (p *Probe) Dir() string { return p.dir }

// DataVersion is SQLite's data_version on the probe's connection: it
// changes when another connection commits.
func (p *Probe) DataVersion(ctx context.Context) (int64, error) {
	var v int64
	err := p.conn.QueryRowContext(ctx, stmtDataVersion).Scan(&v)
	return v, err
}

// CountDue counts the messages due at now (unix ms), up to max.
func (p *Probe) CountDue(ctx context.Context, now, max int64) (int64, error) {
	var n int64
	err := p.conn.QueryRowContext(ctx, stmtCountDue, now, max).Scan(&n)
	return n, err
}

// NextVisible returns the earliest visible_at (unix ms) after now; not
// Valid when no message waits for one. Another program may store a REAL
// visible_at (Python's time.time()*1000): rounded up, as the row is not
// due before. A value that is no number is never due.
func (p *Probe) NextVisible(ctx context.Context, now int64) (sql.NullInt64, error) {
	var raw any
	if err := p.conn.QueryRowContext(ctx, stmtNextVisible, now).Scan(&raw); err != nil {
		return sql.NullInt64{}, err
	}
	var next sql.NullInt64
	next.Int64, next.Valid = sqlstore.IntValue(raw, true)
	return next, nil
}

// LastID reads the largest message id ever inserted (0: none yet): ids of
// the spec's AUTOINCREMENT table grow in commit order.
func (p *Probe) LastID(ctx context.Context) (int64, error) {
	var id int64
	err := p.conn.QueryRowContext(ctx, stmtLastID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

// Close gives the connection back to the pool.
func (p *Probe) Close() error { return p.conn.Close() }
