package queuetest

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings/queue"
)

func testAckRemoves(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a", "b")
	m := receiveOne(t, q)
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after ack; want 1", n)
	}
	tl.advance(time.Hour) // never redelivered, however long we wait
	wantTexts(t, receive(t, q, 10), "b")
}

func testAckGarbage(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	garbage := []string{"nope", "1:not-a-uuid", "", ":", " " + m.ReceiptHandle, m.ReceiptHandle + " "}
	u := m.ReceiptHandle[strings.IndexByte(m.ReceiptHandle, ':')+1:]
	id := strconv.FormatInt(m.ID, 10)
	if h.Caps.IDUUIDReceipts {
		garbage = append(garbage, "x:"+u, id+":", ":"+u, "-1:"+u, "0:"+u, id+":"+u+":extra",
			"999999:"+u) // well formed, but no such message
	}
	for _, r := range garbage {
		if err := q.Ack(ctx, r); err != nil {
			t.Errorf("Ack(%q) = %v; want a no-op success", r, err)
		}
		if err := q.Nack(ctx, r); err != nil {
			t.Errorf("Nack(%q) = %v; want a no-op success", r, err)
		}
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows; want 1 (garbage receipts delete nothing)", n)
	}
	wantEmpty(t, q) // nor do they make anything visible
	if r := rawMessage(t, q, m.ID); r.attempt != 1 {
		t.Fatalf("attempt %d; want 1", r.attempt)
	}
	if h.Caps.IDUUIDReceipts {
		// A well-formed receipt of an existing message whose uuid is not the
		// current one is stale by the spec's rule (0 rows, the id exists).
		wantStale(t, q.Ack(ctx, id+":"+uuid.NewString()), "Ack")
		if n := rawCount(t, q); n != 1 {
			t.Fatalf("%d rows; want 1", n)
		}
	}
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

func testAckTwice(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	for i := range 2 {
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatalf("ack #%d: %v", i+1, err)
		}
	}
	if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("nack after ack: %v; want a no-op success", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

func testAckStale(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a")
	mark := tl.now()
	old := receiveOne(t, q, queue.ReceiveVisibility(shortLease))
	cur := tl.receiveDue(t, q, mark, shortLease)
	if cur.ID != old.ID {
		t.Fatalf("redelivered id %d; want %d", cur.ID, old.ID)
	}
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after a stale ack; want 1 (the message must NOT be deleted)", n)
	}
	wantEmpty(t, q) // the current lease is untouched
	if err := q.Ack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatalf("ack with the current receipt: %v", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	// Once the message is gone, the old receipt is merely idempotent.
	if err := q.Ack(ctx, old.ReceiptHandle); err != nil {
		t.Fatalf("old receipt after the ack: %v; want a no-op success", err)
	}
}

func testNack(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a")
	first := receiveOne(t, q)
	tl.advance(time.Second)
	before := tl.now()
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	after := tl.now()
	p := peekMessage(t, q, first.ID)
	if p.Attempt != 1 {
		t.Fatalf("after nack: attempt %d; want 1", p.Attempt)
	}
	tl.wantLeaseEnd(t, "visible_at after nack", p, before, after, 0)
	again := receiveOne(t, q) // no clock movement: visible at once
	if again.ID != first.ID || again.Attempt != 2 || again.ReceiptHandle == first.ReceiptHandle {
		t.Fatalf("redelivery id %d attempt %d receipt %q; want id %d, attempt 2, a new receipt",
			again.ID, again.Attempt, again.ReceiptHandle, first.ID)
	}
	checkReceipt(t, h, q, again)
	if err := q.Ack(ctx, again.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q)
}

func testNackStale(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a")
	old := receiveOne(t, q)
	if err := q.Nack(ctx, old.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	cur := receiveOne(t, q)
	wantStale(t, q.Nack(ctx, old.ReceiptHandle), "Nack")
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	wantEmpty(t, q) // the stale nack did not make it visible
	tl.wantPeekAttempt(t, q, cur.ID, 2)
	if err := q.Nack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatalf("nack with the current receipt: %v", err)
	}
	third := receiveOne(t, q)
	if third.ID != cur.ID || third.Attempt != 3 {
		t.Fatalf("third delivery id %d attempt %d; want %d, 3", third.ID, third.Attempt, cur.ID)
	}
}

func testPurge(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a", "b", "c")
	inFlight := receive(t, q, 2)
	if len(inFlight) != 2 {
		t.Fatalf("got %d; want 2", len(inFlight))
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("COUNT(*) = %d after purge; want 0", n)
	}
	tl.advance(time.Hour)
	wantEmpty(t, q)
	// Receipts of purged messages ack as already gone.
	if err := q.Ack(ctx, inFlight[0].ReceiptHandle); err != nil {
		t.Fatalf("ack after purge: %v; want a no-op success", err)
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatalf("purge of an empty queue: %v", err)
	}
	sendTexts(t, q, "after")
	wantTexts(t, receive(t, q, 10), "after")
}

func testNackDelay(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	sendTexts(t, q, "a", "b")
	before := tl.now()
	first := receiveOne(t, q)
	after := tl.now()
	wantInvalid(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(-time.Second)), "delay")
	wantInvalid(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(queue.MaxDelay+1)), "delay")
	tl.wantLeaseEnd(t, "visible_at after rejected nacks (the lease end, unchanged)",
		peekMessage(t, q, first.ID), before, after, queue.DefaultVisibility)
	tl.advance(time.Second)
	delay := 10 * time.Second
	if tl.isReal() {
		delay = shortDelay
	}
	before = tl.now()
	if err := q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	after = tl.now()
	p := peekMessage(t, q, first.ID)
	if p.Attempt != 1 {
		t.Fatalf("after nack: attempt %d; want 1", p.Attempt)
	}
	tl.wantLeaseEnd(t, "visible_at after nack with a delay", p, before, after, delay)
	wantTexts(t, receive(t, q, 10, queue.ReceiveVisibility(time.Minute)), "b") // a backs off
	tl.wantNotDue(t, q, before, delay)
	again := tl.receiveDue(t, q, before, delay)
	if again.ID != first.ID || again.Attempt != 2 || again.ReceiptHandle == first.ReceiptHandle {
		t.Fatalf("redelivery id %d attempt %d; want id %d attempt 2 with a new receipt", again.ID, again.Attempt, first.ID)
	}
	checkReceipt(t, h, q, again)
	// A stale nack with a delay changes nothing either.
	wantStale(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(time.Second)), "Nack")
}
