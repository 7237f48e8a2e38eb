package sqlitequeue_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// groupHelperEnv switches the test binary into one process of
// TestMultiProcessGroupCommit: it holds the store directory.
const groupHelperEnv = "LOCALCLOUD_QUEUE_GROUP_HELPER_DIR"

const (
	gcProcesses = 4
	gcSenders   = 8 // sending goroutines per process
	gcConsumers = 4 // receiving and acking goroutines per process
	gcPerSender = 250
	// gcPerSenderRace: the race detector slows the write path about tenfold.
	gcPerSenderRace = 40
)

// TestMultiProcessGroupCommit: 4 OS processes each send with 8 goroutines
// (so their sends find the write lock busy and commit in groups) while 4
// goroutines per process receive and ack, the acks grouped too. Every
// message sent must be delivered exactly once (attempt 1, payload intact),
// every ack must hold (the store is empty at the end), and the processes
// must have committed fewer transactions than single-statement writes.
func TestMultiProcessGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	t.Parallel()
	per := gcPerSender
	if raceEnabled() {
		per = gcPerSenderRace
	}
	dir := t.TempDir()
	q := openFile(t, dir)

	var children []*testutil.Child
	for p := range gcProcesses {
		children = append(children, testutil.StartChild(t, fmt.Sprintf("grouped-%d", p), "TestGroupHelperProcess",
			groupHelperEnv+"="+dir, "LOCALCLOUD_GROUP_PER_SENDER="+strconv.Itoa(per), "LOCALCLOUD_GROUP_PROC="+strconv.Itoa(p)))
	}
	for _, c := range children {
		if line := c.Expect(t, "ready", 30*time.Second); line != "ready" {
			t.Fatalf("%s said %q; want ready", c.Name, line)
		}
	}
	for _, c := range children {
		c.Send(t, "go")
	}
	sent := map[string]bool{}
	acked := map[string]int64{} // payload -> id
	var problems mpProblems
	var writes, commits int64
	handle := func(c *testutil.Child, line string) bool {
		kind, rest, _ := strings.Cut(line, "\t")
		switch kind {
		case "sent":
			if sent[rest] {
				problems.add("%s sent %q twice", c.Name, rest)
			}
			sent[rest] = true
		case "ack":
			idStr, payload, _ := strings.Cut(rest, "\t")
			id, _ := strconv.ParseInt(idStr, 10, 64)
			if prev, dup := acked[payload]; dup {
				problems.add("%q delivered twice (ids %d and %d, the second in %s)", payload, prev, id, c.Name)
			}
			acked[payload] = id
		case "groups":
			w, cm, _ := strings.Cut(rest, "\t")
			wn, _ := strconv.ParseInt(w, 10, 64)
			cn, _ := strconv.ParseInt(cm, 10, 64)
			writes += wn
			commits += cn
		case "sent-done":
			return true
		default:
			t.Errorf("%s: unexpected output %q", c.Name, line)
		}
		return false
	}
	// Every process finished sending, then all drain.
	for _, c := range children {
		for done := false; !done; {
			select {
			case line, ok := <-c.Lines:
				if !ok {
					<-c.Done
					t.Fatalf("%s exited before it finished sending: %v\n%s", c.Name, c.Err, c.Stderr)
				}
				done = handle(c, line)
			case <-time.After(2 * time.Minute):
				t.Fatalf("%s: no sent-done within 2 minutes", c.Name)
			}
		}
	}
	for _, c := range children {
		c.Send(t, "drain")
	}
	for _, c := range children {
		for line := range c.UntilExit(t, 2*time.Minute) {
			handle(c, line)
		}
		c.WantSuccess(t, 30*time.Second)
	}
	if want := gcProcesses * gcSenders * per; len(sent) != want {
		problems.add("%d messages sent; want %d", len(sent), want)
	}
	for p := range sent {
		if _, ok := acked[p]; !ok {
			problems.add("%q sent but never delivered", p)
		}
	}
	for p := range acked {
		if !sent[p] {
			problems.add("%q delivered but never sent", p)
		}
	}
	problems.report(t)
	if n := rawCountRows(t, q); n != 0 {
		t.Errorf("%d messages left after every ack held; want 0 (a lost ack)", n)
	}
	checkIntegrity(t, dbOf(q).R)
	if commits == 0 || commits >= writes {
		t.Errorf("%d single-statement writes took %d commits: no group commit happened", writes, commits)
	}
	t.Logf("%d messages by %d processes x %d senders; %d single-statement writes in %d commits (%.2f per commit)",
		len(sent), gcProcesses, gcSenders, writes, commits, float64(writes)/float64(max(commits, 1)))
}

// TestGroupHelperProcess is not a test: re-executed by
// TestMultiProcessGroupCommit with groupHelperEnv set, it is one process.
// It prints "ready", waits for "go", then sends with gcSenders goroutines
// ("sent\t<payload>" once each Send returned) while gcConsumers goroutines
// receive and ack ("ack\t<id>\t<payload>" once each Ack returned); it
// prints "sent-done" when its sends are done, and after "drain" its
// consumers stop at the first empty receive. Last it prints "groups\t
// <single-statement writes>\t<their commits>" and exits 0; any error exits
// 1 with the error on stderr.
func TestGroupHelperProcess(t *testing.T) {
	dir := os.Getenv(groupHelperEnv)
	if dir == "" {
		t.Skip("helper process of TestMultiProcessGroupCommit; runs only when re-executed")
	}
	per, _ := strconv.Atoi(os.Getenv("LOCALCLOUD_GROUP_PER_SENDER"))
	os.Exit(groupProcess(dir, os.Getenv("LOCALCLOUD_GROUP_PROC"), per, os.Stdin, os.Stdout, os.Stderr))
}

func groupProcess(dir, proc string, per int, in io.Reader, out, errOut io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errOut, "process %s: "+format+"\n", append([]any{proc}, args...)...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	q, err := openQueue(ctx, dir, queue.WithDefaultVisibility(mpLease))
	if err != nil {
		return fail("open: %v", err)
	}
	defer q.Close()
	var mu sync.Mutex
	w := bufio.NewWriter(out)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
		w.Flush()
	}
	say("ready")
	r := bufio.NewReader(in)
	if line, err := r.ReadString('\n'); err != nil || line != "go\n" {
		return fail("waiting for go: %q, %v", line, err)
	}
	var (
		errs    []string
		writes  atomic.Int64
		drain   atomic.Bool
		senders sync.WaitGroup
		all     sync.WaitGroup
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 20 {
			errs = append(errs, fmt.Sprintf(format, args...))
		}
	}
	for g := range gcSenders {
		senders.Add(1)
		all.Go(func() {
			defer senders.Done()
			for i := range per {
				p := fmt.Sprintf("p%s-g%d-m%d", proc, g, i)
				if err := q.Send(ctx, queue.Text(p)); err != nil {
					report("send %s: %v", p, err)
					return
				}
				writes.Add(1)
				say("sent\t%s", p)
			}
		})
	}
	for g := range gcConsumers {
		all.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			for {
				max := 1 + rng.IntN(queue.MaxReceiveBatch)
				msgs, err := q.Receive(ctx, max)
				if err != nil {
					report("receive: %v", err)
					return
				}
				if max == 1 {
					writes.Add(1) // a one-message claim is one statement
				}
				if len(msgs) == 0 {
					if drain.Load() {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for _, m := range msgs {
					if m.Attempt != 1 {
						report("message %d attempt %d; want 1", m.ID, m.Attempt)
					}
					if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
						report("ack %d: %v", m.ID, err)
						return
					}
					writes.Add(1)
					say("ack\t%d\t%s", m.ID, m.Payload.Data)
				}
			}
		})
	}
	senders.Wait()
	say("sent-done")
	if line, err := r.ReadString('\n'); err != nil || line != "drain\n" {
		return fail("waiting for drain: %q, %v", line, err)
	}
	drain.Store(true)
	all.Wait()
	say("groups\t%d\t%d", writes.Load(), dbOf(q).GroupCommits())
	if len(errs) > 0 {
		return fail("%s", strings.Join(errs, "; "))
	}
	if err := q.Close(); err != nil {
		return fail("close: %v", err)
	}
	return 0
}
