// Package queuetest is the conformance suite of the localqueue.v1 binding:
// every line of the "Queue" section of docs/store-conformance.md is a case
// here. Every store mode's tests call Run, so a semantic change goes into
// this package, not into one mode's tests.
//
// Leases and order are driven by a fake clock (internal/clock), never by
// sleeping, and every case ends with PRAGMA integrity_check.
package queuetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
	"github.com/localcloud/localcloud/internal/sqlstore"
)

// Harness gives the suite one fresh store.
type Harness struct {
	// Open opens a new handle on the harness's store: every call names the
	// SAME store. It fails the test if the open fails. The suite closes the
	// handles it opens (closing twice is fine).
	Open func(t *testing.T, opts ...queue.Option) *queue.Queue
	// Persistent is true when data survives closing every handle and
	// opening a new one (file stores). A non-persistent store (memory) must
	// still share data between handles that are open at the same time.
	Persistent bool
	// OpenSibling opens a handle on another store of the same mode, called
	// name, beside the harness's store (a dead-letter queue): every call
	// with the same name names the same store. Cases that need two stores
	// are skipped when it is nil.
	OpenSibling func(t *testing.T, name string, opts ...queue.Option) *queue.Queue
}

// Run runs every case as a parallel subtest "Area/Case", each on a store
// from newHarness, and checks the store's integrity after each.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Limits/PayloadText", testPayloadTextLimit},
		{"Limits/PayloadJSON", testPayloadJSONLimit},
		{"Limits/PayloadInvalid", testPayloadInvalid},
		{"Limits/ReceiveBatch", testReceiveBatch},
		{"Limits/Visibility", testVisibilityLimits},
		{"Order/SendReceive", testSendReceive},
		{"Order/Empty", testEmpty},
		{"Order/TwoOfFive", testTwoOfFive},
		{"Order/TenInSendOrder", testTenInOrder},
		{"Order/ClockStepsBackwards", testClockBackwards},
		{"Order/RedeliveryKeepsPlace", testRedeliveryKeepsPlace},
		{"Payload/JSONEqual", testJSONEqual},
		{"Receipt/Format", testReceiptFormat},
		{"Lease/DefaultThirtySeconds", testLeaseDefault},
		{"Lease/ShortLeaseRedelivered", testLeaseShort},
		{"Ack/Removes", testAckRemoves},
		{"Ack/GarbageHandleNoop", testAckGarbage},
		{"Ack/Twice", testAckTwice},
		{"Ack/StaleAfterRedelivery", testAckStale},
		{"Nack/VisibleAtOnce", testNack},
		{"Nack/Stale", testNackStale},
		{"Purge/InFlightToo", testPurge},
		{"Persistence/Reopen", testPersistence},
		{"Concurrency/ThirtyMessagesSixReceivers", testConcurrentReceivers},
		{"Notifier/SendAndNackOnly", testNotifier},
		{"Delay/NotBeforeDue", testDelayNotBeforeDue},
		{"Delay/OrderAmongDue", testDelayOrder},
		{"Delay/Limits", testDelayLimits},
		{"Batch/HundredInOrder", testBatchHundred},
		{"Batch/Limits", testBatchLimits},
		{"Batch/FailureMidBatchLeavesNone", testBatchAllOrNone},
		{"Nack/WithDelay", testNackDelay},
		{"Extend/KeepsHiddenPastLease", testExtend},
		{"Extend/StaleGarbageGone", testExtendStale},
		{"DeadLetter/PoisonDeliveredMaxAttemptsTimes", testDeadLetterPoison},
		{"DeadLetter/RedriveReturnsIt", testRedrive},
		{"DeadLetter/OptionsValidated", testDeadLetterOptions},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := withCleanup(t, newHarness(t))
			// Deferred, not a Cleanup: it runs while the case's handles are
			// still open (a memory store would be gone afterwards), and also
			// after a t.Fatal.
			defer checkIntegrity(t, h)
			c.fn(t, h)
		})
	}
}

// withCleanup makes every handle the case opens close at the end.
func withCleanup(t *testing.T, h Harness) Harness {
	open := h.Open
	h.Open = func(t *testing.T, opts ...queue.Option) *queue.Queue {
		t.Helper()
		q := open(t, opts...)
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	if sib := h.OpenSibling; sib != nil {
		h.OpenSibling = func(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
			t.Helper()
			q := sib(t, name, opts...)
			t.Cleanup(func() { _ = q.Close() })
			return q
		}
	}
	return h
}

// checkIntegrity runs PRAGMA integrity_check through a fresh handle's reader
// pool. It reports with Errorf: it may run during a t.Fatal's unwinding.
func checkIntegrity(t *testing.T, h Harness) {
	t.Helper()
	q := h.Open(t)
	defer q.Close()
	var res string
	if err := q.DB().R.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Errorf("PRAGMA integrity_check = %q, %v; want ok", res, err)
	}
}

var ctx = context.Background()

// start is the fake clock's first reading: a realistic epoch far from 0.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newClock() *clock.Fake { return clock.New(start) }

// openClocked opens a handle driven by c.
func openClocked(t *testing.T, h Harness, c *clock.Fake, opts ...queue.Option) *queue.Queue {
	t.Helper()
	return h.Open(t, append([]queue.Option{queue.WithClock(c.Now)}, opts...)...)
}

func send(t *testing.T, q *queue.Queue, p queue.Payload) {
	t.Helper()
	if err := q.Send(ctx, p); err != nil {
		t.Fatalf("Send(%.40q): %v", p.Data, err)
	}
}

func sendTexts(t *testing.T, q *queue.Queue, texts ...string) {
	t.Helper()
	for _, s := range texts {
		send(t, q, queue.Text(s))
	}
}

func receive(t *testing.T, q *queue.Queue, max int, opts ...queue.ReceiveOption) []queue.Message {
	t.Helper()
	msgs, err := q.Receive(ctx, max, opts...)
	if err != nil {
		t.Fatalf("Receive(%d): %v", max, err)
	}
	return msgs
}

func receiveOne(t *testing.T, q *queue.Queue, opts ...queue.ReceiveOption) queue.Message {
	t.Helper()
	msgs := receive(t, q, 1, opts...)
	if len(msgs) != 1 {
		t.Fatalf("Receive(1) gave %d messages (%s); want 1", len(msgs), texts(msgs))
	}
	return msgs[0]
}

func wantEmpty(t *testing.T, q *queue.Queue) {
	t.Helper()
	if msgs := receive(t, q, queue.MaxReceiveBatch); len(msgs) != 0 {
		t.Fatalf("Receive gave %d messages (%s); want none", len(msgs), texts(msgs))
	}
}

func texts(msgs []queue.Message) string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = m.Payload.Data
	}
	return strings.Join(s, ",")
}

func wantTexts(t *testing.T, msgs []queue.Message, want ...string) {
	t.Helper()
	if got := texts(msgs); got != strings.Join(want, ",") {
		t.Fatalf("received [%s]; want [%s]", got, strings.Join(want, ","))
	}
	for _, m := range msgs {
		if m.Payload.Type != queue.TypeText {
			t.Errorf("message %d payload type %q; want %q", m.ID, m.Payload.Type, queue.TypeText)
		}
	}
}

func wantInvalid(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("err = %v; want INVALID_INPUT", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func wantStale(t *testing.T, err error, op string) {
	t.Helper()
	if !errors.Is(err, queue.ErrStaleReceipt) {
		t.Fatalf("%s with the old receipt: err = %v; want ErrStaleReceipt", op, err)
	}
	if !errors.Is(err, bindings.ErrQueueOperationFailed) {
		t.Errorf("%s with the old receipt: err = %v; want code QUEUE_OPERATION_FAILED", op, err)
	}
	if !strings.Contains(err.Error(), "stale") {
		t.Errorf("%s with the old receipt: error %q does not say \"stale\"", op, err)
	}
}

// rawCount counts message rows through the reader pool.
func rawCount(t *testing.T, q *queue.Queue) int {
	t.Helper()
	var n int
	if err := q.DB().R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

type rawRow struct {
	attempt   int
	receipt   *string
	visibleAt int64
	enqueued  int64
}

func rawMessage(t *testing.T, q *queue.Queue, id int64) rawRow {
	t.Helper()
	var r rawRow
	err := q.DB().R.QueryRowContext(ctx,
		"SELECT attempt, receipt_handle, visible_at, enqueued_at FROM messages WHERE id = ?", id).
		Scan(&r.attempt, &r.receipt, &r.visibleAt, &r.enqueued)
	if err != nil {
		t.Fatalf("read message %d: %v", id, err)
	}
	return r
}

// ---- Limits ----

func testPayloadTextLimit(t *testing.T, h Harness) {
	q := h.Open(t)
	max := strings.Repeat("a", queue.MaxPayloadBytes)
	if queue.MaxPayloadBytes != 65536 {
		t.Fatalf("MaxPayloadBytes = %d; the spec says 64 KiB (65536)", queue.MaxPayloadBytes)
	}
	wantInvalid(t, q.Send(ctx, queue.Text(max+"a")), "payload", "65536", "65537")
	// Bytes, not characters: 32,768 two-byte runes are 65,536 bytes.
	wide := strings.Repeat("é", queue.MaxPayloadBytes/2)
	wantInvalid(t, q.Send(ctx, queue.Text(wide+"a")), "payload", "65536", "65537")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0 (nothing may be written)", n)
	}
	send(t, q, queue.Text(max))
	send(t, q, queue.Text(wide))
	msgs := receive(t, q, 2)
	if len(msgs) != 2 || msgs[0].Payload.Data != max || msgs[1].Payload.Data != wide {
		t.Fatalf("the 65,536-byte payloads did not come back intact (%d messages)", len(msgs))
	}
}

func testPayloadJSONLimit(t *testing.T, h Harness) {
	q := h.Open(t)
	// A JSON string of n 'a's serializes to n+2 bytes.
	wantInvalid(t, q.Send(ctx, queue.JSON(strings.Repeat("a", queue.MaxPayloadBytes-1))), "payload", "65536", "65537")
	// The limit is on the compact form another implementation writes:
	// '<' is one byte, not encoding/json's \u003c (6 bytes), so 65,535 of
	// them are 65,537 bytes and 65,534 exactly the limit (below).
	wantInvalid(t, q.Send(ctx, queue.JSON(strings.Repeat("<", queue.MaxPayloadBytes-1))), "payload", "65536", "65537")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0", n)
	}
	for _, at := range []string{strings.Repeat("a", queue.MaxPayloadBytes-2), strings.Repeat("<", queue.MaxPayloadBytes-4) + "&>"} {
		send(t, q, queue.JSON(at))
		m := receiveOne(t, q)
		if m.Payload.Type != queue.TypeJSON || m.Payload.Data != `"`+at+`"` {
			t.Fatalf("got type %q, %d bytes; want json, the 65536-byte compact form", m.Payload.Type, len(m.Payload.Data))
		}
		var got string
		if err := m.Payload.Decode(&got); err != nil || got != at {
			t.Fatalf("Decode: %v (equal: %v)", err, got == at)
		}
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
}

func testPayloadInvalid(t *testing.T, h Harness) {
	q := h.Open(t)
	wantInvalid(t, q.Send(ctx, queue.JSON(func() {})), "payload")
	wantInvalid(t, q.Send(ctx, queue.Payload{Type: queue.TypeJSON, Data: `{"open":`}), "payload", "JSON")
	wantInvalid(t, q.Send(ctx, queue.Payload{Type: "xml", Data: "<a/>"}), "payload", "xml")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected sends; want 0", n)
	}
}

func testReceiveBatch(t *testing.T, h Harness) {
	q := h.Open(t)
	// Rejected on an empty queue too: validation comes before the store.
	for _, n := range []int{0, 11, -1} {
		_, err := q.Receive(ctx, n)
		wantInvalid(t, err, "max", "10", strconv.Itoa(n))
	}
	sendTexts(t, q, "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11")
	for _, n := range []int{0, 11} {
		_, err := q.Receive(ctx, n)
		wantInvalid(t, err, "max", "10", strconv.Itoa(n))
	}
	var claimed int
	if err := q.DB().R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages WHERE attempt > 0").Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if claimed != 0 {
		t.Fatalf("%d messages claimed by rejected receives; want 0", claimed)
	}
	wantTexts(t, receive(t, q, 1), "m0")
	wantTexts(t, receive(t, q, 10), "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10")
	wantTexts(t, receive(t, q, 10), "m11")
}

func testVisibilityLimits(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b")
	for _, d := range []time.Duration{0, -time.Second, queue.MinVisibility - 1, queue.MaxVisibility + 1} {
		_, err := q.Receive(ctx, 1, queue.WithVisibility(d))
		wantInvalid(t, err, "visibility", queue.MaxVisibility.String())
	}
	if n := rawCount(t, q); n != 2 {
		t.Fatalf("%d rows; want 2", n)
	}
	a := receive(t, q, 1, queue.WithVisibility(queue.MinVisibility))
	wantTexts(t, a, "a")
	b := receive(t, q, 1, queue.WithVisibility(queue.MaxVisibility))
	wantTexts(t, b, "b")
	if r := rawMessage(t, q, a[0].ID); r.visibleAt != start.Add(queue.MinVisibility).UnixMilli() {
		t.Errorf("visible_at %d; want now + %s", r.visibleAt, queue.MinVisibility)
	}
	if r := rawMessage(t, q, b[0].ID); r.visibleAt != start.Add(queue.MaxVisibility).UnixMilli() {
		t.Errorf("visible_at %d; want now + %s", r.visibleAt, queue.MaxVisibility)
	}
}

// ---- Order ----

func testSendReceive(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "hello", "world")
	wantTexts(t, receive(t, q, 10), "hello", "world")
}

func testEmpty(t *testing.T, h Harness) {
	q := h.Open(t)
	msgs, err := q.Receive(ctx, 10)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("Receive on an empty queue = %d messages, %v; want none, nil", len(msgs), err)
	}
}

func testTwoOfFive(t *testing.T, h Harness) {
	q := h.Open(t)
	for i := range 5 {
		sendTexts(t, q, fmt.Sprintf("msg-%d", i))
	}
	wantTexts(t, receive(t, q, 2), "msg-0", "msg-1")
	if n := rawCount(t, q); n != 5 {
		t.Fatalf("%d rows; want 5 (receive does not delete)", n)
	}
}

func testTenInOrder(t *testing.T, h Harness) {
	// A clock that never moves: every send is in the same millisecond, so
	// the order comes from the id tiebreak alone.
	c := newClock()
	q := openClocked(t, h, c)
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("msg-%d", i))
	}
	sendTexts(t, q, want...)
	wantTexts(t, receive(t, q, 10), want...)
}

func testClockBackwards(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "sent-first")
	c.Advance(-5 * time.Second) // the clock steps back (NTP, a VM resume)
	sendTexts(t, q, "sent-second-but-earlier")
	c.Advance(time.Millisecond)
	sendTexts(t, q, "sent-third")
	c.Advance(10 * time.Second)
	// Order is (enqueued_at, id), not insertion order.
	wantTexts(t, receive(t, q, 10), "sent-second-but-earlier", "sent-third", "sent-first")
}

func testRedeliveryKeepsPlace(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	for _, s := range []string{"m0", "m1", "m2", "m3"} {
		sendTexts(t, q, s)
		c.Advance(time.Millisecond)
	}
	first := receiveOne(t, q, queue.WithVisibility(time.Second))
	wantTexts(t, []queue.Message{first}, "m0")
	c.Advance(2 * time.Second) // m0's lease ends; its visible_at is now later than m1..m3's
	msgs := receive(t, q, 2)
	wantTexts(t, msgs, "m0", "m1")
	if msgs[0].ID != first.ID || msgs[0].Attempt != 2 {
		t.Fatalf("redelivery id %d attempt %d; want id %d attempt 2", msgs[0].ID, msgs[0].Attempt, first.ID)
	}
	// A nacked message also keeps its place ahead of later sends.
	if err := q.Nack(ctx, msgs[1].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q, 10), "m1", "m2", "m3")
}

// ---- Payload ----

func testJSONEqual(t *testing.T, h Harness) {
	q := h.Open(t)
	sent := map[string]any{"key": "value", "num": 42}
	send(t, q, queue.JSON(sent))
	send(t, q, queue.JSON(json.RawMessage(`{ "key" : "value", "num" : 42 }`)))
	sendTexts(t, q, `{"key":"value","num":42}`)
	msgs := receive(t, q, 10)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages; want 3", len(msgs))
	}
	want := map[string]any{"key": "value", "num": float64(42)}
	for i, m := range msgs[:2] {
		if m.Payload.Type != queue.TypeJSON {
			t.Fatalf("message %d type %q; want json", i, m.Payload.Type)
		}
		var got map[string]any
		if err := m.Payload.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("message %d = %v; want %v", i, got, want)
		}
	}
	if m := msgs[2]; m.Payload.Type != queue.TypeText || m.Payload.Data != `{"key":"value","num":42}` {
		t.Errorf("text payload came back as %q %q; want text, unchanged", m.Payload.Type, m.Payload.Data)
	}
	if err := msgs[2].Payload.Decode(new(any)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Errorf("Decode of a text payload: %v; want INVALID_INPUT", err)
	}
}

// ---- Receipts and leases ----

var receiptRE = regexp.MustCompile(`^([0-9]+):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$`)

// checkReceipt asserts m's receipt is "{id}:{uuid}" with the uuid and
// attempt in the row's columns, and returns the uuid.
func checkReceipt(t *testing.T, q *queue.Queue, m queue.Message) string {
	t.Helper()
	p := receiptRE.FindStringSubmatch(m.ReceiptHandle)
	if p == nil {
		t.Fatalf("receipt %q is not {id}:{uuid}", m.ReceiptHandle)
	}
	if p[1] != strconv.FormatInt(m.ID, 10) {
		t.Fatalf("receipt %q does not start with the id %d", m.ReceiptHandle, m.ID)
	}
	if _, err := uuid.Parse(p[2]); err != nil {
		t.Fatalf("receipt %q: %v", m.ReceiptHandle, err)
	}
	r := rawMessage(t, q, m.ID)
	if r.receipt == nil || *r.receipt != p[2] {
		t.Fatalf("receipt_handle column = %v; want the receipt's uuid %q", r.receipt, p[2])
	}
	if r.attempt != m.Attempt {
		t.Fatalf("attempt column = %d; message says %d", r.attempt, m.Attempt)
	}
	return p[2]
}

func testReceiptFormat(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b", "c")
	var id int64
	if err := q.DB().R.QueryRowContext(ctx, "SELECT MIN(id) FROM messages").Scan(&id); err != nil {
		t.Fatal(err)
	}
	before := rawMessage(t, q, id)
	if before.attempt != 0 || before.receipt != nil {
		t.Fatalf("before delivery: attempt %d receipt %v; want 0, NULL", before.attempt, before.receipt)
	}
	if before.enqueued != start.UnixMilli() || before.visibleAt != start.UnixMilli() {
		t.Fatalf("enqueued_at %d visible_at %d; want both %d (unix ms)", before.enqueued, before.visibleAt, start.UnixMilli())
	}
	msgs := receive(t, q, 3)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages; want 3", len(msgs))
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		if m.Attempt != 1 {
			t.Errorf("message %d attempt %d; want 1", m.ID, m.Attempt)
		}
		if !m.EnqueuedAt.Equal(start) {
			t.Errorf("message %d EnqueuedAt %v; want %v", m.ID, m.EnqueuedAt, start)
		}
		u := checkReceipt(t, q, m)
		if seen[u] {
			t.Errorf("uuid %s minted twice in one batch", u)
		}
		seen[u] = true
		if r := rawMessage(t, q, m.ID); r.visibleAt != start.Add(queue.DefaultVisibility).UnixMilli() {
			t.Errorf("visible_at %d; want now + 30 s = %d", r.visibleAt, start.Add(queue.DefaultVisibility).UnixMilli())
		}
	}
	if msgs[0].ID != id {
		t.Errorf("first message id %d; want %d", msgs[0].ID, id)
	}
}

func testLeaseDefault(t *testing.T, h Harness) {
	if queue.DefaultVisibility != 30*time.Second {
		t.Fatalf("DefaultVisibility = %s; the spec's LEASE_SECONDS is 30 s", queue.DefaultVisibility)
	}
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "m")
	first := receiveOne(t, q)
	c.Advance(queue.DefaultVisibility - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond) // due when visible_at <= now
	again := receiveOne(t, q)
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	checkReceipt(t, q, again)
}

func testLeaseShort(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	other := openClocked(t, h, c) // a second consumer must not see it either
	sendTexts(t, q, "m")
	first := receiveOne(t, q, queue.WithVisibility(100*time.Millisecond))
	c.Advance(99 * time.Millisecond)
	wantEmpty(t, q)
	wantEmpty(t, other)
	c.Advance(151 * time.Millisecond) // 250 ms after the receive
	again := receiveOne(t, other)
	if again.ID != first.ID || again.ReceiptHandle == first.ReceiptHandle || again.Attempt != 2 {
		t.Fatalf("redelivery id %d receipt %q attempt %d; want id %d, a new receipt, attempt 2",
			again.ID, again.ReceiptHandle, again.Attempt, first.ID)
	}
	if again.Payload.Data != "m" {
		t.Fatalf("redelivered payload %q; want %q", again.Payload.Data, "m")
	}
	checkReceipt(t, q, again)
	// A handle-wide default lease applies without WithVisibility.
	short := openClocked(t, h, c, queue.WithDefaultVisibility(time.Second))
	c.Advance(queue.DefaultVisibility)
	third := receiveOne(t, short)
	if r := rawMessage(t, q, third.ID); r.visibleAt != c.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("visible_at %d; want now + 1 s = %d", r.visibleAt, c.Now().Add(time.Second).UnixMilli())
	}
}

// ---- Ack ----

func testAckRemoves(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b")
	m := receiveOne(t, q)
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after ack; want 1", n)
	}
	c.Advance(time.Hour) // never redelivered, however long we wait
	wantTexts(t, receive(t, q, 10), "b")
}

func testAckGarbage(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	u := m.ReceiptHandle[strings.IndexByte(m.ReceiptHandle, ':')+1:]
	id := strconv.FormatInt(m.ID, 10)
	garbage := []string{
		"nope", "1:not-a-uuid", "x:" + u, "", ":", id + ":", ":" + u, "-1:" + u, "0:" + u,
		id + ":" + u + ":extra", " " + m.ReceiptHandle, m.ReceiptHandle + " ",
		"999999:" + u, // well formed, but no such message
	}
	for _, r := range garbage {
		if err := q.Ack(ctx, r); err != nil {
			t.Errorf("Ack(%q) = %v; want a no-op success", r, err)
		}
		if err := q.Nack(ctx, r); err != nil {
			t.Errorf("Nack(%q) = %v; want a no-op success", r, err)
		}
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows; want 1 (garbage receipts delete nothing)", n)
	}
	wantEmpty(t, q) // nor do they make anything visible
	if r := rawMessage(t, q, m.ID); r.attempt != 1 {
		t.Fatalf("attempt %d; want 1", r.attempt)
	}
	// A well-formed receipt of an existing message whose uuid is not the
	// current one is stale by the spec's rule (0 rows, the id exists).
	wantStale(t, q.Ack(ctx, id+":"+uuid.NewString()), "Ack")
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows; want 1", n)
	}
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

func testAckTwice(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "a")
	m := receiveOne(t, q)
	for i := range 2 {
		if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
			t.Fatalf("ack #%d: %v", i+1, err)
		}
	}
	if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("nack after ack: %v; want a no-op success", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
}

func testAckStale(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	old := receiveOne(t, q, queue.WithVisibility(time.Second))
	c.Advance(2 * time.Second)
	cur := receiveOne(t, q)
	if cur.ID != old.ID {
		t.Fatalf("redelivered id %d; want %d", cur.ID, old.ID)
	}
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after a stale ack; want 1 (the message must NOT be deleted)", n)
	}
	wantEmpty(t, q) // the current lease is untouched
	if err := q.Ack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatalf("ack with the current receipt: %v", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	// Once the message is gone, the old receipt is merely idempotent.
	if err := q.Ack(ctx, old.ReceiptHandle); err != nil {
		t.Fatalf("old receipt after the ack: %v; want a no-op success", err)
	}
}

// ---- Nack ----

func testNack(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	first := receiveOne(t, q)
	c.Advance(time.Second)
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	r := rawMessage(t, q, first.ID)
	if r.attempt != 1 || r.visibleAt != c.Now().UnixMilli() {
		t.Fatalf("after nack: attempt %d visible_at %d; want 1 and now (%d)", r.attempt, r.visibleAt, c.Now().UnixMilli())
	}
	again := receiveOne(t, q) // no clock movement: visible at once
	if again.ID != first.ID || again.Attempt != 2 || again.ReceiptHandle == first.ReceiptHandle {
		t.Fatalf("redelivery id %d attempt %d receipt %q; want id %d, attempt 2, a new receipt",
			again.ID, again.Attempt, again.ReceiptHandle, first.ID)
	}
	checkReceipt(t, q, again)
	if err := q.Ack(ctx, again.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q)
}

func testNackStale(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	old := receiveOne(t, q)
	if err := q.Nack(ctx, old.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	cur := receiveOne(t, q)
	wantStale(t, q.Nack(ctx, old.ReceiptHandle), "Nack")
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	wantEmpty(t, q) // the stale nack did not make it visible
	if r := rawMessage(t, q, cur.ID); r.attempt != 2 {
		t.Fatalf("attempt %d; want 2", r.attempt)
	}
	if err := q.Nack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatalf("nack with the current receipt: %v", err)
	}
	third := receiveOne(t, q)
	if third.ID != cur.ID || third.Attempt != 3 {
		t.Fatalf("third delivery id %d attempt %d; want %d, 3", third.ID, third.Attempt, cur.ID)
	}
}

// ---- Purge ----

func testPurge(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b", "c")
	inFlight := receive(t, q, 2)
	if len(inFlight) != 2 {
		t.Fatalf("got %d; want 2", len(inFlight))
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("COUNT(*) = %d after purge; want 0", n)
	}
	c.Advance(time.Hour)
	wantEmpty(t, q)
	// Receipts of purged messages ack as already gone.
	if err := q.Ack(ctx, inFlight[0].ReceiptHandle); err != nil {
		t.Fatalf("ack after purge: %v; want a no-op success", err)
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatalf("purge of an empty queue: %v", err)
	}
	sendTexts(t, q, "after")
	wantTexts(t, receive(t, q, 10), "after")
}

// ---- Persistence ----

func testPersistence(t *testing.T, h Harness) {
	c := newClock()
	q1 := openClocked(t, h, c)
	sendTexts(t, q1, "keep-1", "keep-2", "keep-3")
	inFlight := receiveOne(t, q1, queue.WithVisibility(time.Minute))
	if err := q1.Ack(ctx, receiveOne(t, q1).ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	// Across handles: a second handle, opened while the first is open, sees
	// the same store; it stays after the first closes.
	q2 := openClocked(t, h, c)
	if err := q1.Close(); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q2, 10, queue.WithVisibility(time.Minute)), "keep-3")

	if h.Persistent {
		// Across close and reopen: every handle closed.
		if err := q2.Close(); err != nil {
			t.Fatal(err)
		}
		q2 = openClocked(t, h, c)
	}
	wantEmpty(t, q2) // keep-1 still in flight, keep-3 too, keep-2 acked
	c.Advance(time.Minute)
	msgs := receive(t, q2, 10)
	wantTexts(t, msgs, "keep-1", "keep-3")
	if msgs[0].ID != inFlight.ID || msgs[0].Attempt != 2 {
		t.Fatalf("keep-1 id %d attempt %d; want id %d attempt 2 (the lease survived)", msgs[0].ID, msgs[0].Attempt, inFlight.ID)
	}
	// The stale-receipt rule survives too.
	wantStale(t, q2.Ack(ctx, inFlight.ReceiptHandle), "Ack")
}

// ---- Concurrency ----

func testConcurrentReceivers(t *testing.T, h Harness) {
	const messages, receivers = 30, 6
	// The fake clock never moves, so no lease ever ends: a second delivery
	// of any message would be a bug, not a redelivery.
	c := newClock()
	handles := []*queue.Queue{openClocked(t, h, c), openClocked(t, h, c)}
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

// ---- Notifier ----

type countingNotifier struct{ n atomic.Int64 }

func (c *countingNotifier) MessageDue() { c.n.Add(1) }

func testNotifier(t *testing.T, h Harness) {
	c := newClock()
	n := &countingNotifier{}
	q := openClocked(t, h, c, queue.WithNotifier(n))
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

// ---- Delay ----

func testDelayNotBeforeDue(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	if err := q.Send(ctx, queue.Text("later"), queue.WithDelay(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := q.DB().R.QueryRowContext(ctx, "SELECT MAX(id) FROM messages").Scan(&id); err != nil {
		t.Fatal(err)
	}
	r := rawMessage(t, q, id)
	if r.enqueued != start.UnixMilli() || r.visibleAt != start.Add(10*time.Second).UnixMilli() || r.attempt != 0 || r.receipt != nil {
		t.Fatalf("delayed row: enqueued_at %d visible_at %d attempt %d receipt %v; want %d, %d, 0, NULL",
			r.enqueued, r.visibleAt, r.attempt, r.receipt, start.UnixMilli(), start.Add(10*time.Second).UnixMilli())
	}
	c.Advance(10*time.Second - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond) // due when visible_at <= now
	m := receiveOne(t, q)
	if m.Payload.Data != "later" || m.Attempt != 1 || !m.EnqueuedAt.Equal(start) {
		t.Fatalf("got %q attempt %d enqueued %v; want later, 1, %v", m.Payload.Data, m.Attempt, m.EnqueuedAt, start)
	}
	// Zero is no delay at all, and a delay under a millisecond still
	// delays (visible_at is rounded up).
	if err := q.Send(ctx, queue.Text("now"), queue.WithDelay(0)); err != nil {
		t.Fatal(err)
	}
	wantTexts(t, receive(t, q, 10), "now")
	if err := q.Send(ctx, queue.Text("tiny"), queue.WithDelay(time.Nanosecond)); err != nil {
		t.Fatal(err)
	}
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	wantTexts(t, receive(t, q, 10), "tiny")
}

func testDelayOrder(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	if err := q.Send(ctx, queue.Text("delayed-first"), queue.WithDelay(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Millisecond)
	sendTexts(t, q, "plain-second")
	wantTexts(t, receive(t, q, 10, queue.WithVisibility(time.Second)), "plain-second")
	c.Advance(5 * time.Second)
	sendTexts(t, q, "plain-third")
	// Among due messages the order is (enqueued_at, id): the delayed message
	// was sent first, so it comes before the redelivery and the later send.
	wantTexts(t, receive(t, q, 10), "delayed-first", "plain-second", "plain-third")
}

func testDelayLimits(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
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
	c.Advance(queue.MaxDelay - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	wantTexts(t, receive(t, q, 10), "max")
}

// ---- Batch ----

func batchOf(n int, prefix string) []queue.Payload {
	ps := make([]queue.Payload, n)
	for i := range ps {
		ps[i] = queue.Text(fmt.Sprintf("%s-%03d", prefix, i))
	}
	return ps
}

func testBatchHundred(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	if queue.MaxSendBatch != 100 {
		t.Fatalf("MaxSendBatch = %d; want 100", queue.MaxSendBatch)
	}
	ps := batchOf(queue.MaxSendBatch, "b")
	ps[7] = queue.JSON(map[string]int{"seven": 7})
	if err := q.SendBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	rows, err := q.DB().R.QueryContext(ctx, "SELECT id, enqueued_at, visible_at FROM messages ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for rows.Next() {
		var id, enq, vis int64
		if err := rows.Scan(&id, &enq, &vis); err != nil {
			t.Fatal(err)
		}
		if enq != start.UnixMilli() || vis != enq {
			t.Errorf("row %d: enqueued_at %d visible_at %d; want both %d", id, enq, vis, start.UnixMilli())
		}
		n++
	}
	rows.Close()
	if n != queue.MaxSendBatch {
		t.Fatalf("%d rows; want %d", n, queue.MaxSendBatch)
	}
	var got []queue.Message
	for len(got) < n {
		msgs := receive(t, q, queue.MaxReceiveBatch)
		if len(msgs) == 0 {
			t.Fatalf("received %d of %d", len(got), n)
		}
		for _, m := range msgs {
			if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, msgs...)
	}
	for i, m := range got {
		if m.Payload != ps[i] {
			t.Fatalf("message %d = %v %q; want %v %q (slice order)", i, m.Payload.Type, m.Payload.Data, ps[i].Type, ps[i].Data)
		}
		if i > 0 && m.ID <= got[i-1].ID {
			t.Fatalf("ids not ascending: %d after %d", m.ID, got[i-1].ID)
		}
	}
	// A delayed batch: every message is due together.
	if err := q.SendBatch(ctx, batchOf(3, "d"), queue.WithDelay(time.Minute)); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	wantTexts(t, receive(t, q, 10), "d-000", "d-001", "d-002")
}

func testBatchLimits(t *testing.T, h Harness) {
	q := h.Open(t)
	wantInvalid(t, q.SendBatch(ctx, nil), "batch", "100", "0")
	wantInvalid(t, q.SendBatch(ctx, []queue.Payload{}), "batch", "0")
	wantInvalid(t, q.SendBatch(ctx, batchOf(queue.MaxSendBatch+1, "x")), "batch", "101")
	// One bad payload anywhere rejects the batch before the store is touched.
	ps := batchOf(queue.MaxSendBatch, "x")
	ps[50] = queue.Text(strings.Repeat("a", queue.MaxPayloadBytes+1))
	wantInvalid(t, q.SendBatch(ctx, ps), "payload 50", "65537")
	ps[50] = queue.Payload{Type: queue.TypeJSON, Data: `{"open":`}
	wantInvalid(t, q.SendBatch(ctx, ps), "payload 50")
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows after rejected batches; want 0", n)
	}
}

func testBatchAllOrNone(t *testing.T, h Harness) {
	q := h.Open(t)
	sendTexts(t, q, "before")
	// A valid payload that the store refuses: a TEMP trigger lives on this
	// handle's own writer connection only, so the file's schema is unchanged
	// and nobody else sees it.
	err := q.DB().Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TEMP TRIGGER queuetest_fail BEFORE INSERT ON main.messages
WHEN NEW.payload_data = 'refused' BEGIN SELECT RAISE(ABORT, 'queuetest: refused insert'); END`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ps := batchOf(queue.MaxSendBatch, "batch")
	ps[73] = queue.Text("refused") // inserts 0..72 run before it fails
	err = q.SendBatch(ctx, ps)
	if err == nil || !strings.Contains(err.Error(), "refused insert") {
		t.Fatalf("SendBatch with a refused insert: %v; want the store's error", err)
	}
	if !errors.Is(err, bindings.ErrQueueOperationFailed) {
		t.Errorf("err = %v; want QUEUE_OPERATION_FAILED", err)
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after a failed batch; want 1 (the earlier send only: all or none)", n)
	}
	// A batch cut off by its context mid-way leaves none either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := q.SendBatch(cctx, batchOf(10, "cancelled")); err == nil {
		t.Fatal("SendBatch with a cancelled context succeeded")
	}
	if n := rawCount(t, q); n != 1 {
		t.Fatalf("%d rows after a cancelled batch; want 1", n)
	}
	err = q.DB().Write(ctx, func(tx *sqlstore.Tx) error {
		_, err := tx.Exec(ctx, `DROP TRIGGER temp.queuetest_fail`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.SendBatch(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, q); n != 1+queue.MaxSendBatch {
		t.Fatalf("%d rows; want %d", n, 1+queue.MaxSendBatch)
	}
}

// ---- Nack with delay ----

func testNackDelay(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a", "b")
	first := receiveOne(t, q)
	wantInvalid(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(-time.Second)), "delay")
	wantInvalid(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(queue.MaxDelay+1)), "delay")
	if r := rawMessage(t, q, first.ID); r.visibleAt != start.Add(queue.DefaultVisibility).UnixMilli() {
		t.Fatalf("visible_at %d after rejected nacks; want the lease end unchanged", r.visibleAt)
	}
	c.Advance(time.Second)
	if err := q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	r := rawMessage(t, q, first.ID)
	if r.attempt != 1 || r.visibleAt != c.Now().Add(10*time.Second).UnixMilli() {
		t.Fatalf("after nack: attempt %d visible_at %d; want 1 and now + 10 s (%d)", r.attempt, r.visibleAt, c.Now().Add(10*time.Second).UnixMilli())
	}
	wantTexts(t, receive(t, q, 10, queue.WithVisibility(time.Minute)), "b") // a backs off
	c.Advance(10*time.Second - time.Millisecond)
	wantEmpty(t, q)
	c.Advance(time.Millisecond)
	again := receiveOne(t, q)
	if again.ID != first.ID || again.Attempt != 2 || again.ReceiptHandle == first.ReceiptHandle {
		t.Fatalf("redelivery id %d attempt %d; want id %d attempt 2 with a new receipt", again.ID, again.Attempt, first.ID)
	}
	checkReceipt(t, q, again)
	// A stale nack with a delay changes nothing either.
	wantStale(t, q.Nack(ctx, first.ReceiptHandle, queue.WithDelay(time.Second)), "Nack")
}

// ---- Extend ----

func testExtend(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	other := openClocked(t, h, c)
	sendTexts(t, q, "slow")
	m := receiveOne(t, q, queue.WithVisibility(time.Second))
	c.Advance(800 * time.Millisecond)
	if err := q.Extend(ctx, m.ReceiptHandle, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := rawMessage(t, q, m.ID); r.visibleAt != c.Now().Add(2*time.Second).UnixMilli() || r.attempt != 1 {
		t.Fatalf("after extend: visible_at %d attempt %d; want now + 2 s (%d), 1", r.visibleAt, r.attempt, c.Now().Add(2*time.Second).UnixMilli())
	}
	c.Advance(time.Second) // past the original lease end
	wantEmpty(t, q)
	wantEmpty(t, other)
	// The receipt is still the current one: extend again, then ack.
	if err := other.Extend(ctx, m.ReceiptHandle, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(59 * time.Second)
	wantEmpty(t, other)
	if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
		t.Fatalf("ack after extends: %v", err)
	}
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows; want 0", n)
	}
	// Without an extend the message comes back when its lease ends.
	sendTexts(t, q, "fast")
	m = receiveOne(t, q, queue.WithVisibility(time.Second))
	c.Advance(time.Second)
	if again := receiveOne(t, other); again.ID != m.ID || again.Attempt != 2 {
		t.Fatalf("redelivery id %d attempt %d; want %d, 2", again.ID, again.Attempt, m.ID)
	}
}

func testExtendStale(t *testing.T, h Harness) {
	c := newClock()
	q := openClocked(t, h, c)
	sendTexts(t, q, "a")
	old := receiveOne(t, q, queue.WithVisibility(time.Second))
	c.Advance(time.Second)
	cur := receiveOne(t, q, queue.WithVisibility(time.Second))
	wantStale(t, q.Extend(ctx, old.ReceiptHandle, time.Minute), "Extend")
	wantStale(t, q.Ack(ctx, old.ReceiptHandle), "Ack")
	if r := rawMessage(t, q, cur.ID); r.visibleAt != c.Now().Add(time.Second).UnixMilli() {
		t.Fatalf("visible_at %d after a stale extend; want the current lease end %d", r.visibleAt, c.Now().Add(time.Second).UnixMilli())
	}
	for _, d := range []time.Duration{0, -time.Second, queue.MaxVisibility + 1} {
		wantInvalid(t, q.Extend(ctx, cur.ReceiptHandle, d), "extend", queue.MaxVisibility.String())
	}
	// Extend cannot succeed by doing nothing: a garbage receipt is invalid
	// input, and a message that is gone is an error.
	for _, r := range []string{"nope", "", "1:not-a-uuid", cur.ReceiptHandle + " "} {
		wantInvalid(t, q.Extend(ctx, r, time.Minute), "receipt")
	}
	if err := q.Ack(ctx, cur.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	err := q.Extend(ctx, cur.ReceiptHandle, time.Minute)
	if !errors.Is(err, queue.ErrMessageGone) || !errors.Is(err, bindings.ErrQueueOperationFailed) {
		t.Fatalf("Extend of an acked message: %v; want ErrMessageGone, QUEUE_OPERATION_FAILED", err)
	}
}

// ---- Dead letters ----

func needSibling(t *testing.T, h Harness) {
	t.Helper()
	if h.OpenSibling == nil {
		t.Skip("the harness has no OpenSibling: dead letters need a second store")
	}
}

func testDeadLetterPoison(t *testing.T, h Harness) {
	needSibling(t, h)
	c := newClock()
	dlq := h.OpenSibling(t, "dlq", queue.WithClock(c.Now))
	q := openClocked(t, h, c, queue.WithBindingName("orders"), queue.WithDeadLetter(3, dlq.Location()))
	// A second handle with the same policy: the limit is the message's, not
	// a handle's.
	q2 := openClocked(t, h, c, queue.WithBindingName("orders"), queue.WithDeadLetter(3, dlq.Location()))
	poison := queue.Text("poison\t✓ \"quoted\" \\ trailing space ")
	payloadJSON := queue.JSON(json.RawMessage(`{"b":[1,2.50,"x"],"a":null}`))
	send(t, q, poison)
	c.Advance(time.Millisecond)
	send(t, q, payloadJSON)
	c.Advance(time.Millisecond)
	sendTexts(t, q, "healthy")
	first := receiveOne(t, q) // the others wait behind
	if first.Payload != poison {
		t.Fatalf("first delivery %q; want the poison", first.Payload.Data)
	}
	if err := q.Nack(ctx, first.ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	var last queue.Message
	var deliveries int
	for i := range 6 {
		h := []*queue.Queue{q, q2}[i%2]
		var got []queue.Message
		for _, m := range receive(t, h, 10) {
			if m.Payload.Data == poison.Data {
				got = append(got, m)
			} else if m.Payload.Data == "healthy" {
				if err := h.Ack(ctx, m.ReceiptHandle); err != nil {
					t.Fatal(err)
				}
			} else if err := h.Nack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range got {
			deliveries++
			last = m
			if m.Attempt != deliveries+1 {
				t.Fatalf("delivery %d has attempt %d", deliveries+1, m.Attempt)
			}
			if err := h.Nack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	if deliveries != 2 { // the first delivery was the receive before the loop
		t.Fatalf("poison delivered %d times; want exactly 3", deliveries+1)
	}
	// Both poison and the json message (nacked 3 times too) are gone from
	// the queue; a stale receipt of the last delivery stays stale.
	if n := rawCount(t, q); n != 0 {
		t.Fatalf("%d rows left in the queue; want 0", n)
	}
	if err := q.Ack(ctx, last.ReceiptHandle); err != nil {
		t.Fatalf("ack of the last receipt after the move: %v; want a no-op success (the message is gone)", err)
	}

	peeked, err := dlq.Peek(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 {
		t.Fatalf("DLQ holds %d messages; want 2", len(peeked))
	}
	p := peeked[0]
	if p.Payload.Type != poison.Type || p.Payload.Data != poison.Data {
		t.Fatalf("dead letter payload %q %q; want %q %q byte for byte", p.Payload.Type, p.Payload.Data, poison.Type, poison.Data)
	}
	if peeked[1].Payload != payloadJSON {
		t.Fatalf("dead letter payload %q; want %q byte for byte", peeked[1].Payload.Data, payloadJSON.Data)
	}
	o := p.Origin
	if o == nil {
		t.Fatal("dead letter has no origin")
	}
	if o.Store != q.Location() || o.Binding != "orders" || o.ID != last.ID || o.Attempts != 3 ||
		o.LastReceipt != last.ReceiptHandle || !o.EnqueuedAt.Equal(start) || !o.MovedAt.Equal(c.Now()) {
		t.Fatalf("origin %+v; want store %s, binding orders, id %d, 3 attempts, last receipt %s, enqueued %v, moved %v",
			*o, q.Location(), last.ID, last.ReceiptHandle, start, c.Now())
	}
	if p.Attempt != 0 || p.Delivered || !p.VisibleAt.Equal(c.Now()) || p.Moving {
		t.Fatalf("dead letter attempt %d delivered %v visible %v moving %v; want a fresh message due now", p.Attempt, p.Delivered, p.VisibleAt, p.Moving)
	}
	st, err := dlq.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 2 || st.Due != 2 || len(st.Origins) != 1 || st.Origins[0].Binding != "orders" || st.Origins[0].Count != 2 {
		t.Fatalf("DLQ stats %+v; want 2 dead letters from orders", st)
	}
	if st, err := q.Stats(ctx); err != nil || st.Total != 0 || st.Moving != 0 || st.DeadLetters != 0 {
		t.Fatalf("queue stats %+v, %v; want empty, nothing moving", st, err)
	}
	// The dead letter is a plain message of the DLQ: received, attempt 1.
	dm := receiveOne(t, dlq)
	if dm.ID != p.ID || dm.Attempt != 1 || dm.Payload.Data != poison.Data {
		t.Fatalf("DLQ receive = id %d attempt %d %q; want %d, 1, the poison", dm.ID, dm.Attempt, dm.Payload.Data, p.ID)
	}
}

func testRedrive(t *testing.T, h Harness) {
	needSibling(t, h)
	c := newClock()
	dlq := h.OpenSibling(t, "dlq", queue.WithClock(c.Now), queue.WithBindingName("orders-dlq"))
	q := openClocked(t, h, c, queue.WithBindingName("orders"), queue.WithDeadLetter(1, dlq.Location()))
	sendTexts(t, q, "p0", "p1", "p2")
	for _, m := range receive(t, q, 10) {
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	wantEmpty(t, q) // the second delivery would exceed maxAttempts 1
	if n := rawCount(t, dlq); n != 3 {
		t.Fatalf("DLQ has %d messages; want 3", n)
	}
	// Sent to the DLQ directly: no origin, redriven only with RedriveTo.
	sendTexts(t, dlq, "orphan")
	// One in flight in the DLQ stays there.
	held := receiveOne(t, dlq, queue.WithVisibility(time.Minute))
	wantTexts(t, []queue.Message{held}, "p0")

	if _, err := dlq.Redrive(ctx, queue.RedriveMax(0)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("RedriveMax(0): %v; want INVALID_INPUT", err)
	}
	if _, err := dlq.Redrive(ctx, queue.RedriveTo(dlq.Location())); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("RedriveTo(itself): %v; want INVALID_INPUT", err)
	}
	res, err := dlq.Redrive(ctx, queue.RedriveMax(1))
	if err != nil || res.Moved != 1 {
		t.Fatalf("Redrive(max 1) = %+v, %v; want 1 moved", res, err)
	}
	res, err = dlq.Redrive(ctx)
	if err != nil || res.Moved != 1 || res.Skipped != 1 {
		t.Fatalf("Redrive = %+v, %v; want 1 moved, 1 skipped (the orphan)", res, err)
	}
	msgs := receive(t, q, 10)
	wantTexts(t, msgs, "p1", "p2")
	for _, m := range msgs {
		if m.Attempt != 1 {
			t.Fatalf("redriven %s has attempt %d; want 1: attempts are counted afresh", m.Payload.Data, m.Attempt)
		}
		if !m.EnqueuedAt.Equal(c.Now()) {
			t.Errorf("redriven %s enqueued at %v; want the redrive time %v", m.Payload.Data, m.EnqueuedAt, c.Now())
		}
	}
	// Afresh means the policy applies again: nacked once more, they return.
	for _, m := range msgs {
		if err := q.Nack(ctx, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
	}
	wantEmpty(t, q)
	peeked, err := dlq.Peek(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range peeked {
		got = append(got, p.Payload.Data)
	}
	if strings.Join(got, ",") != "p0,orphan,p1,p2" {
		t.Fatalf("DLQ holds %v; want p0 (in flight), orphan, then p1, p2 back again", got)
	}
	// The orphan goes where RedriveTo says; the in-flight p0 stays.
	other := h.OpenSibling(t, "other", queue.WithClock(c.Now))
	res, err = dlq.Redrive(ctx, queue.RedriveTo(other.Location()))
	if err != nil || res.Moved != 3 {
		t.Fatalf("Redrive(to other) = %+v, %v; want 3 moved", res, err)
	}
	wantTexts(t, receive(t, other, 10), "orphan", "p1", "p2")
	if n := rawCount(t, dlq); n != 1 {
		t.Fatalf("DLQ has %d messages; want 1 (p0, in flight)", n)
	}
	if err := dlq.Ack(ctx, held.ReceiptHandle); err != nil {
		t.Fatalf("ack of the in-flight dead letter: %v", err)
	}
	if res, err := dlq.Redrive(ctx); err != nil || res != (queue.RedriveResult{}) {
		t.Fatalf("Redrive of an empty DLQ = %+v, %v; want nothing", res, err)
	}
}

func testDeadLetterOptions(t *testing.T, h Harness) {
	needSibling(t, h)
	dlq := h.OpenSibling(t, "dlq")
	q := h.Open(t)
	for _, n := range []int{0, -1, queue.MaxAttemptsLimit + 1} {
		_, err := queue.Open(ctx, t.TempDir(), queue.WithDeadLetter(n, dlq.Location()))
		wantInvalid(t, err, "maxAttempts")
	}
	_, err := queue.Open(ctx, t.TempDir(), queue.WithDeadLetter(3, ""))
	wantInvalid(t, err, "dead-letter queue")
	// A queue cannot be its own dead-letter queue.
	loc := q.Location()
	if name, ok := strings.CutPrefix(loc, queue.MemoryPrefix); ok {
		_, err = queue.OpenMemory(ctx, name, queue.WithDeadLetter(3, loc))
	} else {
		_, err = queue.Open(ctx, loc, queue.WithDeadLetter(3, loc))
	}
	wantInvalid(t, err, "dead-letter queue", "itself")
}
