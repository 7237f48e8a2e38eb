package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// The engine beside a bare nats.go loop doing the same work on the same
// embedded single node (R1): the target is >= 0.8x the bare loop.
// Run: go test -run '^$' -bench . -benchtime 300x ./internal/engine/jsengine

// BenchmarkQueueSendReceiveAck: one send, one receive of one, one ack.
func BenchmarkQueueSendReceiveAck(b *testing.B) {
	b.Run("engine", func(b *testing.B) {
		q, err := queue.OpenEngine(context.Background(), jsengine.Queue{Conn: connectB(b)}, freshName("bq"))
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		b.ResetTimer()
		for range b.N {
			if err := q.Send(bg, queue.Text("m")); err != nil {
				b.Fatal(err)
			}
			msgs, err := q.Receive(bg, 1)
			if err != nil || len(msgs) != 1 {
				b.Fatalf("Receive = %d, %v", len(msgs), err)
			}
			if err := q.Ack(bg, msgs[0].ReceiptHandle); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		js, err := jetstream.New(connectB(b))
		if err != nil {
			b.Fatal(err)
		}
		name := freshName("bare")
		st, err := js.CreateStream(bg, jetstream.StreamConfig{Name: name, Subjects: []string{name},
			Retention: jetstream.WorkQueuePolicy})
		if err != nil {
			b.Fatal(err)
		}
		cons, err := st.CreateOrUpdateConsumer(bg, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := js.Publish(bg, name, []byte("m")); err != nil {
				b.Fatal(err)
			}
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for m := range batch.Messages() {
				if err := m.DoubleAck(bg); err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != 1 {
				b.Fatalf("fetched %d", n)
			}
		}
	})
}

// BenchmarkKVPutGet: one put and one get of the same key.
func BenchmarkKVPutGet(b *testing.B) {
	b.Run("engine", func(b *testing.B) {
		s, err := kv.OpenEngine(context.Background(), jsengine.KV{Conn: connectB(b)}, freshName("bkv"))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		b.ResetTimer()
		for range b.N {
			if _, err := s.Put(bg, "user:1", []byte("v")); err != nil {
				b.Fatal(err)
			}
			if _, ok, err := s.Get(bg, "user:1"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		js, err := jetstream.New(connectB(b))
		if err != nil {
			b.Fatal(err)
		}
		// A bare KV bucket with nats.go's defaults (direct get on: its reads are
		// not read-your-writes on a cluster; the engine reads through the leader).
		name := freshName("barekv")
		bkt, err := js.CreateKeyValue(bg, jetstream.KeyValueConfig{Bucket: name})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := bkt.Put(bg, "user1", []byte("v")); err != nil {
				b.Fatal(err)
			}
			if _, err := bkt.Get(bg, "user1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func connectB(b *testing.B) *natsConn {
	b.Helper()
	nc, err := natsConnect(node.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}
