package sqssdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// goawsEnv names the goaws binary of BenchmarkSQS (go install
// github.com/Admiral-Piett/goaws/app/cmd@v0.4.5 installs it as "cmd").
const goawsEnv = "LOCALCLOUD_GOAWS"

// target is one SQS server of the benchmark.
type target struct {
	name string
	c    *qclient
	q    string // the queue URL
	pid  int    // its process; 0: the benchmark's own
}

// startGoaws runs goaws (in memory, Query protocol only) with one queue
// "bench" on a free port; it listens on every address (goaws has no
// setting for that), the benchmark talks to it on loopback.
func startGoaws(b *testing.B, bin string) *target {
	addr := freePort(b)
	_, port, _ := strings.Cut(addr, ":")
	dir := b.TempDir()
	cfg := filepath.Join(dir, "goaws.yaml")
	yaml := "Local:\n  Host: 127.0.0.1\n  Port: " + port + "\n  Region: us-east-1\n  AccountId: \"000000000000\"\n  LogToFile: false\n" +
		"  QueueAttributeDefaults:\n    VisibilityTimeout: 30\n    ReceiveMessageWaitTimeSeconds: 0\n  Queues:\n    - Name: bench\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfg, "Local")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	c := newQClient("http://" + addr)
	deadline := time.Now().Add(30 * time.Second)
	for {
		q, err := c.queueURL("bench")
		if err == nil {
			return &target{name: "goaws", c: c, q: q, pid: cmd.Process.Pid}
		}
		if time.Now().After(deadline) {
			b.Fatalf("goaws not answering after 30 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nativeQueue opens the stack's queue "bench" with queue.FromEnv, as an
// app under `localcloud run` would.
func nativeQueue(b *testing.B, s *stack) *queue.Queue {
	var env map[string]string
	if err := json.Unmarshal([]byte(s.lc(b, "env", "--json")), &env); err != nil {
		b.Fatal(err)
	}
	for k, v := range env {
		b.Setenv(k, v)
	}
	q, err := queue.FromEnv(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	return q
}

func bodies(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%-100d", i) // 100 bytes
	}
	return out
}

// BenchmarkSQS: the same Query-protocol client code against localcloud's
// SQS API (a file binding, durability normal: every batch is committed to
// disk) and against goaws (in memory), and the native Go API (queue.FromEnv)
// on the same store: SendMessage, SendMessageBatch of 10,
// ReceiveMessage of 10 + DeleteMessageBatch, each from 1 client (one
// request at a time) and from 8 clients at once (8 goroutines sharing the
// client's connection pool), and the wake latency of a long-polling
// ReceiveMessage in another process (send to return, p50 and p99). Every
// row also reports the CPU time per op of the process that does the
// queue's work (server-cpu-us, from /proc, Linux only): the server's, and
// for the native rows the benchmark's own (the native API runs in it, so
// that includes the client loop). Run it with
//
//	LOCALCLOUD_GOAWS=$(go env GOPATH)/bin/cmd go test -run '^$' -bench SQS -benchtime 2000x .
func BenchmarkSQS(b *testing.B) {
	s := startStack(b, "", "  bench:\n    type: queue\n")
	lc := &target{name: "localcloud", c: newQClient(s.endpoint), q: s.endpoint + "/000000000000/bench", pid: s.up.Process.Pid}
	targets := []*target{lc}
	if bin := os.Getenv(goawsEnv); bin != "" {
		targets = append(targets, startGoaws(b, bin))
	} else {
		b.Logf("goaws rows skipped: set %s to the goaws binary (go install github.com/Admiral-Piett/goaws/app/cmd@v0.4.5)", goawsEnv)
	}
	// The floor answers without doing anything: its rows are not a server
	// to compare with but what any server's rows include (floor_test.go).
	throughput := append([]*target{startFloor(b)}, targets...)
	native := nativeQueue(b, s)
	body := bodies(10)
	ps := make([]queue.Payload, 10)
	for i := range ps {
		ps[i] = queue.Text(body[i])
	}
	ctx := context.Background()
	for _, clients := range []int{1, 8} {
		// row runs one op b.N times from the clients, reports the
		// messages per second (op returns how many it moved) and the CPU
		// time per op of t's process, then drains t.
		row := func(name string, t *target, fill func(b *testing.B), op func(i int) (int, error)) {
			b.Run(fmt.Sprintf("%s/%s/%dclients", t.name, name, clients), func(b *testing.B) {
				b.StopTimer()
				if fill != nil {
					fill(b)
				}
				cpu0 := cpuTime(t.pid)
				b.StartTimer()
				msgs := runClients(b, clients, op)
				b.StopTimer()
				b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
				if cpu1 := cpuTime(t.pid); cpu1 > 0 {
					b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "server-cpu-us")
				}
				drainTarget(b, t)
			})
		}
		// The native rows' target only names them and drains the store
		// through localcloud's API; pid 0: their CPU is the benchmark's.
		nat := &target{name: "native", c: lc.c, q: lc.q}
		for _, t := range throughput {
			row("Send", t, nil, func(i int) (int, error) { return 1, t.c.send(t.q, body[i%10]) })
		}
		row("Send", nat, nil, func(i int) (int, error) { return 1, native.Send(ctx, ps[i%10]) })
		for _, t := range throughput {
			row("SendBatch10", t, nil, func(int) (int, error) { return 10, t.c.sendBatch(t.q, body) })
		}
		row("SendBatch10", nat, nil, func(int) (int, error) { return 10, native.SendBatch(ctx, ps) })
		for _, t := range throughput {
			fill := func(b *testing.B) {
				for range b.N {
					if err := t.c.sendBatch(t.q, body); err != nil {
						b.Fatal(err)
					}
				}
			}
			row("Receive10+DeleteBatch", t, fill, func(int) (int, error) {
				ms, err := t.c.receive(t.q, 10, 0)
				if err != nil || len(ms) == 0 {
					return 0, err
				}
				return len(ms), t.c.deleteBatch(t.q, ms)
			})
		}
		fill := func(b *testing.B) {
			for range b.N {
				if err := native.SendBatch(ctx, ps); err != nil {
					b.Fatal(err)
				}
			}
		}
		row("Receive10+AckBatch", nat, fill, func(int) (int, error) {
			ms, err := native.Receive(ctx, 10)
			if err != nil || len(ms) == 0 {
				return 0, err
			}
			rs := make([]string, len(ms))
			for i, m := range ms {
				rs[i] = m.ReceiptHandle
			}
			_, err = native.AckBatch(ctx, rs)
			return len(ms), err
		})
	}
	for _, t := range targets {
		b.Run(t.name+"/Wake", func(b *testing.B) {
			wake(b, t, func(body string) error { return t.c.send(t.q, body) })
		})
	}
	b.Run("localcloud/WakeNativeSend", func(b *testing.B) {
		wake(b, lc, func(body string) error { return native.Send(context.Background(), queue.Text(body)) })
	})
}

// runClients calls op b.N times in all, from one goroutine or from
// clients goroutines at once, and returns the messages the ops moved; an
// op's error fails the benchmark.
func runClients(b *testing.B, clients int, op func(i int) (int, error)) int64 {
	var msgs, next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				n, err := op(i)
				if err != nil {
					b.Error(err)
					return
				}
				msgs.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return msgs.Load()
}

// drainTarget receives and deletes what t's queue holds (the floor has
// none: it answers every receive with ten).
func drainTarget(b *testing.B, t *target) {
	if t.name == "floor" {
		return
	}
	for {
		ms, err := t.c.receive(t.q, 10, 0)
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) == 0 {
			return
		}
		if err := t.c.deleteBatch(t.q, ms); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU time so far of process pid (0: this one), the sum
// of its threads' time on a CPU in /proc/<pid>/task/*/schedstat (in ns; a
// thread that already exited is not counted, and Go's seldom exit), or 0
// where that cannot be read.
func cpuTime(pid int) time.Duration {
	dir := "/proc/self/task"
	if pid != 0 {
		dir = fmt.Sprintf("/proc/%d/task", pid)
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		sum += time.Duration(ns)
	}
	return sum
}

// wake measures, b.N times, from just before send until a
// ReceiveMessage long-polling in another process (a waiter helper) got
// the message, by the waiter's clock (the same host's); it reports the
// p50 and p99 in ms.
func wake(b *testing.B, t *target, send func(body string) error) {
	b.StopTimer()
	w := startHelper(b, "waiter", "SQSSDK_ENDPOINT="+t.c.endpoint, "SQSSDK_QUEUE="+t.q)
	waitLines := func(n int) string {
		for {
			w.mu.Lock()
			if len(w.lines) >= n {
				l := w.lines[n-1]
				w.mu.Unlock()
				return l
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				b.Fatalf("waiter exited: %v", w.err)
			default:
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitLines(1) // "ready"
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		time.Sleep(20 * time.Millisecond) // the waiter is back in its long poll
		start := time.Now()
		if err := send(strconv.FormatInt(start.UnixNano(), 10)); err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(waitLines(i + 2))
		got, _ := strconv.ParseInt(f[0], 10, 64)
		sent, _ := strconv.ParseInt(f[1], 10, 64)
		if sent != start.UnixNano() {
			b.Fatalf("waiter got %q, want %d", f, start.UnixNano())
		}
		lat = append(lat, time.Duration(got-sent))
	}
	_ = w.stdin.Close()
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

// runWaiter is the "waiter" helper: it long-polls (WaitTimeSeconds 20)
// for one message at a time, prints "<received unix ns> <body>" and
// deletes it, until stdin is closed.
func runWaiter() int {
	c := newQClient(os.Getenv("SQSSDK_ENDPOINT"))
	q := os.Getenv("SQSSDK_QUEUE")
	stdinClosed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdinClosed) }()
	fmt.Println("ready")
	for {
		select {
		case <-stdinClosed:
			return 0
		default:
		}
		ms, err := c.receive(q, 1, 2)
		now := time.Now().UnixNano()
		if err != nil {
			fmt.Fprintln(os.Stderr, "waiter:", err)
			return 1
		}
		for _, m := range ms {
			fmt.Printf("%d %s\n", now, m.Body)
			if err := c.deleteBatch(q, ms); err != nil {
				fmt.Fprintln(os.Stderr, "waiter:", err)
				return 1
			}
		}
	}
}
