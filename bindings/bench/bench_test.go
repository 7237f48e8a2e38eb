package bench

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// getKeys is how many keys the Get benchmarks read from: enough that reads
// are not all of one page, few enough to pre-fill in a blink.
const getKeys = 10_000

// BenchmarkKVPut: sequential Put of b.N distinct keys with 100-byte values
// on a file store (WAL, synchronous=NORMAL, the default durability).
func BenchmarkKVPut(b *testing.B) {
	s := openKV(b, b.TempDir())
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	val := []byte(payload100)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Put(ctx, keys[i], val); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, "puts/s")
}

// getFixture pre-fills getKeys keys and returns the open store and a
// shuffled read order, so reads do not walk the b-tree in key order.
func getFixture(b *testing.B) (*kv.Store, []string) {
	dir := b.TempDir()
	keys := make([]string, getKeys)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	prefillKV(b, dir, keys)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return openKV(b, dir), keys
}

// BenchmarkKVGet: point Get of existing keys from one goroutine.
func BenchmarkKVGet(b *testing.B) {
	s, keys := getFixture(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		v, ok, err := s.Get(ctx, keys[i%len(keys)])
		if err != nil || !ok || len(v) != len(payload100) {
			b.Fatalf("get: ok=%v len=%d err=%v", ok, len(v), err)
		}
	}
	reportRate(b, b.N, "gets/s")
}

// BenchmarkKVGetParallel: the same Gets from GOMAXPROCS goroutines sharing
// one handle (its reader pool has 4 connections).
func BenchmarkKVGetParallel(b *testing.B) {
	s, keys := getFixture(b)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		for pb.Next() {
			i++
			v, ok, err := s.Get(ctx, keys[i%len(keys)])
			if err != nil || !ok || len(v) != len(payload100) {
				b.Errorf("get: ok=%v len=%d err=%v", ok, len(v), err)
				return
			}
		}
	})
	reportRate(b, b.N, "gets/s")
}

// BenchmarkQueueSend: sequential Send of a 100-byte text payload.
func BenchmarkQueueSend(b *testing.B) {
	q := openQueue(b, b.TempDir())
	p := queue.Text(payload100)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if err := q.Send(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, "sends/s")
}

// BenchmarkQueueReceive1Ack: Receive(1) then Ack, until the b.N pre-filled
// messages are gone. One op is one message.
func BenchmarkQueueReceive1Ack(b *testing.B) {
	benchReceiveAck(b, 1)
}

// BenchmarkQueueReceive10Ack: Receive(10) then an Ack per message, until the
// b.N pre-filled messages are gone. One op is one message.
func BenchmarkQueueReceive10Ack(b *testing.B) {
	benchReceiveAck(b, 10)
}

func benchReceiveAck(b *testing.B, batch int) {
	dir := b.TempDir()
	prefillQueue(b, dir, b.N)
	q := openQueue(b, dir)
	b.ResetTimer()
	receiveAck(b, q, batch, b.N)
	reportRate(b, b.N, "msgs/s")
}

// rate1k is the last msgs/s of BenchmarkQueueReceiveBacklog/backlog=1k, for
// the ratio the 100k case reports.
var rate1k float64

// BenchmarkQueueReceiveBacklog: Receive(10)+Ack throughput with about 1,000
// and about 100,000 due messages waiting. Every 100 messages acked, 100 are
// appended at the tail (outside the timer), so the backlog stays within 100
// of its size and the head is always the oldest pre-filled or appended
// message. One op is one message. The 100k case also reports ratio-vs-1k
// when the 1k case ran before it in the same process (target >= 0.8).
func BenchmarkQueueReceiveBacklog(b *testing.B) {
	for _, c := range []struct {
		name    string
		backlog int
	}{
		{"backlog=1k", 1_000},
		{"backlog=100k", 100_000},
	} {
		b.Run(c.name, func(b *testing.B) {
			const refill = 100
			dir := b.TempDir()
			prefillQueue(b, dir, c.backlog)
			q := openQueue(b, dir)
			ctx := context.Background()
			b.ResetTimer()
			pending := 0
			for got := 0; got < b.N; {
				msgs, err := q.Receive(ctx, min(10, b.N-got))
				if err != nil {
					b.Fatal(err)
				}
				if len(msgs) == 0 {
					b.Fatalf("queue empty after %d of %d messages", got, b.N)
				}
				for _, m := range msgs {
					if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
						b.Fatal(err)
					}
				}
				got += len(msgs)
				pending += len(msgs)
				if pending >= refill {
					b.StopTimer()
					appendMessages(b, q, pending)
					pending = 0
					b.StartTimer()
				}
			}
			r := reportRate(b, b.N, "msgs/s")
			switch c.backlog {
			case 1_000:
				rate1k = r
			case 100_000:
				if rate1k > 0 {
					b.ReportMetric(r/rate1k, "ratio-vs-1k")
				} else {
					b.Logf("backlog 100k: %.0f msgs/s; run backlog=1k first for the ratio", r)
				}
			}
		})
	}
}
