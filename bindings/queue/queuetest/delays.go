package queuetest

import (
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

func testDelayNotBeforeDue(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	if err := q.Send(ctx, queue.Text("later"), queue.WithDelay(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	_, id := minMaxID(t, q)
	r := rawMessage(t, q, id)
	if r.enqueued != start.UnixMilli() || r.visibleAt != start.Add(10*time.Second).UnixMilli() || r.attempt != 0 || r.delivered {
		t.Fatalf("delayed message: enqueued %d visible %d attempt %d delivered %v; want %d, %d, 0, false",
			r.enqueued, r.visibleAt, r.attempt, r.delivered, start.UnixMilli(), start.Add(10*time.Second).UnixMilli())
	}
	c.Advance(10*time.Second - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond) // due when visible_at <= now
	m := receiveOne(t, q)
	if m.Payload.Data != "later" || m.Attempt != 1 || !m.EnqueuedAt.Equal(start) {
		t.Fatalf("got %q attempt %d enqueued %v; want later, 1, %v", m.Payload.Data, m.Attempt, m.EnqueuedAt, start)
	}
	// Zero is no delay at all, and a delay under a millisecond still
	// delays (visible_at is rounded up).
	if err := q.Send(ctx, queue.Text("now"), queue.WithDelay(0)); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q, 10), "now")
	if err := q.Send(ctx, queue.Text("tiny"), queue.WithDelay(time.Nanosecond)); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	wantTexts(t, receive(t, q, 10), "tiny")
}

func testDelayOrder(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	if err := q.Send(ctx, queue.Text("delayed-first"), queue.WithDelay(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Millisecond)
	sendTexts(t, q, "plain-second")
	wantTexts(t, receive(t, q, 10, queue.ReceiveVisibility(time.Second)), "plain-second")
	c.Advance(5 * time.Second)
	sendTexts(t, q, "plain-third")
	// Among due messages the order is (enqueued_at, id): the delayed message
	// was sent first, so it comes before the redelivery and the later send.
	wantTexts(t, receive(t, q, 10), "delayed-first", "plain-second", "plain-third")
}

func testDelayLimits(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	if queue.MaxDelay != 12*time.Hour {
		t.Fatalf("MaxDelay = %s; documented as 12h", queue.MaxDelay)
	}
	for _, d := range []time.Duration{-time.Nanosecond, -time.Second, queue.MaxDelay + time.Nanosecond} {
		wantInvalid(t, q.Send(ctx, queue.Text("x"), queue.WithDelay(d)), "delay", queue.MaxDelay.String())
		wantInvalid(t, q.SendBatch(ctx, []queue.Payload{queue.Text("x")}, queue.WithDelay(d)), "delay")
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected delays; want 0", n)
	}
	if err := q.Send(ctx, queue.Text("max"), queue.WithDelay(queue.MaxDelay)); err != nil {
		t.Fatal(err)
	}
	c.Advance(queue.MaxDelay - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	wantTexts(t, receive(t, q, 10), "max")
}
