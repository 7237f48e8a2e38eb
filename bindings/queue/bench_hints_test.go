package queue_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/hintserver"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/notify"
)

// Benchmarks of the wake-up paths. Each reports latency percentiles as
// metrics (p50-ms, p99-ms, max-ms); ns/op is the wall time of one whole
// round and means little. Latencies are taken honestly: the commit time
// right after Send (or the foreign Exec) returns, the handler start at
// handler entry.

const (
	benchMessages = 1000
	benchPace     = 2 * time.Millisecond

	// The trickling writer: benchPacedMessages commits at random gaps in
	// [benchGapMin, benchGapMax] (about 30 s a round).
	benchPacedMessages = 200
	benchGapMin        = 20 * time.Millisecond
	benchGapMax        = 300 * time.Millisecond
)

// benchLatencies reports percentiles of lat.
func benchLatencies(b *testing.B, lat []time.Duration) {
	b.Helper()
	benchLatenciesAs(b, "", lat)
}

// benchLatenciesAs reports percentiles of lat as prefix+"p50-ms" and so on.
func benchLatenciesAs(b *testing.B, prefix string, lat []time.Duration) {
	b.Helper()
	if len(lat) == 0 {
		b.Fatal("no latencies")
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		return lat[max(i, 0)]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(0.50)), prefix+"p50-ms")
	b.ReportMetric(ms(pct(0.99)), prefix+"p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), prefix+"max-ms")
}

// benchStarts records handler start times by message number (the payload).
type benchStarts struct {
	mu     sync.Mutex
	starts map[int]time.Time
	n      atomic.Int32
	all    chan struct{}
	want   int32
}

func newBenchStarts(want int) *benchStarts {
	return &benchStarts{starts: make(map[int]time.Time, want), all: make(chan struct{}), want: int32(want)}
}

func (s *benchStarts) handler(_ context.Context, m queue.Message) error {
	at := time.Now()
	i, err := strconv.Atoi(m.Payload.Data)
	if err != nil {
		return nil // a warm-up or probe message
	}
	s.mu.Lock()
	if _, dup := s.starts[i]; !dup {
		s.starts[i] = at
		if s.n.Add(1) == s.want {
			close(s.all)
		}
	}
	s.mu.Unlock()
	return nil
}

func (s *benchStarts) wait(b testing.TB) {
	b.Helper()
	select {
	case <-s.all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("only %d of %d messages handled", s.n.Load(), s.want)
	}
}

// benchRound runs one paced round: send(i) commits message i and returns
// its commit time; the latency of i is its handler start minus that.
func benchRound(b *testing.B, starts *benchStarts, n int, pace time.Duration, send func(i int) time.Time) []time.Duration {
	b.Helper()
	return benchRoundGaps(b, starts, n, func(int) time.Duration { return pace }, send)
}

// benchRoundGaps is benchRound with gap(i) between the planned commit times
// of messages i-1 and i.
func benchRoundGaps(b *testing.B, starts *benchStarts, n int, gap func(i int) time.Duration, send func(i int) time.Time) []time.Duration {
	b.Helper()
	commits := make([]time.Time, n)
	at := time.Now()
	for i := range n {
		if i > 0 {
			at = at.Add(gap(i))
		}
		time.Sleep(time.Until(at))
		commits[i] = send(i)
	}
	starts.wait(b)
	lat := make([]time.Duration, n)
	starts.mu.Lock()
	for i := range n {
		lat[i] = starts.starts[i].Sub(commits[i])
	}
	starts.mu.Unlock()
	return lat
}

// BenchmarkSendToHandler: a Send in this process with the in-process wake
// turned off, so the path is Send -> NATS hint -> Consume -> handler, as
// for a producer in another process.
func BenchmarkSendToHandler(b *testing.B) {
	srv := hwServer(b)
	dir := b.TempDir()
	subject := notify.Subject("bench", "send")
	consumer := hwOpen(b, dir, queue.WithHints(srv.URL(), "", subject))
	sender := hwOpen(b, dir, queue.WithHints(srv.URL(), "", subject), queue.ExportWithoutLocalWake())
	var all []time.Duration
	for range b.N {
		starts := newBenchStarts(benchMessages)
		stop := hwConsume(b, consumer, starts.handler, queue.ConsumeWorkers(2), queue.ConsumePollInterval(hwNoPoll))
		hwSubscribed(b, consumer, srv.URL(), subject)
		warm := make(chan struct{})
		go func() {
			testutil.CheckFor(b, hwTimeout, time.Millisecond, "warm-up handled", func() bool { return hwCount(b, consumer) == 0 })
			close(warm)
		}()
		if err := sender.Send(context.Background(), queue.Text("warm-up")); err != nil {
			b.Fatal(err)
		}
		<-warm
		lat := benchRound(b, starts, benchMessages, benchPace, func(i int) time.Time {
			if err := sender.Send(context.Background(), queue.Text(strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
			return time.Now()
		})
		all = append(all, lat...)
		if err := stop(); err != nil {
			b.Fatal(err)
		}
	}
	benchLatencies(b, all)
}

// BenchmarkForeignWriterToHandler: a row inserted with the spec's SQL on a
// foreign connection -> inotify + data_version in the hint source -> NATS
// hint -> Consume -> handler. The foreign connection runs with SQLite's
// default synchronous=FULL (an fsync inside every commit, holding the lock)
// or with synchronous=NORMAL, localcloud's own default.
//
// pace=2ms commits back to back (1000 messages); pace=rand20-300ms commits
// 200 messages at random gaps between 20 and 300 ms, as a writer that
// trickles does: a commit then lands anywhere in the hint source's re-check
// schedule of the commit before it (the seed is logged). hint-p50-ms and
// so on are the latencies from each commit to the first hint a plain NATS
// subscriber received after it: the hint source's share of the total.
func BenchmarkForeignWriterToHandler(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, pace := range []string{"2ms", "rand20-300ms"} {
			b.Run("sync="+sync+"/pace="+pace, func(b *testing.B) {
				benchForeignWriter(b, sync, pace)
			})
		}
	}
}

// benchForeignWriter is one case of BenchmarkForeignWriterToHandler.
func benchForeignWriter(b *testing.B, syncMode, pace string) {
	n, gap := benchMessages, func(int) time.Duration { return benchPace }
	if pace != "2ms" {
		seed := uint64(time.Now().UnixNano())
		b.Logf("gap seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, seed))
		n = benchPacedMessages
		gap = func(int) time.Duration {
			return benchGapMin + time.Duration(rng.Int64N(int64(benchGapMax-benchGapMin)+1))
		}
	}
	srv := hwServer(b)
	dir := b.TempDir()
	subject := notify.Subject("bench", "foreign")
	consumer := hwOpen(b, dir, queue.WithHints(srv.URL(), "", subject))
	hwSource(b, srv.URL(), dir, subject)
	foreign := hwForeign(b, dir)
	if _, err := foreign.Exec("PRAGMA synchronous=" + syncMode); err != nil {
		b.Fatal(err)
	}
	var hintMu sync.Mutex
	var hints []time.Time
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	if _, err := nc.Subscribe(subject, func(*nats.Msg) {
		hintMu.Lock()
		hints = append(hints, time.Now())
		hintMu.Unlock()
	}); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	insert := func(text string) time.Time {
		now := time.Now().UnixMilli()
		if _, err := foreign.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES ('text', ?1, ?2, ?2, 0)`, text, now); err != nil {
			b.Fatal(err)
		}
		return time.Now()
	}
	var all, toHint []time.Duration
	for range b.N {
		starts := newBenchStarts(n)
		stop := hwConsume(b, consumer, starts.handler, queue.ConsumeWorkers(2), queue.ConsumePollInterval(hwNoPoll))
		hwSubscribed(b, consumer, srv.URL(), subject)
		insert("warm-up")
		testutil.CheckFor(b, hwTimeout, time.Millisecond, "warm-up handled", func() bool { return hwCount(b, consumer) == 0 })
		hintMu.Lock()
		hints = hints[:0]
		hintMu.Unlock()
		before := make([]time.Time, 0, n)
		commits := make([]time.Time, 0, n)
		all = append(all, benchRoundGaps(b, starts, n, gap, func(i int) time.Time {
			before = append(before, time.Now())
			at := insert(strconv.Itoa(i))
			commits = append(commits, at)
			return at
		})...)
		if err := stop(); err != nil {
			b.Fatal(err)
		}
		hintMu.Lock()
		for i, c := range commits {
			// The first hint after Exec began is this commit's (the one
			// before came 20+ ms earlier), even when it arrives before Exec
			// returned to a descheduled caller (then it counts as 0).
			if j, _ := slices.BinarySearchFunc(hints, before[i], time.Time.Compare); j < len(hints) {
				toHint = append(toHint, max(hints[j].Sub(c), 0))
			}
		}
		hintMu.Unlock()
	}
	benchLatencies(b, all)
	benchLatenciesAs(b, "hint-", toHint)
}

// BenchmarkLeaseEndToRedelivery: time from a lease's end (visible_at) to
// the handler start of the redelivery.
//
//   - known: the leases exist when Consume starts; its own timer at the
//     earliest future visible_at wakes it.
//   - foreign: leased rows appear while Consume waits (a consumer in
//     another process took them and died); only the hint source's timer
//     knows, and wakes Consume through NATS.
func BenchmarkLeaseEndToRedelivery(b *testing.B) {
	const n = 200
	const step = 5 * time.Millisecond
	b.Run("known", func(b *testing.B) {
		var all []time.Duration
		for range b.N {
			dir := b.TempDir()
			dead := hwOpen(b, dir)
			consumer := hwOpen(b, dir)
			for i := range n {
				if err := dead.Send(context.Background(), queue.Text(strconv.Itoa(i))); err != nil {
					b.Fatal(err)
				}
			}
			ends := make([]time.Time, n)
			for i := range n {
				msgs, err := dead.Receive(context.Background(), 1, queue.ReceiveVisibility(300*time.Millisecond+time.Duration(i)*step))
				if err != nil || len(msgs) != 1 {
					b.Fatalf("Receive = %v, %v", msgs, err)
				}
				ends[i] = hwVisibleAt(b, consumer, msgs[0].ID)
			}
			starts := newBenchStarts(n)
			stop := hwConsume(b, consumer, starts.handler, queue.ConsumePollInterval(hwNoPoll))
			starts.wait(b)
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				all = append(all, starts.starts[i].Sub(ends[i]))
			}
		}
		benchLatencies(b, all)
	})
	b.Run("foreign", func(b *testing.B) {
		srv := hwServer(b)
		dir := b.TempDir()
		subject := notify.Subject("bench", "lease")
		consumer := hwOpen(b, dir, queue.WithHints(srv.URL(), "", subject))
		hwSource(b, srv.URL(), dir, subject)
		foreign := hwForeign(b, dir)
		var all []time.Duration
		for range b.N {
			starts := newBenchStarts(n)
			stop := hwConsume(b, consumer, starts.handler, queue.ConsumePollInterval(hwNoPoll))
			hwSubscribed(b, consumer, srv.URL(), subject)
			hwWaiting(b, consumer, 1)
			ends := make([]time.Time, n)
			t0 := time.Now()
			for i := range n {
				time.Sleep(time.Until(t0.Add(time.Duration(i) * step)))
				now := time.Now()
				end := now.Add(100 * time.Millisecond).UnixMilli()
				ends[i] = time.UnixMilli(end)
				if _, err := foreign.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt, receipt_handle)
VALUES ('text', ?1, ?2, ?3, 1, '00000000-0000-4000-8000-000000000000')`, strconv.Itoa(i), now.UnixMilli(), end); err != nil {
					b.Fatal(err)
				}
			}
			starts.wait(b)
			if err := stop(); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				all = append(all, starts.starts[i].Sub(ends[i]))
			}
		}
		benchLatencies(b, all)
	})
}

// BenchmarkHintsAt10k: senders aim at 10,000 sends/s for one second; the
// coalescing publishers (the library's, and the hint source's as under
// localcloud up) must publish far fewer hints than sends, and the last send
// must still be followed by a hint.
func BenchmarkHintsAt10k(b *testing.B) {
	const (
		rate    = 10000
		dur     = time.Second
		senders = 2
	)
	srv := hwServer(b)
	dir := b.TempDir()
	subject := notify.Subject("bench", "rate")
	var received atomic.Int64
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(subject, func(*nats.Msg) { received.Add(1) }); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	srcPub, err := notify.DialPublisher(srv.URL(), "", notify.PublisherOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer srcPub.Close()
	hwSourcePub(b, srcPub, dir, subject)
	q := hwOpen(b, dir, queue.WithHints(srv.URL(), "", subject))
	if err := q.Send(context.Background(), queue.Text("warm-up")); err != nil {
		b.Fatal(err)
	}
	var sent atomic.Int64
	var libHints, srcHints, recv, sends, elapsed float64
	for range b.N {
		lib0, src0, recv0 := queue.ExportHintStats(q), srcPub.Stats(), received.Load()
		sent.Store(0)
		t0 := time.Now()
		var wg sync.WaitGroup
		per := rate / senders
		for range senders {
			wg.Go(func() {
				// 10 sends per ms overall, in chunks paced by the clock.
				const chunk = 5
				for i := 0; i < per; i += chunk {
					time.Sleep(time.Until(t0.Add(time.Duration(i) * dur / time.Duration(per))))
					for range chunk {
						if err := q.Send(context.Background(), queue.Text("x")); err != nil {
							b.Error(err)
							return
						}
						sent.Add(1)
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(t0)
		// The trailing hints of the last window.
		testutil.CheckFor(b, hwTimeout, time.Millisecond, "the trailing hints", func() bool {
			st := queue.ExportHintStats(q)
			return st.Published+st.Failed+st.Coalesced == st.Notified
		})
		time.Sleep(20 * time.Millisecond) // let the source's settle check and NATS delivery finish
		lib1, src1 := queue.ExportHintStats(q), srcPub.Stats()
		libHints += float64(lib1.Published - lib0.Published)
		srcHints += float64(src1.Published - src0.Published)
		recv += float64(received.Load() - recv0)
		sends += float64(sent.Load())
		elapsed += el.Seconds()
	}
	b.ReportMetric(sends/elapsed, "sends/s")
	b.ReportMetric(libHints/elapsed, "lib-hints/s")
	b.ReportMetric(srcHints/elapsed, "src-hints/s")
	b.ReportMetric(recv/elapsed, "hints-recv/s")
}

// BenchmarkIdleCPU: the process CPU time per second of an idle Consume (8
// workers, 1 s jittered poll): "baseline" runs no consumer at all (the test
// process itself), "no-nats" an idle Consume without hints, "nats" one with
// an embedded NATS server and a live subscription in the same process (the
// server's CPU counts too).
func BenchmarkIdleCPU(b *testing.B) {
	for _, mode := range []string{"baseline", "no-nats", "nats"} {
		b.Run(mode, func(b *testing.B) {
			if mode != "baseline" {
				var opts []queue.Option
				var srv *hintserver.Server
				subject := notify.Subject("bench", "idle")
				if mode == "nats" {
					srv = hwServer(b)
					opts = append(opts, queue.WithHints(srv.URL(), "", subject))
				}
				q := hwOpen(b, b.TempDir(), opts...)
				hwConsume(b, q, func(context.Context, queue.Message) error { return nil },
					queue.ConsumeWorkers(8), queue.ConsumePollInterval(time.Second))
				if srv != nil {
					hwSubscribed(b, q, srv.URL(), subject)
				}
				hwWaiting(b, q, 1)
			}
			runtime.GC() // garbage of earlier benchmarks is not the consumer's
			var cpu, wall time.Duration
			for range b.N {
				c0, t0 := hwCPU(b), time.Now()
				time.Sleep(2 * time.Second) // the measured idle period
				cpu += hwCPU(b) - c0
				wall += time.Since(t0)
			}
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/wall.Seconds(), "cpu-ms/s")
		})
	}
}
