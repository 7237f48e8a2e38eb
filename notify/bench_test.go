package notify

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/testutil"
)

// BenchmarkHintLatency measures Notify -> third-party subscriber latency. The publisher connects
// over TCP like another process would, or through the server's in-process pipe as `localcloud
// up` can; the subscriber always uses TCP. "idle" cases pause a window before each call, so each
// call is isolated and takes the leading edge, as a send on a quiet queue does (threads have gone
// to sleep, so this includes their wake-ups). "hot" cases publish back to back with coalescing
// off, the best case.
func BenchmarkHintLatency(b *testing.B) {
	for _, c := range []struct {
		name      string
		inProcess bool
		idle      bool
	}{
		{"tcp/idle", false, true},
		{"inprocess/idle", true, true},
		{"tcp/hot", false, false},
		{"inprocess/hot", true, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := startTestServer(b, "", "")
			subject := Subject("bench", "orders")
			got := make(chan time.Time, 1)
			sub := connect(b, s.URL())
			if _, err := sub.Subscribe(subject, func(*nats.Msg) { got <- time.Now() }); err != nil {
				b.Fatal(err)
			}
			if err := sub.Flush(); err != nil {
				b.Fatal(err)
			}
			opts := PublisherOptions{}
			if !c.idle {
				opts.Window = -1
			}
			var p *Publisher
			if !c.inProcess {
				p = newTestPublisher(b, s, opts)
			} else {
				nc, err := s.Connect()
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(nc.Close)
				p = NewPublisher(nc, opts)
				b.Cleanup(p.Close)
			}

			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if c.idle {
					b.StopTimer()
					time.Sleep(DefaultWindow) // pacing: keep every call isolated
					b.StartTimer()
				}
				start := time.Now()
				p.Notify(subject, int64(i))
				select {
				case at := <-got:
					samples = append(samples, at.Sub(start))
				case <-time.After(waitTimeout):
					b.Fatal("hint not received")
				}
			}
			b.StopTimer()
			slices.Sort(samples)
			pct := func(q float64) float64 {
				return float64(samples[int(q*float64(len(samples)-1))].Nanoseconds()) / 1e3
			}
			b.ReportMetric(pct(0.50), "p50-us")
			b.ReportMetric(pct(0.99), "p99-us")
			if st := p.Stats(); st.Coalesced != 0 {
				b.Fatalf("isolated calls were coalesced: %+v", st)
			}
		})
	}
}

// BenchmarkNotify10kPerSecond paces Notify on one subject at 10,000 calls per second (b.N calls)
// and reports how many hints per second reach the wire and how many a subscriber receives.
func BenchmarkNotify10kPerSecond(b *testing.B) {
	s := startTestServer(b, "", "")
	subject := Subject("bench", "orders")
	rec := subscribe(b, s.URL(), subject)
	p := newTestPublisher(b, s, PublisherOptions{})
	const interval = 100 * time.Microsecond

	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		for time.Since(start) < time.Duration(i)*interval {
			// Busy-wait: sleeps are far coarser than 100 us.
		}
		p.Notify(subject, int64(i))
	}
	elapsed := time.Since(start)
	b.StopTimer()

	testutil.CheckFor(b, waitTimeout, 2*time.Millisecond, "trailing hint", func() bool { return rec.sawDue(int64(b.N - 1)) })
	st := p.Stats()
	secs := elapsed.Seconds()
	b.ReportMetric(float64(st.Notified)/secs, "notify/s")
	b.ReportMetric(float64(st.Published)/secs, "hints/s")
	b.ReportMetric(float64(rec.count())/secs, "received/s")
	b.ReportMetric(float64(st.Coalesced)/float64(st.Notified), "coalesced-ratio")
}

// BenchmarkNotifyCoalesced is the cost of a call that folds into a pending hint: the common case
// under load.
func BenchmarkNotifyCoalesced(b *testing.B) {
	s := startTestServer(b, "", "")
	p := newTestPublisher(b, s, PublisherOptions{Window: time.Hour})
	subject := Subject("bench", "orders")
	p.Notify(subject, 0)
	p.Notify(subject, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.Notify(subject, int64(i))
	}
}
