package sqlitequeue_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// helperDirEnv switches the test binary into a queue consumer process: it
// holds the store directory. See TestHelperProcess.
const helperDirEnv = "LOCALCLOUD_QUEUE_HELPER_DIR"

const (
	mpProcesses  = 4
	mpGoroutines = 4
	mpMessages   = 10000
	// mpMessagesRace is the count under -race: the detector slows the
	// transpiled SQLite about tenfold inside the serialised write path
	// (measured ~250 msg/s against ~2,500), and 10,000 would take a minute.
	mpMessagesRace = 2000
	// mpLease outlasts the whole test, so a second delivery of any message
	// is a bug, never a lease that ran out on a slow machine.
	mpLease = 10 * time.Minute
)

// TestMultiProcessReceive: 4 OS processes x 4 goroutines receive (batches of
// 1..10) and ack 10,000 messages the parent sent (2,000 under -race). Every
// message must be delivered exactly once across all processes, with its
// payload intact, and no process may see any error.
func TestMultiProcessReceive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	t.Parallel()
	messages := mpMessages
	if raceEnabled() {
		messages = mpMessagesRace
	}
	dir := t.TempDir()
	q := openFile(t, dir)

	began := time.Now()
	for i := range messages {
		if err := q.Send(ctx, mpPayload(i)); err != nil {
			t.Fatal(err)
		}
	}
	sendTime := time.Since(began)

	// What was stored: id -> "type\tdata".
	want := map[int64]string{}
	scanPayloads(t, dbOf(q).R, "SELECT id, payload_type, payload_data FROM messages", func(id int64, p string) { want[id] = p })
	if len(want) != messages {
		t.Fatalf("%d rows stored; want %d", len(want), messages)
	}
	sent := map[string]bool{}
	for i := range messages {
		p := mpPayload(i)
		sent[string(p.Type)+"\t"+p.Data] = true
	}
	for id, w := range want {
		if !sent[w] {
			t.Fatalf("row %d holds %.60q, which was never sent", id, w)
		}
		delete(sent, w)
	}

	var children []*testutil.Child
	for p := range mpProcesses {
		children = append(children, testutil.StartChild(t, fmt.Sprintf("consumer-%d", p), "TestHelperProcess", helperDirEnv+"="+dir))
	}
	for _, c := range children {
		if line := c.Expect(t, "ready", 30*time.Second); line != "ready" {
			t.Fatalf("%s said %q; want %q", c.Name, line, "ready")
		}
	}
	began = time.Now()
	for _, c := range children { // the start gun
		c.Send(t, "go")
	}

	got := map[int64]string{}
	var problems mpProblems
	perProcess := make([]int, len(children))
	for p, c := range children {
		for line := range c.UntilExit(t, 90*time.Second) {
			rest, ok := strings.CutPrefix(line, "ack\t")
			if !ok {
				t.Errorf("%s: unexpected output %q", c.Name, line)
				continue
			}
			idStr, payload, _ := strings.Cut(rest, "\t")
			id, err := strconv.ParseInt(idStr, 10, 64)
			if err != nil {
				t.Errorf("%s: bad line %q", c.Name, line)
				continue
			}
			if prev, dup := got[id]; dup {
				problems.add("message %d delivered twice (%.60q, then %.60q in %s)", id, prev, payload, c.Name)
			}
			got[id] = payload
			perProcess[p]++
		}
		c.WantSuccess(t, 30*time.Second)
	}
	consumeTime := time.Since(began)

	for id, w := range want {
		if g, ok := got[id]; !ok {
			problems.add("message %d never delivered", id)
		} else if g != w {
			problems.add("message %d payload %.60q; want %.60q", id, g, w)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			problems.add("delivered message %d that was never sent", id)
		}
	}
	problems.report(t)
	busy := 0
	for _, n := range perProcess {
		if n > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("acks per process %v: fewer than 2 processes took part, nothing was contended", perProcess)
	}
	if n := rawCountRows(t, q); n != 0 {
		t.Errorf("%d messages left after every ack; want 0", n)
	}
	checkIntegrity(t, dbOf(q).R)
	t.Logf("sent %d in %v; %d processes x %d goroutines acked them in %v (%.0f msg/s); per process %v",
		messages, sendTime.Round(time.Millisecond), mpProcesses, mpGoroutines,
		consumeTime.Round(time.Millisecond), float64(messages)/consumeTime.Seconds(), perProcess)
}

// raceEnabled reports whether this binary was built with -race (recorded
// in its build settings), without a build-tagged file.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// mpProblems collects delivery errors and reports the first few and the
// total, so a broken store does not print 10,000 lines.
type mpProblems struct {
	n     int
	first []string
}

func (p *mpProblems) add(format string, args ...any) {
	p.n++
	if len(p.first) < 10 {
		p.first = append(p.first, fmt.Sprintf(format, args...))
	}
}

func (p *mpProblems) report(t *testing.T) {
	t.Helper()
	if p.n > 0 {
		t.Errorf("%d delivery problems; the first %d:\n%s", p.n, len(p.first), strings.Join(p.first, "\n"))
	}
}

// mpPayload is message i: text or JSON, of varying length.
func mpPayload(i int) queue.Payload {
	pad := strings.Repeat(string(rune('a'+i%26)), i%97)
	if i%2 == 0 {
		return queue.Text(fmt.Sprintf("text-%05d-%s", i, pad))
	}
	return queue.JSON(map[string]any{"i": i, "pad": pad, "nested": []int{i, i * 2}})
}

func rawCountRows(t *testing.T, q *queue.Queue) int {
	t.Helper()
	var n int
	if err := dbOf(q).R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestHelperProcess is not a test: re-executed by TestMultiProcessReceive
// with helperDirEnv set, it is one consumer process. It prints "ready" once
// the store is open, waits for "go" on stdin, then prints "ack\t<id>\t<type>\t
// <data>" for every message it acked, and exits 0 when the queue has
// nothing due. Any error exits 1 with the error on stderr.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("helper process of TestMultiProcessReceive; runs only when re-executed")
	}
	os.Exit(mpConsume(dir, os.Stdin, os.Stdout, os.Stderr))
}

func mpConsume(dir string, in io.Reader, out, errOut io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errOut, "consumer %d: "+format+"\n", append([]any{os.Getpid()}, args...)...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, err := openQueue(ctx, dir, queue.WithDefaultVisibility(mpLease))
	if err != nil {
		return fail("open: %v", err)
	}
	defer q.Close()
	w := bufio.NewWriter(out)
	fmt.Fprintln(w, "ready")
	if err := w.Flush(); err != nil {
		return fail("write: %v", err)
	}
	if line, err := bufio.NewReader(in).ReadString('\n'); err != nil || line != "go\n" {
		return fail("waiting for go: %q, %v", line, err)
	}

	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for g := range mpGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			for {
				msgs, err := q.Receive(ctx, 1+rng.IntN(queue.MaxReceiveBatch))
				if err != nil {
					report("goroutine %d: receive: %v", g, err)
					return
				}
				if len(msgs) == 0 {
					// Everything was sent before the start gun: nothing due
					// means every message is acked or held by a live consumer.
					return
				}
				for _, m := range msgs {
					if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
						report("goroutine %d: ack %d: %v", g, m.ID, err)
						return
					}
					if m.Attempt != 1 {
						report("goroutine %d: message %d attempt %d; want 1", g, m.ID, m.Attempt)
					}
					mu.Lock()
					fmt.Fprintf(w, "ack\t%d\t%s\t%s\n", m.ID, m.Payload.Type, m.Payload.Data)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := w.Flush(); err != nil {
		return fail("write: %v", err)
	}
	if len(errs) > 0 {
		return fail("%s", strings.Join(errs, "; "))
	}
	if err := q.Close(); err != nil {
		return fail("close: %v", err)
	}
	return 0
}
