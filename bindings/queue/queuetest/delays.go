package queuetest

import (
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

func testDelayNotBeforeDue(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	delay := 10 * time.Second
	if tl.isReal() {
		delay = shortDelay
	}
	before := tl.now()
	if err := q.Send(ctx, queue.Text("later"), queue.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	after := tl.now()
	_, id := minMaxID(t, q)
	p := peekMessage(t, q, id)
	if p.Attempt != 0 || p.Delivered {
		t.Fatalf("delayed message: attempt %d delivered %v; want 0, false", p.Attempt, p.Delivered)
	}
	tl.wantTime(t, "delayed message enqueued_at", p.EnqueuedAt, before, after, 0)
	tl.wantTime(t, "delayed message visible_at", p.VisibleAt, before, after, delay)
	tl.wantNotDue(t, q, before, delay)
	m := tl.receiveDue(t, q, before, delay) // due when visible_at <= now
	if m.Payload.Data != "later" || m.Attempt != 1 || !m.EnqueuedAt.Equal(p.EnqueuedAt) {
		t.Fatalf("got %q attempt %d enqueued %v; want later, 1, %v", m.Payload.Data, m.Attempt, m.EnqueuedAt, p.EnqueuedAt)
	}
	// Zero is no delay at all, and a delay under a millisecond still
	// delays (visible_at is rounded up).
	if err := q.Send(ctx, queue.Text("now"), queue.WithDelay(0)); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q, 10), "now")
	before = tl.now()
	if err := q.Send(ctx, queue.Text("tiny"), queue.WithDelay(time.Nanosecond)); err != nil {
		t.Fatal(err)
	}
	if !tl.isReal() { // on real time a millisecond is gone before we can look
		wantEmpty(t, q)
	}
	wantTexts(t, tl.receiveDueN(t, q, 10, before, time.Millisecond), "tiny")
}

func testDelayOrder(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
	delay, lease := 5*time.Second, time.Second
	if tl.isReal() {
		delay, lease = shortDelay, shortLease
	}
	sent := tl.now()
	if err := q.Send(ctx, queue.Text("delayed-first"), queue.WithDelay(delay)); err != nil {
		t.Fatal(err)
	}
	tl.advance(time.Millisecond)
	sendTexts(t, q, "plain-second")
	wantTexts(t, receive(t, q, 10, queue.ReceiveVisibility(lease)), "plain-second")
	tl.waitAllDue(t, q, tl.now().Add(max(lease, delay-tl.now().Sub(sent))))
	sendTexts(t, q, "plain-third")
	if h.Caps.ArrivalOrder {
		got := receive(t, q, 10)
		if len(got) == 1 && tl.isReal() { // the redelivery may still be on its way
			got = append(got, tl.receiveDueN(t, q, 10, sent, 0)...)
		}
		seen := map[string]bool{}
		for _, m := range got {
			seen[m.Payload.Data] = true
		}
		if len(got) != 3 || !seen["delayed-first"] || !seen["plain-second"] || !seen["plain-third"] {
			t.Fatalf("received [%s]; want delayed-first, plain-second and plain-third in any order", texts(got))
		}
		return
	}
	// Among due messages the order is (enqueued_at, id): the delayed message
	// was sent first, so it comes before the redelivery and the later send.
	wantTexts(t, receive(t, q, 10), "delayed-first", "plain-second", "plain-third")
}

func testDelayLimits(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q := tl.open(t, h)
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
	before := tl.now()
	wantEmpty(t, q)
	if tl.isReal() { // 12 h of real time: the not-due check is all we can do
		return
	}
	tl.wantNotDue(t, q, before, queue.MaxDelay)
	wantTexts(t, tl.receiveDueN(t, q, 10, before, queue.MaxDelay), "max")
}
