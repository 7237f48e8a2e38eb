package jsengine_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestAckBatchPresence: AckBatch's outcomes when its messages' presence
// comes from one stream read (presence.go) and, with the deleted list over
// its bound, from batched direct gets (R1, direct.go: without headers for a
// range of stored due messages, else with; a batch of 2 needs
// more than one request, of 1 more than directRounds, whose rest is a get
// each) or from a get each: a live receipt of a message another handle
// acked (it shared the receipt) or purged is gone; the others are current.
// Both handles are this process's, but neither knows the other's acks.
// When AckBatch returns, the other handle no longer sees the acked
// messages (on R3: the removal was awaited, waitAllGone).
func TestAckBatchPresence(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replicas   int
		maxDeleted uint64
		direct     uint64 // the direct gets' batch; 0: off
	}{
		{"R1/OneRead", 1, 2048, 0}, {"R1/Direct", 1, 2, 256}, {"R1/DirectSmall", 1, 2, 2}, {"R1/DirectRounds", 1, 2, 1}, {"R1/GetEach", 1, 2, 0},
		{"R3/OneRead", 3, 2048, 0}, {"R3/GetEach", 3, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.replicas > 1 && testing.Short() {
				t.Skip("a 3-node cluster")
			}
			old := jsengine.SetMaxDeleted(tc.maxDeleted)
			defer jsengine.SetMaxDeleted(old)
			reads := jsengine.SetDirectGets(tc.direct > 0, max(tc.direct, 1))
			defer jsengine.SetDirectGets(true, 256)
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
			// Eight in flight, the second acked by the other handle: with
			// a direct batch of 1 the last three are past directRounds.
			eight := make([]queue.Payload, 8)
			for i := range eight {
				eight[i] = queue.Text(strconv.Itoa(i))
			}
			if err := a.SendBatch(ctx, eight); err != nil {
				t.Fatal(err)
			}
			ms8 := receive(8)
			if _, err := b.AckBatch(ctx, []string{ms8[1].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			rs := make([]string, 8)
			for i, m := range ms8 {
				rs[7-i] = m.ReceiptHandle // not in stream order
			}
			got8, err := a.AckBatch(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			want8 := slices.Repeat([]queue.AckOutcome{queue.AckCurrent}, 8)
			want8[6] = queue.AckGone
			if !slices.Equal(got8, want8) {
				t.Fatalf("AckBatch of eight after another handle acked the second: %v; want %v", got8, want8)
			}
			// Four in flight, none acked elsewhere: all current (R1/Direct:
			// one direct get without headers).
			if err := a.SendBatch(ctx, eight[:4]); err != nil {
				t.Fatal(err)
			}
			ms4 := receive(4)
			got4, err := a.AckBatch(ctx, []string{ms4[2].ReceiptHandle, ms4[0].ReceiptHandle, ms4[3].ReceiptHandle, ms4[1].ReceiptHandle})
			if err != nil {
				t.Fatal(err)
			}
			if want4 := slices.Repeat([]queue.AckOutcome{queue.AckCurrent}, 4); !slices.Equal(got4, want4) {
				t.Fatalf("AckBatch of four: %v; want %v", got4, want4)
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
			// Whether the direct reads served (at least the four batches
			// over the bound) or, off, none.
			served := jsengine.SetDirectGets(tc.direct > 0, 0) - reads
			if tc.direct > 0 && served < 4 || tc.direct == 0 && served != 0 {
				t.Fatalf("direct reads served %d AckBatch calls; want %s", served, map[bool]string{true: "at least 4", false: "none"}[tc.direct > 0])
			}
		})
	}
}

// TestOpenTurnsOnDirect: a queue stream of one replica made without
// AllowDirect (before AckBatch read with direct gets) gets it at Open; a
// read-only Open changes nothing.
func TestOpenTurnsOnDirect(t *testing.T) {
	nc := connect(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	loc := freshName("olddirect")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "LCQ_" + loc, Subjects: []string{"lcq." + loc, "lcqs." + loc + ".>", "lcqd." + loc},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: 1,
		AllowAtomicPublish: true, AllowMsgSchedules: true, AllowMsgTTL: true, Duplicates: 5 * time.Minute,
	}); err != nil {
		t.Fatal(err)
	}
	direct := func() bool {
		t.Helper()
		st, err := js.Stream(ctx, "LCQ_"+loc)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.AllowDirect
	}
	ro, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, loc, queue.WithReadOnly())
	if err == nil {
		ro.Close()
	}
	if direct() {
		t.Fatal("a read-only Open turned allow_direct on")
	}
	q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if !direct() {
		t.Fatal("Open left allow_direct off on a stream of one replica")
	}
}
