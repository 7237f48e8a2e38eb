package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// Point reads (a KV Get or Exists) go to the driver directly, on reader
// connections pinned for the handle's life, each with its own prepared
// statements. Through database/sql the same read cost about 2 µs more
// (connection choice, Rows and their locks, conversion), which is a sixth of
// the whole read; the rest is SQLite's, and a third of that is the two
// fcntl(2) calls on -shm that every WAL read transaction makes.

// rawReaders is the number of pinned connections: one per CPU, at most 4.
// They come from their own pool, so the database/sql reader pool (R) keeps
// all its connections for scans and inspection.
func rawReaders() int { return max(1, min(4, runtime.GOMAXPROCS(0))) }

// rawReader is one pinned connection and its statements.
type rawReader struct {
	conn  *sql.Conn
	stmts map[string]driver.Stmt
}

// rawPool hands out pinned readers, creating them on first use.
type rawPool struct {
	db   *sql.DB // owns the connections; nil in a closed or failed pool
	free chan *rawReader

	mu      sync.Mutex
	made    int
	all     []*rawReader
	closing bool
}

func newRawPool(db *sql.DB) *rawPool {
	n := rawReaders()
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(0)
	db.SetConnMaxLifetime(0)
	return &rawPool{db: db, free: make(chan *rawReader, n)}
}

var errClosed = errors.New("store handle is closed")

// get returns a free reader, making one if fewer than the limit exist and
// waiting for one otherwise.
func (p *rawPool) get(ctx context.Context) (*rawReader, error) {
	select {
	case r := <-p.free:
		return r, nil
	default:
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		return nil, errClosed
	}
	if p.made < cap(p.free) {
		p.made++
		p.mu.Unlock()
		c, err := p.db.Conn(ctx)
		if err != nil {
			p.mu.Lock()
			p.made--
			p.mu.Unlock()
			return nil, err
		}
		r := &rawReader{conn: c, stmts: map[string]driver.Stmt{}}
		p.mu.Lock()
		p.all = append(p.all, r)
		p.mu.Unlock()
		return r, nil
	}
	p.mu.Unlock()
	select {
	case r := <-p.free:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *rawPool) put(r *rawReader) { p.free <- r }

// close closes every reader's statements and connection, then the pool.
// Callers must have stopped reading.
func (p *rawPool) close() error {
	p.mu.Lock()
	p.closing = true
	all := p.all
	p.all = nil
	p.mu.Unlock()
	for len(p.free) > 0 {
		<-p.free
	}
	var errs []error
	for _, r := range all {
		errs = append(errs, r.conn.Raw(func(any) error {
			var errs []error
			for _, st := range r.stmts {
				errs = append(errs, st.Close())
			}
			return errors.Join(errs...)
		}))
		errs = append(errs, r.conn.Close())
	}
	return errors.Join(append(errs, p.db.Close())...)
}

// ReadRow runs query, a statement that returns at most one row, on a pinned
// reader and stores the row's columns in dest (driver values: int64,
// float64, []byte owned by the caller, string, nil). It reports whether there
// was a row.
func (db *DB) ReadRow(ctx context.Context, query string, args []driver.NamedValue, dest []driver.Value) (bool, error) {
	r, err := db.raw.get(ctx)
	if err != nil {
		return false, err
	}
	defer db.raw.put(r)
	found := false
	err = r.conn.Raw(func(dc any) error {
		st, ok := r.stmts[query]
		if !ok {
			pc, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("driver connection %T cannot prepare with a context", dc)
			}
			var err error
			if st, err = pc.PrepareContext(ctx, query); err != nil {
				return err
			}
			r.stmts[query] = st
		}
		sq, ok := st.(driver.StmtQueryContext)
		if !ok {
			return fmt.Errorf("driver statement %T cannot query with a context", st)
		}
		rows, err := sq.QueryContext(ctx, args)
		if err != nil {
			return err
		}
		err = rows.Next(dest)
		found = err == nil
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return errors.Join(err, rows.Close())
	})
	return found, err
}

// seedWAL gives a WAL that holds no commit yet one that changes nothing: a
// meta row added and removed in one transaction (SQLite skips a write that
// leaves a row as it was, so rewriting a row would not do). SQLite takes the
// database's size from the last commit in the WAL index, and while there is
// none, every read transaction asks the file system instead (an fstat(2),
// a sixth of a point read). A store that is only read after it was opened,
// such as an app's configuration, would pay that on every read until
// someone writes.
//
// The seed is written by a goroutine of its own (startSeed), after Open
// returned: it is a write transaction, and the first one into a new WAL
// syncs the WAL's header and its directory, two fsyncs that made up a good
// part of opening an existing store (issue 25: up opens 20 at its start).
// A write of the caller's that comes first seeds the WAL itself, and the
// goroutine then finds it non-empty and writes nothing.
func (db *DB) seedWAL(ctx context.Context) error {
	fi, err := os.Stat(db.Path + "-wal")
	if err != nil || fi.Size() > 0 {
		return nil
	}
	return db.Write(ctx, func(tx *Tx) error {
		if _, err := tx.Exec(ctx, `INSERT OR IGNORE INTO meta (key, value) VALUES ('localcloud.seed', '')`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM meta WHERE key = 'localcloud.seed'`)
		return err
	})
}

// seeder is the goroutine that writes the seed of one handle.
type seeder struct {
	closing atomic.Bool // the handle closes: a seed not begun is not written
	done    chan struct{}
}

// startSeed seeds db's WAL in the background (see seedWAL).
func startSeed(db *DB) *seeder {
	s := &seeder{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if s.closing.Load() {
			return
		}
		// Not cut short by the close once begun: it is one small
		// transaction, and the close waits for it.
		if err := db.seedWAL(context.Background()); err != nil {
			// Only reads of a store nobody writes are slower without it.
			db.log.Debug("seed the WAL", "path", db.Path, "err", err)
		}
	}()
	return s
}

// stop keeps a seed not begun from being written and waits for the
// goroutine to end. Safe on nil and more than once.
func (s *seeder) stop() {
	if s == nil {
		return
	}
	s.closing.Store(true)
	<-s.done
}
