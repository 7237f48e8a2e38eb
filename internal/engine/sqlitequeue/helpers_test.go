package sqlitequeue_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// The tests of this file's package drive the engine through the public
// API (queue.New over the engine's own handle, as localcloud's tools open
// it) and read its tables through the engine's handle.

var ctx = context.Background()

// handles holds the engine's handle under each public one the tests open.
var handles sync.Map // *queue.Queue -> *sqlitequeue.Queue

// openQueue opens the queue at loc (a directory or "memory:NAME") as
// queue.Open does, keeping the engine's handle for engineOf.
func openQueue(ctx context.Context, loc string, opts ...queue.Option) (*queue.Queue, error) {
	cfg, err := queue.EngineConfig(loc, opts...)
	if err != nil {
		return nil, err
	}
	e, err := sqlitequeue.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	q, err := queue.New(e, opts...)
	if err != nil {
		_ = e.Close()
		return nil, err
	}
	handles.Store(q, e)
	return q, nil
}

// openQueueMemory opens the in-memory queue called name, as
// queue.OpenMemory does.
func openQueueMemory(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
	return openQueue(ctx, queue.MemoryPrefix+name, opts...)
}

// engineOf is the engine's handle under q, which openQueue opened; nil
// for another.
func engineOf(q *queue.Queue) *sqlitequeue.Queue {
	e, _ := handles.Load(q)
	eq, _ := e.(*sqlitequeue.Queue)
	return eq
}

// dbOf is the store plumbing under q, which openQueue opened.
func dbOf(q *queue.Queue) *sqlstore.DB { return engineOf(q).DB() }

// hwTimeout bounds every wait: only reached when something is broken;
// hwNoPoll is a fallback poll so long that only a wake-up explains a
// prompt return.
const (
	hwTimeout = 20 * time.Second
	hwNoPoll  = 30 * time.Second
)

// hwOpen opens the queue in dir for the test, closed at its end.
func hwOpen(t testing.TB, dir string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := openQueue(ctx, dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// hwConsume runs q.Consume in the background until the test ends.
func hwConsume(t testing.TB, q *queue.Queue, h queue.Handler, opts ...queue.ConsumeOption) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- q.Consume(cctx, h, opts...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(hwTimeout):
			t.Error("Consume did not return after cancel")
		}
	})
}

// hwCount returns the number of rows in the store, in flight or not.
func hwCount(t testing.TB, q *queue.Queue) int {
	t.Helper()
	var n int
	if err := dbOf(q).R.QueryRow(`SELECT COUNT(*) FROM messages`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// hwLog is a concurrency-safe slog text buffer.
type hwLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *hwLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *hwLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *hwLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// openFuzzQueue opens one real store for a fuzz worker; every input of the
// worker uses it.
func openFuzzQueue(f *testing.F) *queue.Queue {
	f.Helper()
	q, err := openQueue(ctx, filepath.Join(f.TempDir(), "queue"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = q.Close() })
	return q
}

// wantFuzzCode checks that err is an *bindings.Error with code, and, when
// field is not "", that its message starts with "field: ".
func wantFuzzCode(t *testing.T, err error, code bindings.Code, field string) *bindings.Error {
	t.Helper()
	var be *bindings.Error
	if !errors.As(err, &be) || be.Code != code || !errors.Is(err, &bindings.Error{Code: code}) {
		t.Fatalf("error %T %v; want an *bindings.Error with code %s", err, err, code)
	}
	if field != "" && !strings.HasPrefix(be.Msg, field+": ") {
		t.Fatalf("message %q does not start with the field %q", be.Msg, field)
	}
	return be
}
