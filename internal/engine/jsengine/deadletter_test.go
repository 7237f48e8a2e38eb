package jsengine_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// Environment of the crash helper process.
const (
	envCrashKind = "LC_JSENGINE_CRASH_KIND" // "dead-letter" or "redrive"
	envCrashURL  = "LC_JSENGINE_CRASH_URL"
	envCrashQ    = "LC_JSENGINE_CRASH_QUEUE"
	envCrashDLQ  = "LC_JSENGINE_CRASH_DLQ"
)

// crashExit is the helper's exit code at the hook.
const crashExit = 7

// TestMoveCrashHelperProcess is the process TestMoveCrashNoDuplicate kills:
// it opens the queue (or its dead-letter queue), starts a dead-letter move
// (a Receive) or a Redrive, and exits right after the destination
// acknowledged the publish, before the source's ack.
func TestMoveCrashHelperProcess(t *testing.T) {
	kind := os.Getenv(envCrashKind)
	if kind == "" {
		t.Skip("helper process of TestMoveCrashNoDuplicate")
	}
	nc, err := nats.Connect(os.Getenv(envCrashURL))
	if err != nil {
		t.Fatal(err)
	}
	jsengine.SetAfterMovePublish(func(k string) {
		if k == kind {
			os.Exit(crashExit)
		}
	})
	ctx := context.Background()
	switch kind {
	case "dead-letter":
		q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, os.Getenv(envCrashQ),
			queue.WithBindingName("orders"), queue.WithDeadLetter(1, os.Getenv(envCrashDLQ)))
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := q.Receive(ctx, 10)
		t.Fatalf("receive returned %d messages, %v; want the process to exit in the move", len(msgs), err)
	case "redrive":
		dlq, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, os.Getenv(envCrashDLQ))
		if err != nil {
			t.Fatal(err)
		}
		res, err := dlq.Redrive(ctx)
		t.Fatalf("redrive returned %+v, %v; want the process to exit in the move", res, err)
	}
	t.Fatalf("unknown kind %q", kind)
}

// runCrashHelper runs the helper for kind and wants it killed at the hook.
func runCrashHelper(t *testing.T, kind, q, dlq string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMoveCrashHelperProcess$", "-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), envCrashKind+"="+kind, envCrashURL+"="+node.url, envCrashQ+"="+q, envCrashDLQ+"="+dlq)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != crashExit {
		t.Fatalf("helper (%s): %v; want exit code %d at the hook; output:\n%s", kind, err, crashExit, out)
	}
}

func total(t *testing.T, q *queue.Queue) int64 {
	t.Helper()
	st, err := q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Total
}

// TestMoveCrashNoDuplicate kills a process (the re-executed test binary)
// between a move's publish to its destination and the source's ack, for a
// dead-letter move and for a redrive: the message is then in both queues;
// the next receive (or redrive) of this process finishes the move, and the
// message ends up exactly once in the destination (the msg-id) and gone
// from the source.
func TestMoveCrashNoDuplicate(t *testing.T) {
	ctx := context.Background()
	nc := connect(t)
	name, dlqName := freshName("crash"), freshName("crashdlq")
	open := func(loc string, opts ...queue.Option) *queue.Queue {
		q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, loc, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	q := open(name, queue.WithBindingName("orders"), queue.WithDeadLetter(1, dlqName))
	dlq := open(dlqName)
	if err := q.Send(ctx, queue.Text("poison")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive = %d, %v; want the message", len(msgs), err)
	}
	first := msgs[0]
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil { // its one attempt is used up
		t.Fatal(err)
	}

	runCrashHelper(t, "dead-letter", name, dlqName)
	if n, m := total(t, q), total(t, dlq); n != 1 || m != 1 {
		t.Fatalf("after the crash: %d in the queue, %d in the DLQ; want 1 and 1 (published, not acked)", n, m)
	}
	// The next receive after the move's hiding (moveLease) moves it again.
	deadline := time.Now().Add(20 * time.Second)
	for total(t, q) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the message is still in the queue 20 s after the crash")
		}
		got, err := q.Receive(ctx, 10)
		if err != nil || len(got) != 0 {
			t.Fatalf("receive = %d messages, %v; want none delivered (it is spent)", len(got), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m := total(t, dlq); m != 1 {
		t.Fatalf("DLQ holds %d messages after the retried move; want exactly 1", m)
	}
	peeked, err := dlq.Peek(ctx, 10)
	if err != nil || len(peeked) != 1 || peeked[0].Origin == nil || peeked[0].Origin.ID != first.ID ||
		peeked[0].Origin.Store != name || peeked[0].Payload.Data != "poison" {
		t.Fatalf("DLQ peek = %+v, %v; want the poison with origin %s id %d", peeked, err, name, first.ID)
	}

	runCrashHelper(t, "redrive", name, dlqName)
	if n, m := total(t, q), total(t, dlq); n != 1 || m != 1 {
		t.Fatalf("after the redrive crash: %d in the queue, %d in the DLQ; want 1 and 1", n, m)
	}
	deadline = time.Now().Add(20 * time.Second)
	for total(t, dlq) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the dead letter is still in the DLQ 20 s after the crash")
		}
		if _, err := dlq.Redrive(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := total(t, q); n != 1 {
		t.Fatalf("queue holds %d messages after the retried redrive; want exactly 1", n)
	}
	got, err := q.Receive(ctx, 10)
	if err != nil || len(got) != 1 || got[0].Payload.Data != "poison" || got[0].Attempt != 1 {
		t.Fatalf("receive after the redrive = %+v, %v; want the poison, attempt 1", got, err)
	}
}

// TestConsumeMovesSpentToDeadLetters: a Consume whose handler always fails
// (waiting on the server between deliveries) hands the message out
// maxAttempts times, and the delivery after that is moved, not handled.
func TestConsumeMovesSpentToDeadLetters(t *testing.T) {
	name, dlqName := freshName("cdl"), freshName("cdlq")
	q := openOn(t, name, queue.WithBindingName("orders"), queue.WithDeadLetter(2, dlqName),
		queue.WithRetryDelay(time.Millisecond))
	dlq := openOn(t, dlqName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan int, 10)
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(ctx, func(_ context.Context, m queue.Message) error {
			calls <- m.Attempt
			return errors.New("always fails")
		}, queue.ConsumeWorkers(1), queue.ConsumePollInterval(longPoll))
	}()
	if err := q.Send(context.Background(), queue.Text("poison")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for total(t, dlq) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the message is not in the DLQ 10 s after its send")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(calls)
	var attempts []int
	for a := range calls {
		attempts = append(attempts, a)
	}
	if len(attempts) != 2 || attempts[0] != 1 || attempts[1] != 2 {
		t.Fatalf("handler saw attempts %v; want [1 2]", attempts)
	}
	if n := total(t, q); n != 0 {
		t.Fatalf("queue holds %d messages; want 0", n)
	}
	p, err := dlq.Peek(context.Background(), 10)
	if err != nil || len(p) != 1 || p[0].Origin == nil || p[0].Origin.Attempts != 2 || p[0].Origin.Binding != "orders" ||
		p[0].Origin.LastReceipt == "" {
		t.Fatalf("DLQ peek = %+v, %v; want the poison from orders after 2 attempts, with its last receipt", p, err)
	}
}
