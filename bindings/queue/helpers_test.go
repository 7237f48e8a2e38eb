package queue_test

import (
	"context"
	"database/sql"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/localcloud/localcloud/bindings/queue"
)

var ctx = context.Background()

// openFile opens the queue in dir for the test, closed at its end.
func openFile(t *testing.T, dir string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := queue.Open(ctx, dir, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// rawDB opens the database file at path the way another program would:
// plain database/sql on the "sqlite" driver.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
