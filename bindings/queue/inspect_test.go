package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
)

func TestPeekAndStatsClaimNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	q, err := queue.Open(ctx, dir, queue.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, p := range []queue.Payload{queue.Text("a"), queue.JSON(map[string]int{"n": 2}), queue.Text("c")} {
		if err := q.Send(ctx, p); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	got, err := q.Receive(ctx, 1, queue.ReceiveVisibility(time.Minute))
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v %d", err, len(got))
	}
	if err := q.Send(ctx, queue.Text("later"), queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}

	ro, err := queue.Open(ctx, dir, queue.WithReadOnly(), queue.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for range 2 { // peeking twice changes nothing
		ms, err := ro.Peek(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 4 {
			t.Fatalf("peek returned %d messages", len(ms))
		}
		first := ms[0]
		if first.Payload.Data != "a" || first.Attempt != 1 || !first.Delivered || !first.VisibleAt.Equal(now.Add(time.Minute)) {
			t.Errorf("first = %+v", first)
		}
		if ms[1].Payload.Type != queue.TypeJSON || ms[1].Attempt != 0 || ms[1].Delivered || ms[1].VisibleAt.After(now) {
			t.Errorf("second = %+v", ms[1])
		}
		st, err := ro.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Total != 4 || st.Due != 2 || st.InFlight != 2 || st.Delayed != 1 || !st.Oldest.Equal(ms[0].EnqueuedAt) {
			t.Errorf("stats = %+v", st)
		}
	}
	if ms, _ := ro.Peek(ctx, 1); len(ms) != 1 {
		t.Errorf("limit 1 gave %d", len(ms))
	}
	if _, err := ro.Peek(ctx, 0); bindings.CodeOf(err) != bindings.CodeInvalidInput {
		t.Errorf("limit 0: %v", err)
	}
	// The next receive still gets the second message on its first attempt.
	got, err = q.Receive(ctx, 1)
	if err != nil || len(got) != 1 || got[0].Attempt != 1 || got[0].Payload.Type != queue.TypeJSON {
		t.Errorf("receive after peek: %+v %v", got, err)
	}
}

// TestStatsCountsDelayedApartFromInFlight: a message sent with a delay is
// counted in Delayed; a nacked one backing off is not.
func TestStatsCountsDelayedApartFromInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, err := queue.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, opts := range [][]queue.SendOption{nil, {queue.WithDelay(time.Hour)}, nil} {
		if err := q.Send(ctx, queue.Text("m"), opts...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := q.Receive(ctx, 2, queue.ReceiveVisibility(time.Minute))
	if err != nil || len(got) != 2 {
		t.Fatalf("receive: %v %d", err, len(got))
	}
	if err := q.Nack(ctx, got[1].ReceiptHandle, queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// InFlight counts every message not due (Delayed among them).
	if st.Total != 3 || st.Due != 0 || st.Delayed != 1 || st.InFlight != 3 {
		t.Errorf("stats = %+v; want total 3, due 0, in flight 3 of which delayed 1", st)
	}
}
