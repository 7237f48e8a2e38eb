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
	if r := rawMessage(t, q, m.ID); (r.attempt != m.Attempt && !h.Caps.PeekHidesLeases) || !r.delivered {
		t.Fatalf("Peek shows attempt %d delivered %v; message says attempt %d", r.attempt, r.delivered, m.Attempt)
	}
	if h.CheckReceipt != nil {
		h.CheckReceipt(t, q, m)
	}
	return m.ReceiptHandle
}

func testReceiptFormat(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sent0 := tl.now()
	sendTexts(t, q, "a")
	sent1 := tl.now()
	sendTexts(t, q, "b", "c")
	id, _ := minMaxID(t, q)
	before := peekMessage(t, q, id)
	if before.Attempt != 0 || before.Delivered {
		t.Fatalf("before delivery: attempt %d delivered %v; want 0, false", before.Attempt, before.Delivered)
	}
	tl.wantTime(t, "enqueued_at", before.EnqueuedAt, sent0, sent1, 0)
	if !before.VisibleAt.Equal(before.EnqueuedAt) {
		t.Fatalf("visible_at %v; want enqueued_at %v", before.VisibleAt, before.EnqueuedAt)
	}
	recv0 := tl.now()
	msgs := receive(t, q, 3)
	recv1 := tl.now()
	if len(msgs) != 3 {
		t.Fatalf("got %d messages; want 3", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Attempt != 1 {
			t.Errorf("message %d attempt %d; want 1", m.ID, m.Attempt)
		}
		if m.ID == id && !m.EnqueuedAt.Equal(before.EnqueuedAt) {
			t.Errorf("message %d EnqueuedAt %v; want %v", m.ID, m.EnqueuedAt, before.EnqueuedAt)
		}
		u := checkReceipt(t, h, q, m)
		if seen[u] {
			t.Errorf("receipt %s minted twice in one batch", u)
		}
		seen[u] = true
		tl.wantLeaseEnd(t, "visible_at (now + 30 s)", peekMessage(t, q, m.ID), recv0, recv1, queue.DefaultVisibility)
	}
	if msgs[0].ID != id {
		t.Errorf("first message id %d; want %d", msgs[0].ID, id)
	}
}

func testLeaseDefault(t *testing.T, h Harness) {
	if queue.DefaultVisibility != 30*time.Second {
		t.Fatalf("DefaultVisibility = %s; the spec's LEASE_SECONDS is 30 s", queue.DefaultVisibility)
	}
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "m")
	mark := tl.now()
	first := receiveOne(t, q)
	after := tl.now()
	tl.wantLeaseEnd(t, "visible_at (now + 30 s)", peekMessage(t, q, first.ID), mark, after, queue.DefaultVisibility)
	if tl.isReal() {
		// Waiting 30 s of real time is too long for the suite: the lease
		// end above is the check; the redelivery itself is Lease/Short's.
		wantEmpty(t, q)
		return
	}
	tl.wantNotDue(t, q, mark, queue.DefaultVisibility)
	again := tl.receiveDue(t, q, mark, queue.DefaultVisibility) // due when visible_at <= now
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	checkReceipt(t, h, q, again)
}

func testLeaseShort(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	other := tl.open(t, h) // a second consumer must not see it either
	sendTexts(t, q, "m")
	lease := 100 * time.Millisecond
	if tl.isReal() {
		lease = shortLease
	}
	mark := tl.now()
	first := receiveOne(t, q, queue.ReceiveVisibility(lease))
	tl.wantNotDue(t, q, mark, lease)
	tl.wantNotDue(t, other, mark, lease)
	again := tl.receiveDue(t, other, mark, lease)
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	if again.Payload.Data != "m" {
		t.Fatalf("redelivered payload %q; want %q", again.Payload.Data, "m")
	}
	checkReceipt(t, h, q, again)
	// A handle-wide default lease applies without WithVisibility.
	// The same handle sends and receives: what is checked is the default
	// lease, not how soon another handle sees a send (on JetStream a pull
	// from another handle right after a send was seen to find nothing
	// under load; cross-handle visibility has its own cases).
	short := tl.open(t, h, queue.WithDefaultVisibility(time.Second))
	sendTexts(t, short, "n")
	before := tl.now()
	third := receiveOne(t, short)
	after := tl.now()
	tl.wantLeaseEnd(t, "visible_at with the handle's default lease", peekMessage(t, q, third.ID), before, after, time.Second)
}

func testExtend(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	other := tl.open(t, h)
	sendTexts(t, q, "slow")
	lease := time.Second
	if tl.isReal() {
		lease = shortLease
	}
	mark := tl.now()
	m := receiveOne(t, q, queue.ReceiveVisibility(lease))
	tl.advance(800 * time.Millisecond)
	before := tl.now()
	if err := q.Extend(ctx, m.ReceiptHandle, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	after := tl.now()
	p := peekMessage(t, q, m.ID)
	if p.Attempt != 1 {
		t.Fatalf("after extend: attempt %d; want 1", p.Attempt)
	}
	tl.wantLeaseEnd(t, "visible_at after extend", p, before, after, 2*time.Second)
	tl.wantEmptyThrough(t, q, mark, lease+200*time.Millisecond) // past the original lease end
	wantEmpty(t, other)
	// The receipt is still the current one: extend again, then ack.
	extender := other
	if h.Caps.HandleLocalExtend {
		extender = q
	}
	if err := extender.Extend(ctx, m.ReceiptHandle, time.Minute); err != nil {
		t.Fatal(err)
	}
	tl.advance(59 * time.Second)
	wantEmpty(t, other)
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("ack after extends: %v", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	// Without an extend the message comes back when its lease ends.
	sendTexts(t, q, "fast")
	mark = tl.now()
	m = receiveOne(t, q, queue.ReceiveVisibility(lease))
	if again := tl.receiveDue(t, other, mark, lease); again.ID != m.ID || again.Attempt != 2 {
		t.Fatalf("redelivery id %d attempt %d; want %d, 2", again.ID, again.Attempt, m.ID)
	}
}

func testExtendStale(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a")
	mark := tl.now()
	old := receiveOne(t, q, queue.ReceiveVisibility(shortLease))
	before := tl.now()
	cur := tl.receiveDue(t, q, mark, shortLease, queue.ReceiveVisibility(time.Minute))
	after := tl.now()
	wantStale(t, q.Extend(ctx, old.ReceiptHandle, time.Minute), "Extend")
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	if tl.fake != nil {
		before, after = tl.now(), tl.now()
	}
	tl.wantLeaseEnd(t, "visible_at after a stale extend (the current lease end)", peekMessage(t, q, cur.ID), before, after, time.Minute)
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
