package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

func batchOf(n int, prefix string) []queue.Payload {
	ps := make([]queue.Payload, n)
	for i := range ps {
		ps[i] = queue.Text(fmt.Sprintf("%s-%03d", prefix, i))
	}
	return ps
}

func testBatchHundred(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	if queue.MaxSendBatch != 100 {
		t.Fatalf("MaxSendBatch = %d; want 100", queue.MaxSendBatch)
	}
	ps := batchOf(queue.MaxSendBatch, "b")
	ps[7] = queue.JSON(map[string]int{"seven": 7})
	before := tl.now()
	if err := q.SendBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	after := tl.now()
	var n int
	var enq0 int64
	for _, m := range peekAll(t, q) {
		tl.wantTime(t, fmt.Sprintf("message %d enqueued_at", m.ID), m.EnqueuedAt, before, after, 0)
		if enq, vis := m.EnqueuedAt.UnixMilli(), m.VisibleAt.UnixMilli(); vis != enq || (n > 0 && enq != enq0) {
			t.Errorf("message %d: enqueued %d visible %d; want both %d (one time for the whole batch)", m.ID, enq, vis, enq0)
		} else if n == 0 {
			enq0 = enq
		}
		n++
	}
	if n != queue.MaxSendBatch {
		t.Fatalf("%d rows; want %d", n, queue.MaxSendBatch)
	}
	var got []queue.Message
	for len(got) < n {
		msgs := receive(t, q, queue.MaxReceiveBatch)
		if len(msgs) == 0 {
			t.Fatalf("received %d of %d", len(got), n)
		}
		for _, m := range msgs {
			if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, msgs...)
	}
	for i, m := range got {
		if m.Payload != ps[i] {
			t.Fatalf("message %d = %v %q; want %v %q (slice order)", i, m.Payload.Type, m.Payload.Data, ps[i].Type, ps[i].Data)
		}
		if i > 0 && m.ID <= got[i-1].ID {
			t.Fatalf("ids not ascending: %d after %d", m.ID, got[i-1].ID)
		}
	}
	// A delayed batch: every message is due together.
	delay := time.Minute
	if tl.isReal() {
		delay = shortDelay
	}
	before = tl.now()
	if err := q.SendBatch(ctx, batchOf(3, "d"), queue.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	tl.wantNotDue(t, q, before, delay)
	due := tl.receiveDueN(t, q, 10, before, delay)
	if !tl.isReal() || !tl.caps.PeekHidesLeases {
		wantTexts(t, due, "d-000", "d-001", "d-002")
		return
	}
	// A server that makes delayed messages due on its own timer (JetStream's
	// schedules) makes them due one after another: the receive that saw
	// the first may come before the last (seen under -race: d-000, d-001).
	// The rest must follow within serverSlack, in order.
	for end := time.Now().Add(serverSlack); len(due) < 3 && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		due = append(due, receive(t, q, 10)...)
	}
	wantTexts(t, due, "d-000", "d-001", "d-002")
}

func testBatchLimits(t *testing.T, h Harness) {
	q := h.Open(t)
	wantInvalid(t, q.SendBatch(ctx, nil), "batch", "100", "0")
	wantInvalid(t, q.SendBatch(ctx, []queue.Payload{}), "batch", "0")
	wantInvalid(t, q.SendBatch(ctx, batchOf(queue.MaxSendBatch+1, "x")), "batch", "101")
	// One bad payload anywhere rejects the batch before the store is touched.
	ps := batchOf(queue.MaxSendBatch, "x")
	ps[50] = queue.Text(strings.Repeat("a", queue.MaxPayloadBytes+1))
	wantInvalid(t, q.SendBatch(ctx, ps), "payload 50", "65537")
	ps[50] = queue.Payload{Type: queue.TypeJSON, Data: `{"open":`}
	wantInvalid(t, q.SendBatch(ctx, ps), "payload 50")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected batches; want 0", n)
	}
}

func testBatchAllOrNone(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "before")
	ps := batchOf(queue.MaxSendBatch, "batch")
	ps[73] = queue.Text("refused") // inserts 0..72 run before it fails
	undo := func() {}
	if h.RefuseSends != nil {
		// A valid payload that the store refuses.
		undo = h.RefuseSends(t, q, "refused")
		err := q.SendBatch(ctx, ps)
		if err == nil || !strings.Contains(err.Error(), "refused insert") {
			t.Fatalf("SendBatch with a refused insert: %v; want the store's error", err)
		}
		if !errors.Is(err, bindings.ErrQueueOperationFailed) {
			t.Errorf("err = %v; want QUEUE_OPERATION_FAILED", err)
		}
		if n := rawCount(t, q); n != 1 {
			t.Fatalf("%d rows after a failed batch; want 1 (the earlier send only: all or none)", n)
		}
	}
	// A batch cut off by its context mid-way leaves none either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.SendBatch(cctx, batchOf(10, "cancelled")); err == nil {
		t.Fatal("SendBatch with a cancelled context succeeded")
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after a cancelled batch; want 1", n)
	}
	undo()
	if err := q.SendBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 1+queue.MaxSendBatch {
		t.Fatalf("%d rows; want %d", n, 1+queue.MaxSendBatch)
	}
}
