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
//
// Its statements are prepared on that connection at first use and kept:
// parsing one costs about 45 us here, as much as running it, and the look
// that follows a foreign commit runs three of them before its hint. A
// statement whose prepare failed (a store another program damaged) is
// prepared again at its next use. Not safe for concurrent use.
type Probe struct {
	conn  *sql.Conn
	dir   string
	stmts [probeStmts]*sql.Stmt
}

// Indexes of Probe.stmts, and their SQL.
const (
	probeDataVersion = iota
	probeCountDue
	probeNextVisible
	probeLastID
	probeStmts
)

var probeSQL = [probeStmts]string{
	probeDataVersion: stmtDataVersion,
	probeCountDue:    stmtCountDue,
	probeNextVisible: stmtNextVisible,
	probeLastID:      stmtLastID,
}

// stmt returns statement i prepared on the probe's connection.
func (p *Probe) stmt(ctx context.Context, i int) (*sql.Stmt, error) {
	if st := p.stmts[i]; st != nil {
		return st, nil
	}
	st, err := p.conn.PrepareContext(ctx, probeSQL[i])
	if err != nil {
		return nil, err
	}
	p.stmts[i] = st
	return st, nil
}

// queryRow runs statement i with args and scans its one row into dest.
func (p *Probe) queryRow(ctx context.Context, i int, dest any, args ...any) error {
	st, err := p.stmt(ctx, i)
	if err != nil {
		return err
	}
	return st.QueryRowContext(ctx, args...).Scan(dest)
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

// File returns the base name of the store's database file.
func (p *Probe) File() string { return FileName }

// DataVersion is SQLite's data_version on the probe's connection: it
// changes when another connection commits.
func (p *Probe) DataVersion(ctx context.Context) (int64, error) {
	var v int64
	err := p.queryRow(ctx, probeDataVersion, &v)
	return v, err
}

// CountDue counts the messages due at now (unix ms), up to max.
func (p *Probe) CountDue(ctx context.Context, now, max int64) (int64, error) {
	var n int64
	err := p.queryRow(ctx, probeCountDue, &n, now, max)
	return n, err
}

// NextVisible returns the earliest visible_at (unix ms) after now; not
// Valid when no message waits for one. Another program may store a REAL
// visible_at (Python's time.time()*1000): rounded up, as the row is not
// due before. A value that is no number is never due.
func (p *Probe) NextVisible(ctx context.Context, now int64) (sql.NullInt64, error) {
	var raw any
	if err := p.queryRow(ctx, probeNextVisible, &raw, now); err != nil {
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
	err := p.queryRow(ctx, probeLastID, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

// Close closes the probe's statements and gives the connection back to the
// pool.
func (p *Probe) Close() error {
	var errs []error
	for i, st := range p.stmts {
		if st != nil {
			errs = append(errs, st.Close())
			p.stmts[i] = nil
		}
	}
	errs = append(errs, p.conn.Close())
	return errors.Join(errs...)
}
