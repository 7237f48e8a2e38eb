package queuetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

func needSibling(t *testing.T, h Harness) {
	t.Helper()
	if h.OpenSibling == nil {
		t.Skip("the harness has no OpenSibling: dead letters need a second store")
	}
	if h.Caps.NoDeadLetters {
		t.Skip("the engine has no dead letters yet (Capabilities.NoDeadLetters)")
	}
}

func testDeadLetterPoison(t *testing.T, h Harness) {
	needSibling(t, h)
	tl := newTimeline(t, h)
	dlq := tl.openSibling(t, h, "dlq")
	q := tl.open(t, h, queue.WithBindingName("orders"), queue.WithDeadLetter(3, dlq.Location()))
	// A second handle with the same policy: the limit is the message's, not
	// a handle's.
	q2 := tl.open(t, h, queue.WithBindingName("orders"), queue.WithDeadLetter(3, dlq.Location()))
	poison := queue.Text("poison\t✓ \"quoted\" \\ trailing space ")
	payloadJSON := queue.JSON(json.RawMessage(`{"b":[1,2.50,"x"],"a":null}`))
	beforeSend := tl.now()
	send(t, q, poison)
	afterSend := tl.now()
	tl.advance(time.Millisecond)
	send(t, q, payloadJSON)
	tl.advance(time.Millisecond)
	sendTexts(t, q, "healthy")
	beforeMove := tl.now()
	first := receiveOne(t, q) // the others wait behind
	if first.Payload != poison {
		t.Fatalf("first delivery %q; want the poison", first.Payload.Data)
	}
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	var last queue.Message
	var deliveries int
	for i := range 6 {
		h := []*queue.Queue{q, q2}[i%2]
		var got []queue.Message
		for _, m := range receive(t, h, 10) {
			if m.Payload.Data == poison.Data {
				got = append(got, m)
			} else if m.Payload.Data == "healthy" {
				if err := h.Ack(ctx, m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
			} else if err := h.Nack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range got {
			deliveries++
			last = m
			if m.Attempt != deliveries+1 {
				t.Fatalf("delivery %d has attempt %d", deliveries+1, m.Attempt)
			}
			if err := h.Nack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	afterMove := tl.now()
	if deliveries != 2 { // the first delivery was the receive before the loop
		t.Fatalf("poison delivered %d times; want exactly 3", deliveries+1)
	}
	// Both poison and the json message (nacked 3 times too) are gone from
	// the queue; a stale receipt of the last delivery stays stale.
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows left in the queue; want 0", n)
	}
	if err := q.Ack(ctx, last.ReceiptHandle); err != nil {
		t.Fatalf("ack of the last receipt after the move: %v; want a no-op success (the message is gone)", err)
	}

	peeked, err := dlq.Peek(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 {
		t.Fatalf("DLQ holds %d messages; want 2", len(peeked))
	}
	p := peeked[0]
	if p.Payload.Type != poison.Type || p.Payload.Data != poison.Data {
		t.Fatalf("dead letter payload %q %q; want %q %q byte for byte", p.Payload.Type, p.Payload.Data, poison.Type, poison.Data)
	}
	if peeked[1].Payload != payloadJSON {
		t.Fatalf("dead letter payload %q; want %q byte for byte", peeked[1].Payload.Data, payloadJSON.Data)
	}
	o := p.Origin
	if o == nil {
		t.Fatal("dead letter has no origin")
	}
	if o.Store != q.Location() || o.Binding != "orders" || o.ID != last.ID || o.Attempts != 3 ||
		o.LastReceipt != last.ReceiptHandle {
		t.Fatalf("origin %+v; want store %s, binding orders, id %d, 3 attempts, last receipt %s",
			*o, q.Location(), last.ID, last.ReceiptHandle)
	}
	tl.wantTime(t, "origin enqueued_at", o.EnqueuedAt, beforeSend, afterSend, 0)
	tl.wantTime(t, "origin moved_at", o.MovedAt, beforeMove, afterMove, 0)
	tl.wantTime(t, "dead letter visible_at", p.VisibleAt, beforeMove, afterMove, 0)
	if p.Attempt != 0 || p.Delivered || p.Moving {
		t.Fatalf("dead letter attempt %d delivered %v visible %v moving %v; want a fresh message due now", p.Attempt, p.Delivered, p.VisibleAt, p.Moving)
	}
	st, err := dlq.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 2 || st.Due != 2 || len(st.Origins) != 1 || st.Origins[0].Binding != "orders" || st.Origins[0].Count != 2 {
		t.Fatalf("DLQ stats %+v; want 2 dead letters from orders", st)
	}
	if st, err := q.Stats(ctx); err != nil || st.Total != 0 || st.Moving != 0 || st.DeadLetters != 0 {
		t.Fatalf("queue stats %+v, %v; want empty, nothing moving", st, err)
	}
	// The dead letter is a plain message of the DLQ: received, attempt 1.
	dm := receiveOne(t, dlq)
	if dm.ID != p.ID || dm.Attempt != 1 || dm.Payload.Data != poison.Data {
		t.Fatalf("DLQ receive = id %d attempt %d %q; want %d, 1, the poison", dm.ID, dm.Attempt, dm.Payload.Data, p.ID)
	}
}

func testRedrive(t *testing.T, h Harness) {
	needSibling(t, h)
	tl := newTimeline(t, h)
	dlq := tl.openSibling(t, h, "dlq", queue.WithBindingName("orders-dlq"))
	q := tl.open(t, h, queue.WithBindingName("orders"), queue.WithDeadLetter(1, dlq.Location()))
	sendTexts(t, q, "p0", "p1", "p2")
	for _, m := range receive(t, q, 10) {
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	wantEmpty(t, q) // the second delivery would exceed maxAttempts 1
	if n := rawCount(t, dlq); n != 3 {
		t.Fatalf("DLQ has %d messages; want 3", n)
	}
	// Sent to the DLQ directly: no origin, redriven only with RedriveTo.
	sendTexts(t, dlq, "orphan")
	// One in flight in the DLQ stays there.
	held := receiveOne(t, dlq, queue.ReceiveVisibility(time.Minute))
	wantTexts(t, []queue.Message{held}, "p0")

	if _, err := dlq.Redrive(ctx, queue.RedriveMax(0)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("RedriveMax(0): %v; want INVALID_INPUT", err)
	}
	if _, err := dlq.Redrive(ctx, queue.RedriveTo(dlq.Location())); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("RedriveTo(itself): %v; want INVALID_INPUT", err)
	}
	beforeRedrive := tl.now()
	res, err := dlq.Redrive(ctx, queue.RedriveMax(1))
	if err != nil || res.Moved != 1 {
		t.Fatalf("Redrive(max 1) = %+v, %v; want 1 moved", res, err)
	}
	res, err = dlq.Redrive(ctx)
	if err != nil || res.Moved != 1 || res.Skipped != 1 {
		t.Fatalf("Redrive = %+v, %v; want 1 moved, 1 skipped (the orphan)", res, err)
	}
	afterRedrive := tl.now()
	msgs := receive(t, q, 10)
	wantTexts(t, msgs, "p1", "p2")
	for _, m := range msgs {
		if m.Attempt != 1 {
			t.Fatalf("redriven %s has attempt %d; want 1: attempts are counted afresh", m.Payload.Data, m.Attempt)
		}
		tl.wantTime(t, "redriven "+m.Payload.Data+" enqueued_at (the redrive time)", m.EnqueuedAt, beforeRedrive, afterRedrive, 0)
	}
	// Afresh means the policy applies again: nacked once more, they return.
	for _, m := range msgs {
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	wantEmpty(t, q)
	peeked, err := dlq.Peek(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peeked {
		got = append(got, p.Payload.Data)
	}
	if strings.Join(got, ",") != "p0,orphan,p1,p2" {
		t.Fatalf("DLQ holds %v; want p0 (in flight), orphan, then p1, p2 back again", got)
	}
	// The orphan goes where RedriveTo says; the in-flight p0 stays.
	other := tl.openSibling(t, h, "other")
	res, err = dlq.Redrive(ctx, queue.RedriveTo(other.Location()))
	if err != nil || res.Moved != 3 {
		t.Fatalf("Redrive(to other) = %+v, %v; want 3 moved", res, err)
	}
	wantTexts(t, receive(t, other, 10), "orphan", "p1", "p2")
	if n := rawCount(t, dlq); n != 1 {
		t.Fatalf("DLQ has %d messages; want 1 (p0, in flight)", n)
	}
	if err := dlq.Ack(ctx, held.ReceiptHandle); err != nil {
		t.Fatalf("ack of the in-flight dead letter: %v", err)
	}
	if res, err := dlq.Redrive(ctx); err != nil || res != (queue.RedriveResult{}) {
		t.Fatalf("Redrive of an empty DLQ = %+v, %v; want nothing", res, err)
	}
}

func testDeadLetterOptions(t *testing.T, h Harness) {
	if h.OpenSibling == nil {
		t.Skip("the harness has no OpenSibling: dead letters need a second store")
	}
	if h.TryOpen == nil {
		t.Skip("the harness has no TryOpen: this case checks what Open refuses")
	}
	dlq := h.OpenSibling(t, "dlq")
	q := h.Open(t)
	// Every open is on the harness's own store and engine.
	for _, n := range []int{0, -1, queue.MaxAttemptsLimit + 1} {
		_, err := h.TryOpen(t, queue.WithDeadLetter(n, dlq.Location()))
		wantInvalid(t, err, "maxAttempts")
	}
	if h.Caps.NoDeadLetters {
		return // the rest are the engine's checks of a policy it cannot run
	}
	_, err := h.TryOpen(t, queue.WithDeadLetter(3, ""))
	wantInvalid(t, err, "dead-letter queue")
	// A queue cannot be its own dead-letter queue.
	_, err = h.TryOpen(t, queue.WithDeadLetter(3, q.Location()))
	wantInvalid(t, err, "dead-letter queue", "itself")
}
