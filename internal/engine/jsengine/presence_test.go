package jsengine_test

import (
	"context"
	"slices"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestAckBatchPresence: AckBatch's outcomes when its messages' presence
// comes from one stream read (presence.go) and, with the deleted list over
// its bound, from a get each: a live receipt of a message another handle
// acked (it shared the receipt) or purged is gone; the others are current.
// Both handles are this process's, but neither knows the other's acks.
func TestAckBatchPresence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxDeleted uint64
	}{{"OneRead", 2048}, {"GetEach", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			old := jsengine.SetMaxDeleted(tc.maxDeleted)
			defer jsengine.SetMaxDeleted(old)
			nc := connect(t)
			ctx := context.Background()
			loc := freshName("presence")
			open := func() *queue.Queue {
				q, err := queue.OpenEngine(ctx, jsengine.Queue{Conn: nc}, loc)
				if err != nil {
					t.Fatal(err)
				}
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
