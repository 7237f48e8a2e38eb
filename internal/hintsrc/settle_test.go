package hintsrc

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
	"github.com/localcloud/localcloud/internal/hintserver"
	"github.com/localcloud/localcloud/notify"
)

// probeOf gives the probe of a SQLite queue, as the engine's tools do.
type probeOf struct{ eq *sqlitequeue.Queue }

func (p probeOf) Probe(ctx context.Context) (engine.Probe, error) {
	return sqlitetools.Probe(ctx, p.eq)
}

// manualRig is a Source on a real embedded server watching one queue
// store, with a subscriber on its subject. The directory is unwatched, so
// the test reports each event by hand with src.changed(dir).
type manualRig struct {
	src *Source
	sub *nats.Subscription
	dir string
	db  *sql.DB // a foreign connection on the store, spec SQL only
}

func newManualRig(t *testing.T, name string) manualRig {
	t.Helper()
	ctx := context.Background()
	srv, err := hintserver.StartServer(ctx, hintserver.ServerOptions{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subject := notify.Subject("test", name)
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	pub := notify.NewPublisher(nc, notify.PublisherOptions{})
	t.Cleanup(pub.Close)
	src, err := New(Options{Publisher: pub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dir := t.TempDir()
	q, eq, err := sqlitetools.OpenQueue(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := src.Add(name, subject, probeOf{eq}); err != nil {
		t.Fatal(err)
	}
	if err := src.byDir[dir].dw.Remove(dir); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitequeue.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return manualRig{src: src, sub: sub, dir: dir, db: db}
}

// TestCommitVisibleLongAfterItsEventIsHinted: inotify reports a foreign
// commit's -wal writes before the commit is visible, and on a loaded
// machine the writer can be descheduled in between for hundreds of
// milliseconds (measured: up to 0.5-1 s with 2 cores and ~20 busy
// processes). No later event comes, so the re-checks after the event must
// reach that far.
func TestCommitVisibleLongAfterItsEventIsHinted(t *testing.T) {
	t.Parallel()
	// From here the directory raises no events, so the commit below is seen
	// only by the re-checks that follow the one event we report by hand.
	r := newManualRig(t, "late")
	r.src.changed(r.dir)
	// The writer's pause between its -wal writes and its commit becoming
	// visible: the scenario itself, not a synchronisation.
	time.Sleep(300 * time.Millisecond)
	now := time.Now().UnixMilli()
	if _, err := r.db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES ('text', 'x', ?1, ?1, 0)`, now); err != nil {
		t.Fatal(err)
	}
	m, err := r.sub.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatalf("no hint for a commit visible 300 ms after its event: %v", err)
	}
	if h, err := notify.ParseHint(m.Data); err != nil || h.Due != 1 {
		t.Fatalf("hint %s (%v), want due 1", m.Data, err)
	}
}

// TestEventRestartsTheReChecks: a directory event while the re-checks of an
// earlier event are still running starts them over at 1 ms. Otherwise a
// commit that becomes visible just after the second event waits for the
// schedule's current step (here the one at ~511 ms after the first event,
// about 200 ms after the commit).
func TestEventRestartsTheReChecks(t *testing.T) {
	t.Parallel()
	// Events are reported by hand from here, so the commit below raises none.
	r := newManualRig(t, "restart")
	r.src.changed(r.dir) // a first event: nothing new, the re-checks start
	// Into the schedule's long steps (the re-checks at ~255 and ~511 ms):
	// the scenario itself, not a synchronisation.
	time.Sleep(300 * time.Millisecond)
	r.src.changed(r.dir) // a second event, for the commit below, not yet visible
	now := time.Now().UnixMilli()
	if _, err := r.db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES ('text', 'x', ?1, ?1, 0)`, now); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	m, err := r.sub.NextMsg(2 * time.Second)
	if err != nil {
		t.Fatalf("no hint: %v", err)
	}
	late := time.Since(committed)
	if h, err := notify.ParseHint(m.Data); err != nil || h.Due != 1 {
		t.Fatalf("hint %s (%v), want due 1", m.Data, err)
	}
	// Restarted, the re-checks look 1, 3, 7 ms after the event; unrestarted,
	// ~200 ms after the commit. 100 ms leaves room for a loaded machine.
	if late > 100*time.Millisecond {
		t.Fatalf("hint %v after the commit: the second event did not restart the re-checks", late)
	}
}

// TestSettleStep: the re-checks come every millisecond at first, then an
// eighth of the wait apart, never more than settleMaxStep, and about 50 of
// them cover settleFor. On a quiet store (fast) they start settleFastStep
// apart and reach the 1 ms steps at 8 ms: about 14 more.
func TestSettleStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		elapsed time.Duration
		fast    bool
		want    time.Duration
	}{
		{0, false, time.Millisecond},
		{5 * time.Millisecond, false, time.Millisecond},
		{20 * time.Millisecond, false, 2500 * time.Microsecond},
		{time.Second, false, 125 * time.Millisecond},
		{10 * time.Second, false, settleMaxStep},
		{0, true, settleFastStep},
		{1600 * time.Microsecond, true, settleFastStep},
		{4 * time.Millisecond, true, 500 * time.Microsecond},
		{8 * time.Millisecond, true, time.Millisecond},
		{time.Second, true, 125 * time.Millisecond},
	} {
		if got := settleStep(c.elapsed, c.fast); got != c.want {
			t.Errorf("settleStep(%v, fast %v) = %v, want %v", c.elapsed, c.fast, got, c.want)
		}
	}
	count := func(fast bool) int {
		n := 0
		for at := time.Duration(0); at < settleFor; at += settleStep(at, fast) {
			n++
		}
		return n
	}
	n, nf := count(false), count(true)
	if n < 30 || n > 60 {
		t.Errorf("%d re-checks cover %v, want 30..60", n, settleFor)
	}
	if extra := nf - n; extra < 8 || extra > 20 {
		t.Errorf("a fast start adds %d re-checks, want 8..20", extra)
	}
	t.Logf("%d re-checks per event, %d after a fast start", n, nf)
}

// TestFastStartOnlyOnQuietStore: an event on a store where no look saw a
// change for settleQuiet starts the fast re-checks (on their goroutine),
// and they find a commit made after the event; an event right after a seen
// change (as in a steady stream of commits) keeps the timer schedule.
func TestFastStartOnlyOnQuietStore(t *testing.T) {
	t.Parallel()
	// Events are reported by hand from here; the directory raises none.
	r := newManualRig(t, "fast")
	w := r.src.byDir[r.dir]
	// start runs an event's settle start as if the last change was ago,
	// and reports whether the fast re-checks took it. Under w.mu, so no
	// re-check runs in between.
	start := func(ago time.Duration) (fast, running bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.changeAt = time.Now().Add(-ago)
		w.startSettle()
		return w.fast, w.fastRun
	}
	if fast, running := start(time.Second); !fast || !running {
		t.Fatalf("an event on a quiet store: fast %v, goroutine running %v, want both", fast, running)
	}
	now := time.Now().UnixMilli()
	if _, err := r.db.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt)
VALUES ('text', 'x', ?1, ?1, 0)`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := r.sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("no hint for a commit after the event: %v", err)
	}
	if fast, _ := start(time.Millisecond); fast {
		t.Fatal("an event 1 ms after a seen change started the fast re-checks")
	}
}

// TestLearnWait: a late library hint lengthens the wait to 1.5 times its
// lag (at most maxCoverWait); hints in time shrink it back to coverWait.
func TestLearnWait(t *testing.T) {
	w := learnWait(coverWait, 10*time.Millisecond)
	if w != 15*time.Millisecond {
		t.Fatalf("after a 10ms lag: %s, want 15ms", w)
	}
	if got := learnWait(w, time.Second); got != maxCoverWait {
		t.Fatalf("after a 1s lag: %s, want the cap %s", got, maxCoverWait)
	}
	for range 200 {
		w = learnWait(w, 100*time.Microsecond)
	}
	if w != coverWait {
		t.Fatalf("after 200 prompt hints: %s, want back at %s", w, coverWait)
	}
}
