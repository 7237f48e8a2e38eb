package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/notify"
)

// hwConsume runs q.Consume in the background; stop cancels it and returns
// Consume's error.
func hwConsume(t testing.TB, q *queue.Queue, h queue.Handler, opts ...queue.ConsumeOption) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Consume(ctx, h, opts...) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(hwTimeout):
				err = errors.New("Consume did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// hwCount returns the number of rows in the store, in flight or not.
func hwCount(t testing.TB, q *queue.Queue) int {
	t.Helper()
	var n int
	if err := queue.ExportDB(q).R.QueryRow(`SELECT COUNT(*) FROM messages`).Scan(&n); err != nil {
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

func TestConsumeOptionsValidated(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir())
	ok := func(context.Context, queue.Message) error { return nil }
	for name, tc := range map[string]struct {
		h    queue.Handler
		opts []queue.ConsumeOption
	}{
		"nil handler":  {nil, nil},
		"workers 0":    {ok, []queue.ConsumeOption{queue.ConsumeWorkers(0)}},
		"workers 257":  {ok, []queue.ConsumeOption{queue.ConsumeWorkers(queue.MaxWorkers + 1)}},
		"batch 11":     {ok, []queue.ConsumeOption{queue.ConsumeBatchSize(11)}},
		"batch 0":      {ok, []queue.ConsumeOption{queue.ConsumeBatchSize(0)}},
		"batch -1":     {ok, []queue.ConsumeOption{queue.ConsumeBatchSize(-1)}},
		"visibility 0": {ok, []queue.ConsumeOption{queue.ConsumeVisibility(0)}},
		"poll 0":       {ok, []queue.ConsumeOption{queue.ConsumePollInterval(0)}},
	} {
		err := q.Consume(context.Background(), tc.h, tc.opts...)
		if !errors.Is(err, bindings.ErrInvalidInput) {
			t.Errorf("%s: Consume = %v, want INVALID_INPUT", name, err)
		}
	}
}

// TestConsumeEachMessageOnce: 1,000 messages, 8 workers, every message
// handled exactly once and acked.
func TestConsumeEachMessageOnce(t *testing.T) {
	t.Parallel()
	const n = 1000
	dir := t.TempDir()
	producer := hwOpen(t, dir)
	consumer := hwOpen(t, dir, queue.WithPollInterval(hwNoPoll))
	var mu sync.Mutex
	seen := make(map[string]int, n)
	var inFlight, maxInFlight atomic.Int32
	stop := hwConsume(t, consumer, func(_ context.Context, m queue.Message) error {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			old := maxInFlight.Load()
			if cur <= old || maxInFlight.CompareAndSwap(old, cur) {
				break
			}
		}
		mu.Lock()
		seen[m.Payload.Data]++
		mu.Unlock()
		time.Sleep(100 * time.Microsecond) // some work, so workers overlap
		return nil
	}, queue.ConsumeWorkers(8))

	start := time.Now()
	for i := range n {
		if err := producer.Send(context.Background(), queue.Text(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Since(start)
	// Generous: the race detector slows SQLite (pure Go) down ~20 times.
	testutil.CheckFor(t, 3*hwTimeout, time.Millisecond, "all messages handled and acked", func() bool {
		mu.Lock()
		done := len(seen) == n
		mu.Unlock()
		return done && hwCount(t, consumer) == 0
	})
	t.Logf("sent %d in %s, all handled after %s", n, sent, time.Since(start))
	if err := stop(); err != nil {
		t.Fatalf("Consume returned %v after cancel, want nil", err)
	}
	for i := range n {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Fatalf("message %d handled %d times", i, c)
		}
	}
	if m := maxInFlight.Load(); m < 2 || m > 8 {
		t.Fatalf("at most %d handlers ran at once, want 2..8", m)
	}
}

// TestConsumeErrorNacks: a failing handler's message comes back at once
// (the nack wakes the consumer; the poll is 30 s) with attempt 2.
func TestConsumeErrorNacks(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	var logs hwLog
	attempts := make(chan int, 4)
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		attempts <- m.Attempt
		if m.Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	}, queue.ConsumeLogger(logs.logger()))
	if err := q.Send(context.Background(), queue.Text("retry me")); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		select {
		case got := <-attempts:
			if got != want {
				t.Fatalf("delivery %d has attempt %d", want, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("delivery %d did not come within 5 s", want)
		}
	}
	testutil.CheckFor(t, hwTimeout, time.Millisecond, "the message acked", func() bool { return hwCount(t, q) == 0 })
	if !bytes.Contains([]byte(logs.String()), []byte("transient")) {
		t.Fatalf("handler error not logged:\n%s", logs.String())
	}
}

// TestConsumeRecoversPanic: a panicking handler does not kill Consume; the
// message is nacked and redelivered.
func TestConsumeRecoversPanic(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	var logs hwLog
	var handled atomic.Int32
	stop := hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		if m.Attempt == 1 {
			panic("boom")
		}
		handled.Add(1)
		return nil
	}, queue.ConsumeLogger(logs.logger()))
	if err := q.Send(context.Background(), queue.Text("explosive")); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, hwTimeout, time.Millisecond, "the redelivery handled and acked", func() bool {
		return handled.Load() == 1 && hwCount(t, q) == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := logs.String(); !bytes.Contains([]byte(s), []byte("boom")) || !bytes.Contains([]byte(s), []byte("panicked")) {
		t.Fatalf("panic not logged:\n%s", s)
	}
}

// TestConsumeCancelLetsHandlersFinish: cancelling Consume's ctx stops
// claiming but the handler in flight keeps an uncancelled context, finishes,
// and its message is acked before Consume returns.
func TestConsumeCancelLetsHandlersFinish(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir(), queue.WithPollInterval(hwNoPoll))
	started := make(chan struct{})
	release := make(chan struct{})
	var handlerCtxErr atomic.Value
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), hwKey{}, "v"))
	done := make(chan error, 1)
	var calls atomic.Int32
	go func() {
		done <- q.Consume(ctx, func(hctx context.Context, m queue.Message) error {
			calls.Add(1)
			if hctx.Value(hwKey{}) != "v" {
				return errors.New("handler context lost Consume's values")
			}
			close(started)
			<-release
			handlerCtxErr.Store(fmt.Sprint(hctx.Err()))
			return nil
		})
	}()
	if err := q.Send(context.Background(), queue.Text("slow")); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Consume returned (%v) while its handler was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	// Sent after the cancel: must not be claimed.
	if err := q.Send(context.Background(), queue.Text("after cancel")); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Consume = %v, want nil after cancel", err)
		}
	case <-time.After(hwTimeout):
		t.Fatal("Consume did not return after its handler finished")
	}
	if got := handlerCtxErr.Load(); got != "<nil>" {
		t.Fatalf("handler context error after cancel = %v, want nil", got)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler ran %d times, want 1", c)
	}
	msgs, err := q.Receive(context.Background(), 10)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "after cancel" || msgs[0].Attempt != 1 {
		t.Fatalf("left in the queue: %+v, %v; want only the unclaimed message", msgs, err)
	}
}

type hwKey struct{}

// TestConsumeReturnsWhenQueueClosed: closing the handle under a running
// Consume ends it with an error instead of a retry loop.
func TestConsumeReturnsWhenQueueClosed(t *testing.T) {
	t.Parallel()
	q, err := queue.Open(context.Background(), t.TempDir(), queue.WithPollInterval(hwNoPoll))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(context.Background(), func(context.Context, queue.Message) error { return nil })
	}()
	hwWaiting(t, q, 1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, bindings.ErrQueueOperationFailed) {
			t.Fatalf("Consume after Close = %v, want QUEUE_OPERATION_FAILED", err)
		}
	case <-time.After(hwTimeout):
		t.Fatal("Consume did not return after Close")
	}
}

// TestConsumeLeaseExpiryRedelivers: a message whose consumer died (received,
// never acked) is handled right when its lease ends.
func TestConsumeLeaseExpiryRedelivers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := hwOpen(t, dir)
	q := hwOpen(t, dir, queue.WithPollInterval(hwNoPoll))
	if err := dead.Send(context.Background(), queue.Text("orphan")); err != nil {
		t.Fatal(err)
	}
	got, err := dead.Receive(context.Background(), 1, queue.ReceiveVisibility(200*time.Millisecond))
	if err != nil || len(got) != 1 {
		t.Fatalf("Receive = %v, %v", got, err)
	}
	leaseEnd := hwVisibleAt(t, q, got[0].ID)
	handled := make(chan time.Time, 1)
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		handled <- time.Now()
		return nil
	})
	select {
	case at := <-handled:
		if d := at.Sub(leaseEnd); d < 0 || d > time.Second {
			t.Fatalf("handled %s after the lease end, want 0..1s", d)
		}
	case <-time.After(hwTimeout):
		t.Fatal("orphan never redelivered")
	}
}

// TestConsumeHintsResumeWhenNATSComesBack: Consume starts with no NATS
// server at its URL; once a server starts on that port, a message from a
// foreign writer reaches it through hints, long before the 30 s poll.
func TestConsumeHintsResumeWhenNATSComesBack(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	url := "nats://" + addr
	dir := t.TempDir()
	subject := notify.Subject("test", "comeback")
	q := hwOpen(t, dir, queue.WithHints(url, "", subject))
	handled := make(chan time.Time, 1)
	hwConsume(t, q, func(_ context.Context, m queue.Message) error {
		handled <- time.Now()
		return nil
	}, queue.ConsumePollInterval(hwNoPoll))
	hwWaiting(t, q, 1)
	hwSource(t, url, dir, subject) // its publisher dials a server that is not up yet

	hwServerOn(t, addr)
	hwSubscribed(t, q, url, subject)
	hwWaiting(t, q, 1)
	committed := hwForeignInsert(t, hwForeign(t, dir), "after the comeback", 0)
	select {
	case at := <-handled:
		if d := at.Sub(committed); d > 5*time.Second {
			t.Fatalf("handled %s after the commit, want well under the 30 s poll", d)
		}
	case <-time.After(hwTimeout):
		t.Fatal("message never handled")
	}
}

// TestConsumeIdleUsesNoCPU: an idle consumer (1 s poll, NATS subscribed)
// sleeps: under 50 ms of process CPU over 2 s. Not parallel: it measures
// the whole process.
func TestConsumeIdleUsesNoCPU(t *testing.T) {
	srv := hwServer(t)
	subject := notify.Subject("test", "idle")
	q := hwOpen(t, t.TempDir(), queue.WithHints(srv.URL(), "", subject))
	hwConsume(t, q, func(context.Context, queue.Message) error { return nil },
		queue.ConsumeWorkers(8), queue.ConsumePollInterval(time.Second))
	hwSubscribed(t, q, srv.URL(), subject)
	hwWaiting(t, q, 1)
	cpu := hwCPU(t)
	time.Sleep(2 * time.Second) // the measured idle period, not a synchronisation
	used := hwCPU(t) - cpu
	t.Logf("idle Consume used %s of CPU in 2 s", used)
	if used > 50*time.Millisecond {
		t.Fatalf("idle Consume used %s of CPU in 2 s, want < 50ms", used)
	}
}

// hwCPU returns the process's user+system CPU time so far.
func hwCPU(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
