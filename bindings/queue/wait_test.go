package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"github.com/localcloud/localcloud/internal/hintserver"
	"github.com/localcloud/localcloud/internal/hintsrc"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/notify"
)

// hwTimeout is the deadline of every wait in the hint tests: only reached
// when something is broken.
const hwTimeout = 20 * time.Second

// hwNoPoll is a fallback poll so long that only a wake-up can explain a
// prompt return.
const hwNoPoll = 30 * time.Second

// hwServer starts an embedded hint server on a free loopback port.
func hwServer(t testing.TB) *hintserver.Server {
	t.Helper()
	return hwServerOn(t, "127.0.0.1:0")
}

func hwServerOn(t testing.TB, listen string) *hintserver.Server {
	t.Helper()
	s, err := hintserver.StartServer(context.Background(), hintserver.ServerOptions{Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// hwOpen opens a queue handle closed (after an integrity check) at cleanup.
func hwOpen(t testing.TB, dir string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := queue.Open(context.Background(), dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var res string
		if err := queue.ExportDB(q).R.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
			t.Errorf("integrity_check of %s: %q, %v", q.Path(), res, err)
		}
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	return q
}

// hwForeign opens the store of dir as a foreign writer does: its own
// database/sql connection, the spec's SQL, nothing of localcloud.
func hwForeign(t testing.TB, dir string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitequeue.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// hwForeignInsert inserts one text message with the spec's send statement,
// due after delay (0: at once), and returns its commit time.
func hwForeignInsert(t testing.TB, db *sql.DB, text string, delay time.Duration) time.Time {
	t.Helper()
	now := time.Now()
	_, err := db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES ('text', ?1, ?2, ?3, 0)`, text, now.UnixMilli(), now.Add(delay).UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// hwSource starts the `up`-side hint source for the queue in dir, publishing
// on url, on a handle of its own.
func hwSource(t testing.TB, url, dir, subject string) *hintsrc.Source {
	t.Helper()
	pub, err := notify.DialPublisher(url, "", notify.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return hwSourcePub(t, pub, dir, subject)
}

// hwSourcePub is hwSource with a publisher the caller owns.
func hwSourcePub(t testing.TB, pub *notify.Publisher, dir, subject string) *hintsrc.Source {
	t.Helper()
	src, err := hintsrc.New(hintsrc.Options{Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close) // runs before pub.Close and the handle's close
	upQ, eq, err := sqlitetools.OpenQueue(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = upQ.Close() })
	if err := src.Add(filepath.Base(dir), subject, hwProbe{eq}); err != nil {
		t.Fatal(err)
	}
	return src
}

// hwProbe gives the hint source the probe of a queue, as up's engine tools
// do.
type hwProbe struct{ eq *sqlitequeue.Queue }

func (p hwProbe) Probe(ctx context.Context) (engine.Probe, error) {
	return sqlitetools.Probe(ctx, p.eq)
}

// hwSubscribed waits until q's shared hint subscription receives hints, by
// publishing probe hints on subject until one wakes it.
func hwSubscribed(t testing.TB, q *queue.Queue, url, subject string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(hwTimeout)
	for {
		n := queue.ExportHintWakes(q)
		if err := nc.Publish(subject, []byte(`{"binding":"probe","due":-1,"at":0}`)); err == nil {
			_ = nc.FlushTimeout(time.Second)
		}
		probe := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(probe) {
			if queue.ExportHintWakes(q) > n {
				return
			}
			time.Sleep(time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription on %s never received a probe hint", subject)
		}
	}
}

// hwWaiting waits until n goroutines of q are blocked waiting for a wake-up.
func hwWaiting(t testing.TB, q *queue.Queue, n int) {
	t.Helper()
	testutil.CheckFor(t, hwTimeout, time.Millisecond, fmt.Sprintf("%d waiter(s) blocked", n), func() bool { return queue.ExportWaiting(q) == n })
}

type hwResult struct {
	msgs []queue.Message
	err  error
	at   time.Time
}

func hwReceiveWait(q *queue.Queue, ctx context.Context, max int, wait time.Duration, opts ...queue.ReceiveOption) <-chan hwResult {
	out := make(chan hwResult, 1)
	go func() {
		msgs, err := q.ReceiveWait(ctx, max, wait, opts...)
		out <- hwResult{msgs, err, time.Now()}
	}()
	return out
}

func hwGet(t testing.TB, ch <-chan hwResult) hwResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hwTimeout):
		t.Fatal("ReceiveWait did not return")
		return hwResult{}
	}
}

func TestReceiveWaitZeroIsOneReceive(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir())
	start := time.Now()
	msgs, err := q.ReceiveWait(context.Background(), 1, 0)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("ReceiveWait on an empty queue = %v, %v", msgs, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("wait 0 took %s", d)
	}
	if _, err := q.ReceiveWait(context.Background(), 1, -time.Second); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("negative wait: %v, want INVALID_INPUT", err)
	}
	if _, err := q.ReceiveWait(context.Background(), 11, time.Second); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("max 11: %v, want INVALID_INPUT", err)
	}
}

func TestReceiveWaitReturnsAtOnceWhenDue(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir())
	if err := q.Send(context.Background(), queue.Text("ready")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.ReceiveWait(context.Background(), 10, hwNoPoll)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "ready" {
		t.Fatalf("ReceiveWait = %v, %v", msgs, err)
	}
}

func TestReceiveWaitTimesOutEmpty(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(20*time.Millisecond))
	start := time.Now()
	msgs, err := q.ReceiveWait(context.Background(), 1, 150*time.Millisecond)
	d := time.Since(start)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("ReceiveWait = %v, %v; want empty", msgs, err)
	}
	if d < 150*time.Millisecond || d > 5*time.Second {
		t.Fatalf("ReceiveWait(150ms) returned after %s", d)
	}
}

func TestReceiveWaitContextCanceled(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	ctx, cancel := context.WithCancel(context.Background())
	res := hwReceiveWait(q, ctx, 1, time.Minute)
	hwWaiting(t, q, 1)
	cancel()
	r := hwGet(t, res)
	if !errors.Is(r.err, context.Canceled) || len(r.msgs) != 0 {
		t.Fatalf("ReceiveWait after cancel = %v, %v; want context.Canceled", r.msgs, r.err)
	}
}

// TestReceiveWaitInProcessWake: a Send on another handle of this process
// wakes the waiter at once, with no NATS and no poll.
func TestReceiveWaitInProcessWake(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"file", "memory"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var waiter, sender *queue.Queue
			if mode == "file" {
				dir := t.TempDir()
				waiter = hwOpen(t, dir, queue.WithPollInterval(hwNoPoll))
				sender = hwOpen(t, dir)
			} else {
				name := fmt.Sprintf("hw-wake-%d", time.Now().UnixNano())
				waiter = hwOpenMemory(t, name, queue.WithPollInterval(hwNoPoll))
				sender = hwOpenMemory(t, name)
			}
			res := hwReceiveWait(waiter, context.Background(), 1, time.Minute)
			hwWaiting(t, waiter, 1)
			if err := sender.Send(context.Background(), queue.Text("wake")); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			r := hwGet(t, res)
			if r.err != nil || len(r.msgs) != 1 || r.msgs[0].Payload.Data != "wake" {
				t.Fatalf("ReceiveWait = %v, %v", r.msgs, r.err)
			}
			if d := r.at.Sub(sent); d > time.Second {
				t.Fatalf("woken %s after the send; want well under the 30 s poll", d)
			}
		})
	}
}

func hwOpenMemory(t testing.TB, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := queue.OpenMemory(context.Background(), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// TestReceiveWaitForeignWriterThroughHints: a row inserted with the spec's
// SQL on a foreign connection reaches a waiter only through the hint source
// (inotify + data_version) and NATS: the waiter has no in-process wake for
// it and a 30 s poll.
func TestReceiveWaitForeignWriterThroughHints(t *testing.T) {
	t.Parallel()
	srv := hwServer(t)
	dir := t.TempDir()
	subject := notify.Subject("test", "foreign")
	waiter := hwOpen(t, dir, queue.WithHints(srv.URL(), "", subject), queue.WithPollInterval(hwNoPoll))
	hwSource(t, srv.URL(), dir, subject)
	hwSubscribed(t, waiter, srv.URL(), subject)
	foreign := hwForeign(t, dir)

	res := hwReceiveWait(waiter, context.Background(), 1, time.Minute)
	hwWaiting(t, waiter, 1)
	committed := hwForeignInsert(t, foreign, "from outside", 0)
	r := hwGet(t, res)
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].Payload.Data != "from outside" {
		t.Fatalf("ReceiveWait = %v, %v", r.msgs, r.err)
	}
	if d := r.at.Sub(committed); d > 5*time.Second {
		t.Fatalf("woken %s after the foreign commit; want well under the 30 s poll", d)
	}
}

// TestReceiveWaitLeaseExpiry: a message received and never acked is offered
// to a waiter on another handle right when its lease ends.
func TestReceiveWaitLeaseExpiry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := hwOpen(t, dir)
	waiter := hwOpen(t, dir, queue.WithPollInterval(hwNoPoll))
	if err := dead.Send(context.Background(), queue.Text("orphan")); err != nil {
		t.Fatal(err)
	}
	got, err := dead.Receive(context.Background(), 1, queue.ReceiveVisibility(200*time.Millisecond))
	if err != nil || len(got) != 1 {
		t.Fatalf("Receive = %v, %v", got, err)
	}
	leaseEnd := hwVisibleAt(t, waiter, got[0].ID)
	r := hwGet(t, hwReceiveWait(waiter, context.Background(), 1, time.Minute))
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].ID != got[0].ID || r.msgs[0].Attempt != 2 {
		t.Fatalf("ReceiveWait = %+v, %v; want the orphan at attempt 2", r.msgs, r.err)
	}
	if d := r.at.Sub(leaseEnd); d < 0 || d > time.Second {
		t.Fatalf("redelivered %s after the lease end; want 0..1s", d)
	}
}

// TestReceiveWaitLeaseExpiryWhileWaiting: the lease is taken while the
// waiter already waits, so only the hint source's timer knows when it ends.
func TestReceiveWaitLeaseExpiryWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := hwServer(t)
	dir := t.TempDir()
	subject := notify.Subject("test", "lease")
	waiter := hwOpen(t, dir, queue.WithHints(srv.URL(), "", subject), queue.WithPollInterval(hwNoPoll))
	hwSource(t, srv.URL(), dir, subject)
	hwSubscribed(t, waiter, srv.URL(), subject)

	// A consumer in another process took the message and died: the row is
	// leased, and nothing in this process knows when the lease ends.
	foreign := hwForeign(t, dir)
	now := time.Now()
	leaseEnd := time.UnixMilli(now.Add(300 * time.Millisecond).UnixMilli())
	res := hwReceiveWait(waiter, context.Background(), 1, time.Minute)
	hwWaiting(t, waiter, 1)
	if _, err := foreign.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle)
VALUES ('text', 'leased', ?1, ?2, 1, '00000000-0000-4000-8000-000000000000')`, now.UnixMilli(), leaseEnd.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	r := hwGet(t, res)
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].Attempt != 2 {
		t.Fatalf("ReceiveWait = %+v, %v; want the leased message at attempt 2", r.msgs, r.err)
	}
	if d := r.at.Sub(leaseEnd); d < 0 || d > time.Second {
		t.Fatalf("redelivered %s after the lease end; want 0..1s", d)
	}
}

// hwVisibleAt reads a message's visible_at (its lease end).
func hwVisibleAt(t testing.TB, q *queue.Queue, id int64) time.Time {
	t.Helper()
	var v int64
	if err := queue.ExportDB(q).R.QueryRow(`SELECT visible_at FROM messages WHERE id = ?`, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(v)
}
