package queuetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

func testPersistence(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	q1 := tl.open(t, h)
	sendTexts(t, q1, "keep-1", "keep-2", "keep-3")
	lease := time.Minute
	if tl.isReal() {
		lease = 2 * time.Second // two reopens must fit in it
	}
	mark := tl.now()
	inFlight := receiveOne(t, q1, queue.ReceiveVisibility(lease))
	if err := q1.Ack(ctx, receiveOne(t, q1).ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	// Across handles: a second handle, opened while the first is open, sees
	// the same store; it stays after the first closes.
	q2 := tl.open(t, h)
	if err := q1.Close(); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q2, 10, queue.ReceiveVisibility(lease)), "keep-3")

	if h.Persistent {
		// Across close and reopen: every handle closed.
		if err := q2.Close(); err != nil {
			t.Fatal(err)
		}
		q2 = tl.open(t, h)
	}
	tl.wantNotDue(t, q2, mark, lease) // keep-1 still in flight, keep-3 too, keep-2 acked
	// keep-3's lease started after keep-1's: wait for both (on real time
	// they may become due in two polls).
	msgs := tl.receiveDueN(t, q2, 10, mark, lease)
	if len(msgs) == 1 && tl.isReal() {
		msgs = append(msgs, tl.receiveDueN(t, q2, 10, mark, lease)...)
	}
	wantTexts(t, msgs, "keep-1", "keep-3")
	if msgs[0].ID != inFlight.ID || msgs[0].Attempt != 2 {
		t.Fatalf("keep-1 id %d attempt %d; want id %d attempt 2 (the lease survived)", msgs[0].ID, msgs[0].Attempt, inFlight.ID)
	}
	// The stale-receipt rule survives too.
	wantStale(t, q2.Ack(ctx, inFlight.ReceiptHandle), "Ack")
}

func testConcurrentReceivers(t *testing.T, h Harness) {
	const messages, receivers = 30, 6
	// The fake clock never moves, so no lease ever ends: a second delivery
	// of any message would be a bug, not a redelivery. On real time the
	// default 30 s lease outlasts the case's 30 s timeout.
	tl := newTimeline(t, h)
	handles := []*queue.Queue{tl.open(t, h), tl.open(t, h)}
	for i := range messages {
		sendTexts(t, handles[i%2], fmt.Sprintf("msg-%02d", i))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	var (
		mu       sync.Mutex
		got      = map[string]int{}
		ids      = map[int64]string{}
		done     atomic.Int64
		errs     = make(chan error, receivers)
		wg       sync.WaitGroup
		startGun = make(chan struct{})
	)
	for r := range receivers {
		wg.Go(func() {
			q := handles[r%2]
			<-startGun
			for done.Load() < messages {
				if ctx.Err() != nil {
					errs <- fmt.Errorf("receiver %d: timed out with %d of %d delivered", r, done.Load(), messages)
					return
				}
				msgs, err := q.Receive(ctx, 1+r%3)
				if err != nil {
					errs <- fmt.Errorf("receiver %d: receive: %w", r, err)
					return
				}
				for _, m := range msgs {
					mu.Lock()
					got[m.Payload.Data]++
					if prev, ok := ids[m.ID]; ok && prev != m.Payload.Data {
						mu.Unlock()
						errs <- fmt.Errorf("id %d delivered as %q and %q", m.ID, prev, m.Payload.Data)
						return
					}
					ids[m.ID] = m.Payload.Data
					mu.Unlock()
					if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
						errs <- fmt.Errorf("receiver %d: ack: %w", r, err)
						return
					}
					done.Add(1)
				}
			}
		})
	}
	close(startGun)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range messages {
		p := fmt.Sprintf("msg-%02d", i)
		if got[p] != 1 {
			t.Errorf("%s delivered %d times; want exactly once", p, got[p])
		}
	}
	if len(got) != messages {
		t.Errorf("%d distinct payloads delivered; want %d", len(got), messages)
	}
	if n := rawCount(t, handles[0]); n != 0 {
		t.Errorf("%d rows left; want 0", n)
	}
}

type countingNotifier struct{ n atomic.Int64 }

func (c *countingNotifier) MessageDue() { c.n.Add(1) }

func testNotifier(t *testing.T, h Harness) {
	tl := newTimeline(t, h)
	n := &countingNotifier{}
	q := tl.open(t, h, queue.WithNotifier(n))
	want := func(step string, calls int64) {
		t.Helper()
		if got := n.n.Load(); got != calls {
			t.Fatalf("after %s: notifier called %d times; want %d", step, got, calls)
		}
	}
	want("open", 0)
	sendTexts(t, q, "a")
	want("send", 1)
	if err := q.Send(ctx, queue.Text(strings.Repeat("x", queue.MaxPayloadBytes+1))); err == nil {
		t.Fatal("oversized send accepted")
	}
	want("a rejected send", 1)
	first := receiveOne(t, q)
	want("receive", 1)
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	want("a nack", 2)
	cur := receiveOne(t, q)
	want("the second receive", 2)
	wantStale(t, q.Nack(ctx, first.ReceiptHandle), "Nack")
	want("a failed (stale) nack", 2)
	if err := q.Nack(ctx, "nope"); err != nil {
		t.Fatal(err)
	}
	want("a nack of a garbage receipt (nothing made due)", 2)
	if err := q.Ack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	want("an ack", 2)
	if err := q.Nack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	want("a nack of an acked message (nothing made due)", 2)
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	want("a purge", 2)
}
