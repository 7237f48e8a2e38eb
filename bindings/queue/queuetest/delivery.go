package queuetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// needLastErrors skips a case on an engine that keeps no last errors.
func needLastErrors(t *testing.T, h Harness) {
	t.Helper()
	if !h.Caps.LastErrors {
		t.Skip("the engine keeps no last errors (Capabilities.LastErrors is false)")
	}
}

// needDedup skips a case on an engine without dedup keys.
func needDedup(t *testing.T, h Harness) {
	t.Helper()
	if !h.Caps.DedupKeys {
		t.Skip("the engine has no dedup keys (Capabilities.DedupKeys is false)")
	}
}

// consumeUntil runs Consume on q in the background; stop cancels it and
// waits for it to return.
func consumeUntil(t *testing.T, q *queue.Queue, handler queue.Handler, opts ...queue.ConsumeOption) (stop func()) {
	t.Helper()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	opts = append([]queue.ConsumeOption{queue.ConsumePollInterval(5 * time.Millisecond),
		queue.ConsumeLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	go func() { done <- q.Consume(cctx, handler, opts...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Consume: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond (real time) for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// peekOne returns the queue's only message.
func peekOne(t *testing.T, q *queue.Queue) queue.PeekedMessage {
	t.Helper()
	ms := peekAll(t, q)
	if len(ms) != 1 {
		t.Fatalf("peek: %d messages, want 1", len(ms))
	}
	return ms[0]
}

// testRetryBackoff: a failed handler's message comes back after the retry
// delay, doubling per attempt within the +-20% jitter, and the plain Nack
// it replaces would have been immediate.
func testRetryBackoff(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c, queue.WithRetryDelay(200*time.Millisecond), queue.WithMaxRetryDelay(time.Second))
	sendTexts(t, q, "fails")
	var calls atomic.Int32
	consumeUntil(t, q, func(context.Context, queue.Message) error {
		calls.Add(1)
		return fmt.Errorf("attempt %d failed", calls.Load())
	})
	for attempt, base := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second} {
		n := int32(attempt + 1)
		waitFor(t, fmt.Sprintf("delivery %d", n), func() bool { return calls.Load() >= n })
		var m queue.PeekedMessage
		waitFor(t, fmt.Sprintf("the nack of delivery %d", n), func() bool {
			m = peekOne(t, q)
			return m.VisibleAt.Sub(c.Now()) > 0 && m.VisibleAt.Sub(c.Now()) < 2*time.Second
		})
		if m.Attempt != int(n) {
			t.Fatalf("after delivery %d the message has attempt %d", n, m.Attempt)
		}
		lo, hi := base*8/10, base*12/10
		if base == time.Second {
			lo, hi = time.Second*8/10, time.Second // capped by WithMaxRetryDelay
		}
		if got := m.VisibleAt.Sub(c.Now()); got < lo-time.Millisecond || got > hi+time.Millisecond {
			t.Fatalf("after failed attempt %d the message is due in %s; want %s..%s", n, got, lo, hi)
		}
		if h.Caps.LastErrors && m.LastError != fmt.Sprintf("attempt %d failed", n) {
			t.Fatalf("last error %q after attempt %d", m.LastError, n)
		}
		// Not redelivered before it is due.
		time.Sleep(20 * time.Millisecond)
		if got := calls.Load(); got != n {
			t.Fatalf("delivered %d times before its retry delay passed; want %d", got, n)
		}
		c.Advance(m.VisibleAt.Sub(c.Now()))
	}
}

// testRetryAfter: a handler chooses its delay; a Consume option overrides
// the handle's schedule.
func testRetryAfter(t *testing.T, h Harness) {
	c := newClock(t, h)
	q := openClocked(t, h, c)
	sendTexts(t, q, "later")
	var calls atomic.Int32
	stop := consumeUntil(t, q, func(context.Context, queue.Message) error {
		calls.Add(1)
		return queue.RetryAfter(errors.New("not yet"), 7*time.Second)
	})
	// Consume settles what its handlers finished before it returns, so
	// after stop the message holds its nack, not the claim's lease (a peek
	// between the claim and the nack sees the lease).
	waitFor(t, "the handler", func() bool { return calls.Load() == 1 })
	stop()
	if got := peekOne(t, q).VisibleAt.Sub(c.Now()); got != 7*time.Second {
		t.Fatalf("RetryAfter 7s: due in %s", got)
	}
	c.Advance(7 * time.Second)
	stop = consumeUntil(t, q, func(context.Context, queue.Message) error {
		calls.Add(1)
		return errors.New("again")
	}, queue.ConsumeRetryDelay(3*time.Second), queue.ConsumeMaxRetryDelay(3*time.Second))
	waitFor(t, "the second handler", func() bool { return calls.Load() == 2 })
	stop()
	// Attempt 2 would double, but ConsumeMaxRetryDelay caps it at 3s.
	if got := peekOne(t, q).VisibleAt.Sub(c.Now()); got != 3*time.Second {
		t.Fatalf("ConsumeRetryDelay/ConsumeMaxRetryDelay 3s: due in %s", got)
	}
	wantInvalid(t, q.Consume(ctx, func(context.Context, queue.Message) error { return nil }, queue.ConsumeRetryDelay(-time.Second)), "retry delay", "-1s")
	wantInvalid(t, q.Consume(ctx, func(context.Context, queue.Message) error { return nil }, queue.ConsumeMaxRetryDelay(13*time.Hour)), "max retry delay", "13h")
}

// testLastErrorIntoDeadLetter: the last failure's text is kept (bounded)
// and carried into the dead-letter queue; a message that failed its last
// attempt goes there without waiting for a retry delay.
func testLastErrorIntoDeadLetter(t *testing.T, h Harness) {
	needSibling(t, h)
	needLastErrors(t, h)
	dlq := h.OpenSibling(t, "dlq")
	q := h.Open(t, queue.WithBindingName("orders"), queue.WithDeadLetter(3, dlq.Location()),
		queue.WithRetryDelay(time.Millisecond))
	sendTexts(t, q, "poison")
	long := strings.Repeat("x", 3000)
	var calls atomic.Int32
	consumeUntil(t, q, func(_ context.Context, m queue.Message) error {
		calls.Add(1)
		if m.Attempt == 3 {
			panic("last " + long)
		}
		return fmt.Errorf("failure %d", m.Attempt)
	})
	// The copy reaches the dead-letter queue one commit before the source
	// deletes the message (a move is three commits): wait for both.
	waitFor(t, "the dead letter, and none left in the queue", func() bool {
		return len(peekAll(t, dlq)) == 1 && rawCount(t, q) == 0
	})
	dm := peekAll(t, dlq)[0]
	if !strings.HasPrefix(dm.LastError, "handler panicked: last xxx") || len(dm.LastError) > queue.MaxLastErrorBytes {
		t.Fatalf("dead letter's last error: %d bytes %.60q; want the panic, at most %d bytes", len(dm.LastError), dm.LastError, queue.MaxLastErrorBytes)
	}
	if dm.Origin == nil || dm.Origin.Attempts != 3 {
		t.Fatalf("dead letter origin %+v", dm.Origin)
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("handler ran %d times; want 3", got)
	}
}

// testDedupKeys: a second send of a key within the window adds nothing and
// succeeds, the caller learns it; keys are validated like KV keys; after
// the window the key adds again.
func testDedupKeys(t *testing.T, h Harness) {
	needDedup(t, h)
	c := newClock(t, h)
	q := openClocked(t, h, c, queue.WithDedupWindow(time.Minute))
	var r queue.SendResult
	if err := q.Send(ctx, queue.Text("a"), queue.WithDedupKey("order:1"), queue.WithSendResult(&r)); err != nil {
		t.Fatal(err)
	}
	if r.Added != 1 || len(r.Duplicate) != 1 || r.Duplicate[0] {
		t.Fatalf("first send: %+v", r)
	}
	c.Advance(59 * time.Second)
	q2 := openClocked(t, h, c, queue.WithDedupWindow(time.Minute))
	if err := q2.Send(ctx, queue.Text("a again"), queue.WithDedupKey("order:1"), queue.WithSendResult(&r)); err != nil {
		t.Fatal(err)
	}
	if r.Added != 0 || !r.Duplicate[0] {
		t.Fatalf("second send in the window: %+v; want a duplicate", r)
	}
	if err := q.SendBatch(ctx, []queue.Payload{queue.Text("b"), queue.Text("a3"), queue.Text("c"), queue.Text("b2")},
		queue.WithDedupKeys("order:2", "order:1", "", "order:2"), queue.WithSendResult(&r)); err != nil {
		t.Fatal(err)
	}
	if r.Added != 2 || fmt.Sprint(r.Duplicate) != "[false true false true]" {
		t.Fatalf("batch: %+v; want b and c added", r)
	}
	batchIDs := r.IDs
	got := receive(t, q, 10)
	if texts(got) != "a,b,c" {
		t.Fatalf("stored %q; want a,b,c", texts(got))
	}
	if len(batchIDs) != 4 || batchIDs[0] != got[1].ID || batchIDs[1] != 0 || batchIDs[2] != got[2].ID || batchIDs[3] != 0 {
		t.Fatalf("batch ids %v; want [%d 0 %d 0] (b, a duplicate, c, a duplicate)", batchIDs, got[1].ID, got[2].ID)
	}
	if h.Persistent {
		for _, hd := range []*queue.Queue{q, q2} {
			_ = hd.Close()
		}
		q = openClocked(t, h, c, queue.WithDedupWindow(time.Minute))
		if err := q.Send(ctx, queue.Text("after reopen"), queue.WithDedupKey("order:2"), queue.WithSendResult(&r)); err != nil || r.Added != 0 {
			t.Fatalf("send after reopen within the window: %+v, %v; want a duplicate", r, err)
		}
	}
	c.Advance(time.Minute + time.Millisecond)
	if err := q.Send(ctx, queue.Text("a4"), queue.WithDedupKey("order:1"), queue.WithSendResult(&r)); err != nil || r.Added != 1 {
		t.Fatalf("send after the window: %+v, %v; want it added", r, err)
	}
	n := rawCount(t, q)
	for _, bad := range []struct {
		err  error
		want []string
	}{
		{q.Send(ctx, queue.Text("x"), queue.WithDedupKey("")), []string{"dedup key", "1 to 512 bytes", "0 bytes"}},
		{q.Send(ctx, queue.Text("x"), queue.WithDedupKey(strings.Repeat("k", 513))), []string{"dedup key", "513 bytes"}},
		{q.Send(ctx, queue.Text("x"), queue.WithDedupKey("a b")), []string{"dedup key", "byte 1", `"a b"`}},
		{q.SendBatch(ctx, []queue.Payload{queue.Text("x"), queue.Text("y")}, queue.WithDedupKeys("ok", "no/pe")), []string{"dedup key 1", "byte 2"}},
		{q.SendBatch(ctx, []queue.Payload{queue.Text("x"), queue.Text("y")}, queue.WithDedupKeys("one")), []string{"dedup keys", "one per message", "2, got 1"}},
		{q.SendBatch(ctx, []queue.Payload{queue.Text("x"), queue.Text("y")}, queue.WithDedupKey("k")), []string{"WithDedupKeys"}},
	} {
		wantInvalid(t, bad.err, bad.want...)
	}
	if got := rawCount(t, q); got != n {
		t.Fatalf("invalid keyed sends stored %d messages", got-n)
	}
	for _, w := range []time.Duration{0, -time.Second, 8 * 24 * time.Hour} {
		if _, err := queue.OpenEngine(ctx, nil, "", queue.WithDedupWindow(w)); err == nil || !strings.Contains(err.Error(), "dedup window") {
			t.Errorf("dedup window %s: %v; want INVALID_INPUT naming the dedup window", w, err)
		}
	}
}

// testDedupConcurrent: handles sending the same keys at once store each
// key once.
func testDedupConcurrent(t *testing.T, h Harness) {
	needDedup(t, h)
	const keys = 60
	handles := []*queue.Queue{h.Open(t), h.Open(t), h.Open(t)}
	var wg sync.WaitGroup
	var dups atomic.Int32
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := handles[w%len(handles)]
			for i := range keys {
				var r queue.SendResult
				k := fmt.Sprintf("k%d", (i+w*7)%keys)
				if err := q.Send(ctx, queue.Text(k), queue.WithDedupKey(k), queue.WithSendResult(&r)); err != nil {
					t.Errorf("send %s: %v", k, err)
					return
				}
				if r.Duplicate[0] {
					dups.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := rawCount(t, handles[0]); n != keys {
		t.Fatalf("%d messages stored for %d keys", n, keys)
	}
	if got := dups.Load(); got != 6*keys-keys {
		t.Fatalf("%d sends reported duplicates; want %d", got, 5*keys)
	}
}
