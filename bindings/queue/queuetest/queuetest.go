// Package queuetest is the conformance suite of the queue binding: the
// semantics every engine behind package queue must have, tested through
// the public API only (package queue). Every line of the "Queue" section of
// docs/store-conformance.md is a case here. The SQLite engine's file and
// memory modes run it (see queue_test.go); so does any other engine, in
// this module or another one:
//
//	func TestMyEngine(t *testing.T) {
//		queuetest.Run(t, func(t *testing.T) queuetest.Harness {
//			loc := newStream(t) // a fresh, empty queue of the engine
//			open := func(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
//				q, err := queue.OpenEngine(context.Background(), myengine.Engine{}, loc, opts...)
//				if err != nil {
//					t.Fatal(err)
//				}
//				return q
//			}
//			return queuetest.Harness{
//				Open:        func(t *testing.T, opts ...queue.Option) *queue.Queue { return open(t, loc, opts...) },
//				OpenSibling: func(t *testing.T, name string, opts ...queue.Option) *queue.Queue { return open(t, loc+"-"+name, opts...) },
//				Persistent:  true,
//				Caps:        queuetest.Capabilities{ControlsTime: true},
//			}
//		})
//	}
//
// The cases are split by area like River's riverdrivertest: limits.go,
// order.go, leases.go (receipts and leases), acks.go (ack, nack, purge),
// delays.go, batches.go, deadletters.go and multihandle.go (persistence,
// racing receivers, the notifier). A semantic change goes here, not into
// one engine's tests. What the public API cannot see (the SQLite engine's
// receipt_handle column, a store that refuses one insert) the harness
// supplies through its optional hooks, and its cases run only with them.
package queuetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
)

// Harness gives the suite one fresh store.
type Harness struct {
	// Open opens a new handle on the harness's store: every call names the
	// SAME store. It fails the test if the open fails. The suite closes the
	// handles it opens (closing twice is fine).
	Open func(t *testing.T, opts ...queue.Option) *queue.Queue
	// TryOpen opens a handle on the same store as Open but returns the
	// error instead of failing the test: the cases that check what Open
	// refuses need it (they skip without it). A handle it returns is
	// closed by the suite.
	TryOpen func(t *testing.T, opts ...queue.Option) (*queue.Queue, error)
	// Persistent is true when data survives closing every handle and
	// opening a new one (file stores). A non-persistent store (memory) must
	// still share data between handles that are open at the same time.
	Persistent bool
	// OpenSibling opens a handle on another store of the same mode, called
	// name, beside the harness's store (a dead-letter queue): every call
	// with the same name names the same store. Cases that need two stores
	// are skipped when it is nil.
	OpenSibling func(t *testing.T, name string, opts ...queue.Option) *queue.Queue
	// Caps is what the engine lets the suite do.
	Caps Capabilities
	// Check, if set, runs at the end of every case on a fresh handle while
	// the case's handles are still open: the engine's own consistency check
	// (the SQLite engine's integrity_check). It reports with t.Errorf.
	Check func(t *testing.T, q *queue.Queue)
	// CheckReceipt, if set, checks what the engine stored for the delivery
	// m (the SQLite engine: the receipt's uuid and the attempt in the row).
	CheckReceipt func(t *testing.T, q *queue.Queue, m queue.Message)
	// RefuseSends, if set, makes q's store refuse to store a message whose
	// data is data (a valid payload), until undo is called: the suite's way
	// to make a batch fail half-way. Without it that part of
	// Batch/FailureMidBatchLeavesNone is skipped.
	RefuseSends func(t *testing.T, q *queue.Queue, data string) (undo func())
	// RefuseAcks, if set, makes q's store fail the ack of the stored
	// message whose data is data (the SQLite engine: its delete aborts;
	// JetStream: the ack gets no reply, as if the consumer's answer were
	// lost), until undo is called: the suite's way to make an AckBatch fail
	// half-way. Without it AckBatch/FailureAcksNone is skipped.
	RefuseAcks func(t *testing.T, q *queue.Queue, data string) (undo func())
}

// Capabilities is the small set of facts about an engine the suite needs.
type Capabilities struct {
	// ControlsTime says the engine takes every time it uses (leases,
	// delays, enqueue times) from queue.WithClock, so the suite drives a
	// fake clock, never sleeps, and checks times to the millisecond.
	// Without it the timed cases run their server-time form (timeline.go):
	// short real leases and delays (400 ms), a poll with a deadline for
	// what becomes due, and times checked against the window measured
	// around the call; only Order/ClockStepsBackwards still needs a fake
	// clock.
	ControlsTime bool
	// IDUUIDReceipts says receipt handles are "{id}:{uuid}" (the
	// localqueue.v1 form): the suite then also forges receipts of that form
	// (a wrong uuid for an existing id, a missing id) and checks the rules
	// for them. Without it receipts are opaque and only generic garbage is
	// tried.
	IDUUIDReceipts bool
	// PeekHidesLeases says Peek cannot show a delivered message's lease
	// end and delivery count (on JetStream the server holds them and
	// exposes neither per message): Peek reports such a message as
	// delivered, attempt 1, VisibleAt zero. The suite then skips the
	// checks of those two fields on delivered messages (the receipts'
	// Attempt and the redeliveries are still checked) and waits out a
	// lease by its known length.
	PeekHidesLeases bool
	// ArrivalOrder says due messages come in the order they became due in
	// the engine (redeliveries first, then by when a message entered the
	// queue: a delayed send when its delay ended), not by (enqueued_at,
	// id). The suite then checks which messages come, not their order, in
	// the one case where the two differ (Delay/OrderAmongDue).
	ArrivalOrder bool
	// HandleLocalExtend says an Extend is known only to the handle that
	// made it: another handle refuses the receipt as stale once the lease
	// it was issued with has ended (a JetStream receipt carries its lease
	// end, and the server cannot tell an old delivery from the current
	// one). The suite then extends again through the same handle.
	HandleLocalExtend bool
	// NoDeadLetters says the engine does not implement dead letters yet
	// (WithDeadLetter, Redrive): their cases are skipped.
	NoDeadLetters bool
	// LastErrors says the engine keeps the error of a message's last failed
	// delivery (driver.FailureRecorder): Peek shows it as LastError, also in
	// the dead-letter queue. Without it those checks are skipped.
	LastErrors bool
	// DedupKeys says the engine supports queue.WithDedupKey
	// (driver.DedupSender). Without it the Dedup cases are skipped.
	DedupKeys bool
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
		{"Send/IDsAreReceiveIDs", testSendIDs},
		{"Attributes/EveryDeliveryAndPeek", testAttributes},
		{"Attributes/DeadLetterAndRedrive", testAttributesDeadLetter},
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
		{"AckBatch/Outcomes", testAckBatchOutcomes},
		{"AckBatch/DuplicateReceipt", testAckBatchDuplicate},
		{"AckBatch/Limits", testAckBatchLimits},
		{"AckBatch/FailureAcksNone", testAckBatchFailureAcksNone},
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
		{"Retry/BackoffDoublesWithJitter", testRetryBackoff},
		{"Retry/RetryAfterAndConsumeOptions", testRetryAfter},
		{"Retry/LastErrorIntoDeadLetter", testLastErrorIntoDeadLetter},
		{"Dedup/SecondSendAddsNothing", testDedupKeys},
		{"Dedup/ConcurrentHandles", testDedupConcurrent},
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
	if try := h.TryOpen; try != nil {
		h.TryOpen = func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
			t.Helper()
			q, err := try(t, opts...)
			if q != nil {
				t.Cleanup(func() { _ = q.Close() })
			}
			return q, err
		}
	}
	return h
}

// checkIntegrity runs the harness's Check through a fresh handle. It must
// report with Errorf: it may run during a t.Fatal's unwinding.
func checkIntegrity(t *testing.T, h Harness) {
	t.Helper()
	if h.Check == nil {
		return
	}
	q := h.Open(t)
	defer q.Close()
	h.Check(t, q)
}

var ctx = context.Background()

// start is the fake clock's first reading: a realistic epoch far from 0.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newClock returns the fake clock of a case that needs one; it skips the
// case on an engine that does not follow queue.WithClock.
func newClock(t *testing.T, h Harness) *clock.Fake {
	t.Helper()
	if !h.Caps.ControlsTime {
		t.Skip("the engine runs on its own time (Capabilities.ControlsTime is false): this case needs a fake clock")
	}
	return clock.New(start)
}

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

// rawCount counts the queue's messages, due or not (Stats).
func rawCount(t *testing.T, q *queue.Queue) int {
	t.Helper()
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Total)
}

// rawRow is one message as Peek shows it, times in unix ms.
type rawRow struct {
	attempt   int
	delivered bool
	visibleAt int64
	enqueued  int64
}

// peekAll returns every message of q in delivery order, without claiming.
func peekAll(t *testing.T, q *queue.Queue) []queue.PeekedMessage {
	t.Helper()
	ms, err := q.Peek(ctx, queue.MaxPeekLimit)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func rawMessage(t *testing.T, q *queue.Queue, id int64) rawRow {
	t.Helper()
	for _, m := range peekAll(t, q) {
		if m.ID == id {
			return rawRow{attempt: m.Attempt, delivered: m.Delivered, visibleAt: m.VisibleAt.UnixMilli(), enqueued: m.EnqueuedAt.UnixMilli()}
		}
	}
	t.Fatalf("message %d: not in Peek", id)
	return rawRow{}
}

// minMaxID returns the smallest and largest message id Peek shows.
func minMaxID(t *testing.T, q *queue.Queue) (lo, hi int64) {
	t.Helper()
	ms := peekAll(t, q)
	if len(ms) == 0 {
		t.Fatal("no messages to peek")
	}
	lo, hi = ms[0].ID, ms[0].ID
	for _, m := range ms {
		lo, hi = min(lo, m.ID), max(hi, m.ID)
	}
	return lo, hi
}
