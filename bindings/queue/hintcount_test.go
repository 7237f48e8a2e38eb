package queue_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
	"github.com/localcloud/localcloud/notify"
)

// hcGap is the pause between two commits of the hint-count cases: far
// longer than any coalescing window, so every hint counted belongs to one
// commit.
const hcGap = 30 * time.Millisecond

// hcRig is a store watched by the `up`-side hint source, a library sender
// with hints, a consumer that acks everything, a foreign writer, and a
// subscriber that records when each hint on the subject arrived.
type hcRig struct {
	sender  *queue.Queue
	foreign *sql.DB

	mu    sync.Mutex
	hints []time.Time
}

func newHCRig(t testing.TB) *hcRig {
	t.Helper()
	srv := hwServer(t)
	dir := t.TempDir()
	subject := notify.Subject("test", "count")
	hwSource(t, srv.URL(), dir, subject)
	consumer := hwOpen(t, dir, queue.WithHints(srv.URL(), "", subject))
	hwConsume(t, consumer, func(context.Context, queue.Message) error { return nil }, queue.ConsumePollInterval(hwNoPoll))
	hwSubscribed(t, consumer, srv.URL(), subject)
	// Another handle, as in another process: its sends wake the consumer by
	// NATS only.
	r := &hcRig{
		sender:  hwOpen(t, dir, queue.WithHints(srv.URL(), "", subject), queue.ExportWithoutLocalWake()),
		foreign: hwForeign(t, dir),
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(subject, func(*nats.Msg) {
		r.mu.Lock()
		r.hints = append(r.hints, time.Now())
		r.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Let the probe hints of hwSubscribed and the source's first look pass.
	time.Sleep(100 * time.Millisecond)
	r.mu.Lock()
	r.hints = nil
	r.mu.Unlock()
	return r
}

// send commits message i: through the library when lib, else with the
// spec's SQL on the foreign connection.
func (r *hcRig) send(t testing.TB, lib bool, i int) {
	t.Helper()
	if lib {
		if err := r.sender.Send(context.Background(), queue.Text(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		return
	}
	hwForeignInsert(t, r.foreign, strconv.Itoa(i), 0)
}

// run commits n messages hcGap apart (lib(i) chooses the writer of each),
// waits for the last hints and returns, per commit, the hints that arrived
// between its start and the next commit's start. A commit counts from
// before its Send or Exec began: its hint can arrive before the call
// returns (the commit is visible before SQLite's call returns, and the hint
// source may look at once).
func (r *hcRig) run(t testing.TB, n int, lib func(i int) bool) []int {
	t.Helper()
	commits := make([]time.Time, n)
	for i := range n {
		commits[i] = time.Now()
		r.send(t, lib(i), i)
		// The first hint after the commit began, however late a loaded
		// machine makes it (else it would be counted for the next commit),
		// then the gap, in which a second hint for the same commit would come.
		r.waitHintAfter(commits[i])
		time.Sleep(hcGap)
	}
	time.Sleep(hcGap) // the hints of the last commit
	r.mu.Lock()
	defer r.mu.Unlock()
	per := make([]int, n)
	for _, at := range r.hints {
		for i := n - 1; i >= 0; i-- {
			if !at.Before(commits[i]) {
				per[i]++
				break
			}
		}
	}
	return per
}

// waitHintAfter waits up to hwTimeout for a hint that arrived at or after
// at; a commit that gets none is reported by the caller's count.
func (r *hcRig) waitHintAfter(at time.Time) {
	for deadline := time.Now().Add(hwTimeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		got := len(r.hints) > 0 && !r.hints[len(r.hints)-1].Before(at)
		r.mu.Unlock()
		if got {
			return
		}
	}
}

// TestOneHintPerPacedLibrarySend: with `up`'s hint source watching the
// store, a paced Send through the library is followed by one hint (its
// own), not by a second one from the source, while every commit of a
// foreign writer between them still gets a hint.
func TestOneHintPerPacedLibrarySend(t *testing.T) {
	t.Parallel()
	r := newHCRig(t)
	const n = 40
	// Library sends, with a foreign commit every fourth.
	isLib := func(i int) bool { return i%4 != 3 }
	per := r.run(t, n, isLib)
	lib, libHints := 0, 0
	for i, c := range per {
		if !isLib(i) {
			if c == 0 {
				t.Errorf("foreign commit %d got no hint", i)
			}
			continue
		}
		lib++
		libHints += c
	}
	t.Logf("hints per commit: %v", per)
	t.Logf("%d library sends, %d hints (%.2f per send)", lib, libHints, float64(libHints)/float64(lib))
	// Before: two per send. A late library hint (a loaded machine) may still
	// let the source publish one of its own now and then.
	if float64(libHints) > 1.25*float64(lib) {
		t.Fatalf("%d hints for %d paced library sends, want about one each", libHints, lib)
	}
	testutil.CheckFor(t, hwTimeout, time.Millisecond, "every message consumed", func() bool { return hwCount(t, r.sender) == 0 })
}

// BenchmarkHintsPerPacedSend counts the hints on a binding's subject per
// commit, hcGap apart, with `up`'s hint source watching: "library" sends
// through the library (one hint wanted), "foreign" inserts with the spec's
// SQL (one hint wanted, from the source).
func BenchmarkHintsPerPacedSend(b *testing.B) {
	for _, writer := range []string{"library", "foreign"} {
		b.Run("writer="+writer, func(b *testing.B) {
			r := newHCRig(b)
			const n = 50
			var commits, hints int
			for range b.N {
				r.mu.Lock()
				r.hints = nil
				r.mu.Unlock()
				for _, c := range r.run(b, n, func(int) bool { return writer == "library" }) {
					hints += c
				}
				commits += n
			}
			b.ReportMetric(float64(hints)/float64(commits), "hints/send")
		})
	}
}
