package queuetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

func testSendReceive(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "hello", "world")
	wantTexts(t, receive(t, q, 10), "hello", "world")
}

func testEmpty(t *testing.T, h Harness) {
	q := h.Open(t)
	msgs, err := q.Receive(ctx, 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("Receive on an empty queue = %d messages, %v; want none, nil", len(msgs), err)
	}
}

func testTwoOfFive(t *testing.T, h Harness) {
	q := h.Open(t)
	for i := range 5 {
		sendTexts(t, q, fmt.Sprintf("msg-%d", i))
	}
	wantTexts(t, receive(t, q, 2), "msg-0", "msg-1")
	if n := rawCount(t, q); n != 5 {
		t.Fatalf("%d rows; want 5 (receive does not delete)", n)
	}
}

func testTenInOrder(t *testing.T, h Harness) {
	// A clock that never moves: every send is in the same millisecond, so
	// the order comes from the id tiebreak alone. On real time the sends
	// are in order anyway.
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("msg-%d", i))
	}
	sendTexts(t, q, want...)
	wantTexts(t, receive(t, q, 10), want...)
}

func testClockBackwards(t *testing.T, h Harness) {
	c := needsFakeClock(t, h, "the case steps the clock back, which real time cannot do")
	q := openClocked(t, h, c)
	sendTexts(t, q, "sent-first")
	c.Advance(-5 * time.Second) // the clock steps back (NTP, a VM resume)
	sendTexts(t, q, "sent-second-but-earlier")
	c.Advance(time.Millisecond)
	sendTexts(t, q, "sent-third")
	c.Advance(10 * time.Second)
	// Order is (enqueued_at, id), not insertion order.
	wantTexts(t, receive(t, q, 10), "sent-second-but-earlier", "sent-third", "sent-first")
}

func testRedeliveryKeepsPlace(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	for _, s := range []string{"m0", "m1", "m2", "m3"} {
		sendTexts(t, q, s)
		tl.advance(time.Millisecond)
	}
	first := receiveOne(t, q, queue.ReceiveVisibility(shortLease))
	wantTexts(t, []queue.Message{first}, "m0")
	tl.waitAllDue(t, q, tl.now().Add(shortLease)) // m0's lease ends; its visible_at is now later than m1..m3's
	msgs := receive(t, q, 2)
	wantTexts(t, msgs, "m0", "m1")
	if msgs[0].ID != first.ID || msgs[0].Attempt != 2 {
		t.Fatalf("redelivery id %d attempt %d; want id %d attempt 2", msgs[0].ID, msgs[0].Attempt, first.ID)
	}
	// A nacked message also keeps its place ahead of later sends.
	if err := q.Nack(ctx, msgs[1].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q, 10), "m1", "m2", "m3")
}
