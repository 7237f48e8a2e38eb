// Package sqlstore is the SQLite plumbing the KV and queue stores share: the
// open handshake of the localkv.v1/localqueue.v1 formats, the connection
// settings, and the write path.
//
// Every store handle has two database/sql pools on one file: a single writer
// connection and a small pool of readers. Writes are serialised first inside
// the process (a lock shared by every handle on the same file) and then across
// processes by flock(2) on a lock file beside the database, so writers queue
// in the kernel instead of polling in SQLite's busy handler. SQLite's own
// busy_timeout (5 s) stays as the backstop for writers that do not take the
// lock file (other programs). The database file itself is only ever opened
// by SQLite: opening and closing another descriptor on it would drop the
// POSIX locks SQLite holds.
package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/localcloud/localcloud/bindings"
)

// BusyTimeoutMillis is the spec's busy_timeout: 5 s.
const BusyTimeoutMillis = 5000

// Format describes one on-disk format.
type Format struct {
	Marker string // value of the meta 'format' row, e.g. "localkv.v1"
	File   string // database file name inside the store directory
	// Schema is the provider DDL, run after the marker check. It and
	// Extra hold only CREATE ... IF NOT EXISTS statements: an open skips
	// both when every object they create exists.
	Schema string
	// Extra is DDL of localcloud's own that a spec-exact reader tolerates
	// (indexes and tables created IF NOT EXISTS).
	Extra string
	// Retired names indexes of localcloud's own that earlier versions
	// created and this one does not use: a store may still hold them until
	// its next read-write open, which drops them (before Extra) in the
	// handshake transaction.
	Retired []string
	// OpCode is the code of operation errors (KV_OPERATION_FAILED, ...).
	OpCode bindings.Code
	// CheckRows, if set, reads the provider rows through conn (read-only)
	// and returns a ProblemRow for each row another program wrote that
	// the store has to coerce or cannot use. Verify runs it.
	CheckRows func(ctx context.Context, conn *sql.Conn) ([]Problem, error)
}

// MetaDDL is the meta table both formats share, exactly as the spec writes it.
const MetaDDL = `CREATE TABLE IF NOT EXISTS meta (
key TEXT PRIMARY KEY,
value TEXT NOT NULL
);`

// Options are the settings both stores take.
type Options struct {
	Durability bindings.Durability
	Logger     *slog.Logger
	// ReadOnly opens without creating anything and refuses writes (for
	// inspection tools).
	ReadOnly bool
}

// DB is one open store file.
type DB struct {
	Path   string // database file, or "memory:<name>"
	Dir    string // store directory ("" in memory mode)
	Format Format
	R      *sql.DB       // readers
	raw    *rawPool      // pinned readers for point reads (rawread.go)
	ckpt   *checkpointer // background checkpoints (checkpoint.go); nil without a WAL
	seed   *seeder       // the WAL's seed, written after Open returned (rawread.go); nil without a WAL
	w      *sql.DB       // pool of the single writer connection
	wconn  *sql.Conn     // that connection, held for the handle's life
	lock   *writeLock
	log    *slog.Logger
	ro     bool
	goBusy bool // busy waits happen in begin, not in SQLite
	// empty: the database file was empty (0 bytes, no -wal) when Open
	// looked at it, a store not created yet.
	empty bool
	// lazySync: commits are not fsynced (durability normal); SyncWAL
	// makes them durable when an order across files needs it.
	lazySync bool

	group committer // group commit of Exec and WriteRow (group.go)

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on w
	rstmts map[string]*sql.Stmt // prepared on R

	closeOnce sync.Once
	closeErr  error

	// PageSize is the database's page size in bytes: its file is always a
	// whole number of pages.
	PageSize int64
}

// Open opens or creates the store of format f in dir, following the spec's
// handshake: directory (0700), file (0600), WAL and busy timeout, the meta
// marker checked before any provider table is created.
func Open(ctx context.Context, dir string, f Format, o Options) (*DB, error) {
	if dir == "" {
		return nil, bindings.Errorf(bindings.CodeInvalidInput, "dir: must not be empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, bindings.Wrap(bindings.CodeLocalFilesystemError, err, "resolve store directory %q", dir)
	}
	path := filepath.Join(abs, f.File)
	if o.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q", path)
		}
	}
	// Modes first, so nothing is created in a directory others can write.
	p, warns := checkModes(abs, path)
	if p != nil {
		return nil, refused(path, p)
	}
	for _, w := range warns {
		logger(o.Logger).Warn("store readable by group or others", "store", path, "problem", w)
	}
	if !o.ReadOnly {
		if err := prepareFile(abs, path); err != nil {
			return nil, err
		}
	}
	var files storeFiles
	inspected := false // false: another handle of this process has it open
	lk, err := acquireLock(abs, f.File, func() error {
		var p *fileProblem
		if files, p = inspect(path); p != nil {
			return refused(path, p)
		}
		inspected = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if files.wal == walOrphan && !o.ReadOnly {
		// A crash left a WAL that SQLite will replay and, once this
		// handle closes, checkpoint into the file: look at the result
		// through a connection that cannot checkpoint first.
		if err := checkRecovered(ctx, path, f); err != nil {
			lk.release()
			return nil, err
		}
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	wq := url.Values{}
	for k, v := range q {
		wq[k] = append([]string(nil), v...)
	}
	if o.ReadOnly {
		q.Set("mode", "ro")
	} else {
		wq.Add("_pragma", "synchronous("+syncMode(o.Durability)+")")
		wq.Set("_txlock", "immediate")
	}
	q.Add("_pragma", "query_only(1)")
	db := &DB{Path: path, Dir: abs, Format: f, lock: lk, log: logger(o.Logger), ro: o.ReadOnly,
		empty:    inspected && files.header.size == 0 && files.wal == walNone,
		lazySync: o.Durability != bindings.DurabilityFull}
	if err := db.connect(ctx, fileURI(path, wq), fileURI(path, q)); err != nil {
		lk.release()
		return nil, db.openErr(err)
	}
	// On the writer, which is open already: a reader connection is opened
	// at the first read (each one parses the whole schema), and a KV store
	// that up only serves has none until an app or the explorer reads.
	var pageSize *sql.Row
	if db.wconn != nil {
		pageSize = db.wconn.QueryRowContext(ctx, "PRAGMA page_size")
	} else {
		pageSize = db.R.QueryRowContext(ctx, "PRAGMA page_size")
	}
	if err := pageSize.Scan(&db.PageSize); err != nil {
		_ = db.Close()
		return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: read the page size", path)
	}
	return db, nil
}

// refused is the error of a store whose files fail the checks of
// filecheck.go; nothing was opened or written.
func refused(path string, p *fileProblem) error {
	return bindings.Errorf(bindings.CodeBindingSetupFailed, "open store %q: %s; the store's files were left untouched", path, p.msg)
}

// checkRecovered reads the store at path together with the WAL a process
// that ended left beside it, through a read-only connection (which never
// checkpoints), and fails unless it holds the format marker and passes
// PRAGMA quick_check. It runs only on the first open after such an end.
func checkRecovered(ctx context.Context, path string, f Format) error {
	c, err := sql.Open("sqlite", readOnlyURI(path, true))
	if err != nil {
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q", path)
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	// A process killed while it created the store (after the switch to
	// WAL, before the commit of its tables: see handshake) leaves a
	// database of no tables at all, which the handshake creates like any
	// new store: nothing of another program can be in it.
	var objects int
	if err := c.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&objects); err != nil {
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: read the schema with the -wal a process that ended left beside it", path)
	}
	if objects == 0 {
		return nil
	}
	db := &DB{Path: path, Format: f}
	if err := db.checkMarker(ctx, c); err != nil {
		return &bindings.Error{Code: bindings.CodeBindingSetupFailed, Err: err, Msg: fmt.Sprintf(
			"open store %q: the database read with the -wal a process that ended left beside it fails the format marker check; the store's files were left untouched: move the -wal away if it is not this store's, or restore a backup",
			path)}
	}
	// The handshake would refuse them too, but only after SQLite replayed
	// the -wal into the file.
	if err := checkObjects(ctx, c, path, f); err != nil {
		return err
	}
	rows, err := c.QueryContext(ctx, fmt.Sprintf("PRAGMA quick_check(%d)", integrityLines))
	if err != nil {
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: quick_check with the -wal a process that ended left beside it", path)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: quick_check", path)
		}
		if line != "ok" {
			bad = append(bad, line)
		}
	}
	if err := rows.Err(); err != nil {
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q: quick_check", path)
	}
	if len(bad) > 0 {
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: the database read with the -wal a process that ended left beside it fails quick_check (%s); the store's files were left untouched: move the -wal away if it is not this store's, or restore a backup",
			path, strings.Join(bad, "; "))
	}
	return nil
}

// memNameRE limits memory store names to something safe inside a URI.
var memNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// OpenMemory opens the in-memory store called name. Every handle in this
// process that names the same store (and format) shares it; it is gone when
// the last handle closes. Nothing touches the disk.
func OpenMemory(ctx context.Context, name string, f Format, o Options) (*DB, error) {
	if !memNameRE.MatchString(name) {
		return nil, bindings.Errorf(bindings.CodeInvalidInput,
			"name: must be 1..128 characters of A-Z a-z 0-9 . _ -, got %q", name)
	}
	vfsName := "/localcloud-" + strings.TrimSuffix(f.File, ".sqlite") + "-" + name
	lk, err := acquireLock("", vfsName, nil)
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("vfs", "memdb")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeoutMillis))
	wq := url.Values{}
	for k, v := range q {
		wq[k] = append([]string(nil), v...)
	}
	wq.Set("_txlock", "immediate")
	q.Add("_pragma", "query_only(1)")
	db := &DB{Path: "memory:" + name, Format: f, lock: lk, log: logger(o.Logger)}
	if err := db.connect(ctx, "file:"+vfsName+"?"+wq.Encode(), "file:"+vfsName+"?"+q.Encode()); err != nil {
		lk.release()
		return nil, err
	}
	return db, nil
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

func syncMode(d bindings.Durability) string {
	if d == bindings.DurabilityFull {
		return "FULL"
	}
	return "NORMAL"
}

func fileURI(path string, q url.Values) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	// url.URL writes "file:///abs"; SQLite accepts that form.
	return u.String()
}

// prepareFile creates the store directory (0700) and an empty database file
// (0600) so SQLite, which would create it 0644, inherits the private mode for
// the database and its -wal/-shm siblings. An existing file is left alone.
// New directories and the new file's name are fsynced into their parents
// (dirsync.go), so a power cut cannot take a store that has commits away.
func prepareFile(dir, path string) error {
	if err := makeStoreDir(dir); err != nil {
		return err
	}
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: is a directory, want a %s database file", path, filepath.Base(path))
	case err == nil && !st.Mode().IsRegular():
		return bindings.Errorf(bindings.CodeBindingSetupFailed,
			"open store %q: not a regular file (mode %s)", path, st.Mode())
	case err == nil:
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "stat store %q", path)
	}
	// O_EXCL: if another process creates it first we simply use theirs.
	// The descriptor is closed before SQLite opens the file, so no SQLite
	// lock of this process can be on it yet.
	fh, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "create store %q", path)
	}
	if err := fh.Close(); err != nil {
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "create store %q", path)
	}
	if err := syncDir(dir); err != nil {
		return bindings.Wrap(bindings.CodeLocalFilesystemError, err, "sync store directory %q", dir)
	}
	return nil
}

func (db *DB) connect(ctx context.Context, wdsn, rdsn string) error {
	fail := func(err error) error {
		db.closeConns()
		return bindings.Wrap(bindings.CodeBindingSetupFailed, err, "open store %q", db.Path)
	}
	var err error
	if !db.ro {
		if db.w, err = sql.Open("sqlite", wdsn); err != nil {
			return fail(err)
		}
		db.w.SetMaxOpenConns(1)
		db.w.SetMaxIdleConns(1)
		db.w.SetConnMaxLifetime(0)
		db.w.SetConnMaxIdleTime(0)
		if db.wconn, err = db.w.Conn(ctx); err != nil {
			return fail(err)
		}
	}
	if db.R, err = sql.Open("sqlite", rdsn); err != nil {
		return fail(err)
	}
	db.R.SetMaxOpenConns(4)
	db.R.SetMaxIdleConns(4)
	db.R.SetConnMaxIdleTime(0)
	rawDB, err := sql.Open("sqlite", rdsn)
	if err != nil {
		return fail(err)
	}
	db.raw = newRawPool(rawDB)
	if db.ro {
		if err := db.checkMarker(ctx, db.R); err != nil {
			db.closeConns()
			return err
		}
		if err := checkObjects(ctx, db.R, db.Path, db.Format); err != nil {
			db.closeConns()
			return err
		}
		return nil
	}
	if err := db.handshake(ctx); err != nil {
		db.closeConns()
		var e *bindings.Error
		if errors.As(err, &e) {
			return err
		}
		return fail(err)
	}
	if db.goBusy { // a file in WAL mode
		// The handshake's transactions before the switch to WAL ran with
		// a rollback journal, which SQLite deletes without fsyncing the
		// directory: a power cut could bring the journal back, and the
		// next open would roll committed pages back under a WAL that
		// holds later ones. Syncing the directory makes the deletions
		// durable before any commit of this handle is.
		if err := syncDir(db.Dir); err != nil {
			return fail(err)
		}
		for _, p := range walPragmas {
			if _, err := db.wconn.ExecContext(ctx, p); err != nil {
				return fail(err)
			}
		}
		db.ckpt = newCheckpointer(wdsn, db.Path, db.lock, db.log)
		db.seed = startSeed(db)
	}
	return nil
}

// handshake runs the spec's open order inside one write transaction, so
// processes opening one new store at once cannot interleave, and switches
// the file to WAL only after the marker check passed: a foreign database is
// left byte for byte as it was.
//
// An empty file has nothing to leave as it was, so it is switched first and
// the schema is created in the WAL: the switch is a rollback-journal
// transaction (three fsyncs and a -journal created and deleted), and the
// creation would be a second one (issue 25: half the start of up on fresh
// stores). Should another process create the store in between, the switch
// finds it in WAL mode already and changes nothing.
func (db *DB) handshake(ctx context.Context) error {
	walFirst := db.empty && db.Dir != ""
	if walFirst {
		if err := db.enterWAL(ctx); err != nil {
			return err
		}
	}
	if err := db.Write(ctx, func(tx *Tx) error { return db.initSchema(ctx, tx) }); err != nil {
		return err
	}
	if db.Dir == "" {
		return nil // memdb has no WAL
	}
	if !walFirst {
		if err := db.enterWAL(ctx); err != nil {
			return err
		}
	}
	// From here on the writer waits for the write lock in begin, not in
	// SQLite's busy handler (see there). In WAL mode nothing after a
	// successful BEGIN IMMEDIATE waits for a lock.
	if _, err := db.wconn.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	db.goBusy = true
	return nil
}

// enterWAL switches the file to WAL mode, or fails.
func (db *DB) enterWAL(ctx context.Context) error {
	mode, err := db.switchToWAL(ctx)
	if err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal_mode is %q after asking for WAL", mode)
	}
	return nil
}

// switchToWAL asks for WAL mode and returns the journal mode SQLite
// reports. Leaving rollback mode needs the file's exclusive lock, and when
// another process holds a lock on the file (several app processes creating
// one new store at once) SQLite answers SQLITE_BUSY at once, without its
// busy handler (TestManyProcessesCreateOneStore failed so in 3 of 6 runs
// before this). So it is asked again, 1 ms doubling up
// to 50 ms apart, for at most the spec's busy timeout.
func (db *DB) switchToWAL(ctx context.Context) (string, error) {
	var mode string
	err := retryWhileBusy(ctx, time.Millisecond, 50*time.Millisecond, func() error {
		return db.wconn.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode)
	})
	return mode, err
}

// begin starts the write transaction.
func (db *DB) begin(ctx context.Context) error {
	st, err := db.stmt(ctx, "BEGIN IMMEDIATE")
	if err != nil {
		return err
	}
	return db.retryBusy(ctx, func() error {
		_, err := st.ExecContext(ctx)
		return err
	})
}

// retryBusy runs op, which takes SQLite's write lock, until it is not busy.
// Writers of localcloud already queue on the lock file, so a busy database
// here means a writer that does not take it (another program). SQLite's
// busy handler would sleep 1, 2, 5 ... 100 ms between tries and oversleep
// the other writer's commit by up to 100 ms; this loop retries after
// 50 us .. 2 ms (jittered) instead, for at most the spec's 5 s busy timeout.
func (db *DB) retryBusy(ctx context.Context, op func() error) error {
	if !db.goBusy {
		return op()
	}
	return retryWhileBusy(ctx, 50*time.Microsecond, 2*time.Millisecond, op)
}

// retryWhileBusy runs op until it is not SQLITE_BUSY, pausing first
// (jittered, doubling) up to most between tries, for at most the spec's
// 5 s busy timeout; it returns op's last error, or ctx's.
func retryWhileBusy(ctx context.Context, first, most time.Duration, op func() error) error {
	err := op()
	if err == nil || !IsBusy(err) {
		return err
	}
	deadline := time.Now().Add(BusyTimeoutMillis * time.Millisecond)
	for pause := first; time.Now().Before(deadline); pause = min(2*pause, most) {
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err = op(); err == nil || !IsBusy(err) {
			return err
		}
	}
	return err
}

// WriteRow runs one write statement with a RETURNING clause under the
// store's write lock and scans its first row into dest. sql.ErrNoRows means
// the statement changed nothing. Like Exec it joins a group commit when
// other writers of the handle wait.
func (db *DB) WriteRow(ctx context.Context, query string, args []any, dest ...any) error {
	if db.ro {
		return ErrReadOnly
	}
	if dest == nil {
		dest = []any{}
	}
	op := &groupOp{ctx: ctx, query: query, args: args, dest: dest}
	db.submit(op)
	return op.err
}

// Exec runs one write statement under the store's write lock and returns
// after it committed. A lone writer runs it on its own (autocommit: the
// statement is its transaction), which saves the BEGIN and COMMIT round
// trips of Write; writers that find the lock busy wait and commit together
// in one BEGIN IMMEDIATE transaction (group commit, group.go), each with
// its own result, and a statement that fails there fails alone. The
// statement itself is not interrupted by ctx, so a returned error means it
// did not happen.
func (db *DB) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if db.ro {
		return nil, ErrReadOnly
	}
	op := &groupOp{ctx: ctx, query: query, args: args}
	db.submit(op)
	return op.res, op.err
}

// IsBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED.
func IsBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
	}
	return false
}

// Close closes the handle. It is safe to call more than once.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.closeErr = db.closeConns()
		db.lock.release()
	})
	return db.closeErr
}

func (db *DB) closeConns() error {
	// First: the seed writes through the writer and its statements.
	db.seed.stop()
	var errs []error
	db.stmtMu.Lock()
	for _, st := range db.stmts {
		errs = append(errs, st.Close())
	}
	for _, st := range db.rstmts {
		errs = append(errs, st.Close())
	}
	db.stmts, db.rstmts = nil, nil
	db.stmtMu.Unlock()
	// Readers first: the writer closing last lets SQLite checkpoint the WAL.
	db.ckpt.close()
	if db.raw != nil {
		errs = append(errs, db.raw.close())
	}
	if db.R != nil {
		errs = append(errs, db.R.Close())
	}
	if db.wconn != nil {
		errs = append(errs, db.wconn.Close())
	}
	if db.w != nil {
		errs = append(errs, db.w.Close())
	}
	return errors.Join(errs...)
}
