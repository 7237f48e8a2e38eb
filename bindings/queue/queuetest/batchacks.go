package queuetest

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// testAckBatchOutcomes: one AckBatch holding a current, a stale, a gone
// and a garbage receipt and a current one again gives each its own
// outcome; only the current receipts' messages are deleted.
func testAckBatchOutcomes(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	sendTexts(t, q, "stale", "gone", "a", "b")
	old := receiveOne(t, q, queue.ReceiveVisibility(time.Second)) // "stale"
	c.Advance(2 * time.Second)
	cur := receiveOne(t, q) // "stale" again, under a new receipt
	if cur.ID != old.ID {
		t.Fatalf("redelivered id %d; want %d", cur.ID, old.ID)
	}
	gone := receiveOne(t, q)
	if err := q.Ack(ctx, gone.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	ab := receive(t, q, 2)
	if len(ab) != 2 {
		t.Fatalf("received %d; want 2", len(ab))
	}
	receipts := []string{ab[0].ReceiptHandle, old.ReceiptHandle, gone.ReceiptHandle, "nope", ab[1].ReceiptHandle}
	got, err := q.AckBatch(ctx, receipts)
	if err != nil {
		t.Fatalf("AckBatch: %v", err)
	}
	want := []queue.AckOutcome{queue.AckCurrent, queue.AckStale, queue.AckGone, queue.AckGone, queue.AckCurrent}
	if !slices.Equal(got, want) {
		t.Fatalf("AckBatch outcomes %v; want %v", got, want)
	}
	// The stale receipt deleted nothing: the current delivery still holds it.
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after the batch; want 1 (the redelivered message)", n)
	}
	wantEmpty(t, q) // and its current lease is untouched
	// A second batch: the current receipt acks it, the others are gone now.
	got, err = q.AckBatch(ctx, []string{cur.ReceiptHandle, old.ReceiptHandle, ab[0].ReceiptHandle})
	if err != nil {
		t.Fatal(err)
	}
	if want := []queue.AckOutcome{queue.AckCurrent, queue.AckGone, queue.AckGone}; !slices.Equal(got, want) {
		t.Fatalf("second AckBatch outcomes %v; want %v", got, want)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	c.Advance(time.Hour)
	wantEmpty(t, q) // nothing acked comes back
}

// testAckBatchDuplicate: the same receipt twice in one batch acks its
// message once: current, then gone.
func testAckBatchDuplicate(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	got, err := q.AckBatch(ctx, []string{m.ReceiptHandle, m.ReceiptHandle})
	if err != nil {
		t.Fatal(err)
	}
	if want := []queue.AckOutcome{queue.AckCurrent, queue.AckGone}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v; want %v", got, want)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

// testAckBatchLimits: an empty batch and one over MaxAckBatch are
// INVALID_INPUT naming the limit and the size, and ack nothing;
// MaxAckBatch receipts are fine.
func testAckBatchLimits(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	for _, n := range []int{0, queue.MaxAckBatch + 1} {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = m.ReceiptHandle
		}
		out, err := q.AckBatch(ctx, rs)
		if out != nil {
			t.Fatalf("AckBatch of %d: outcomes %v with error %v; want none", n, out, err)
		}
		wantInvalid(t, err, "receipts", strconv.Itoa(queue.MaxAckBatch), "got "+strconv.Itoa(n))
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after refused batches; want 1", n)
	}
	rs := make([]string, queue.MaxAckBatch)
	rs[0] = m.ReceiptHandle
	for i := 1; i < len(rs); i++ {
		rs[i] = "nope"
	}
	out, err := q.AckBatch(ctx, rs)
	if err != nil || len(out) != queue.MaxAckBatch || out[0] != queue.AckCurrent {
		t.Fatalf("AckBatch of %d: %d outcomes, first %v, %v; want %d, current, nil", len(rs), len(out), out[:min(1, len(out))], err, queue.MaxAckBatch)
	}
}
