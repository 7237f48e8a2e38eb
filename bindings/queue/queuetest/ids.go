package queuetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// testSendIDs: WithSendResult gives the ids of what a send stored, the ids
// every receive and peek of those messages show; a delayed send's ids are
// those too, or 0 where the engine cannot know them at the send.
func testSendIDs(t *testing.T, h Harness) {
	q := h.Open(t)
	var one, batch queue.SendResult
	if err := q.Send(ctx, queue.Text("one"), queue.WithSendResult(&one)); err != nil {
		t.Fatal(err)
	}
	if err := q.SendBatch(ctx, []queue.Payload{queue.Text("b0"), queue.Text("b1"), queue.Text("b2")}, queue.WithSendResult(&batch)); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	if len(one.IDs) != 1 || len(batch.IDs) != 3 {
		t.Fatalf("send results %+v and %+v: want 1 and 3 ids", one, batch)
	}
	want["one"] = one.IDs[0]
	for i, id := range batch.IDs {
		want[fmt.Sprint("b", i)] = id
	}
	seen := map[int64]bool{}
	for _, id := range want {
		if id <= 0 || seen[id] {
			t.Fatalf("send ids %v: want distinct ids > 0", want)
		}
		seen[id] = true
	}
	for _, p := range peekAll(t, q) {
		if want[p.Payload.Data] != p.ID {
			t.Errorf("peek of %q shows id %d; its send said %d", p.Payload.Data, p.ID, want[p.Payload.Data])
		}
	}
	msgs := receive(t, q, 10)
	if len(msgs) != 4 {
		t.Fatalf("received %d messages (%s); want 4", len(msgs), texts(msgs))
	}
	for _, m := range msgs {
		if want[m.Payload.Data] != m.ID {
			t.Errorf("receive of %q shows id %d; its send said %d", m.Payload.Data, m.ID, want[m.Payload.Data])
		}
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	var delayed queue.SendResult
	if err := q.Send(ctx, queue.Text("later"), queue.WithDelay(time.Millisecond), queue.WithSendResult(&delayed)); err != nil {
		t.Fatal(err)
	}
	if len(delayed.IDs) != 1 {
		t.Fatalf("delayed send result %+v: want 1 id", delayed)
	}
	var got queue.Message
	waitFor(t, "the delayed message", func() bool {
		ms, err := q.Receive(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 1 {
			got = ms[0]
		}
		return len(ms) == 1
	})
	if delayed.IDs[0] != 0 && delayed.IDs[0] != got.ID {
		t.Errorf("delayed send said id %d; its receive shows %d", delayed.IDs[0], got.ID)
	}
}
