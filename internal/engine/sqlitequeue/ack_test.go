package sqlitequeue_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// TestAckReceive: the acks and the claim of an AckReceive are one commit.
// Its outcomes are AckBatch's (current, stale, gone, a string that is no
// receipt); the claim comes after the acks, takes the next due messages in
// order, also when the first claim came back short (Receive then reads
// before it writes, which must not skip the acks); a dead-letter policy
// takes the other write path and gives the same results.
func TestAckReceive(t *testing.T) {
	for _, dead := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "dead-letter policy"}[dead], func(t *testing.T) {
			dir := t.TempDir()
			var opts []queue.Option
			if dead {
				opts = append(opts, queue.WithDeadLetter(5, filepath.Join(dir, "dlq")))
			}
			q := hwOpen(t, filepath.Join(dir, "q"), opts...)
			e := engineOf(q)
			for i := range 6 {
				if err := q.Send(ctx, queue.Text(string(rune('a'+i)))); err != nil {
					t.Fatal(err)
				}
			}
			first, err := e.Receive(ctx, 3, time.Minute)
			if err != nil || len(first) != 3 {
				t.Fatalf("receive: %d messages, %v", len(first), err)
			}
			// Message 3 is nacked (due again at once, first in line);
			// message 2 is acked already: gone.
			if err := e.Nack(ctx, first[2].ReceiptHandle, 0); err != nil {
				t.Fatal(err)
			}
			if err := e.Ack(ctx, first[1].ReceiptHandle); err != nil {
				t.Fatal(err)
			}
			receipts := []string{first[0].ReceiptHandle, first[1].ReceiptHandle, "not a receipt"}
			out, msgs, err := e.AckReceive(ctx, receipts, 2, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			want := []driver.AckOutcome{driver.AckCurrent, driver.AckGone, driver.AckGone}
			if !slices.Equal(out, want) {
				t.Fatalf("outcomes %v, want %v", out, want)
			}
			if len(msgs) != 2 || msgs[0].ID != first[2].ID || msgs[0].Attempt != 2 || msgs[1].ID != first[2].ID+1 {
				t.Fatalf("claimed %+v; want message %d again (attempt 2), then %d", msgs, first[2].ID, first[2].ID+1)
			}
			// Now the nacked receipt is stale: redelivered under msgs[0]'s.
			out, more, err := e.AckReceive(ctx, []string{first[2].ReceiptHandle, msgs[0].ReceiptHandle, msgs[1].ReceiptHandle}, 10, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if want := []driver.AckOutcome{driver.AckStale, driver.AckCurrent, driver.AckCurrent}; !slices.Equal(out, want) {
				t.Fatalf("outcomes %v, want %v", out, want)
			}
			if len(more) != 2 {
				t.Fatalf("claimed %d, want the last 2", len(more))
			}
			// The claim came back short, so a Receive would read first
			// and find nothing due: AckReceive still writes its acks.
			out, none, err := e.AckReceive(ctx, []string{more[0].ReceiptHandle, more[1].ReceiptHandle}, 10, time.Minute)
			if err != nil || len(none) != 0 || !slices.Equal(out, []driver.AckOutcome{driver.AckCurrent, driver.AckCurrent}) {
				t.Fatalf("last acks: outcomes %v, claimed %d, %v; want both current, nothing claimed", out, len(none), err)
			}
			if n := hwCount(t, q); n != 0 {
				t.Fatalf("%d messages left, want none", n)
			}
		})
	}
}

// TestAckBatchNamesAMessageTwice: a batch that names one message twice is
// acked receipt by receipt, in order: the current receipt deletes it, the
// second naming finds it gone, a stale receipt before the current one is
// stale.
func TestAckBatchNamesAMessageTwice(t *testing.T) {
	t.Parallel()
	q := hwOpen(t, t.TempDir())
	e := engineOf(q)
	if err := q.Send(ctx, queue.Text("a")); err != nil {
		t.Fatal(err)
	}
	first, err := e.Receive(ctx, 1, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("receive: %d, %v", len(first), err)
	}
	if err := e.Nack(ctx, first[0].ReceiptHandle, 0); err != nil {
		t.Fatal(err)
	}
	again, err := e.Receive(ctx, 1, time.Minute)
	if err != nil || len(again) != 1 {
		t.Fatalf("receive again: %d, %v", len(again), err)
	}
	out, err := e.AckBatch(ctx, []string{first[0].ReceiptHandle, again[0].ReceiptHandle, again[0].ReceiptHandle})
	if err != nil {
		t.Fatal(err)
	}
	if want := []driver.AckOutcome{driver.AckStale, driver.AckCurrent, driver.AckGone}; !slices.Equal(out, want) {
		t.Fatalf("outcomes %v, want %v", out, want)
	}
}
