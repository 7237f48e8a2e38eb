package jsengine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestAckBatchPresence: AckBatch's outcomes when its messages' presence
// comes from one stream read (presence.go) and, with the deleted list over
// its bound, from a get each: a live receipt of a message another handle
// acked (it shared the receipt) or purged is gone; the others are current.
// Both handles are this process's, but neither knows the other's acks.
// When AckBatch returns, the other handle no longer sees the acked
// messages (on R3: the removal was awaited, waitAllGone).
func TestAckBatchPresence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replicas   int
		maxDeleted uint64
	}{{"R1/OneRead", 1, 2048}, {"R1/GetEach", 1, 2}, {"R3/OneRead", 3, 2048}, {"R3/GetEach", 3, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.replicas > 1 && testing.Short() {
				t.Skip("a 3-node cluster")
			}
			old := jsengine.SetMaxDeleted(tc.maxDeleted)
			defer jsengine.SetMaxDeleted(old)
			var nc *nats.Conn
			if tc.replicas > 1 {
				nc = connectCluster(t)
			} else {
				nc = connect(t)
			}
			ctx := context.Background()
			loc := freshName("presence")
			open := func() *queue.Queue {
				q := retryOpen(t, func() (*queue.Queue, error) {
					return queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc, Replicas: tc.replicas}, loc)
				})
				t.Cleanup(func() { q.Close() })
				return q
			}
			a, b := open(), open()
			receive := func(n int) []queue.Message {
				t.Helper()
				var got []queue.Message
				for len(got) < n {
					ms, err := a.Receive(ctx, n-len(got))
					if err != nil {
						t.Fatal(err)
					}
					if len(ms) == 0 {
						t.Fatalf("received %d of %d", len(got), n)
					}
					got = append(got, ms...)
				}
				return got
			}
			// A message that stays stored below the others keeps their
			// acks as deleted sequences in the stream: over the bound of
			// GetEach.
			if err := a.Send(ctx, queue.Text("head")); err != nil {
				t.Fatal(err)
			}
			head := receive(1)[0]
			for range 2 {
				if err := a.SendBatch(ctx, []queue.Payload{queue.Text("x"), queue.Text("y"), queue.Text("z")}); err != nil {
					t.Fatal(err)
				}
				ms := receive(3)
				if _, err := b.AckBatch(ctx, []string{ms[0].ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
				got, err := a.AckBatch(ctx, []string{ms[0].ReceiptHandle, ms[1].ReceiptHandle, ms[2].ReceiptHandle})
				if err != nil {
					t.Fatal(err)
				}
				if want := []queue.AckOutcome{queue.AckGone, queue.AckCurrent, queue.AckCurrent}; !slices.Equal(got, want) {
					t.Fatalf("AckBatch after another handle acked the first: %v; want %v", got, want)
				}
				if st, err := b.Stats(ctx); err != nil || st.Total != 1 {
					t.Fatalf("the other handle's stats %+v (%v) right after the batch; want 1 message (head)", st, err)
				}
			}
			if err := a.SendBatch(ctx, []queue.Payload{queue.Text("p"), queue.Text("q")}); err != nil {
				t.Fatal(err)
			}
			ms := receive(2)
			if err := b.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := a.AckBatch(ctx, []string{ms[0].ReceiptHandle, ms[1].ReceiptHandle, head.ReceiptHandle})
			if err != nil {
				t.Fatal(err)
			}
			if want := []queue.AckOutcome{queue.AckGone, queue.AckGone, queue.AckGone}; !slices.Equal(got, want) {
				t.Fatalf("AckBatch after another handle purged: %v; want %v", got, want)
			}
			st, err := a.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Total != 0 {
				t.Fatalf("stats %+v after the purge; want an empty queue", st)
			}
		})
	}
}
