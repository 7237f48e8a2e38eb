package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
)

// MaxGroup is the most single-statement writes one group commit runs in
// one transaction; more waiting writers go to the next group.
const MaxGroup = 256

// groupOp is one single-statement write (Exec or WriteRow) waiting for, or
// running in, a group commit.
type groupOp struct {
	ctx   context.Context
	query string
	args  []any
	dest  []any // WriteRow: the first row is scanned into dest; nil for Exec
	res   sql.Result
	err   error
	done  chan struct{} // closed when res and err are final
	lead  chan struct{} // closed when this op's goroutine is to lead the next group
	told  bool          // lead was closed (under committer.mu)
}

// committer groups the single-statement writes of one handle. A writer
// that finds no group running leads one itself; a writer that arrives
// while one runs (the write lock is busy) waits in pending, and the first
// of pending leads the next group once the running one has committed. A
// leader takes the write lock (in-process mutex and lock file) once for its
// whole group, so cross-process fairness is that of one writer.
type committer struct {
	mu      sync.Mutex
	pending []*groupOp
	leading bool
	commits atomic.Int64 // transactions committed by groups (for tests)
}

// submit runs op in a group commit and returns when op's own outcome is
// known: after the commit that holds it, or with the error that failed it
// alone.
func (db *DB) submit(op *groupOp) {
	op.done = make(chan struct{})
	op.lead = make(chan struct{})
	g := &db.group
	g.mu.Lock()
	g.pending = append(g.pending, op)
	if !g.leading {
		g.leading = true
		op.told = true
		g.mu.Unlock()
		db.lead(op)
		return
	}
	g.mu.Unlock()
	select {
	case <-op.done:
		return
	case <-op.lead:
		db.lead(op)
		return
	case <-op.ctx.Done():
	}
	g.mu.Lock()
	i := slices.Index(g.pending, op)
	switch {
	case i < 0: // already taken into a running group: its outcome decides
		g.mu.Unlock()
		<-op.done
	case op.told: // it is to lead; lead fails it alone and hands over
		g.mu.Unlock()
		db.lead(op)
	default:
		g.pending = slices.Delete(g.pending, i, i+1)
		g.mu.Unlock()
		op.err = op.ctx.Err()
		close(op.done)
	}
}

// handOff tells the first pending writer to lead the next group, or ends
// leading when nobody waits. Called with g.mu held.
func (g *committer) handOff() {
	if len(g.pending) == 0 {
		g.leading = false
		return
	}
	next := g.pending[0]
	next.told = true
	close(next.lead)
}

// lead runs one group: self (first of pending) and every writer waiting
// behind it when the write lock is taken, up to MaxGroup.
func (db *DB) lead(self *groupOp) {
	g := &db.group
	release, err := db.lock.acquire(self.ctx, db.log)
	g.mu.Lock()
	if err != nil {
		if i := slices.Index(g.pending, self); i >= 0 {
			g.pending = slices.Delete(g.pending, i, i+1)
		}
		g.handOff()
		g.mu.Unlock()
		self.err = err
		close(self.done)
		return
	}
	n := min(len(g.pending), MaxGroup)
	batch := slices.Clone(g.pending[:n])
	g.pending = slices.Delete(g.pending, 0, n)
	g.mu.Unlock()

	db.runGroup(batch)
	release()

	g.mu.Lock()
	g.handOff()
	g.mu.Unlock()
	for _, op := range batch {
		close(op.done)
	}
}

// runGroup runs batch under the write lock. One write runs on its own
// (autocommit), exactly as without grouping, so a lone writer pays
// nothing. Several run in one BEGIN IMMEDIATE transaction: when a
// statement fails, that write fails alone and the transaction is rolled
// back and run again without it.
func (db *DB) runGroup(batch []*groupOp) {
	live := batch[:0:0]
	for _, op := range batch {
		// A writer whose ctx ended before its statement ran gets ctx's
		// error and nothing of it happens.
		if err := op.ctx.Err(); err != nil {
			op.err = err
			continue
		}
		live = append(live, op)
	}
	if len(live) == 1 {
		op := live[0]
		st, err := db.stmt(op.ctx, op.query)
		if err == nil {
			err = db.retryBusy(op.ctx, func() error { return db.runOp(op, st) })
		}
		if err == nil || errors.Is(err, sql.ErrNoRows) {
			db.group.commits.Add(1)
			db.ckpt.committed()
		}
		op.err = db.fsErr(err)
		return
	}
	for len(live) > 0 {
		failed, err := db.runTx(live)
		if failed < 0 {
			for _, op := range live {
				if err != nil {
					op.res, op.err = nil, err
				}
			}
			if err == nil {
				db.group.commits.Add(1)
				db.ckpt.committed()
			}
			return
		}
		live[failed].res, live[failed].err = nil, err
		live = slices.Delete(live, failed, failed+1)
	}
}

// runTx runs ops in one transaction and commits it. It returns the index
// of the op whose statement failed (the transaction is then rolled back)
// and that op's error, or -1 and the error of BEGIN or COMMIT that failed
// every op (nil: all committed).
func (db *DB) runTx(ops []*groupOp) (int, error) {
	done := false
	defer func() {
		if !done {
			db.rollback()
		}
	}()
	ctx := context.Background()
	if err := db.begin(ctx); err != nil {
		return -1, db.fsErr(err)
	}
	for i, op := range ops {
		st, err := db.stmt(ctx, op.query)
		if err == nil {
			err = db.runOp(op, st)
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return i, db.fsErr(err)
		}
	}
	commit, err := db.stmt(ctx, "COMMIT")
	if err == nil {
		_, err = commit.ExecContext(ctx)
	}
	if err != nil {
		return -1, db.fsErr(err)
	}
	done = true
	return -1, nil
}

// runOp runs op's statement once, setting op.res or scanning into op.dest.
// sql.ErrNoRows (a WriteRow that changed nothing) is op's outcome, not a
// failed statement.
func (db *DB) runOp(op *groupOp, st *sql.Stmt) error {
	ctx := context.WithoutCancel(op.ctx)
	op.res, op.err = nil, nil
	if op.dest != nil {
		// Scan closes the row, which ends the statement.
		op.err = st.QueryRowContext(ctx, op.args...).Scan(op.dest...)
		return op.err
	}
	res, err := st.ExecContext(ctx, op.args...)
	if err != nil {
		op.err = err
		return err
	}
	// Read the result now, under the write lock: database/sql's result
	// locks the writer connection for each of its calls, so a caller
	// reading it later would wait for the next group's statements (and
	// miss joining that group).
	var r result
	r.id, r.idErr = res.LastInsertId()
	r.n, r.nErr = res.RowsAffected()
	op.res = r
	return nil
}

// result is an Exec's sql.Result, read once.
type result struct {
	id, n       int64
	idErr, nErr error
}

func (r result) LastInsertId() (int64, error) { return r.id, r.idErr }
func (r result) RowsAffected() (int64, error) { return r.n, r.nErr }

// GroupCommits is how many transactions Exec and WriteRow have committed on
// this handle: with writers waiting on each other, fewer than their calls.
func (db *DB) GroupCommits() int64 { return db.group.commits.Load() }
