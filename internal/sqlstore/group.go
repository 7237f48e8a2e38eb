package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// loneYield is how often (every how many groups) a writer that finds
// nobody else writing lets other goroutines run before it leads.
const loneYield = 8

// MaxGroup is the most single-statement writes one group commit runs in
// one transaction; more waiting writers go to the next group.
const MaxGroup = 256

// groupOp is one write (Exec, WriteRow or WriteGroup) waiting for, or
// running in, a group commit.
type groupOp struct {
	ctx   context.Context
	query string
	args  []any
	dest  []any           // WriteRow: the first row is scanned into dest; nil for Exec
	fn    func(*Tx) error // WriteGroup: runs inside the group's transaction
	panic any             // what fn panicked with, re-panicked in its caller
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
	// busy is whether the last group released more than one writer or
	// others waited for it; lone counts the groups of one with nobody
	// waiting since the last busy one.
	busy    bool
	lone    int
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
// behind it when the write lock is taken, plus those that arrive while its
// transaction runs, up to MaxGroup.
func (db *DB) lead(self *groupOp) {
	g := &db.group
	g.mu.Lock()
	yield := g.busy || g.lone%loneYield == loneYield-1
	g.mu.Unlock()
	if yield {
		// The writers the last group released may be runnable but not
		// yet run: the goroutine that leads never blocks before it
		// commits, so on a busy machine (or with one P) it would run
		// group after group of one while they wait for the CPU until the
		// scheduler preempts it (10 ms). Letting them run first lets them
		// join this group. A lone writer yields only every loneYield-th
		// group, so other writers that were never released by a group
		// (new ones) wait that long at most.
		runtime.Gosched()
	}
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
	batch := g.take(nil)
	g.mu.Unlock()

	batch = db.runGroup(batch)
	release()

	g.mu.Lock()
	// Writers that waited for this group, or that it released, are likely
	// to come back: the next group yields to them first and runs as a
	// transaction even if it starts with one write, so that those arriving
	// while it runs can join it.
	g.busy = len(batch) > 1 || len(g.pending) > 0
	if g.busy {
		g.lone = 0
	} else {
		g.lone++
	}
	g.handOff()
	g.mu.Unlock()
	for _, op := range batch {
		close(op.done)
	}
}

// take moves pending writers into batch, up to MaxGroup in all. Called
// with g.mu held.
func (g *committer) take(batch []*groupOp) []*groupOp {
	n := min(len(g.pending), MaxGroup-len(batch))
	if n <= 0 {
		return batch
	}
	batch = append(batch, g.pending[:n]...)
	g.pending = slices.Delete(g.pending, 0, n)
	return batch
}

// runGroup runs batch under the write lock and returns it with the writers
// that joined while it ran. One write with nobody waiting before it runs
// on its own (autocommit), exactly as without grouping, so a lone writer
// pays nothing. Otherwise the writes run in one BEGIN IMMEDIATE
// transaction, which takes in the writers that arrive while it runs: when
// a statement fails, that write fails alone and the transaction is rolled
// back and run again without it.
func (db *DB) runGroup(batch []*groupOp) []*groupOp {
	live := make([]*groupOp, 0, len(batch))
	for _, op := range batch {
		if ready(op) {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return batch // writers that came meanwhile wait for the next leader
	}
	db.group.mu.Lock()
	lone := len(live) == 1 && len(db.group.pending) == 0 && !db.group.busy
	db.group.mu.Unlock()
	if lone && live[0].fn != nil {
		op := live[0]
		op.err = db.fsErr(db.runLoneFn(op))
		return batch
	}
	if lone {
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
		return batch
	}
	for {
		var failed int
		var err error
		batch, live, failed, err = db.runTx(batch, live)
		if failed < 0 {
			for _, op := range live {
				if err != nil {
					op.res, op.err = nil, err
				}
			}
			if err == nil && len(live) > 0 {
				db.group.commits.Add(1)
				db.ckpt.committed()
			}
			return batch
		}
		live[failed].res, live[failed].err = nil, err
		live = slices.Delete(live, failed, failed+1)
	}
}

// ready reports whether op is to run: a writer whose ctx ended before its
// statement ran gets ctx's error and nothing of it happens.
func ready(op *groupOp) bool {
	if err := op.ctx.Err(); err != nil {
		op.err = err
		return false
	}
	return true
}

// runTx runs live in one transaction and commits it; writers that wait
// when the statements of live have run join it (they are added to batch
// and live) until MaxGroup. It returns the index in live of the op whose
// statement failed (the transaction is then rolled back) and that op's
// error, or -1 and the error of BEGIN or COMMIT that failed every op (nil:
// all committed).
func (db *DB) runTx(batch, live []*groupOp) ([]*groupOp, []*groupOp, int, error) {
	done := false
	defer func() {
		if !done {
			db.rollback()
		}
	}()
	ctx := context.Background()
	if err := db.begin(ctx); err != nil {
		return batch, live, -1, db.fsErr(err)
	}
	g := &db.group
	for i := 0; ; i++ {
		if i == len(live) {
			g.mu.Lock()
			n := len(batch)
			batch = g.take(batch)
			g.mu.Unlock()
			for _, op := range batch[n:] {
				if ready(op) {
					live = append(live, op)
				}
			}
			if i == len(live) {
				break
			}
		}
		op := live[i]
		if op.fn != nil {
			// Any error of fn fails it, sql.ErrNoRows included.
			if err := db.runOp(op, nil); err != nil {
				return batch, live, i, db.fsErr(err)
			}
			continue
		}
		st, err := db.stmt(ctx, op.query)
		if err == nil {
			err = db.runOp(op, st)
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return batch, live, i, db.fsErr(err)
		}
	}
	if len(live) == 0 {
		return batch, live, -1, nil // rolled back: nothing to commit
	}
	commit, err := db.stmt(ctx, "COMMIT")
	if err == nil {
		_, err = commit.ExecContext(ctx)
	}
	if err != nil {
		return batch, live, -1, db.fsErr(err)
	}
	done = true
	return batch, live, -1, nil
}

// runOp runs op's statement once, setting op.res or scanning into op.dest.
// sql.ErrNoRows (a WriteRow that changed nothing) is op's outcome, not a
// failed statement. A WriteGroup's fn that fails (or panics) is a failed
// statement: the group is rolled back and run again without it, as for a
// one-statement write. No savepoint per fn: one costs two statements and,
// worse, a copy of every page the fn changes in SQLite's statement journal
// (a temporary file once it outgrows 64 KiB, so a write syscall a page:
// 10% of a Consume drain's CPU went there), paid by every fn that succeeds to
// spare the rare one that fails a re-run of the group.
func (db *DB) runOp(op *groupOp, st *sql.Stmt) error {
	ctx := context.WithoutCancel(op.ctx)
	op.res, op.err, op.panic = nil, nil, nil
	if op.fn != nil {
		return db.callFn(op, &Tx{db: db, grouped: true})
	}
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

// GroupPending is how many writers of this handle wait for the next group
// commit (for tests that hold the write lock until writers queue).
func (db *DB) GroupPending() int {
	db.group.mu.Lock()
	defer db.group.mu.Unlock()
	return len(db.group.pending)
}

// errPanicked is the error of a WriteGroup whose fn panicked; its caller
// panics again with the value.
var errPanicked = errors.New("write function panicked")

// callFn runs op.fn, turning a panic into errPanicked (the value kept in
// op.panic) so that it ends only op's write, in op's own goroutine.
func (db *DB) callFn(op *groupOp, tx *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			op.panic = r
			err = errPanicked
		}
	}()
	return op.fn(tx)
}

// runLoneFn runs a WriteGroup with nobody else writing: as Write does,
// in a transaction of its own.
func (db *DB) runLoneFn(op *groupOp) error {
	op.panic = nil
	done := false
	defer func() {
		if !done {
			db.rollback()
		}
	}()
	if err := db.begin(op.ctx); err != nil {
		return err
	}
	if err := db.callFn(op, &Tx{db: db}); err != nil {
		return err
	}
	if err := db.execStmt(context.WithoutCancel(op.ctx), "COMMIT"); err != nil {
		return err
	}
	done = true
	db.group.commits.Add(1)
	db.ckpt.committed()
	return nil
}

// execStmt runs a statement without arguments, prepared once, on the
// writer connection. Only called with the write lock held.
func (db *DB) execStmt(ctx context.Context, query string) error {
	st, err := db.stmt(ctx, query)
	if err == nil {
		_, err = st.ExecContext(ctx)
	}
	return err
}

// WriteGroup is Write for a short fn that may run more than once: it
// joins a group commit like Exec when other writers of the handle wait.
// In a group a fn that fails (or panics) fails alone: the group's
// transaction is rolled back and run again without it, and the others
// commit. fn runs again whenever the group's transaction is run again
// without another writer's failed statement or fn, so it must only set its
// results, not add to them. Its
// statements are not interrupted by ctx (an interrupt would end the whole
// group's transaction); a ctx that ends before fn runs fails it.
func (db *DB) WriteGroup(ctx context.Context, fn func(tx *Tx) error) error {
	if db.ro {
		return ErrReadOnly
	}
	op := &groupOp{ctx: ctx, fn: fn}
	db.submit(op)
	if op.panic != nil {
		panic(op.panic)
	}
	return op.err
}
