package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// createCrashEnv switches TestCreateCrashHelper into the helper process.
const createCrashEnv = "LOCALCLOUD_TEST_CREATE_CRASH_DIR"

// TestCreateCrashHelper is the helper process of
// TestKilledWhileCreatingInWAL: on the empty database file of a new store
// it does what a store's first open does, up to the middle of the
// transaction that creates the tables: the switch to WAL, then table
// pages spilled into the -wal (a tiny page cache) with no commit yet. Then
// it waits to be killed.
func TestCreateCrashHelper(t *testing.T) {
	dir := os.Getenv(createCrashEnv)
	if dir == "" {
		t.Skip("helper process of TestKilledWhileCreatingInWAL")
	}
	fail := func(what string, err error) {
		fmt.Println(what+":", err)
		os.Exit(1)
	}
	path := filepath.Join(dir, sqlitequeue.FileName)
	db, err := sql.Open("sqlite", "file://"+path)
	if err != nil {
		fail("open", err)
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		fail("conn", err)
	}
	for _, q := range []string{"PRAGMA journal_mode=WAL", "PRAGMA cache_size=2", "BEGIN IMMEDIATE",
		"CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)", "CREATE TABLE filler (b BLOB)"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			fail(q, err)
		}
	}
	for range 64 {
		if _, err := c.ExecContext(ctx, "INSERT INTO filler VALUES (zeroblob(4000))"); err != nil {
			fail("insert", err)
		}
	}
	fmt.Println("spilled")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	os.Exit(2)
}

// TestKilledWhileCreatingInWAL: a new store switches to WAL before it
// creates its tables (one rollback-journal transaction instead of two), so
// a process killed between the two leaves a database of no tables with a
// -wal of uncommitted frames and its -shm. The next open finds nothing of
// another program there and creates the store.
func TestKilledWhileCreatingInWAL(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "q")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sqlitequeue.FileName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := testutil.StartChild(t, "creating writer", "TestCreateCrashHelper", createCrashEnv+"="+dir)
	c.Expect(t, "spilled", time.Minute)
	if err := c.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.Done
	for _, side := range []string{"-wal", "-shm"} {
		if fi, err := os.Stat(path + side); err != nil || fi.Size() == 0 {
			t.Fatalf("the killed writer left no non-empty %s (stat: %v)", side, err)
		}
	}
	ctx := context.Background()
	q, err := queue.Open(ctx, dir)
	if err != nil {
		t.Fatalf("open after a kill during the creation: %v", err)
	}
	defer q.Close()
	if err := q.Send(ctx, queue.Text("after")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "after" {
		t.Fatalf("receive after the reopen: %v, %d messages", err, len(msgs))
	}
}

// TestOpenCreatesAMissingObject: an open skips the format's DDL only when
// every object it creates is there; a store missing one of them (here
// localcloud's own order index, as in a store a spec-exact program wrote)
// gets it back.
func TestOpenCreatesAMissingObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "q")
	q, err := queue.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sqlitequeue.FileName)
	index := func() int {
		db, err := sql.Open("sqlite", "file://"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE name = 'lc_messages_fresh'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	db, err := sql.Open("sqlite", "file://"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP INDEX lc_messages_fresh"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := index(); n != 0 {
		t.Fatalf("the index is still there after DROP INDEX (%d)", n)
	}
	if q, err = queue.Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if n := index(); n != 1 {
		t.Fatalf("the open did not create the missing index lc_messages_fresh (%d found)", n)
	}
}
