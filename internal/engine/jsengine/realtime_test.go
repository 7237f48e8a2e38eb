package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// The queue suite's cases that need a fake clock skip on this engine (it
// runs on server time); these are their real-time counterparts, with short
// real leases and sleeps that leave a wide margin either side.

var bg = context.Background()

func openQueue(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := queue.OpenEngine(bg, jsengine.QueueEngine{Conn: connect(t)}, loc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func recv(t *testing.T, q *queue.Queue, max int, opts ...queue.ReceiveOption) []queue.Message {
	t.Helper()
	msgs, err := q.Receive(bg, max, opts...)
	if err != nil {
		t.Fatalf("Receive(%d): %v", max, err)
	}
	return msgs
}

func recvOne(t *testing.T, q *queue.Queue, opts ...queue.ReceiveOption) queue.Message {
	t.Helper()
	msgs := recv(t, q, 1, opts...)
	if len(msgs) != 1 {
		t.Fatalf("Receive(1) gave %d messages; want 1", len(msgs))
	}
	return msgs[0]
}

func wantNone(t *testing.T, q *queue.Queue) {
	t.Helper()
	if msgs := recv(t, q, queue.MaxReceiveBatch); len(msgs) != 0 {
		t.Fatalf("Receive gave %d messages (first %q); want none", len(msgs), msgs[0].Payload.Data)
	}
}

// TestQueueStaleReceiptRefused: JetStream matches acks by stream sequence
// only, so an ack with the receipt of delivery 1 sent after delivery 2
// would remove the message; the engine refuses it and deletes nothing.
func TestQueueStaleReceiptRefused(t *testing.T) {
	t.Parallel()
	loc := freshName("stale")
	q, other := openQueue(t, loc), openQueue(t, loc)
	if err := q.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	first := recvOne(t, q, queue.ReceiveVisibility(300*time.Millisecond))
	if first.Attempt != 1 {
		t.Fatalf("first attempt %d; want 1", first.Attempt)
	}
	time.Sleep(700 * time.Millisecond)
	second := recvOne(t, other)
	if second.ID != first.ID || second.Attempt != 2 || second.ReceiptHandle == first.ReceiptHandle {
		t.Fatalf("redelivery id %d attempt %d receipt %q; want id %d, attempt 2, a new receipt",
			second.ID, second.Attempt, second.ReceiptHandle, first.ID)
	}
	for _, h := range []*queue.Queue{q, other} {
		if err := h.Ack(bg, first.ReceiptHandle); !errors.Is(err, queue.ErrStaleReceipt) {
			t.Fatalf("Ack(stale) = %v; want ErrStaleReceipt", err)
		}
		if err := h.Nack(bg, first.ReceiptHandle); !errors.Is(err, queue.ErrStaleReceipt) {
			t.Fatalf("Nack(stale) = %v; want ErrStaleReceipt", err)
		}
		if err := h.Extend(bg, first.ReceiptHandle, time.Second); !errors.Is(err, queue.ErrStaleReceipt) {
			t.Fatalf("Extend(stale) = %v; want ErrStaleReceipt", err)
		}
	}
	if st, err := q.Stats(bg); err != nil || st.Total != 1 {
		t.Fatalf("Stats after stale acks: %+v, %v; want the message kept", st, err)
	}
	if err := other.Ack(bg, second.ReceiptHandle); err != nil {
		t.Fatalf("Ack(current): %v", err)
	}
	if err := other.Ack(bg, second.ReceiptHandle); err != nil {
		t.Fatalf("Ack(current) twice: %v; an ack of a gone message succeeds", err)
	}
	wantNone(t, q)
	if st, err := q.Stats(bg); err != nil || st.Total != 0 {
		t.Fatalf("Stats after ack: %+v, %v; want empty", st, err)
	}
}

// TestQueueLeasePerReceive: a receive's own lease (shorter and longer than
// the consumer's AckWait) hides the message for exactly that lease.
func TestQueueLeasePerReceive(t *testing.T) {
	t.Parallel()
	loc := freshName("lease")
	q, other := openQueue(t, loc), openQueue(t, loc)
	if err := q.SendBatch(bg, []queue.Payload{queue.Text("a"), queue.Text("b")}); err != nil {
		t.Fatal(err)
	}
	a := recvOne(t, q, queue.ReceiveVisibility(600*time.Millisecond))
	b := recvOne(t, q, queue.ReceiveVisibility(time.Hour))
	if a.Payload.Data != "a" || b.Payload.Data != "b" {
		t.Fatalf("received %q, %q; want a, b", a.Payload.Data, b.Payload.Data)
	}
	time.Sleep(300 * time.Millisecond)
	wantNone(t, other)
	time.Sleep(700 * time.Millisecond)
	again := recv(t, other, 10)
	if len(again) != 1 || again[0].ID != a.ID || again[0].Attempt != 2 {
		t.Fatalf("after a's lease: %d messages; want a again, attempt 2", len(again))
	}
	if err := q.Ack(bg, b.ReceiptHandle); err != nil {
		t.Fatalf("Ack(b) within its hour: %v", err)
	}
	if err := other.Ack(bg, again[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantNone(t, q)
}

// TestQueueNackKillsReceipt: after a handle's own nack, its receipt acks
// nothing (the next delivery's message would otherwise be removed).
func TestQueueNackKillsReceipt(t *testing.T) {
	t.Parallel()
	q := openQueue(t, freshName("nack"))
	if err := q.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	m := recvOne(t, q)
	if err := q.Nack(bg, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(bg, m.ReceiptHandle); !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("Ack after own Nack = %v; want ErrStaleReceipt", err)
	}
	again := recvOne(t, q)
	if again.ID != m.ID || again.Attempt != 2 {
		t.Fatalf("after nack: id %d attempt %d; want id %d attempt 2", again.ID, again.Attempt, m.ID)
	}
	if err := q.Nack(bg, again.ReceiptHandle, queue.WithDelay(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	wantNone(t, q)
	time.Sleep(600 * time.Millisecond)
	third := recvOne(t, q)
	if third.Attempt != 3 {
		t.Fatalf("after nack with delay: attempt %d; want 3", third.Attempt)
	}
	if err := q.Ack(bg, third.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
}

// TestQueueExtend: Extend keeps a message hidden past its lease, and its
// receipt acks until the new end.
func TestQueueExtend(t *testing.T) {
	t.Parallel()
	loc := freshName("extend")
	q, other := openQueue(t, loc), openQueue(t, loc)
	if err := q.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	m := recvOne(t, q, queue.ReceiveVisibility(500*time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	if err := q.Extend(bg, m.ReceiptHandle, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond) // past the first lease
	wantNone(t, other)
	if err := q.Ack(bg, m.ReceiptHandle); err != nil {
		t.Fatalf("Ack within the extended lease: %v", err)
	}
	if err := q.Extend(bg, m.ReceiptHandle, time.Second); !errors.Is(err, queue.ErrMessageGone) {
		t.Fatalf("Extend after ack = %v; want ErrMessageGone", err)
	}
	if err := q.Extend(bg, "garbage", time.Second); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("Extend(garbage) = %v; want INVALID_INPUT", err)
	}
	if err := q.Ack(bg, "garbage"); err != nil {
		t.Fatalf("Ack(garbage) = %v; want a no-op", err)
	}
}

// TestQueueDelayedSend: a delayed message is not delivered before its time,
// Peek and Stats show it without consuming, and it arrives after.
func TestQueueDelayedSend(t *testing.T) {
	t.Parallel()
	q := openQueue(t, freshName("delay"))
	sent := time.Now()
	if err := q.Send(bg, queue.Text("later"), queue.WithDelay(700*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(bg, queue.Text("now")); err != nil {
		t.Fatal(err)
	}
	ps, err := q.Peek(bg, 10)
	if err != nil || len(ps) != 2 {
		t.Fatalf("Peek = %d, %v; want 2", len(ps), err)
	}
	if ps[1].Payload.Data != "later" || ps[1].Attempt != 0 || ps[1].VisibleAt.Sub(sent) < 600*time.Millisecond {
		t.Fatalf("Peek of the delayed one: %+v", ps[1])
	}
	st, err := q.Stats(bg)
	if err != nil || st.Total != 2 || st.Due != 1 || st.InFlight != 1 || st.Delayed != 1 {
		t.Fatalf("Stats = %+v, %v; want total 2, due 1, in flight 1, delayed 1", st, err)
	}
	now := recvOne(t, q)
	if now.Payload.Data != "now" {
		t.Fatalf("got %q; want now", now.Payload.Data)
	}
	if err := q.Ack(bg, now.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	wantNone(t, q)
	msgs, err := q.ReceiveWait(bg, 1, 3*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "later" || msgs[0].Attempt != 1 {
		t.Fatalf("ReceiveWait = %v, %v; want the delayed message, attempt 1", msgs, err)
	}
	if d := time.Since(sent); d < 700*time.Millisecond {
		t.Fatalf("delayed message delivered after %s; want >= 700ms", d)
	}
	if err := q.Ack(bg, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
}

// TestQueueBatchAndPurge: a batch of 100 arrives in order; Peek and Stats
// consume nothing; Purge removes in-flight messages too.
func TestQueueBatchAndPurge(t *testing.T) {
	t.Parallel()
	q := openQueue(t, freshName("batch"))
	ps := make([]queue.Payload, queue.MaxSendBatch)
	for i := range ps {
		ps[i] = queue.Text(fmt.Sprintf("m%03d", i))
	}
	if err := q.SendBatch(bg, ps); err != nil {
		t.Fatal(err)
	}
	peeked, err := q.Peek(bg, 1000)
	if err != nil || len(peeked) != 100 {
		t.Fatalf("Peek = %d, %v; want 100", len(peeked), err)
	}
	var got []string
	for len(got) < 100 {
		msgs := recv(t, q, 10)
		if len(msgs) == 0 {
			t.Fatalf("only %d of 100 received", len(got))
		}
		for _, m := range msgs {
			got = append(got, m.Payload.Data)
		}
	}
	for i, g := range got {
		if g != fmt.Sprintf("m%03d", i) {
			t.Fatalf("message %d is %q; want send order", i, g)
		}
	}
	st, err := q.Stats(bg)
	if err != nil || st.Total != 100 || st.InFlight != 100 {
		t.Fatalf("Stats = %+v, %v; want 100 in flight", st, err)
	}
	if err := q.Purge(bg); err != nil {
		t.Fatal(err)
	}
	if st.Delayed != 0 {
		t.Fatalf("Stats = %+v; want none delayed", st)
	}
	if st, err := q.Stats(bg); err != nil || st.Total != 0 {
		t.Fatalf("Stats after purge = %+v, %v", st, err)
	}
}

// TestQueueDeadLetterProvisioning: a policy provisions its dead-letter
// queue (stream marked as one), the streams keep msg-ids for the move
// retries for the binding's dedup window (Duplicates), and the source's consumer has no delivery
// limit (moves never rely on MaxDeliver's advisory). It replaces the test
// that Open refused a policy, from before dead letters existed.
func TestQueueDeadLetterProvisioning(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	name, dlq := freshName("dl"), freshName("dlq")
	q, err := queue.OpenEngine(bg, jsengine.QueueEngine{Conn: nc}, name, queue.WithDeadLetter(3, dlq))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{name, dlq} {
		st, err := js.Stream(bg, "LCQ_"+s)
		if err != nil {
			t.Fatalf("stream of %s: %v", s, err)
		}
		info, err := st.Info(bg)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Duplicates != queue.DefaultDedupWindow {
			t.Errorf("stream of %s: Duplicates %s; want the dedup window %s (a move retried after a crash)", s, info.Config.Duplicates, queue.DefaultDedupWindow)
		}
		if marked := info.Config.Metadata["lc-dead-letter-queue"] != ""; marked != (s == dlq) {
			t.Errorf("stream of %s: marked as a dead-letter queue %v; want %v", s, marked, s == dlq)
		}
		c, err := st.Consumer(bg, "lc")
		if err != nil {
			t.Fatal(err)
		}
		if ci, err := c.Info(bg); err != nil || ci.Config.MaxDeliver != -1 {
			t.Fatalf("consumer of %s: %+v, %v; want MaxDeliver -1", s, ci, err)
		}
	}
	// A dead-letter queue that exists keeps its own window (its binding's,
	// which its own Open checks) and gets marked by an Open with a policy.
	old := freshName("dlqold")
	oq, err := queue.OpenEngine(bg, jsengine.QueueEngine{Conn: nc}, old)
	if err != nil {
		t.Fatal(err)
	}
	oq.Close()
	ost, err := js.Stream(bg, "LCQ_"+old)
	if err != nil {
		t.Fatal(err)
	}
	oinfo, err := ost.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	oc := oinfo.Config
	oc.Duplicates = 2 * time.Minute
	if _, err := js.UpdateStream(bg, oc); err != nil {
		t.Fatal(err)
	}
	q2, err := queue.OpenEngine(bg, jsengine.QueueEngine{Conn: nc}, freshName("dl"), queue.WithDeadLetter(3, old))
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if oinfo, err = ost.Info(bg); err != nil || oinfo.Config.Duplicates != 2*time.Minute || oinfo.Config.Metadata["lc-dead-letter-queue"] == "" {
		t.Fatalf("older dead-letter stream after Open with a policy: %+v, %v; want its Duplicates 2m kept and the mark", oinfo.Config, err)
	}
	for _, bad := range []string{"", name, "no.dots"} {
		_, err := queue.OpenEngine(bg, jsengine.QueueEngine{Conn: nc}, name, queue.WithDeadLetter(3, bad))
		if !errors.Is(err, bindings.ErrInvalidInput) || !strings.Contains(err.Error(), "dead-letter queue") {
			t.Errorf("Open with dead-letter queue %q = %v; want INVALID_INPUT naming the dead-letter queue", bad, err)
		}
	}
}

// TestKVFailsClosedOnOtherStream: a bucket's stream created elsewhere with
// direct get on (not read-your-writes) is refused, not used.
func TestKVFailsClosedOnOtherStream(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := freshName("kvother")
	if _, err := js.CreateStream(bg, jetstream.StreamConfig{Name: "LCKV_" + name,
		Subjects: []string{"lckv." + name + ".>"}, MaxMsgsPerSubject: 1, AllowDirect: true, AllowMsgTTL: true}); err != nil {
		t.Fatal(err)
	}
	_, err = kv.OpenEngine(bg, jsengine.KVEngine{Conn: nc}, name)
	if !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), "allow_direct") {
		t.Fatalf("Open over a direct-get stream = %v; want BINDING_SETUP_FAILED naming allow_direct", err)
	}
}

// TestKVUntrustedExpiryHeader: a message with an expiry header we cannot
// read (a writer that is not us) reads as absent, not as a panic or a live
// value.
func TestKVUntrustedExpiryHeader(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	name := freshName("kvhdr")
	s, err := kv.OpenEngine(bg, jsengine.KVEngine{Conn: nc}, name)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	js, _ := jetstream.New(nc)
	m := natsMsg("lckv."+name+".6b", "v") // key "k"
	m.Header.Set("Lc-Expires-Ms", "soon")
	if _, err := js.PublishMsg(bg, m); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get(bg, "k"); err != nil || ok {
		t.Fatalf("Get = %q, %v, %v; want absent", v, ok, err)
	}
	if ok, err := s.Put(bg, "k", []byte("mine"), kv.IfNotExists()); err != nil || !ok {
		t.Fatalf("put-if-absent over it = %v, %v; want it to win", ok, err)
	}
}

// TestKVLookupAndStats: Lookup gives the expiry; Stats counts live and
// expired keys without changing anything.
func TestKVLookupAndStats(t *testing.T) {
	t.Parallel()
	s, err := kv.OpenEngine(bg, jsengine.KVEngine{Conn: connect(t)}, freshName("kvstats"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := time.Now()
	for _, p := range []struct {
		key string
		ttl time.Duration
	}{{"a", 0}, {"b", time.Hour}, {"c", 0}} {
		var opts []kv.PutOption
		if p.ttl > 0 {
			opts = append(opts, kv.WithTTL(p.ttl))
		}
		if _, err := s.Put(bg, p.key, []byte("v"+p.key), opts...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(bg, "c", []byte("vc"), kv.WithTTL(0)); err != nil { // expired at once
		t.Fatal(err)
	}
	e, ok, err := s.Lookup(bg, "b")
	if err != nil || !ok || string(e.Value) != "vb" || e.ExpiresAt.Before(before.Add(time.Hour-time.Second)) || e.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("Lookup(b) = %+v, %v, %v; want vb expiring in an hour", e, ok, err)
	}
	if e, ok, err := s.Lookup(bg, "a"); err != nil || !ok || !e.ExpiresAt.IsZero() {
		t.Fatalf("Lookup(a) = %+v, %v, %v; want no expiry", e, ok, err)
	}
	if _, ok, err := s.Lookup(bg, "c"); err != nil || ok {
		t.Fatalf("Lookup(expired) = %v, %v; want absent", ok, err)
	}
	st, err := s.Stats(bg)
	if err != nil || st.Live != 2 || st.Expired != 1 {
		t.Fatalf("Stats = %+v, %v; want 2 live, 1 expired", st, err)
	}
}

// TestQueueReceiveAfterOtherPurgeIsQuick: a handle whose last send was
// purged by another handle before delivery does not wait for the consumer
// to deliver it (Receive's read-your-writes catch-up).
func TestQueueReceiveAfterOtherPurgeIsQuick(t *testing.T) {
	t.Parallel()
	loc := freshName("purged")
	q, other := openQueue(t, loc), openQueue(t, loc)
	if err := q.Send(bg, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	if err := other.Purge(bg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantNone(t, q)
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Fatalf("Receive on the purged queue took %s; want no catch-up wait (it is 500 ms)", d)
	}
}
