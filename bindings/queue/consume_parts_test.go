package queue

// Tests of Consume's parts, each alone: the lease keeper, the ack writer,
// the inline runner and the dispatcher. Time is a fakeClock the test
// advances; goroutines meet on channels. Nothing here depends on how fast
// the machine runs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue/driver"
)

// fakeClock is a clock whose time moves only by Advance, which runs the
// functions of the timers that came due on the caller's goroutine, in
// order of their due time.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c     *fakeClock
	f     func()
	at    time.Time
	armed bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, at: c.now.Add(d), armed: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed, t.at = true, t.c.now.Add(d)
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.armed
	t.armed = false
	return was
}

// Advance moves the time on by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		for _, t := range c.timers {
			if t.armed && !t.at.After(c.now) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.mu.Unlock()
			return
		}
		next.armed = false
		c.mu.Unlock()
		next.f()
	}
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func msg(id int64) Message {
	return Message{ID: id, ReceiptHandle: fmt.Sprintf("r%d", id), Payload: Text("x")}
}

// extensions records the receipts a lease keeper extends.
type extensions struct {
	mu  sync.Mutex
	got []string
	err error // returned by every extension
}

func (e *extensions) extend(_ context.Context, receipt string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, receipt)
	return e.err
}

func (e *extensions) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	got := e.got
	e.got = nil
	return got
}

func TestLeaseKeeperExtendsTheRunningMessage(t *testing.T) {
	clk := newFakeClock()
	var ext extensions
	l := newLeaseKeeper(clk, 30*time.Second, context.Background(), quietLog, ext.extend)
	l.arm()
	l.begin(msg(1))
	clk.Advance(9 * time.Second)
	if got := ext.take(); len(got) != 0 {
		t.Fatalf("extended %v before a third of the lease", got)
	}
	clk.Advance(time.Second)
	clk.Advance(10 * time.Second)
	if got := ext.take(); !slices.Equal(got, []string{"r1", "r1"}) {
		t.Fatalf("after two thirds of the lease: extended %v, want r1 twice", got)
	}
	l.end()
	clk.Advance(10 * time.Second)
	if got := ext.take(); len(got) != 0 {
		t.Fatalf("extended %v after the handler returned", got)
	}
	l.begin(msg(2)) // the next message of an inline batch: the timer still runs
	clk.Advance(10 * time.Second)
	l.end()
	l.disarm()
	clk.Advance(time.Minute)
	if got := ext.take(); !slices.Equal(got, []string{"r2"}) {
		t.Fatalf("extended %v, want r2 once (then disarmed)", got)
	}
}

func TestLeaseKeeperStopsOnLostLease(t *testing.T) {
	clk := newFakeClock()
	ext := extensions{err: ErrStaleReceipt}
	l := newLeaseKeeper(clk, 3*time.Second, context.Background(), quietLog, ext.extend)
	l.arm()
	l.begin(msg(1))
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	if got := ext.take(); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("extended %v, want one try: a stale receipt ends the extensions", got)
	}
	ext.err = errors.New("disk busy") // any other failure is tried again
	l.end()
	l.begin(msg(2))
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	if got := ext.take(); !slices.Equal(got, []string{"r2", "r2"}) {
		t.Fatalf("extended %v, want r2 twice: a failure other than a lost lease is retried", got)
	}
}

// TestLeaseKeeperEndCutsExtensionShort: end cancels an extension in
// progress and returns only after it did, so no extension follows the ack.
func TestLeaseKeeperEndCutsExtensionShort(t *testing.T) {
	clk := newFakeClock()
	started := make(chan struct{})
	ended := make(chan error, 1)
	extend := func(ctx context.Context, _ string) error {
		close(started)
		<-ctx.Done()
		ended <- ctx.Err()
		return ctx.Err()
	}
	l := newLeaseKeeper(clk, 3*time.Second, context.Background(), quietLog, extend)
	l.arm()
	l.begin(msg(1))
	ticked := make(chan struct{})
	go func() { clk.Advance(time.Second); close(ticked) }()
	<-started
	l.end() // returns once the extension gave up
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("extension ended with %v, want it cancelled", err)
		}
	default:
		t.Fatal("end returned while the extension was still running")
	}
	<-ticked
	l.disarm()
}

func TestLeaseKeeperExtendsWaitingMessages(t *testing.T) {
	clk := newFakeClock()
	var ext extensions
	l := newLeaseKeeper(clk, 3*time.Second, context.Background(), quietLog, ext.extend)
	l.waiting = func(fn func(Message)) { fn(msg(7)); fn(msg(8)) }
	l.arm()
	clk.Advance(time.Second) // between two messages: only the waiting ones
	l.begin(msg(6))
	clk.Advance(time.Second)
	l.end()
	l.disarm()
	if got := ext.take(); !slices.Equal(got, []string{"r7", "r8", "r7", "r8", "r6"}) {
		t.Fatalf("extended %v", got)
	}
}

// heldWrites is an ack writer's write that records each batch and, while
// hold is set, waits for a release per batch.
type heldWrites struct {
	mu      sync.Mutex
	batches [][]int64
	wrote   chan int // len(batch), after recording it
	release chan struct{}
}

func newHeldWrites() *heldWrites {
	return &heldWrites{wrote: make(chan int, 100), release: make(chan struct{}, 100)}
}

func (h *heldWrites) write(msgs []Message) {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	h.mu.Lock()
	h.batches = append(h.batches, ids)
	h.mu.Unlock()
	h.wrote <- len(msgs)
	<-h.release
}

func (h *heldWrites) all() [][]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.batches)
}

func TestBatchAckerWritesOnFlushOrFullBatch(t *testing.T) {
	h := newHeldWrites()
	a := newBatchAcker(h.write)
	for i := range MaxAckBatch - 1 {
		a.add(msg(int64(i)))
	}
	// Not flushed, not full: nothing is written until the batch is full.
	a.add(msg(MaxAckBatch - 1))
	if n := <-h.wrote; n != MaxAckBatch {
		t.Fatalf("first write took %d acks, want a full batch of %d", n, MaxAckBatch)
	}
	// While that write is held, three more come and are flushed: they go
	// in one write after it.
	a.add(msg(1000), msg(1001))
	a.add(msg(1002))
	a.flush()
	h.release <- struct{}{}
	if n := <-h.wrote; n != 3 {
		t.Fatalf("second write took %d acks, want the 3 added meanwhile", n)
	}
	h.release <- struct{}{}
	a.add(msg(2000)) // written by close, not flushed
	h.release <- struct{}{}
	a.close()
	got := h.all()
	if len(got) != 3 || !slices.Equal(got[1], []int64{1000, 1001, 1002}) || !slices.Equal(got[2], []int64{2000}) {
		t.Fatalf("batches %v", got)
	}
}

// TestBatchAckerCloseWritesBesideInFlight: close writes what waits beside
// the write in flight and returns only after both.
func TestBatchAckerCloseWritesBesideInFlight(t *testing.T) {
	h := newHeldWrites()
	a := newBatchAcker(h.write)
	a.add(msg(1))
	a.flush()
	<-h.wrote // in flight, held
	a.add(msg(2), msg(3))
	closed := make(chan struct{})
	go func() { a.close(); close(closed) }()
	if n := <-h.wrote; n != 2 {
		t.Fatalf("close wrote %d acks beside the one in flight, want 2", n)
	}
	h.release <- struct{}{}
	h.release <- struct{}{}
	<-closed
	if got := h.all(); len(got) != 2 {
		t.Fatalf("batches %v, want 2", got)
	}
}

// recordedAcks is an ackWriter that records adds and flushes.
type recordedAcks struct {
	mu      sync.Mutex
	adds    [][]int64
	flushes int
	closed  bool
}

func (r *recordedAcks) add(msgs ...Message) {
	if len(msgs) == 0 {
		return
	}
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	r.mu.Lock()
	r.adds = append(r.adds, ids)
	r.mu.Unlock()
}

func (r *recordedAcks) flush() {
	r.mu.Lock()
	r.flushes++
	r.mu.Unlock()
}

func (r *recordedAcks) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *recordedAcks) state() ([][]int64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.adds), r.flushes
}

// testRunner is an inline runner with workers worker slots, a fake clock
// and recorded acks; handle runs each message (true: ack).
func testRunner(workers int, handle func(Message) bool) (*inlineRunner, *fakeClock, *recordedAcks, chan Message, *extensions) {
	clk := newFakeClock()
	acks := &recordedAcks{}
	jobs := make(chan Message, workers+MaxReceiveBatch)
	ext := &extensions{}
	r := &inlineRunner{clk: clk, workers: workers, jobs: jobs, acks: acks, note: func(time.Duration) {}}
	r.process = func(l *leaseKeeper, m Message) bool {
		l.begin(m)
		defer l.end()
		return handle(m)
	}
	r.lease = newLeaseKeeper(clk, 3*time.Second, context.Background(), quietLog, ext.extend)
	r.lease.waiting = r.eachWaiting
	r.lease.ticked = r.flushIfSlow
	r.watch = clk.AfterFunc(time.Hour, r.handOff)
	r.watch.Stop()
	return r, clk, acks, jobs, ext
}

func TestInlineRunnerAcksABatchInOneAdd(t *testing.T) {
	r, _, acks, jobs, _ := testRunner(4, func(m Message) bool { return m.ID != 3 })
	if handed := r.run([]Message{msg(1), msg(2), msg(3), msg(4)}); handed != 0 {
		t.Fatalf("handed %d on, want 0", handed)
	}
	adds, flushes := acks.state()
	if !slices.EqualFunc(adds, [][]int64{{1, 2, 4}}, slices.Equal) || flushes != 0 {
		t.Fatalf("adds %v, flushes %d: want one add of the 3 that succeeded, no flush (the dispatcher's)", adds, flushes)
	}
	if len(jobs) != 0 {
		t.Fatalf("%d messages went to the workers", len(jobs))
	}
}

// TestInlineRunnerHandsOnWhenAHandlerTurnsSlow: message 2 of 6 blocks;
// when slowHandler has passed, the watch hands workers-1 = 2 messages on
// and flushes the ack of message 1; the rest follow when message 2
// returns, and its own ack is flushed at once.
func TestInlineRunnerHandsOnWhenAHandlerTurnsSlow(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	r, clk, acks, jobs, ext := testRunner(3, func(m Message) bool {
		if m.ID == 2 {
			close(started)
			<-release
		}
		return true
	})
	handed := make(chan int)
	go func() { handed <- r.run([]Message{msg(1), msg(2), msg(3), msg(4), msg(5), msg(6)}) }()
	<-started
	clk.Advance(slowHandler - time.Nanosecond)
	if len(jobs) != 0 {
		t.Fatal("handed on before slowHandler passed")
	}
	clk.Advance(time.Nanosecond)
	if len(jobs) != 2 {
		t.Fatalf("%d messages handed on, want workers-1 = 2", len(jobs))
	}
	adds, flushes := acks.state()
	if !slices.EqualFunc(adds, [][]int64{{1}}, slices.Equal) || flushes != 1 {
		t.Fatalf("at the hand-off: adds %v, flushes %d; want message 1's ack flushed", adds, flushes)
	}
	// A third of the lease later the running message and the two still
	// waiting (5 and 6) are extended, and the acks added meanwhile (the
	// workers') flushed.
	clk.Advance(time.Second)
	if got := ext.take(); !slices.Equal(got, []string{"r5", "r6", "r2"}) {
		t.Fatalf("extended %v, want the waiting r5, r6 and the running r2", got)
	}
	if _, flushes := acks.state(); flushes != 2 {
		t.Fatalf("%d flushes after a lease tick while slow, want 2", flushes)
	}
	close(release)
	if n := <-handed; n != 4 {
		t.Fatalf("handed %d on, want 4", n)
	}
	if got := ext.take(); !slices.Equal(got, []string{"r5", "r6"}) {
		t.Fatalf("extended %v when the waiting ones went to the workers, want r5 and r6", got)
	}
	var ids []int64
	for len(jobs) > 0 {
		ids = append(ids, (<-jobs).ID)
	}
	if !slices.Equal(ids, []int64{3, 4, 5, 6}) {
		t.Fatalf("the workers got %v", ids)
	}
	adds, flushes = acks.state()
	if !slices.EqualFunc(adds, [][]int64{{1}, {2}}, slices.Equal) || flushes != 2 {
		t.Fatalf("adds %v, flushes %d; want message 2's ack added (the dispatcher flushes it)", adds, flushes)
	}
	if !r.slow.Load() {
		return
	}
	t.Fatal("the runner is still slow after its batch")
}

// TestInlineRunnerLateHandOffDoesNothing: a watch that fires after the
// batch ended finds no batch.
func TestInlineRunnerLateHandOffDoesNothing(t *testing.T) {
	r, _, acks, jobs, _ := testRunner(3, func(Message) bool { return true })
	r.run([]Message{msg(1)})
	r.handOff()
	adds, flushes := acks.state()
	if len(jobs) != 0 || len(adds) != 1 || flushes != 0 || r.slow.Load() {
		t.Fatalf("after a late hand-off: %d jobs, adds %v, %d flushes, slow %v", len(jobs), adds, flushes, r.slow.Load())
	}
}

// stubQueue is a driver.Queue for the dispatcher alone: a backlog of
// messages claimed in order, claim sizes recorded. Only what the
// dispatcher calls is implemented.
type stubQueue struct {
	driver.Queue
	mu      sync.Mutex
	backlog []driver.Message
	claims  []int // max of each Receive
	done    chan struct{}
	wake    chan struct{}
}

func (s *stubQueue) Receive(_ context.Context, max int, _ time.Duration) ([]driver.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, max)
	n := min(max, len(s.backlog))
	ms := slices.Clone(s.backlog[:n])
	s.backlog = s.backlog[n:]
	return ms, nil
}

func (s *stubQueue) WaitChans() (<-chan struct{}, <-chan struct{}) { return s.wake, nil }
func (s *stubQueue) NextDue(context.Context, time.Time) (time.Time, bool, error) {
	return time.Time{}, false, nil
}
func (s *stubQueue) Done() <-chan struct{} { return s.done }
func (s *stubQueue) Path() string          { return "stub" }

// TestDispatcherClaimsForIdleWorkersThenRunsInline: with 4 workers the
// first claim takes 4 (no handler measured yet) for the workers; the
// handlers take no time on the fake clock, so the next claim is run
// inline, and after a clean inline batch the claims are full
// (MaxReceiveBatch). Each inline batch's acks are one add, flushed before
// the next claim runs... by the dispatcher.
func TestDispatcherClaimsForIdleWorkersThenRunsInline(t *testing.T) {
	const n = 4 + 4 + 10 + 10 + 2
	sq := &stubQueue{done: make(chan struct{}), wake: make(chan struct{})}
	for i := range n {
		sq.backlog = append(sq.backlog, driver.Message{ID: int64(i + 1), ReceiptHandle: fmt.Sprint(i + 1), Payload: driver.Payload{Type: driver.TypeText, Data: "x"}})
	}
	q := newQueue(sq, buildOptions(nil), 0)
	o, err := q.consumeOptions([]ConsumeOption{ConsumeWorkers(4)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := 0
	all := make(chan struct{})
	c := newConsumer(q, o, func(context.Context, Message) error {
		mu.Lock()
		defer mu.Unlock()
		if handled++; handled == n {
			close(all)
		}
		return nil
	}, context.Background(), newFakeClock())
	c.acks.close() // the real one is not used here
	acks := &recordedAcks{}
	c.acks, c.inline.acks = acks, acks
	c.wg.Add(o.workers)
	for range o.workers {
		go c.work(c.newLeaseKeeper(c.clk))
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- c.dispatch(ctx) }()
	<-all
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	close(c.jobs)
	c.wg.Wait()
	sq.mu.Lock()
	claims := slices.Clone(sq.claims)
	sq.mu.Unlock()
	// The first claim is the workers' (4); the workers' acks come one add
	// each. Once all 4 reported back (drained before the next claim, or
	// claimed for one at a time while they trickle in), claims run inline:
	// 4 (the first inline one is one per worker), then full ones.
	if claims[0] != 4 {
		t.Fatalf("claims %v: the first should take one per worker", claims)
	}
	i := slices.Index(claims, MaxReceiveBatch)
	if i < 0 || !slices.Equal(claims[i:], []int{10, 10, 10}) {
		t.Fatalf("claims %v: want full claims to the end once inline (the last finds 2, then the queue empty)", claims)
	}
	adds, flushes := acks.state()
	total := 0
	for _, a := range adds {
		total += len(a)
	}
	if total != n {
		t.Fatalf("adds %v: %d acks, want %d", adds, total, n)
	}
	if !slices.ContainsFunc(adds, func(a []int64) bool { return len(a) == MaxReceiveBatch }) || flushes < 3 {
		t.Fatalf("adds %v, %d flushes: want a full inline batch added at once, and flushes by the dispatcher", adds, flushes)
	}
}
