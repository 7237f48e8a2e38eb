package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"
)

// holdWriteLock runs a Write that keeps the write lock until n writers wait
// in the handle's group, so that they all find the lock busy.
func holdWriteLock(t *testing.T, db *DB, n int) {
	t.Helper()
	err := db.Write(context.Background(), func(*Tx) error { return waitPending(db, n) })
	if err != nil {
		t.Fatal(err)
	}
}

// Writers that find the write lock busy commit together in one
// transaction, and each gets its own result.
func TestGroupCommitJoinsWaitingWriters(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	const n = 16
	before := db.group.commits.Load()
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make([]error, n)
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		holdWriteLock(t, db, n)
	}()
	time.Sleep(20 * time.Millisecond) // let the Write take the lock first
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res sql.Result
			res, errs[i] = db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, ?, ?)`, fmt.Sprint("g", i), []byte("v"), i)
			if errs[i] == nil {
				ids[i], _ = res.LastInsertId()
			}
		}()
	}
	wg.Wait()
	<-hold
	seen := map[int64]bool{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if ids[i] == 0 || seen[ids[i]] {
			t.Fatalf("writer %d got rowid %d; all: %v", i, ids[i], ids)
		}
		seen[ids[i]] = true
	}
	if got := db.group.commits.Load() - before; got != 1 {
		t.Fatalf("%d waiting writers took %d transactions, want 1", n, got)
	}
	var count int
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&count); err != nil || count != n {
		t.Fatalf("rows: %d, %v; want %d", count, err, n)
	}
}

// waitPending waits until n writers wait in db's group (at least n when
// n > 0; exactly -n when n < 0).
func waitPending(db *DB, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		db.group.mu.Lock()
		k := len(db.group.pending)
		db.group.mu.Unlock()
		if n > 0 && k >= n || n < 0 && k == -n {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("waiting writers: want %d", n)
}

// A statement that fails in a group fails alone: the others commit, its
// row is not written, and its caller gets its own error.
func TestGroupCommitBadWriteFailsAlone(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	if _, err := db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES ('dup', x'00', 0)`); err != nil {
		t.Fatal(err)
	}
	const n = 9
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		holdWriteLock(t, db, n)
	}()
	time.Sleep(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprint("ok", i)
			if i == 4 {
				k = "dup" // primary key taken: this statement fails
			}
			if i == 6 {
				// WriteRow that matches nothing: sql.ErrNoRows, not a failure
				var k2 string
				errs[i] = db.WriteRow(ctx, `UPDATE t SET n = 1 WHERE k = 'absent' RETURNING k`, nil, &k2)
				return
			}
			_, errs[i] = db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, k, i)
		}()
	}
	wg.Wait()
	<-hold
	for i, err := range errs {
		switch i {
		case 4:
			if err == nil || !strings.Contains(err.Error(), "UNIQUE") {
				t.Fatalf("duplicate insert: %v, want a UNIQUE constraint error", err)
			}
		case 6:
			if !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("WriteRow matching nothing: %v, want sql.ErrNoRows", err)
			}
		default:
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
	}
	var count int
	var v []byte
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&count); err != nil || count != n-2+1 {
		t.Fatalf("rows: %d, %v; want %d", count, err, n-2+1)
	}
	if err := db.R.QueryRow(`SELECT v FROM t WHERE k = 'dup'`).Scan(&v); err != nil || string(v) != "\x00" {
		t.Fatalf("the taken row: %q, %v; it must be unchanged", v, err)
	}
}

// A waiting writer whose ctx ends leaves the group and nothing of it is
// written; the others still commit.
func TestGroupCommitCancelledWaiter(t *testing.T) {
	db := openRaw(t)
	const n = 4
	hold := make(chan struct{})
	cctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(hold)
		// Hold the lock until all n wait, cancel one, and release it only
		// once that one has left the group.
		err := db.Write(context.Background(), func(*Tx) error {
			if err := waitPending(db, n); err != nil {
				return err
			}
			cancel()
			return waitPending(db, -(n - 1))
		})
		if err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(20 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if i == 2 {
				ctx = cctx
			}
			_, errs[i] = db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, fmt.Sprint("c", i), i)
		}()
	}
	wg.Wait()
	<-hold
	var count int
	if err := db.R.QueryRow(`SELECT count(*) FROM t WHERE k = 'c2'`).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(errs[2], context.Canceled) || count != 0 {
		t.Fatalf("cancelled writer: err %v and %d rows; want context.Canceled and none", errs[2], count)
	}
	for i, err := range errs {
		if i != 2 && err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
}

// midGroupDB is the handle whose group lc_test_wait_pending looks at; called
// is closed when that function first runs.
var (
	midGroupDB     *DB
	midGroupCalled chan struct{}
	registerWait   sync.Once
)

// registerWaitPending registers lc_test_wait_pending(n), which blocks the
// statement calling it until n writers wait in midGroupDB's group.
func registerWaitPending(t *testing.T) {
	registerWait.Do(func() {
		sqlite.MustRegisterScalarFunction("lc_test_wait_pending", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			n, _ := args[0].(int64)
			close(midGroupCalled)
			return n, waitPending(midGroupDB, int(n))
		})
	})
}

// Writers that arrive while a group's transaction runs join it: the group
// takes them in before it commits instead of leaving them for the next one.
func TestGroupCommitJoinsWritersArrivingMidGroup(t *testing.T) {
	registerWaitPending(t)
	ctx := context.Background()
	db := openRaw(t)
	midGroupDB, midGroupCalled = db, make(chan struct{})
	before := db.group.commits.Load()
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		holdWriteLock(t, db, 2)
	}()
	time.Sleep(20 * time.Millisecond) // let the Write take the lock first
	var wg sync.WaitGroup
	errs := make([]error, 5)
	exec := func(i int, query string) {
		wg.Go(func() {
			_, errs[i] = db.Exec(ctx, query, fmt.Sprint("m", i), i)
		})
	}
	// The first group: two writers, one of which waits in its statement
	// until three more writers wait.
	exec(0, `INSERT INTO t (k, v, n) VALUES (?, x'01', ? + lc_test_wait_pending(3) - 3)`)
	exec(1, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`)
	<-hold
	select {
	case <-midGroupCalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the first group's statement did not run")
	}
	for i := 2; i < 5; i++ {
		exec(i, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if got := db.group.commits.Load() - before; got != 1 {
		t.Fatalf("5 writers, 3 of them arriving while the group ran, took %d transactions, want 1", got)
	}
	var count int
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&count); err != nil || count != 5 {
		t.Fatalf("rows: %d, %v; want 5", count, err)
	}
}

// With one P (a machine whose other cores are busy) the goroutine that
// leads a group never blocks before it commits; the writers the last group
// released still join the next group instead of waiting for the CPU while
// it runs group after group of one.
func TestGroupCommitOneProc(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	db := openRaw(t)
	const writers, each = 8, 100
	before := db.group.commits.Load()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, fmt.Sprint(g, "-", i), i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	commits := db.group.commits.Load() - before
	per := float64(writers*each) / float64(commits)
	t.Logf("%d writes, %d transactions: %.2f writes each", writers*each, commits, per)
	if per < 4 {
		t.Fatalf("%d writes of %d goroutines took %d transactions (%.2f writes each), want at least 4 each", writers*each, writers, commits, per)
	}
}

// WriteGroup's functions join a group with one-statement writes; one that
// fails or panics is rolled back alone, in its own caller, and the others
// commit in the one transaction.
func TestGroupCommitWriteGroup(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	before := db.group.commits.Load()
	const n = 6
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		holdWriteLock(t, db, n)
	}()
	time.Sleep(20 * time.Millisecond) // let the Write take the lock first
	var wg sync.WaitGroup
	errs := make([]error, n)
	var panicked any
	insert2 := func(tx *Tx, k string) error {
		for j := range 2 {
			if _, err := tx.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, fmt.Sprint(k, "-", j), j); err != nil {
				return err
			}
		}
		return nil
	}
	bad := errors.New("fn failed")
	for i := range n {
		wg.Go(func() {
			switch i {
			case 0, 1:
				errs[i] = db.WriteGroup(ctx, func(tx *Tx) error { return insert2(tx, fmt.Sprint("w", i)) })
			case 2: // writes, then fails: nothing of it stays
				errs[i] = db.WriteGroup(ctx, func(tx *Tx) error {
					if err := insert2(tx, "failed"); err != nil {
						return err
					}
					return bad
				})
			case 3: // writes, then panics in its caller only
				defer func() { panicked = recover() }()
				errs[i] = db.WriteGroup(ctx, func(tx *Tx) error {
					if err := insert2(tx, "panicked"); err != nil {
						return err
					}
					panic("boom")
				})
			default:
				_, errs[i] = db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, fmt.Sprint("e", i), i)
			}
		})
	}
	wg.Wait()
	<-hold
	for i, err := range errs {
		switch {
		case i == 2 && !errors.Is(err, bad):
			t.Fatalf("failing fn: %v, want its own error", err)
		case i != 2 && err != nil:
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if panicked != "boom" {
		t.Fatalf("panicking fn: recovered %v in its caller, want boom", panicked)
	}
	if got := db.group.commits.Load() - before; got != 1 {
		t.Fatalf("%d waiting writers took %d transactions, want 1", n, got)
	}
	var count, gone int
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&count); err != nil || count != 2*2+2 {
		t.Fatalf("rows: %d, %v; want %d", count, err, 2*2+2)
	}
	if err := db.R.QueryRow(`SELECT count(*) FROM t WHERE k LIKE 'failed-%' OR k LIKE 'panicked-%'`).Scan(&gone); err != nil || gone != 0 {
		t.Fatalf("rows of the failed and panicked functions: %d, %v; want none", gone, err)
	}
	// Alone, a WriteGroup is a transaction of its own.
	if err := db.WriteGroup(ctx, func(tx *Tx) error { return insert2(tx, "alone") }); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteGroup(ctx, func(tx *Tx) error {
		if err := insert2(tx, "alone-failed"); err != nil {
			return err
		}
		return bad
	}); !errors.Is(err, bad) {
		t.Fatalf("lone failing fn: %v", err)
	}
	if err := db.R.QueryRow(`SELECT count(*) FROM t WHERE k LIKE 'alone%'`).Scan(&count); err != nil || count != 2 {
		t.Fatalf("rows of the lone functions: %d, %v; want 2", count, err)
	}
}

// A WriteGroup function whose failure ended the whole transaction (SQLite
// rolls back on some errors, such as a full disk; here the function ends
// it itself) gets its own error, not that of the lost savepoint, and the
// other writers of the group are run again and commit.
func TestGroupCommitWriteGroupEndsTransaction(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	const n = 3
	hold := make(chan struct{})
	go func() {
		defer close(hold)
		holdWriteLock(t, db, n)
	}()
	time.Sleep(20 * time.Millisecond) // let the Write take the lock first
	bad := errors.New("fn failed after the transaction ended")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if i == 1 {
				errs[i] = db.WriteGroup(ctx, func(tx *Tx) error {
					if _, err := tx.Exec(ctx, `ROLLBACK`); err != nil {
						return err
					}
					return bad
				})
				return
			}
			_, errs[i] = db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, x'01', ?)`, fmt.Sprint("r", i), i)
		})
	}
	wg.Wait()
	<-hold
	if !errors.Is(errs[1], bad) {
		t.Fatalf("function that ended the transaction: %v, want its own error", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
	}
	var count int
	if err := db.R.QueryRow(`SELECT count(*) FROM t`).Scan(&count); err != nil || count != 2 {
		t.Fatalf("rows: %d, %v; want 2", count, err)
	}
}
