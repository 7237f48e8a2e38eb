package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"testing"
	"time"
)

var rawFormat = Format{
	Marker: "localtest.v1",
	File:   "test.sqlite",
	Schema: `CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB, n INTEGER);`,
	OpCode: "TEST_FAILED",
}

func openRaw(t *testing.T) *DB {
	t.Helper()
	db, err := Open(context.Background(), t.TempDir(), rawFormat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// More readers than pinned connections share them, each read sees its own
// row, and the rows' bytes stay the caller's.
func TestReadRowConcurrent(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	for i := range 50 {
		if _, err := db.Exec(ctx, `INSERT INTO t (k, v, n) VALUES (?, ?, ?)`, fmt.Sprint("k", i), []byte(fmt.Sprint("v", i)), i); err != nil {
			t.Fatal(err)
		}
	}
	const q = `SELECT v, n FROM t WHERE k = ?1`
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	kept := make([][]byte, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				k := (g + i) % 60 // 50..59 do not exist
				var row [2]driver.Value
				found, err := db.ReadRow(ctx, q, []driver.NamedValue{{Ordinal: 1, Value: fmt.Sprint("k", k)}}, row[:])
				if err != nil {
					errs <- err
					return
				}
				if found != (k < 50) {
					errs <- fmt.Errorf("k%d: found = %v", k, found)
					return
				}
				if found && (string(row[0].([]byte)) != fmt.Sprint("v", k) || row[1].(int64) != int64(k)) {
					errs <- fmt.Errorf("k%d: row %q %v", k, row[0], row[1])
					return
				}
				if found && i == 0 {
					kept[g] = row[0].([]byte)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g, b := range kept {
		if b != nil && string(b) != fmt.Sprint("v", g%60) {
			t.Errorf("goroutine %d: a value read earlier changed to %q", g, b)
		}
	}
	if n := db.raw.made; n > rawReaders() {
		t.Errorf("%d pinned readers, limit %d", n, rawReaders())
	}
}

// A read waiting for a pinned connection gives up with its context, and a
// closed handle refuses reads instead of hanging.
func TestReadRowWaitAndClose(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	var held []*rawReader
	for range rawReaders() {
		r, err := db.raw.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	var row [1]driver.Value
	if _, err := db.ReadRow(short, `SELECT n FROM t WHERE k = ?1`, []driver.NamedValue{{Ordinal: 1, Value: "x"}}, row[:]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadRow with every reader busy = %v, want the context's deadline", err)
	}
	for _, r := range held {
		db.raw.put(r)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := &DB{raw: db.raw}
	if _, err := fresh.ReadRow(ctx, `SELECT 1`, nil, row[:]); !errors.Is(err, errClosed) {
		t.Fatalf("ReadRow after Close = %v, want %v", err, errClosed)
	}
}

// Reopening a store whose WAL went away with its last handle leaves (once
// the background seed is written) a commit in the new WAL (so reads take the database size from it) and the
// meta table as it was.
func TestOpenSeedsAnEmptyWAL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(ctx, dir, rawFormat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `INSERT INTO meta (key, value) VALUES ('app', 'x')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(db.Path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the last close left the WAL: %v", err)
	}
	db, err = Open(ctx, dir, rawFormat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	<-db.seed.done // written in the background, after Open returned
	if fi, err := os.Stat(db.Path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("WAL after the open: %v, %v; want a commit in it", fi, err)
	}
	rows, err := db.R.QueryContext(ctx, `SELECT key || '=' || value FROM meta ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var kv string
		if err := rows.Scan(&kv); err != nil {
			t.Fatal(err)
		}
		got = append(got, kv)
	}
	if want := []string{"app=x", "format=" + rawFormat.Marker}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("meta = %q, want %q", got, want)
	}
}

// A close right after the open, while the background seed may be being
// written, still ends with the last connection's checkpoint: no -wal is
// left behind. (A seed that prepared its BEGIN after the close had closed
// the writer's statements kept the writer from closing, in 9 closes of 10.)
func TestCloseRightAfterOpenLeavesNoWAL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for i := range 50 {
		db, err := Open(ctx, dir, rawFormat, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(db.Path + "-wal"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("close %d left the -wal (%v, %v)", i, fi, err)
		}
	}
}
