package jsengine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestQueueAckWaitKept: the consumer is created with the first handle's
// default lease as AckWait, and a receive with that lease sends no Nak, so
// its lease is the server's AckWait. A handle opened later with another
// default lease must not change the AckWait: the server measures every
// pending lease from the current AckWait, so a shorter one would hand the
// message out again while the first receipt is still live (and JetStream
// would then take that receipt's ack for the new delivery).
func TestQueueAckWaitKept(t *testing.T) {
	t.Parallel()
	loc := freshName("ackwait")
	first := openQueue(t, loc) // default lease 30 s: the consumer's AckWait
	if err := first.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	m := recvOne(t, first)
	short := openQueue(t, loc, queue.WithDefaultVisibility(400*time.Millisecond))
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(bg, "LCQ_"+loc, "lc")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != queue.DefaultVisibility {
		t.Fatalf("consumer AckWait %s after a handle with a 400 ms default opened; want %s kept", got, queue.DefaultVisibility)
	}
	time.Sleep(900 * time.Millisecond)
	wantNone(t, short) // still leased to first's receive
	if err := first.Ack(bg, m.ReceiptHandle); err != nil {
		t.Fatalf("Ack of the first receipt: %v", err)
	}
	// The short handle's own leases are its own (a Nak sets them).
	if err := short.Send(bg, queue.Text("n")); err != nil {
		t.Fatal(err)
	}
	n := recvOne(t, short)
	time.Sleep(900 * time.Millisecond)
	again := recvOne(t, first)
	if again.ID != n.ID || again.Attempt != 2 {
		t.Fatalf("after the 400 ms lease: id %d attempt %d; want id %d attempt 2", again.ID, again.Attempt, n.ID)
	}
}

// TestAckAfterTheStreamIsDeleted: an Ack whose +ACK has no responder
// because the queue's stream was deleted (by an operator) fails at once
// saying so, instead of sending the ack again until the 30 s lease ends
// (as it does while a consumer elects a leader).
func TestAckAfterTheStreamIsDeleted(t *testing.T) {
	t.Parallel()
	loc := freshName("ackgone")
	q := openQueue(t, loc)
	if err := q.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	m := recvOne(t, q)
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(bg, "LCQ_"+loc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	err = q.Ack(ctx, m.ReceiptHandle)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "consumer is gone") {
		t.Fatalf("ack after the stream was deleted: %v (caller's deadline passed: %v); want an error saying the consumer is gone, before the deadline", err, ctx.Err() != nil)
	}
}
