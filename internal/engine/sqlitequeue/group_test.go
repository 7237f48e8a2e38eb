package sqlitequeue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// holdUntilWaiting runs a Write that keeps q's write lock until n writers
// wait in its group; its error arrives on the channel returned.
func holdUntilWaiting(q *Queue, n int) <-chan error {
	hold := make(chan error, 1)
	go func() {
		hold <- q.db.Write(context.Background(), func(*sqlstore.Tx) error {
			deadline := time.Now().Add(10 * time.Second)
			for q.db.GroupPending() < n {
				if time.Now().After(deadline) {
					return fmt.Errorf("%d writers wait in the group, want %d", q.db.GroupPending(), n)
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}()
	time.Sleep(20 * time.Millisecond) // let the Write take the lock first
	return hold
}

// Batch receives, batch sends and batch acks that find the write lock busy
// commit together in one group, each with its own messages and outcomes.
func TestBatchWritesJoinGroupCommit(t *testing.T) {
	ctx := context.Background()
	q := hwOpenInternal(t, t.TempDir())
	for i := range 10 {
		if _, err := q.Send(ctx, []Payload{{Type: TypeText, Data: fmt.Sprint("m", i)}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	before := q.db.GroupCommits()
	hold := holdUntilWaiting(q, 4)
	var wg sync.WaitGroup
	got := make([][]Message, 2)
	errs := make([]error, 4)
	for i := range 2 {
		wg.Go(func() { got[i], errs[i] = q.Receive(ctx, 5, time.Minute) })
		wg.Go(func() {
			_, errs[2+i] = q.Send(ctx, []Payload{{Type: TypeText, Data: fmt.Sprint("b", i, "-0")}, {Type: TypeText, Data: fmt.Sprint("b", i, "-1")}}, 0)
		})
	}
	wg.Wait()
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if c := q.db.GroupCommits() - before; c != 1 {
		t.Fatalf("2 waiting receives and 2 batch sends took %d group transactions, want 1", c)
	}
	seen := map[int64]bool{}
	var receipts []string
	for _, ms := range got {
		if len(ms) != 5 {
			t.Fatalf("a receive of 5 got %d messages", len(ms))
		}
		for _, m := range ms {
			if seen[m.ID] || m.Attempt != 1 {
				t.Fatalf("message %d delivered twice or at attempt %d", m.ID, m.Attempt)
			}
			seen[m.ID] = true
			receipts = append(receipts, m.ReceiptHandle)
		}
	}
	before = q.db.GroupCommits()
	hold = holdUntilWaiting(q, 2)
	outs := make([][]driver.AckOutcome, 2)
	for i := range 2 {
		wg.Go(func() {
			o, err := q.AckBatch(ctx, receipts[5*i:5*i+5])
			errs[i] = err
			outs[i] = o
		})
	}
	wg.Wait()
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		for j, o := range outs[i] {
			if o != driver.AckCurrent {
				t.Fatalf("batch %d receipt %d: %v, want current", i, j, o)
			}
		}
	}
	if c := q.db.GroupCommits() - before; c != 1 {
		t.Fatalf("2 waiting batch acks took %d group transactions, want 1", c)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.Total != 4 {
		t.Fatalf("stats after the acks: %+v, %v; want the 4 batch-sent messages", st, err)
	}
}

// Nack and Extend of current receipts are one-statement writes: writers
// that find the write lock busy commit together in one group, each with its
// own outcome, and a stale receipt among them fails alone.
func TestNackExtendJoinGroupCommit(t *testing.T) {
	ctx := context.Background()
	q := hwOpenInternal(t, t.TempDir())
	const n = 8
	for i := range n {
		if _, err := q.Send(ctx, []Payload{{Type: TypeText, Data: fmt.Sprint("m", i)}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Receive(ctx, n, time.Minute)
	if err != nil || len(msgs) != n {
		t.Fatalf("receive: %d messages, %v; want %d", len(msgs), err, n)
	}
	before := q.db.GroupCommits()
	hold := holdUntilWaiting(q, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range msgs {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = q.Nack(ctx, m.ReceiptHandle, 0)
			} else {
				errs[i] = q.Extend(ctx, m.ReceiptHandle, time.Hour)
			}
		})
	}
	// A receipt of message 0 from another delivery: stale.
	var stale error
	wg.Go(func() {
		stale = q.Nack(ctx, formatReceipt(msgs[0].ID, "00000000-0000-4000-8000-000000000000"), 0)
	})
	wg.Wait()
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if !errors.Is(stale, ErrStaleReceipt) {
		t.Fatalf("stale receipt: %v, want ErrStaleReceipt", stale)
	}
	if got := q.db.GroupCommits() - before; got != 1 {
		t.Fatalf("%d waiting nacks and extends took %d group transactions, want 1", n, got)
	}
	// The nacked messages are due again, the extended ones are not.
	again, err := q.Receive(ctx, n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != n/2 {
		t.Fatalf("after the nacks %d messages are due, want %d", len(again), n/2)
	}
	for _, m := range again {
		if m.ID%2 == 0 != (msgs[0].ID%2 == 0) || m.Attempt != 2 {
			t.Fatalf("redelivered message %d (attempt %d): want the nacked ones at attempt 2", m.ID, m.Attempt)
		}
	}
}
