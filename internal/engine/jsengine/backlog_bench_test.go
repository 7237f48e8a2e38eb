package jsengine_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// BenchmarkDelayedBacklog (issue 22): receive(10) on a queue of due
// messages with and without a backlog of delayed sends (message schedules,
// due in an hour) ahead of them, on the package's embedded single node.
// The target: the receive with the backlog within 2x of the one without.
// Each op is one Receive of 10 (the AckBatch of what it got runs with the
// timer stopped). LC_BENCH_DELAYED (default 100,000) and LC_BENCH_DUE
// (default 20,000) set the sizes. Run it with
//
//	go test -run '^$' -bench DelayedBacklog -benchtime 1000x ./internal/engine/jsengine
//
// Measured (2 shared cores, as printed, the test binaries of main before
// and after direct.go run one after the other, 1000x):
//
//	load 4.9-6.7     delayed=0 ns/op  delayed=100000 ns/op  ratio
//	before run 1     163817           192158                1.17
//	after  run 1     163130           162854                1.00
//	before run 2     153918           215271                1.40
//	after  run 2     152269           203934                1.34
//	before run 3     145121           207348                1.43
//	after  run 3     134283           168132                1.25
//
// At load 11-12 before: 138067 / 651476 (4.7x), after: 251229 / 201036
// (0.8x). The untimed AckBatch's get per message (direct.go) slowed the
// timed receives too; where in the server was not traced.
func BenchmarkDelayedBacklog(b *testing.B) {
	delayed := benchEnvInt(b, "LC_BENCH_DELAYED", 100_000)
	due := benchEnvInt(b, "LC_BENCH_DUE", 20_000)
	nc, err := nats.Connect(node.url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	for _, n := range []int{0, delayed} {
		b.Run("delayed="+strconv.Itoa(n), func(b *testing.B) {
			ctx := context.Background()
			q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, freshName("backlog"), queue.WithDefaultVisibility(10*time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			fill := func(n int, opts ...queue.SendOption) {
				batch := make([]queue.Payload, 0, queue.MaxSendBatch)
				for i := 0; i < n; i += len(batch) {
					batch = batch[:0]
					for j := i; j < n && len(batch) < queue.MaxSendBatch; j++ {
						batch = append(batch, queue.Text("m"+strconv.Itoa(j)))
					}
					if err := q.SendBatch(ctx, batch, opts...); err != nil {
						b.Fatal(err)
					}
				}
			}
			began := time.Now()
			fill(n, queue.WithDelay(time.Hour))
			fill(due)
			b.Logf("loaded %d delayed and %d due in %s", n, due, time.Since(began).Round(time.Millisecond))
			b.ResetTimer()
			for b.Loop() {
				ms, err := q.Receive(ctx, 10)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if len(ms) < 10 {
					fill(due) // used up: another round of due messages
				}
				if len(ms) > 0 {
					rs := make([]string, len(ms))
					for i, m := range ms {
						rs[i] = m.ReceiptHandle
					}
					if _, err := q.AckBatch(ctx, rs); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
			}
		})
	}
}

func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatal(fmt.Errorf("%s=%q: want a count", name, v))
	}
	return n
}
