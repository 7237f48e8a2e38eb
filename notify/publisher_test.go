package notify

import (
	"github.com/localcloud/localcloud/internal/hintserver"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

func newTestPublisher(t testing.TB, s *hintserver.Server, opts PublisherOptions) *Publisher {
	t.Helper()
	p, err := DialPublisher(s.URL(), "", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func checkStatsBalance(t *testing.T, st PublisherStats) {
	t.Helper()
	if st.Notified != st.Published+st.Failed+st.Coalesced {
		t.Errorf("stats do not balance: %+v", st)
	}
}

func TestPublisherIsolatedNotify(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	p := newTestPublisher(t, s, PublisherOptions{})

	before := time.Now().UnixMilli()
	p.Notify(subject, 7)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "isolated hint", func() bool { return rec.count() == 1 })
	h := rec.snapshot()[0]
	if h.Binding != "orders" || h.Due != 7 || h.At < before || h.At > time.Now().UnixMilli() {
		t.Fatalf("hint = %+v", h)
	}
	st := p.Stats()
	if st.Notified != 1 || st.Published != 1 || st.Coalesced != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

// TestPublisherCoalescesBurst: 10,000 calls in a tight loop give far fewer hints, never more than
// one per window, and the hint carrying the last call's due value always arrives.
func TestPublisherCoalescesBurst(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	p := newTestPublisher(t, s, PublisherOptions{})

	const calls = 10_000
	start := time.Now()
	for i := range calls {
		p.Notify(subject, int64(i))
	}
	// Only a publish decided after the final call can carry its due value.
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "trailing hint with the last due value", func() bool { return rec.sawDue(calls - 1) })
	elapsed := time.Since(start)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "stats to settle", func() bool {
		st := p.Stats()
		return st.Published+st.Failed+st.Coalesced == calls
	})

	st := p.Stats()
	checkStatsBalance(t, st)
	if st.Notified != calls || st.Failed != 0 {
		t.Fatalf("stats = %+v", st)
	}
	// Hints are at least one window apart, so there can be no more than elapsed/window + 1.
	if limit := uint64(elapsed/DefaultWindow) + 1; st.Published > limit {
		t.Errorf("published %d hints in %s, more than one per %s window (limit %d)", st.Published, elapsed, DefaultWindow, limit)
	}
	if st.Published > calls/10 {
		t.Errorf("published %d hints for %d calls: not coalescing", st.Published, calls)
	}
	last := rec.snapshot()
	if got := last[len(last)-1].Due; got != calls-1 {
		t.Errorf("last hint received has due %d, want %d", got, calls-1)
	}
	t.Logf("%d calls in %s -> %d hints (%d coalesced)", calls, elapsed, st.Published, st.Coalesced)
}

func TestPublisherConcurrentNotify(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	a, b := Subject("shop", "a"), Subject("shop", "b")
	recA, recB := subscribe(t, s.URL(), a), subscribe(t, s.URL(), b)
	p := newTestPublisher(t, s, PublisherOptions{})

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if (g+i)%2 == 0 {
					p.Notify(a, DueUnknown)
				} else {
					p.Notify(b, DueUnknown)
				}
			}
		})
	}
	wg.Wait()
	p.Notify(a, 1) // a marker per subject, after every other call
	p.Notify(b, 2)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "marker hints on both subjects", func() bool { return recA.sawDue(1) && recB.sawDue(2) })
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "stats to settle", func() bool {
		st := p.Stats()
		return st.Published+st.Failed+st.Coalesced == st.Notified
	})
	if st := p.Stats(); st.Notified != 8002 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestPublisherCloseFlushesPending(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	p, err := DialPublisher(s.URL(), "", PublisherOptions{Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p.Notify(subject, 1) // leading edge: published now
	p.Notify(subject, 2) // trailing: due in an hour
	p.Notify(subject, 3) // folds into the trailing hint
	p.Close()
	p.Close()
	p.Notify(subject, 4) // ignored after Close

	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "hint flushed by Close", func() bool { return rec.sawDue(3) })
	st := p.Stats()
	if st.Notified != 3 || st.Published != 2 || st.Coalesced != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if rec.sawDue(2) || rec.sawDue(4) {
		t.Fatalf("unexpected hints: %+v", rec.snapshot())
	}
}

func TestPublisherNegativeWindowPublishesEveryCall(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	p := newTestPublisher(t, s, PublisherOptions{Window: -1})
	for i := range 50 {
		p.Notify(subject, int64(i))
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "50 hints", func() bool { return rec.count() == 50 })
	if st := p.Stats(); st.Published != 50 || st.Coalesced != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestPublisherInProcessConnection(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	nc, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	p := NewPublisher(nc, PublisherOptions{})
	p.Notify(subject, 5)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "hint over the in-process connection", func() bool { return rec.sawDue(5) })
	p.Close()
	if nc.IsClosed() {
		t.Fatal("Close closed a connection the Publisher does not own")
	}
}

// TestDialPublisherBeforeServer: the publisher starts while no server listens, and its hints
// flow once one is up.
func TestDialPublisherBeforeServer(t *testing.T) {
	t.Parallel()
	addr := loopback(testutil.FreePort(t))
	p, err := DialPublisher("nats://"+addr, "", PublisherOptions{})
	if err != nil {
		t.Fatalf("DialPublisher without a server: %v", err)
	}
	defer p.Close()
	subject := Subject("shop", "orders")
	p.Notify(subject, 1) // buffered or lost: both are fine for a hint

	s := startTestServer(t, addr, "")
	rec := subscribe(t, s.URL(), subject)
	i := int64(100)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "hint after the server came up", func() bool {
		i++
		p.Notify(subject, i)
		return rec.count() > 0
	})
}

// TestPublisherLastID: a hint carries the largest lastID of the NotifySent
// calls it reports, and none after it was published.
func TestPublisherLastID(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	rec := subscribe(t, s.URL(), subject)
	p := newTestPublisher(t, s, PublisherOptions{Window: time.Hour})

	p.NotifySent(subject, DueUnknown, 5) // published at once
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "first hint", func() bool { return rec.count() == 1 })
	p.NotifySent(subject, DueUnknown, 9) // folded into the trailing hint
	p.NotifySent(subject, DueUnknown, 7)
	p.Notify(subject, DueUnknown)
	p.Close() // publishes the trailing hint
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "trailing hint", func() bool { return rec.count() == 2 })
	if got := rec.snapshot(); got[0].LastID != 5 || got[1].LastID != 9 {
		t.Fatalf("hints %+v, want lastId 5 then 9", got)
	}
}
