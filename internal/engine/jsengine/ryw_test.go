package jsengine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// rywRounds is how many write-then-receive rounds each case runs: before
// read-your-writes was per process, a receive by another handle right after
// the write missed it in some of them (issue 13).
const rywRounds = 30

// rywTarget is a server (or cluster) the read-your-writes tests run on.
type rywTarget struct {
	name     string
	url      string
	replicas int
}

func rywTargets(t *testing.T) []rywTarget {
	ts := []rywTarget{{"node", node.url, 1}}
	if !testing.Short() {
		ts = append(ts, rywTarget{"cluster", startCluster(t), 3})
	}
	return ts
}

// openWith opens the queue name on nc (a handle of its own that shares
// the connection).
func openWith(t *testing.T, nc *nats.Conn, replicas int, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q := retryOpen(t, func() (*queue.Queue, error) {
		return queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc, Replicas: replicas}, name, opts...)
	})
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func dial(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// receiveAll receives up to 10 from q once, acks what came and returns the
// texts.
func receiveAll(t *testing.T, q *queue.Queue) []string {
	t.Helper()
	ctx := context.Background()
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Payload.Data)
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func wantRound(t *testing.T, round int, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("round %d: another handle of the process received %v right after the write; want %v", round, got, want)
	}
}

// TestReadYourWritesAcrossHandles: a receive (or a redrive) right after a
// write that another handle of the same process did (a send, a batch send,
// a redrive into the queue, a dead-letter move into it; on the same
// connection or another one to the same server or cluster) gets what was
// written.
func TestReadYourWritesAcrossHandles(t *testing.T) {
	ctx := context.Background()
	for _, tg := range rywTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			t.Run("Send", func(t *testing.T) {
				t.Parallel()
				nc := dial(t, tg.url)
				name := freshName("ryws")
				a, b := openWith(t, nc, tg.replicas, name), openWith(t, nc, tg.replicas, name)
				for i := range rywRounds {
					if err := a.Send(ctx, queue.Text("m")); err != nil {
						t.Fatal(err)
					}
					wantRound(t, i, receiveAll(t, b), "m")
				}
			})
			t.Run("SendOtherConnection", func(t *testing.T) {
				t.Parallel()
				name := freshName("rywc")
				a := openWith(t, dial(t, tg.url), tg.replicas, name)
				b := openWith(t, dial(t, tg.url), tg.replicas, name)
				for i := range rywRounds {
					if err := a.Send(ctx, queue.Text("m")); err != nil {
						t.Fatal(err)
					}
					wantRound(t, i, receiveAll(t, b), "m")
				}
			})
			t.Run("SendBatch", func(t *testing.T) {
				t.Parallel()
				nc := dial(t, tg.url)
				name := freshName("rywb")
				a, b := openWith(t, nc, tg.replicas, name), openWith(t, nc, tg.replicas, name)
				for i := range rywRounds {
					if err := a.SendBatch(ctx, []queue.Payload{queue.Text("m1"), queue.Text("m2")}); err != nil {
						t.Fatal(err)
					}
					wantRound(t, i, receiveAll(t, b), "m1", "m2")
				}
			})
			t.Run("Redrive", func(t *testing.T) {
				t.Parallel()
				nc := dial(t, tg.url)
				name, dlqName := freshName("rywr"), freshName("rywrdlq")
				dlq := openWith(t, nc, tg.replicas, dlqName)
				b := openWith(t, nc, tg.replicas, name)
				for i := range rywRounds {
					if err := dlq.Send(ctx, queue.Text("m")); err != nil {
						t.Fatal(err)
					}
					redriveOne(t, dlq, name)
					wantRound(t, i, receiveAll(t, b), "m")
				}
			})
			t.Run("RedriveRightAfterWrite", func(t *testing.T) {
				t.Parallel()
				nc := dial(t, tg.url)
				name, dlqName := freshName("rywt"), freshName("rywtdlq")
				w, dlq := openWith(t, nc, tg.replicas, dlqName), openWith(t, nc, tg.replicas, dlqName)
				b := openWith(t, nc, tg.replicas, name)
				for i := range rywRounds {
					if err := w.Send(ctx, queue.Text("m")); err != nil {
						t.Fatal(err)
					}
					res, err := dlq.Redrive(ctx, queue.RedriveTo(name))
					if err != nil || res.Moved != 1 {
						t.Fatalf("round %d: a redrive by another handle right after the send = %+v, %v; want 1 moved", i, res, err)
					}
					wantRound(t, i, receiveAll(t, b), "m")
				}
			})
			t.Run("DeadLetterMove", func(t *testing.T) {
				t.Parallel()
				nc := dial(t, tg.url)
				name, dlqName := freshName("rywd"), freshName("rywddlq")
				a := openWith(t, nc, tg.replicas, name, queue.WithDeadLetter(1, dlqName))
				c := openWith(t, nc, tg.replicas, dlqName)
				for i := range rywRounds {
					if err := a.Send(ctx, queue.Text("m")); err != nil {
						t.Fatal(err)
					}
					moveOne(t, a)
					wantRound(t, i, receiveAll(t, c), "m")
				}
			})
		})
	}
}

// redriveOne redrives dlq's one message to the queue to, retrying while
// dlq's consumer has not seen it yet (what the test measures is the
// receive on the other side).
func redriveOne(t *testing.T, dlq *queue.Queue, to string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := dlq.Redrive(context.Background(), queue.RedriveTo(to))
		if err != nil {
			t.Fatal(err)
		}
		if res.Moved == 1 {
			return
		}
		if res.Moved > 1 || time.Now().After(deadline) {
			t.Fatalf("redrive moved %+v; want the one message", res)
		}
		time.Sleep(time.Millisecond)
	}
}

// moveOne receives q's one message, nacks it (its one attempt is used up)
// and receives until the next delivery has moved it to the dead letters.
func moveOne(t *testing.T, q *queue.Queue) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for nacked := false; ; {
		msgs, err := q.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 1 {
			if nacked {
				t.Fatalf("the spent message was delivered again: %+v", msgs[0])
			}
			if err := q.Nack(ctx, msgs[0].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			nacked = true
			continue
		}
		if nacked && total(t, q) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the message is not moved to the dead letters 10 s after its send")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadYourWritesAfterPurgeElsewhere: a purge, or a deleted and
// re-created stream, that this process did not do leaves the process's
// record of its last write behind; the first receive after it finds the
// record's message gone and drops it (later receives do not look again),
// and a write to the new stream is read again.
func TestReadYourWritesAfterPurgeElsewhere(t *testing.T) {
	ctx := context.Background()
	for _, tg := range rywTargets(t) {
		t.Run(tg.name, func(t *testing.T) {
			nc := dial(t, tg.url)
			name := freshName("rywp")
			a, b := openWith(t, nc, tg.replicas, name), openWith(t, nc, tg.replicas, name)
			for range 5 {
				if err := a.Send(ctx, queue.Text("old")); err != nil {
					t.Fatal(err)
				}
			}
			if p := jsengine.PendingWrite(nc, name); p != 5 {
				t.Fatalf("recorded last write %d; want 5", p)
			}
			js, err := jetstream.New(dial(t, tg.url)) // another connection: the process's record is not told
			if err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, "LCQ_"+name)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			settlePurge(t, st)
			if got := receiveAll(t, b); len(got) != 0 {
				t.Fatalf("received %v after the purge; want nothing", got)
			}
			if p := jsengine.PendingWrite(nc, name); p != 0 {
				t.Fatalf("after a receive that found the purge: recorded last write %d; want none", p)
			}

			// Deleted and re-created: sequences start again at 1.
			for range 5 {
				if err := a.Send(ctx, queue.Text("old")); err != nil {
					t.Fatal(err)
				}
			}
			if err := js.DeleteStream(ctx, "LCQ_"+name); err != nil {
				t.Fatal(err)
			}
			c := openWith(t, nc, tg.replicas, name) // re-creates it
			if got := receiveAll(t, c); len(got) != 0 {
				t.Fatalf("received %v from the re-created stream; want nothing", got)
			}
			if p := jsengine.PendingWrite(nc, name); p != 0 {
				t.Fatalf("after a receive on the re-created stream: recorded last write %d; want none", p)
			}
			if err := c.Send(ctx, queue.Text("new")); err != nil {
				t.Fatal(err)
			}
			if p := jsengine.PendingWrite(nc, name); p != 1 {
				t.Fatalf("recorded last write %d after the first send to the re-created stream; want 1", p)
			}
			wantRound(t, 0, receiveAll(t, b), "new")
		})
	}
}

// settlePurge waits until the queue's consumer has nothing pending or in
// flight after a purge: on a cluster the consumer's leader was seen to
// deliver purged messages right after the purge's reply (as Purge waits,
// inspect.go's waitPurged).
func settlePurge(t *testing.T, st jetstream.Stream) {
	t.Helper()
	ctx := context.Background()
	cons, err := st.Consumer(ctx, "lc")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ci, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer still has %d pending, %d in flight 10 s after the purge", ci.NumPending, ci.NumAckPending)
		}
		time.Sleep(time.Millisecond)
	}
}
