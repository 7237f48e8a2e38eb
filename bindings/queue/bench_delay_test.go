package queue_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/notify"
)

// Environment of the delayed-wake helper process.
const (
	delayHelperDirEnv     = "LOCALCLOUD_QUEUE_DELAY_HELPER_DIR"
	delayHelperURLEnv     = "LOCALCLOUD_QUEUE_DELAY_HELPER_NATS"
	delayHelperSubjectEnv = "LOCALCLOUD_QUEUE_DELAY_HELPER_SUBJECT"
)

const (
	delayBenchMessages = 200
	delayBenchFirst    = 2 * time.Second       // the first message's delay
	delayBenchStep     = 10 * time.Millisecond // 200 messages: due over 2..4 s
)

// BenchmarkDelayedWake: 200 messages sent with delays spread over 2-4 s,
// consumed by Consume in another OS process (re-executed test binary) that
// is already waiting when they are sent. The latency of a message is its
// handler's start minus its due time (visible_at), on the same host clock.
// "poll": no NATS, so nothing tells the consumer about the sends; it finds
// them at its next fallback poll (1 s) and then sleeps until the earliest
// visible_at each time. "hints": with NATS hints (as under localcloud run),
// a send wakes the consumer at once to re-arm its timer. Run with
// -benchtime=1x: one round takes about 4 s.
func BenchmarkDelayedWake(b *testing.B) {
	b.Run("poll", func(b *testing.B) { benchDelayedWake(b, "", "") })
	b.Run("hints", func(b *testing.B) {
		srv := hwServer(b)
		benchDelayedWake(b, srv.URL(), notify.Subject("bench", "delayed"))
	})
}

func benchDelayedWake(b *testing.B, url, subject string) {
	var all []time.Duration
	for range b.N {
		dir := b.TempDir()
		var opts []queue.Option
		if url != "" {
			opts = append(opts, queue.WithHints(url, "", subject))
		}
		q := hwOpen(b, dir, opts...)
		child := startDelayHelper(b, dir, url, subject)
		for i := range delayBenchMessages {
			d := delayBenchFirst + time.Duration(i)*delayBenchStep
			if err := q.Send(context.Background(), queue.Text(strconv.Itoa(i)), queue.WithDelay(d)); err != nil {
				b.Fatal(err)
			}
		}
		due := map[int64]time.Time{}
		rows, err := queue.ExportDB(q).R.Query("SELECT id, visible_at FROM messages")
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var id, vis int64
			if err := rows.Scan(&id, &vis); err != nil {
				b.Fatal(err)
			}
			due[id] = time.UnixMilli(vis)
		}
		rows.Close()
		for range delayBenchMessages {
			id, at := child.next(b)
			d, ok := due[id]
			if !ok {
				b.Fatalf("helper handled unknown message %d", id)
			}
			delete(due, id)
			if at.Before(d) {
				b.Fatalf("message %d handled %s before its due time", id, d.Sub(at))
			}
			all = append(all, at.Sub(d))
		}
		child.stop(b)
	}
	benchLatencies(b, all)
}

// delayHelper is a running helper process.
type delayHelper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

func startDelayHelper(b *testing.B, dir, url, subject string) *delayHelper {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDelayHelperProcess$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), delayHelperDirEnv+"="+dir, delayHelperURLEnv+"="+url, delayHelperSubjectEnv+"="+subject)
	h := &delayHelper{cmd: cmd, lines: make(chan string, delayBenchMessages+2), stderr: new(strings.Builder)}
	cmd.Stderr = h.stderr
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line := h.line(b); line != "ready" {
		b.Fatalf("helper said %q; want ready", line)
	}
	return h
}

func (h *delayHelper) line(b *testing.B) string {
	b.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			b.Fatalf("helper exited; stderr:\n%s", h.stderr)
		}
		return l
	case <-time.After(time.Minute):
		b.Fatal("helper silent for a minute")
	}
	return ""
}

// next returns the next handled message: its id and handler start.
func (h *delayHelper) next(b *testing.B) (int64, time.Time) {
	b.Helper()
	l := h.line(b)
	idStr, nanos, _ := strings.Cut(l, "\t")
	id, err1 := strconv.ParseInt(idStr, 10, 64)
	ns, err2 := strconv.ParseInt(nanos, 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("helper said %q", l)
	}
	return id, time.Unix(0, ns)
}

func (h *delayHelper) stop(b *testing.B) {
	b.Helper()
	_ = h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		b.Fatalf("helper: %v\nstderr:\n%s", err, h.stderr)
	}
}

// TestDelayHelperProcess is not a test: re-executed by
// BenchmarkDelayedWake, it runs Consume on the queue, says "ready" once
// Consume waits, prints "<id>\t<unix nanoseconds>" at each handler start,
// and stops when its stdin closes.
func TestDelayHelperProcess(t *testing.T) {
	dir := os.Getenv(delayHelperDirEnv)
	if dir == "" {
		t.Skip("helper process of BenchmarkDelayedWake; runs only when re-executed")
	}
	os.Exit(delayHelperMain(dir, os.Getenv(delayHelperURLEnv), os.Getenv(delayHelperSubjectEnv)))
}

func delayHelperMain(dir, url, subject string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var opts []queue.Option
	if url != "" {
		opts = append(opts, queue.WithHints(url, "", subject))
	}
	q, err := queue.Open(ctx, dir, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer q.Close()
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(ctx, func(_ context.Context, m queue.Message) error {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "%d\t%d\n", m.ID, at.UnixNano())
			return w.Flush()
		})
	}()
	for queue.ExportWaiting(q) != 1 {
		time.Sleep(time.Millisecond)
	}
	if url != "" {
		// Subscribed before the first send: the first wait took the hint
		// channel, which makes the subscription; give it a moment to reach
		// the server.
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	fmt.Fprintln(w, "ready")
	err = w.Flush()
	mu.Unlock()
	if err != nil {
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "consume:", err)
		return 1
	}
	return 0
}
