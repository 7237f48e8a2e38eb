package queuetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

// checkReceipt asserts m's receipt is non-empty and, through the harness's
// CheckReceipt, what the engine stored for it; it returns the receipt.
func checkReceipt(t *testing.T, h Harness, q *queue.Queue, m queue.Message) string {
	t.Helper()
	if m.ReceiptHandle == "" {
		t.Fatalf("message %d has an empty receipt", m.ID)
	}
	if h.Caps.IDUUIDReceipts && !strings.HasPrefix(m.ReceiptHandle, strconv.FormatInt(m.ID, 10)+":") {
		t.Fatalf("receipt %q does not start with the id %d", m.ReceiptHandle, m.ID)
	}
	if r := rawMessage(t, q, m.ID); r.attempt != m.Attempt || !r.delivered {
		t.Fatalf("Peek shows attempt %d delivered %v; message says attempt %d", r.attempt, r.delivered, m.Attempt)
	}
	if h.CheckReceipt != nil {
		h.CheckReceipt(t, q, m)
	}
	return m.ReceiptHandle
}

func testReceiptFormat(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b", "c")
	id, _ := minMaxID(t, q)
	before := rawMessage(t, q, id)
	if before.attempt != 0 || before.delivered {
		t.Fatalf("before delivery: attempt %d delivered %v; want 0, false", before.attempt, before.delivered)
	}
	if before.enqueued != start.UnixMilli() || before.visibleAt != start.UnixMilli() {
		t.Fatalf("enqueued_at %d visible_at %d; want both %d (unix ms)", before.enqueued, before.visibleAt, start.UnixMilli())
	}
	msgs := receive(t, q, 3)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages; want 3", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Attempt != 1 {
			t.Errorf("message %d attempt %d; want 1", m.ID, m.Attempt)
		}
		if !m.EnqueuedAt.Equal(start) {
			t.Errorf("message %d EnqueuedAt %v; want %v", m.ID, m.EnqueuedAt, start)
		}
		u := checkReceipt(t, h, q, m)
		if seen[u] {
			t.Errorf("receipt %s minted twice in one batch", u)
		}
		seen[u] = true
		if r := rawMessage(t, q, m.ID); r.visibleAt != start.Add(queue.DefaultVisibility).UnixMilli() {
			t.Errorf("visible_at %d; want now + 30 s = %d", r.visibleAt, start.Add(queue.DefaultVisibility).UnixMilli())
		}
	}
	if msgs[0].ID != id {
		t.Errorf("first message id %d; want %d", msgs[0].ID, id)
	}
}

func testLeaseDefault(t *testing.T, h Harness) {
	if queue.DefaultVisibility != 30*time.Second {
		t.Fatalf("DefaultVisibility = %s; the spec's LEASE_SECONDS is 30 s", queue.DefaultVisibility)
	}
	c := newClock(t, h)
	q := openClocked(t, h, c)
	sendTexts(t, q, "m")
	first := receiveOne(t, q)
	c.Advance(queue.DefaultVisibility - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond) // due when visible_at <= now
	again := receiveOne(t, q)
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	checkReceipt(t, h, q, again)
}

func testLeaseShort(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	other := openClocked(t, h, c) // a second consumer must not see it either
	sendTexts(t, q, "m")
	first := receiveOne(t, q, queue.ReceiveVisibility(100*time.Millisecond))
	c.Advance(99 * time.Millisecond)
	wantEmpty(t, q)
	wantEmpty(t, other)
	c.Advance(151 * time.Millisecond) // 250 ms after the receive
	again := receiveOne(t, other)
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	if again.Payload.Data != "m" {
		t.Fatalf("redelivered payload %q; want %q", again.Payload.Data, "m")
	}
	checkReceipt(t, h, q, again)
	// A handle-wide default lease applies without WithVisibility.
	short := openClocked(t, h, c, queue.WithDefaultVisibility(time.Second))
	c.Advance(queue.DefaultVisibility)
	third := receiveOne(t, short)
	if r := rawMessage(t, q, third.ID); r.visibleAt != c.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("visible_at %d; want now + 1 s = %d", r.visibleAt, c.Now().Add(time.Second).UnixMilli())
	}
}

func testExtend(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	other := openClocked(t, h, c)
	sendTexts(t, q, "slow")
	m := receiveOne(t, q, queue.ReceiveVisibility(time.Second))
	c.Advance(800 * time.Millisecond)
	if err := q.Extend(ctx, m.ReceiptHandle, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := rawMessage(t, q, m.ID); r.visibleAt != c.Now().Add(2*time.Second).UnixMilli() || r.attempt != 1 {
		t.Fatalf("after extend: visible_at %d attempt %d; want now + 2 s (%d), 1", r.visibleAt, r.attempt, c.Now().Add(2*time.Second).UnixMilli())
	}
	c.Advance(time.Second) // past the original lease end
	wantEmpty(t, q)
	wantEmpty(t, other)
	// The receipt is still the current one: extend again, then ack.
	if err := other.Extend(ctx, m.ReceiptHandle, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(59 * time.Second)
	wantEmpty(t, other)
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("ack after extends: %v", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	// Without an extend the message comes back when its lease ends.
	sendTexts(t, q, "fast")
	m = receiveOne(t, q, queue.ReceiveVisibility(time.Second))
	c.Advance(time.Second)
	if again := receiveOne(t, other); again.ID != m.ID || again.Attempt != 2 {
		t.Fatalf("redelivery id %d attempt %d; want %d, 2", again.ID, again.Attempt, m.ID)
	}
}

func testExtendStale(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	old := receiveOne(t, q, queue.ReceiveVisibility(time.Second))
	c.Advance(time.Second)
	cur := receiveOne(t, q, queue.ReceiveVisibility(time.Second))
	wantStale(t, q.Extend(ctx, old.ReceiptHandle, time.Minute), "Extend")
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	if r := rawMessage(t, q, cur.ID); r.visibleAt != c.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("visible_at %d after a stale extend; want the current lease end %d", r.visibleAt, c.Now().Add(time.Second).UnixMilli())
	}
	for _, d := range []time.Duration{0, -time.Second, queue.MaxVisibility + 1} {
		wantInvalid(t, q.Extend(ctx, cur.ReceiptHandle, d), "extend", queue.MaxVisibility.String())
	}
	// Extend cannot succeed by doing nothing: a garbage receipt is invalid
	// input, and a message that is gone is an error.
	for _, r := range []string{"nope", "", "1:not-a-uuid", cur.ReceiptHandle + " "} {
		wantInvalid(t, q.Extend(ctx, r, time.Minute), "receipt")
	}
	if err := q.Ack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	err := q.Extend(ctx, cur.ReceiptHandle, time.Minute)
	if !errors.Is(err, queue.ErrMessageGone) || !errors.Is(err, bindings.ErrQueueOperationFailed) {
		t.Fatalf("Extend of an acked message: %v; want ErrMessageGone, QUEUE_OPERATION_FAILED", err)
	}
}
