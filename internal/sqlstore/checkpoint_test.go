package sqlstore

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Commits reach the database file while the handle stays open and long
// before SQLite's own checkpoint would copy them (at 4000 WAL pages), and
// the WAL stays bounded under a steady stream of commits.
func TestBackgroundCheckpoint(t *testing.T) {
	ctx := context.Background()
	db := openRaw(t)
	before := fileSize(t, db.Path)
	// Two or three WAL pages per commit, well under 1000 pages in all, and
	// enough rows that the database file must grow to hold them.
	for i := range 3 * ckptEvery {
		if _, err := db.Exec(ctx, `INSERT INTO t (k, v) VALUES (?, ?)`, fmt.Sprint("k", i), make([]byte, 500)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.CheckFor(t, 10*time.Second, 10*time.Millisecond, "commits copied into the database file", func() bool {
		return fileSize(t, db.Path) > before
	})
	var frames int
	if err := db.R.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&frames); err != nil || frames != 3*ckptEvery {
		t.Fatalf("rows = %d, %v; want %d", frames, err, 3*ckptEvery)
	}

	payload := make([]byte, 3000)
	const commits = 10000
	for i := range commits {
		if _, err := db.Exec(ctx, `INSERT INTO t (k, v) VALUES (?, ?)`, fmt.Sprint("big", i), payload); err != nil {
			t.Fatal(err)
		}
	}
	// SQLite rewinds the WAL once a checkpoint has copied all of it, which
	// under a steady stream only the catch-up under the write lock allows;
	// without it these commits of about 3 pages each make a 120 MB WAL.
	// The file keeps its largest size until the next rewind.
	n := fileSize(t, db.Path+"-wal")
	t.Logf("WAL file after %d commits: %d bytes", commits, n)
	if n > 32<<20 {
		t.Errorf("WAL is %d bytes after %d commits", n, commits)
	}
}

// Handles that commit too little to start a background checkpoint, while
// another handle keeps the store open (as up does, so no close is the last
// one), still leave a bounded WAL: SQLite's own checkpoint is the backstop.
func TestShortLivedWritersKeepTheWALBounded(t *testing.T) {
	ctx := context.Background()
	keeper := openRaw(t)
	dir := keeper.Dir
	// Once it has read, the keeper holds its shared lock on the database
	// file, so no other handle's close is the last one.
	if _, err := keeper.Exec(ctx, `INSERT INTO t (k) VALUES ('keeper')`); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 3000)
	const handles, each = 300, ckptEvery / 4
	for h := range handles {
		db, err := Open(ctx, dir, rawFormat, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range each {
			if _, err := db.Exec(ctx, `INSERT INTO t (k, v) VALUES (?, ?)`, fmt.Sprint(h, "-", i), payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// About 2 pages per commit: 4800 commits make a 40 MB WAL unless
	// something checkpoints.
	n := fileSize(t, keeper.Path+"-wal")
	t.Logf("WAL file after %d handles of %d commits: %d bytes", handles, each, n)
	if n > 24<<20 {
		t.Errorf("WAL is %d bytes", n)
	}
}
