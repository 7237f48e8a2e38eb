package sqlitequeue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Nack and Extend of current receipts are one-statement writes: writers
// that find the write lock busy commit together in one group, each with its
// own outcome, and a stale receipt among them fails alone.
func TestNackExtendJoinGroupCommit(t *testing.T) {
	ctx := context.Background()
	q := hwOpenInternal(t, t.TempDir())
	const n = 8
	for i := range n {
		if err := q.Send(ctx, []Payload{{Type: TypeText, Data: fmt.Sprint("m", i)}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := q.Receive(ctx, n, time.Minute)
	if err != nil || len(msgs) != n {
		t.Fatalf("receive: %d messages, %v; want %d", len(msgs), err, n)
	}
	before := q.db.GroupCommits()
	hold := make(chan error, 1)
	go func() {
		hold <- q.db.Write(ctx, func(*sqlstore.Tx) error {
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
