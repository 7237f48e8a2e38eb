package sqlstore

// The write path of a handle: transactions on the single writer connection
// and statements prepared once per handle.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
)

// Tx is a write transaction (BEGIN IMMEDIATE) on the writer connection.
type Tx struct {
	db *DB
	// grouped: the transaction is a group commit's (WriteGroup), which
	// ctx must not interrupt: SQLite would roll all of it back.
	grouped bool
}

// ctx is the context the statements of t run under.
func (t *Tx) ctx(ctx context.Context) context.Context {
	if t.grouped && ctx.Done() != nil { // one that cannot end needs no wrapping
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// Exec runs a statement, prepared once per store handle.
func (t *Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = t.ctx(ctx)
	st, err := t.db.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// Query runs a query inside the transaction.
func (t *Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = t.ctx(ctx)
	st, err := t.db.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRow runs a one-row query inside the transaction.
func (t *Tx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = t.ctx(ctx)
	st, err := t.db.stmt(ctx, query)
	if err != nil {
		// Let Scan report the error.
		return t.db.wconn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// stmt returns query prepared on the writer connection. Only called with the
// write lock held.
func (db *DB) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := db.stmts[query]; ok {
		return st, nil
	}
	st, err := db.wconn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if db.stmts == nil {
		db.stmts = map[string]*sql.Stmt{}
	}
	db.stmts[query] = st
	return st, nil
}

// ReadStmt returns query prepared on the reader pool, once per handle.
func (db *DB) ReadStmt(ctx context.Context, query string) (*sql.Stmt, error) {
	db.stmtMu.Lock()
	defer db.stmtMu.Unlock()
	if st, ok := db.rstmts[query]; ok {
		return st, nil
	}
	st, err := db.R.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if db.rstmts == nil {
		db.rstmts = map[string]*sql.Stmt{}
	}
	db.rstmts[query] = st
	return st, nil
}

// ErrReadOnly is returned by Write on a store opened read-only.
var ErrReadOnly = errors.New("store opened read-only")

// Write runs fn in one BEGIN IMMEDIATE transaction while holding the store's
// write lock, commits if fn returns nil and rolls back otherwise (also when
// fn panics). A full disk is a LOCAL_FILESYSTEM_ERROR (see fsErr).
func (db *DB) Write(ctx context.Context, fn func(tx *Tx) error) (err error) {
	if db.ro {
		return ErrReadOnly
	}
	release, err := db.lock.acquire(ctx, db.log)
	if err != nil {
		return err
	}
	defer release()
	defer func() { err = db.fsErr(err) }()
	done := false
	defer func() {
		if !done {
			db.rollback()
		}
	}()
	// A BEGIN cut short by ctx may still have started the transaction, so
	// the deferred rollback runs on this path too.
	if err := db.begin(ctx); err != nil {
		return err
	}
	if err := fn(&Tx{db: db}); err != nil {
		return err
	}
	// COMMIT must not be interrupted by ctx: an interrupted commit leaves
	// the caller unsure whether its write landed.
	commit, err := db.stmt(ctx, "COMMIT")
	if err != nil {
		return err
	}
	if _, err := commit.ExecContext(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	done = true
	db.ckpt.committed()
	return nil
}

// rollback ends a failed transaction. If even that fails the connection is
// in an unknown state, so it is replaced.
func (db *DB) rollback() {
	ctx := context.Background()
	if _, err := db.wconn.ExecContext(ctx, "ROLLBACK"); err == nil || strings.Contains(err.Error(), "no transaction is active") {
		return
	}
	db.log.Warn("rollback failed; reopening the writer connection", "store", db.Path)
	for _, st := range db.stmts {
		_ = st.Close()
	}
	db.stmts = nil
	_ = db.wconn.Raw(func(any) error { return driver.ErrBadConn })
	_ = db.wconn.Close()
	c, err := db.w.Conn(ctx)
	if err != nil {
		db.log.Error("reopen writer connection", "store", db.Path, "err", err)
		return
	}
	db.wconn = c
}
