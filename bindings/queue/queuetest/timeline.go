package queuetest

import (
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/clock"
)

// timeline is a case's time: a fake clock when the engine follows
// queue.WithClock (Capabilities.ControlsTime), else the real (server)
// time. On the fake clock the suite moves time itself and checks times to
// the millisecond; on real time it uses short real durations, waits for a
// due message by polling with a deadline, and checks order and outcome:
// a time read back must lie in the window the case measured around the
// call, and a "not due yet" check only counts while the case can prove
// that too little time has passed (else the case skips, never flakes).
type timeline struct {
	fake *clock.Fake // nil on real time
	caps Capabilities
}

// realSlack is what a time read back on real time may be off by: the
// engine rounds to milliseconds and may take its reading a little before
// or after the suite's own.
const realSlack = 5 * time.Millisecond

// serverSlack is how long after a lease's end a server that hides lease
// ends (Capabilities.PeekHidesLeases) is given to make the message due
// again: its redelivery timer runs on its own goroutine, which a loaded
// machine runs late (JetStream, at load 13: m0 not yet back 5 ms after its
// lease end in RedeliveryKeepsPlace). The order the cases check does not
// depend on it; only whether the message is back yet.
const serverSlack = 200 * time.Millisecond

// dueDeadline bounds the wait for a message that is due on real time.
const dueDeadline = 15 * time.Second

// newTimeline returns the case's timeline.
func newTimeline(t *testing.T, h Harness) *timeline {
	t.Helper()
	if h.Caps.ControlsTime {
		return &timeline{fake: clock.New(start), caps: h.Caps}
	}
	return &timeline{caps: h.Caps}
}

// needsFakeClock skips a case that cannot be expressed on real time.
func needsFakeClock(t *testing.T, h Harness, why string) *clock.Fake {
	t.Helper()
	if !h.Caps.ControlsTime {
		t.Skip("needs a fake clock (Capabilities.ControlsTime is false): " + why)
	}
	return clock.New(start)
}

func (tl *timeline) isReal() bool { return tl.fake == nil }

// open opens a handle on the timeline.
func (tl *timeline) open(t *testing.T, h Harness, opts ...queue.Option) *queue.Queue {
	t.Helper()
	if tl.fake != nil {
		return openClocked(t, h, tl.fake, opts...)
	}
	return h.Open(t, opts...)
}

// now is the timeline's current time. On real time it is the wall clock
// only (no monotonic reading), so that time.Since and comparisons with it
// measure the clock the engines' due times are kept in (the format's
// milliseconds since the epoch). Persistence/Reopen on a loaded VM found a
// lease of 2 s over after 1.33 s (and once 1.994 s) of monotonic time,
// while the engine takes both the lease's start and the due check from
// the wall clock: the wall clock moved faster than the monotonic one,
// which is not a message delivered early.
func (tl *timeline) now() time.Time {
	if tl.fake != nil {
		return tl.fake.Now()
	}
	return time.Now().Round(0)
}

// advance moves the fake clock by d. On real time it does nothing: a case
// calls it only where the passing of time must change nothing ("an acked
// message never comes back, however long we wait") or before a wait that
// polls (receiveDue).
func (tl *timeline) advance(d time.Duration) {
	if tl.fake != nil {
		tl.fake.Advance(d)
	}
}

// wantLeaseEnd is wantTime for the VisibleAt of a delivered message p
// (its lease end, or the nack's due time); on an engine whose Peek hides
// leases it only checks that p is delivered.
func (tl *timeline) wantLeaseEnd(t *testing.T, what string, p queue.PeekedMessage, before, after time.Time, offset time.Duration) {
	t.Helper()
	if tl.caps.PeekHidesLeases {
		if !p.Delivered {
			t.Fatalf("%s: Peek shows message %d not delivered; want delivered", what, p.ID)
		}
		return
	}
	tl.wantTime(t, what, p.VisibleAt, before, after, offset)
}

// wantPeekAttempt checks the attempt Peek shows for message id, unless
// Peek hides it (Capabilities.PeekHidesLeases).
func (tl *timeline) wantPeekAttempt(t *testing.T, q *queue.Queue, id int64, want int) {
	t.Helper()
	if tl.caps.PeekHidesLeases {
		return
	}
	if p := peekMessage(t, q, id); p.Attempt != want {
		t.Fatalf("Peek shows message %d at attempt %d; want %d", id, p.Attempt, want)
	}
}

// wantTime checks a time the engine reports for an event the case
// bracketed with before and after (two now() readings): it must be the
// event's time plus offset. On the fake clock before == after and the
// check is exact to the millisecond.
func (tl *timeline) wantTime(t *testing.T, what string, got, before, after time.Time, offset time.Duration) {
	t.Helper()
	lo, hi := before.Add(offset), after.Add(offset)
	if tl.fake != nil {
		if got.UnixMilli() != lo.UnixMilli() {
			t.Fatalf("%s = %d (unix ms); want %d", what, got.UnixMilli(), lo.UnixMilli())
		}
		return
	}
	if got.Before(lo.Add(-realSlack)) || got.After(hi.Add(realSlack)) {
		t.Fatalf("%s = %s; want between %s and %s (± %s)", what, got.Format(time.StampMilli),
			lo.Format(time.StampMilli), hi.Format(time.StampMilli), realSlack)
	}
}

// wantNotDue checks that q has nothing to deliver just before mark+d,
// when the event that made its message due at mark+d happened at mark. On
// the fake clock it moves time to 1 ms before that. On real time it
// receives at once and a message counts as early only while less than d
// has passed since mark; when the machine was too slow to tell, the case
// is skipped (a delivered message has been claimed, so the case cannot go
// on).
func (tl *timeline) wantNotDue(t *testing.T, q *queue.Queue, mark time.Time, d time.Duration) {
	t.Helper()
	if tl.fake != nil {
		tl.fake.Set(mark.Add(d - time.Millisecond))
		wantEmpty(t, q)
		return
	}
	msgs := receive(t, q, queue.MaxReceiveBatch)
	if len(msgs) == 0 {
		return
	}
	if el := time.Since(mark); el < d-realSlack {
		t.Fatalf("Receive gave %d messages (%s) %s after the event; want none before %s", len(msgs), texts(msgs), el, d)
	}
	t.Skipf("the machine was too slow to check the not-due-yet step (more than %s passed)", d)
}

// receiveDue returns the message that becomes due at mark+d, when the
// event that set it happened at mark. On the fake clock it sets the clock
// to mark+d and receives once. On real time it polls until a message
// comes (up to dueDeadline) and checks it did not come early.
func (tl *timeline) receiveDue(t *testing.T, q *queue.Queue, mark time.Time, d time.Duration, opts ...queue.ReceiveOption) queue.Message {
	t.Helper()
	msgs := tl.receiveDueN(t, q, 1, mark, d, opts...)
	if len(msgs) != 1 {
		t.Fatalf("Receive(1) gave %d messages (%s); want 1", len(msgs), texts(msgs))
	}
	return msgs[0]
}

// receiveDueN is receiveDue for up to max messages: on real time it polls
// until at least one comes, then returns that batch.
func (tl *timeline) receiveDueN(t *testing.T, q *queue.Queue, max int, mark time.Time, d time.Duration, opts ...queue.ReceiveOption) []queue.Message {
	t.Helper()
	if tl.fake != nil {
		if due := mark.Add(d); tl.fake.Now().Before(due) {
			tl.fake.Set(due)
		}
		return receive(t, q, max, opts...)
	}
	deadline := time.Now().Add(d + dueDeadline)
	for {
		msgs := receive(t, q, max, opts...)
		if len(msgs) > 0 {
			if el := time.Since(mark); el < d-realSlack {
				t.Fatalf("message %q delivered %s after the event; want not before %s", msgs[0].Payload.Data, el, d)
			}
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing delivered within %s of the event; want a message due after %s", time.Since(mark), d)
		}
		time.Sleep(5 * time.Millisecond) // poll interval, not synchronisation
	}
}

// Real-time durations of the server-time forms: long enough that a
// "not due yet" check right after the event holds on a loaded machine,
// short enough that the suite stays fast.
const (
	shortLease = 400 * time.Millisecond
	shortDelay = 400 * time.Millisecond
)

// peekMessage returns message id as Peek shows it.
func peekMessage(t *testing.T, q *queue.Queue, id int64) queue.PeekedMessage {
	t.Helper()
	for _, m := range peekAll(t, q) {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("message %d: not in Peek", id)
	return queue.PeekedMessage{}
}

// openSibling opens a handle on the sibling store name, on the timeline.
func (tl *timeline) openSibling(t *testing.T, h Harness, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	if tl.fake != nil {
		opts = append([]queue.Option{queue.WithClock(tl.fake.Now)}, opts...)
	}
	return h.OpenSibling(t, name, opts...)
}

// wantEmptyThrough checks that q stays empty until mark+d has passed. On
// the fake clock it sets the clock to mark+d. On real time it polls,
// checking every receive is empty, until d has passed since mark.
func (tl *timeline) wantEmptyThrough(t *testing.T, q *queue.Queue, mark time.Time, d time.Duration) {
	t.Helper()
	if tl.fake != nil {
		tl.fake.Set(mark.Add(d))
		wantEmpty(t, q)
		return
	}
	for {
		wantEmpty(t, q)
		if time.Since(mark) > d+realSlack {
			return
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}

// waitAllDue waits until Peek shows every message of q due (visible_at at
// or before now), and on an engine whose Peek hides leases
// (Capabilities.PeekHidesLeases) also until leaseEnd, the latest lease end
// the case knows of. On the fake clock it sets the clock to the latest
// visible_at.
func (tl *timeline) waitAllDue(t *testing.T, q *queue.Queue, leaseEnd time.Time) {
	t.Helper()
	deadline := time.Now().Add(dueDeadline)
	if tl.fake == nil && tl.caps.PeekHidesLeases {
		for time.Now().Before(leaseEnd.Add(serverSlack)) {
			time.Sleep(5 * time.Millisecond) // waiting out a known lease: the server shows no lease end
		}
	}
	for {
		var latest time.Time
		for _, m := range peekAll(t, q) {
			if m.VisibleAt.After(latest) {
				latest = m.VisibleAt
			}
		}
		if tl.fake != nil {
			if tl.fake.Now().Before(latest) {
				tl.fake.Set(latest)
			}
			return
		}
		if !time.Now().Before(latest) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("messages not due within %s (latest visible_at %s)", dueDeadline, latest.Format(time.StampMilli))
		}
		time.Sleep(5 * time.Millisecond) // poll interval
	}
}
