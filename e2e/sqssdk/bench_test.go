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
			return &target{name: "goaws", c: c, q: q}
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
// ReceiveMessage of 10 + DeleteMessageBatch, and the wake latency of a
// long-polling ReceiveMessage in another process (send to return, p50 and
// p99). Run it with
//
//	LOCALCLOUD_GOAWS=$(go env GOPATH)/bin/cmd go test -run '^$' -bench SQS -benchtime 2000x .
func BenchmarkSQS(b *testing.B) {
	s := startStack(b, "", "  bench:\n    type: queue\n")
	lc := &target{name: "localcloud", c: newQClient(s.endpoint), q: s.endpoint + "/000000000000/bench"}
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
	msgsPerSec := func(b *testing.B, perOp int) {
		b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "msgs/s")
	}
	drain := func(b *testing.B, t *target) {
		if t.name == "floor" {
			return // it has no messages; it answers every receive with ten
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
	for _, t := range throughput {
		b.Run(t.name+"/Send", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if err := t.c.send(t.q, body[i%10]); err != nil {
					b.Fatal(err)
				}
			}
			msgsPerSec(b, 1)
			b.StopTimer()
			drain(b, t)
		})
	}
	b.Run("native/Send", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := native.Send(context.Background(), queue.Text(body[i%10])); err != nil {
				b.Fatal(err)
			}
		}
		msgsPerSec(b, 1)
		b.StopTimer()
		drain(b, lc)
	})
	for _, t := range throughput {
		b.Run(t.name+"/SendBatch10", func(b *testing.B) {
			for b.Loop() {
				if err := t.c.sendBatch(t.q, body); err != nil {
					b.Fatal(err)
				}
			}
			msgsPerSec(b, 10)
			b.StopTimer()
			drain(b, t)
		})
	}
	ps := make([]queue.Payload, 10)
	for i := range ps {
		ps[i] = queue.Text(body[i])
	}
	b.Run("native/SendBatch10", func(b *testing.B) {
		for b.Loop() {
			if err := native.SendBatch(context.Background(), ps); err != nil {
				b.Fatal(err)
			}
		}
		msgsPerSec(b, 10)
		b.StopTimer()
		drain(b, lc)
	})
	for _, t := range throughput {
		b.Run(t.name+"/Receive10+DeleteBatch", func(b *testing.B) {
			b.StopTimer()
			for range b.N {
				if err := t.c.sendBatch(t.q, body); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			got := 0
			for range b.N {
				ms, err := t.c.receive(t.q, 10, 0)
				if err != nil {
					b.Fatal(err)
				}
				if len(ms) > 0 {
					if err := t.c.deleteBatch(t.q, ms); err != nil {
						b.Fatal(err)
					}
				}
				got += len(ms)
			}
			b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "msgs/s")
			b.StopTimer()
			drain(b, t)
		})
	}
	b.Run("native/Receive10+AckBatch", func(b *testing.B) {
		b.StopTimer()
		for range b.N {
			if err := native.SendBatch(context.Background(), ps); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		got := 0
		for range b.N {
			ms, err := native.Receive(context.Background(), 10)
			if err != nil {
				b.Fatal(err)
			}
			rs := make([]string, len(ms))
			for i, m := range ms {
				rs[i] = m.ReceiptHandle
			}
			if len(rs) > 0 {
				if _, err := native.AckBatch(context.Background(), rs); err != nil {
					b.Fatal(err)
				}
			}
			got += len(ms)
		}
		b.ReportMetric(float64(got)/b.Elapsed().Seconds(), "msgs/s")
		b.StopTimer()
		drain(b, lc)
	})
	for _, t := range targets {
		b.Run(t.name+"/Wake", func(b *testing.B) {
			wake(b, t, func(body string) error { return t.c.send(t.q, body) })
		})
	}
	b.Run("localcloud/WakeNativeSend", func(b *testing.B) {
		wake(b, lc, func(body string) error { return native.Send(context.Background(), queue.Text(body)) })
	})
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
