package queuetest

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
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

// testAckBatchFailureAcksNone: a batch whose store fails the ack of one of
// its messages either fails as a whole, and then acked none of them (the
// driver contract: an error means none was acked; the receipts still ack
// once the fault is gone), or gives outcomes that tell the truth: every
// AckCurrent message is deleted, every other one is still stored, and the
// refused one is not AckCurrent.
func testAckBatchFailureAcksNone(t *testing.T, h Harness) {
	if h.RefuseAcks == nil {
		t.Skip("the harness cannot make an ack fail (Harness.RefuseAcks)")
	}
	var q *queue.Queue
	if h.Caps.ControlsTime {
		q = openClocked(t, h, clock.New(start)) // the leases never end here
	} else {
		q = h.Open(t)
	}
	sendTexts(t, q, "a", "refused", "c")
	// A short lease: an engine whose failed ack waits for the lease to end
	// (JetStream: a reply that never comes) gives up after 2 s.
	ms := receive(t, q, 3, queue.ReceiveVisibility(2*time.Second))
	if len(ms) != 3 {
		t.Fatalf("received %d (%s); want 3", len(ms), texts(ms))
	}
	receipts := make([]string, len(ms))
	for i, m := range ms {
		receipts[i] = m.ReceiptHandle
	}
	undo := h.RefuseAcks(t, q, "refused")
	out, err := q.AckBatch(ctx, receipts)
	if err != nil {
		if n := rawCount(t, q); n != 3 {
			t.Fatalf("AckBatch failed (%v) yet %d of its 3 messages are deleted; an error must mean none was acked", err, 3-n)
		}
		undo()
		if !h.Caps.ControlsTime {
			return // the leases may have ended meanwhile
		}
		out, err = q.AckBatch(ctx, receipts)
		if want := []queue.AckOutcome{queue.AckCurrent, queue.AckCurrent, queue.AckCurrent}; err != nil || !slices.Equal(out, want) {
			t.Fatalf("AckBatch after the fault: %v, %v; want %v (the failed batch left the receipts current)", out, err, want)
		}
		if n := rawCount(t, q); n != 0 {
			t.Fatalf("%d messages after the second AckBatch; want 0", n)
		}
		return
	}
	undo()
	if len(out) != len(ms) {
		t.Fatalf("AckBatch gave %d outcomes for %d receipts", len(out), len(ms))
	}
	stored := map[string]bool{}
	for _, m := range peekAll(t, q) {
		stored[m.Payload.Data] = true
	}
	for i, m := range ms {
		switch d := m.Payload.Data; {
		case out[i] == queue.AckCurrent && stored[d]:
			t.Errorf("%q: AckCurrent, yet still stored", d)
		case out[i] != queue.AckCurrent && !stored[d]:
			t.Errorf("%q: outcome %v, yet deleted", d, out[i])
		case d == "refused" && out[i] == queue.AckCurrent:
			t.Errorf("%q: AckCurrent, though its ack failed", d)
		}
	}
}
