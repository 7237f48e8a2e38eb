// Package hintsrc is the hint source of `localcloud up`: it publishes a
// "message available" hint for a queue binding whenever a message of that
// queue becomes due, whoever made it so.
//
// Programs that use localcloud's queue library publish their own hints on
// Send and Nack. Two transitions to "due" have no such publisher, and this
// package covers them:
//
//   - a foreign writer: any process that inserts or updates rows with the
//     spec's SQL on its own SQLite connection. The store directory is watched
//     with inotify (dirwatch.DirWatcher); each event is only a reason to look,
//     confirmed by PRAGMA data_version on one connection kept open per queue
//     (it changes only when another connection committed), then the due
//     messages are counted.
//   - time passing: a lease that ends (its consumer died) or a delayed
//     message coming due. A timer per queue is armed at the earliest future
//     visible_at and re-armed after every change and every firing.
//
// A send through localcloud's queue library is hinted by that library
// alone: its hint names the largest id it inserted, and the Source, which
// subscribes to each queue's subject, publishes nothing for inserts so
// covered (see coverWait).
//
// A hint carries no data and may be lost; the store stays the only truth.
// Coalescing hints under load is the Publisher's job. The database file is
// never opened directly, only through SQLite connections of the queue's own
// handle (closing a stray descriptor would drop SQLite's POSIX locks), and
// inotify holds no descriptor on it.
package hintsrc

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/dirwatch"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/notify"
)

// Tuning of a Source.
const (
	// MaxDueCount caps the due count a hint carries, so counting stays cheap
	// however large the backlog.
	MaxDueCount = 1000

	// queryTimeout bounds each look at a store.
	queryTimeout = 5 * time.Second
)

// Log attribute keys.
const (
	logKeyBinding = "binding"
	logKeyDir     = "dir"
	logKeyErr     = "err"
	logKeyFile    = "file"
)

// Errors returned by this package. Returned errors wrap them with context.
var (
	// ErrClosed means the Source was closed.
	ErrClosed = errors.New("hint source closed")

	// ErrDuplicate means a binding or a store directory is already watched.
	ErrDuplicate = errors.New("already watched")

	// ErrNoDirectory means the queue has no directory to watch (a memory
	// store, which no other process can write anyway, or a store of an
	// engine that wakes its consumers itself). It is engine.ErrNoProbe.
	ErrNoDirectory = engine.ErrNoProbe
)

// The re-checks that follow a directory event. inotify reports a commit's
// writes to the -wal file before the commit is visible to other connections
// (it becomes so when the wal-index in -shm, which raises no event, is
// updated; with synchronous=FULL only after an fsync, a millisecond or, on a
// busy disk, tens of them), and no later event may come. So after an event
// the queue is looked at again and again: each re-check follows the one
// before after an eighth of the time since the event (at least 1 ms, at most
// settleMaxStep), until settleFor has passed without a change. A re-check
// that sees a change starts over, as more commits may be on their way, and
// so does every new event. A commit visible L after its event is so seen at
// most about L/8 later: 1 ms for the first 8 ms, 2.5 ms at 20 ms.
//
// Why steps that grow with the wait: a doubling schedule (1, 2, 4, ... ms)
// found a commit that became visible 9 ms after its event only at 15 ms;
// with a random 20-300 ms writer on synchronous=FULL that was a p99 of 12 ms.
// Why so far: on a loaded machine the writer can be descheduled between its
// -wal writes and the wal-index update. Measured with 2 cores and ~20 busy
// processes, commits became visible up to 0.5-1 s after their event;
// re-checks that stopped at 31 ms lost those hints. Past ~1 s a consumer's
// default fallback poll (1 s) has looked anyway. A re-check is one PRAGMA
// data_version on a connection already open (tens of microseconds); the
// about 50 re-checks of one event cost about a millisecond of CPU.
//
// The first re-checks after an event on a quiet store come faster. The
// event that starts a lone commit's re-checks is the write of its first
// -wal frame; the commit becomes visible 0.1-0.5 ms later with
// synchronous=NORMAL (after its last frame), with FULL after the fsync (a
// millisecond or more), and the DirWatcher holds back the events of the
// frames that follow for its 1 ms window. With 1 ms as the first step the
// hint came 1.8 ms (p50, foreign-writer benchmark) after a NORMAL commit
// returned. So when no look has seen a change for settleQuiet, the
// re-checks start settleFastStep apart (then an eighth of the wait, as
// above) until one sees the change or the steps reach settleMinStep (8 ms
// after the event), where the timer schedule above takes over: about 22
// looks instead of 8 in those 8 ms, each a data_version on the open
// connection (20-60 us). They run on a goroutine of their own that sleeps
// with nanosleep (preciseSleep): a Go timer shorter than a millisecond
// fires after about a millisecond in a process with nothing else to do (the
// runtime waits in epoll_wait, whose timeout is in whole milliseconds). Under
// a steady stream of commits (a change seen at least every settleQuiet) the
// schedule stays as above, so a busy store costs no more looks than before;
// an idle one costs none.
const (
	settleFor      = 1024 * time.Millisecond
	settleMinStep  = time.Millisecond
	settleMaxStep  = 128 * time.Millisecond
	settleFraction = 8

	settleQuiet    = 10 * time.Millisecond
	settleFastStep = 200 * time.Microsecond
)

// settleStep is the delay of the next re-check, elapsed after the event;
// fast: the event came to a quiet store and no re-check saw its change yet.
func settleStep(elapsed time.Duration, fast bool) time.Duration {
	least := settleMinStep
	if fast {
		least = settleFastStep
	}
	return min(max(elapsed/settleFraction, least), settleMaxStep)
}

// A library's own hint covers its inserts. localcloud's queue library
// publishes a hint after every Send carrying the largest id it inserted
// (notify.Hint.LastID); ids of the spec's AUTOINCREMENT table grow in commit
// order, so that hint follows every insert up to that id, foreign ones
// included. The Source subscribes to each queue's subject and remembers the
// largest such id (never more than the store's own sqlite_sequence when the
// hint arrives, so a stray hint cannot silence later inserts); a look that
// finds only inserts so covered publishes nothing. The library's hint
// usually arrives first (its commit is visible before the hint; the -wal
// event is seen before the commit is). When the look comes first and a
// library hint came within libRecent, the Source's hint waits up to
// coverWait for the library's: a foreign insert in a queue that a library
// also sends to is hinted coverWait late; one in a queue only foreign
// writers use, at once. On a loaded machine (or under the race detector) a
// library's hint can come later than coverWait, and the Source would then
// publish a second hint for every send; so each queue learns the wait from
// the library hints it saw: 1.5 times the latest lag from a held look to the
// hint that covered it (also when that hint came after the wait ran out),
// at most maxCoverWait, shrinking back toward coverWait by an eighth of the
// difference per covered hold when hints come in time again.
const (
	coverWait    = 3 * time.Millisecond // > the library's 2 ms coalescing window
	maxCoverWait = 25 * time.Millisecond
	libRecent    = 10 * time.Second
)

// learnWait returns the next wait after a held look was covered lag later.
func learnWait(wait, lag time.Duration) time.Duration {
	want := lag * 3 / 2
	if want > wait {
		return min(want, maxCoverWait)
	}
	return max(coverWait, wait-(wait-want)/8)
}

// Options configures a Source.
type Options struct {
	// Publisher publishes the hints. Required. The Source does not close it.
	Publisher *notify.Publisher

	// Logger receives store and watcher errors. Defaults to discarding them.
	Logger *slog.Logger
}

// Source watches queues and publishes their hints. Its methods are safe for
// concurrent use.
type Source struct {
	pub *notify.Publisher
	log *slog.Logger

	mu        sync.Mutex
	dws       map[string]*dirwatch.DirWatcher // by the database file's base name
	byBinding map[string]*watched
	byDir     map[string]*watched
	closed    bool
}

// New starts a Source with no queues; add them with Add.
func New(opts Options) (*Source, error) {
	if opts.Publisher == nil {
		return nil, errors.New("new hint source: Publisher is nil")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Source{pub: opts.Publisher, log: log, dws: map[string]*dirwatch.DirWatcher{},
		byBinding: map[string]*watched{}, byDir: map[string]*watched{}}, nil
}

// Prober gives the Probe of one queue: engine.Handle does.
type Prober interface {
	Probe(ctx context.Context) (engine.Probe, error)
}

// Add starts publishing hints on subject for the queue of binding, watched
// through the probe q gives (its engine's own connection, held for as long
// as the queue is watched), and publishes a first hint if messages are
// already due. q must stay open until Remove or Close. A queue whose
// engine has no probe (a memory store, a store on a server) is
// ErrNoDirectory.
func (s *Source) Add(binding, subject string, q Prober) error {
	if binding == "" || subject == "" || q == nil {
		return fmt.Errorf("add %q to hint source: binding, subject and queue are required", binding)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("add %q to hint source: %w", binding, ErrClosed)
	}
	if _, ok := s.byBinding[binding]; ok {
		return fmt.Errorf("add %q to hint source: binding %w", binding, ErrDuplicate)
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	conn, err := q.Probe(ctx)
	if err != nil {
		return fmt.Errorf("add %q to hint source: take a connection: %w", binding, err)
	}
	dir := filepath.Clean(conn.Dir())
	if other, ok := s.byDir[dir]; ok {
		_ = conn.Close()
		return fmt.Errorf("add %q to hint source: directory %s %w by binding %q", binding, dir, ErrDuplicate, other.binding)
	}
	dw, err := s.watcher(conn.File())
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("add %q to hint source: %w", binding, err)
	}
	w := &watched{src: s, binding: binding, subject: subject, dir: dir, conn: conn, dw: dw}
	// Without the subscription the Source hints every insert itself, as a
	// library's hint is then never known to cover one.
	sub, err := s.pub.Conn().Subscribe(subject, w.hinted)
	if err != nil {
		s.log.Warn("hint source: subscribe to the library's hints; publishing a hint of its own for every send", logKeyBinding, binding, logKeyErr, err)
	}
	w.sub = sub
	// Watch first, then read the baseline: a commit in between is seen by
	// the first look (its data_version differs) or reported by an event.
	if err := dw.Add(dir); err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		_ = conn.Close()
		return fmt.Errorf("add %q to hint source: %w", binding, err)
	}
	s.byBinding[binding] = w
	s.byDir[dir] = w
	w.mu.Lock()
	w.look(true)
	w.mu.Unlock()
	return nil
}

// watcher returns the directory watcher of database files named name,
// started on first use. Called with s.mu held.
func (s *Source) watcher(name string) (*dirwatch.DirWatcher, error) {
	if dw := s.dws[name]; dw != nil {
		return dw, nil
	}
	dw, err := dirwatch.NewDirWatcher(dirwatch.DirWatcherOptions{
		Name:    name,
		Changed: s.changed,
		Gone:    s.gone,
		Logger:  s.log,
	})
	if err != nil {
		return nil, err
	}
	s.dws[name] = dw
	return dw, nil
}

// Remove stops publishing hints for binding and gives its connection back
// to the queue's pool. Removing a binding that is not watched does nothing.
func (s *Source) Remove(binding string) {
	s.mu.Lock()
	w, ok := s.byBinding[binding]
	if ok {
		delete(s.byBinding, binding)
		delete(s.byDir, w.dir)
		if err := w.dw.Remove(w.dir); err != nil {
			s.log.Warn("hint source: unwatch directory", logKeyBinding, binding, logKeyDir, w.dir, logKeyErr, err)
		}
	}
	s.mu.Unlock()
	if ok {
		w.close()
	}
}

// Close stops the Source: no hint is published after it returns. It does
// not close the Publisher or the queues. Safe to call more than once.
func (s *Source) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	all := make([]*watched, 0, len(s.byBinding))
	for _, w := range s.byBinding {
		all = append(all, w)
	}
	s.byBinding, s.byDir = map[string]*watched{}, map[string]*watched{}
	dws := s.dws
	s.dws = map[string]*dirwatch.DirWatcher{}
	s.mu.Unlock()
	for _, dw := range dws {
		if err := dw.Close(); err != nil { // waits for a running callback
			s.log.Warn("hint source: close directory watcher", logKeyErr, err)
		}
	}
	for _, w := range all {
		w.close()
	}
}

// changed is the DirWatcher's callback: something was written in dir.
func (s *Source) changed(dir string) {
	s.mu.Lock()
	w := s.byDir[dir]
	s.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.look(false)
	// The commit behind this event may not be visible yet.
	w.startSettle()
}

// gone is the DirWatcher's callback for a store file or directory that
// went away.
func (s *Source) gone(dir, name string) {
	s.mu.Lock()
	w := s.byDir[dir]
	s.mu.Unlock()
	if w != nil {
		s.log.Warn("hint source: store removed or renamed; no more hints for it until it is added again", logKeyBinding, w.binding, logKeyDir, dir, logKeyFile, name)
	}
}

// watched is one queue of a Source.
type watched struct {
	src     *Source
	binding string
	subject string
	dir     string

	mu       sync.Mutex   // guards everything below; held while looking
	conn     engine.Probe // dedicated connection: data_version is per connection
	dw       *dirwatch.DirWatcher
	version  int64
	known    bool        // version was read
	next     int64       // visible_at the timer is armed for; 0: none
	timer    *time.Timer // fires at next
	settle   *time.Timer // the next re-check after an event
	settling bool        // settle is armed
	from     time.Time   // the event or change the re-checks count from
	fast     bool        // the re-checks are in their fast start (settleStep), run by fastRechecks
	fastRun  bool        // fastRechecks runs
	changeAt time.Time   // when a look last saw another connection's commit
	fastWG   sync.WaitGroup
	closed   bool
	failures int // consecutive failed looks, to log only the first

	sub      *nats.Subscription // the subject's hints; nil if subscribing failed
	lastID   int64              // sqlite_sequence of messages at the last look
	lastIDOK bool               // lastID was read
	covered  int64              // inserts up to this id are covered by a library hint
	libAt    time.Time          // when the last library hint (with an id) came
	grace    *time.Timer        // publishes a held hint after coverWait
	holding  bool               // a hint for inserts up to heldID waits for the library's
	heldID   int64
	heldDue  int64
	wait     time.Duration // how long a held hint waits (learnWait); 0: coverWait
	holdAt   time.Time     // when the last hold began
	learnID  int64         // heldID of the last hold until a library hint covers it, then 0
}

// look checks the store. Unless force, it goes on only if another
// connection committed since the last look (reported as changed). Then it
// publishes a hint if messages are due and re-arms the timer at the earliest
// future visible_at. Called with w.mu held.
func (w *watched) look(force bool) (changed bool) {
	if w.closed {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	if !force {
		v, err := w.conn.DataVersion(ctx)
		if err != nil {
			w.failed("read data_version", err)
			return false
		}
		if w.known && v == w.version {
			return false // nothing committed by another connection
		}
		w.version, w.known, changed = v, true, true
		w.changeAt = time.Now()
	} else if !w.known {
		v, err := w.conn.DataVersion(ctx)
		if err != nil {
			w.failed("read data_version", err)
			return false
		}
		w.version, w.known = v, true
	}
	now := time.Now().UnixMilli()
	due, err := w.conn.CountDue(ctx, now, MaxDueCount)
	if err != nil {
		w.failed("count due messages", err)
		return changed
	}
	prev, prevOK := w.lastID, w.lastIDOK
	w.lastID, w.lastIDOK = w.readLastID(ctx)
	if due > 0 {
		if !force && changed && prevOK && w.lastIDOK && w.lastID > prev {
			w.inserted(due)
		} else {
			w.publish(due)
		}
	}
	next, err := w.conn.NextVisible(ctx, now)
	if err != nil {
		w.failed("find the next visible_at", err)
		return changed
	}
	w.failures = 0
	w.arm(next)
	return changed
}

// readLastID reads the largest message id ever inserted (0: none yet).
// Called with w.mu held.
func (w *watched) readLastID(ctx context.Context) (int64, bool) {
	id, err := w.conn.LastID(ctx)
	return id, err == nil
}

// inserted publishes the hint of a look that found new messages up to
// w.lastID (and due ones), unless a library hint covers them or may soon.
// Called with w.mu held.
func (w *watched) inserted(due int64) {
	switch {
	case w.lastID <= w.covered:
		// The library's hint came already.
	case time.Since(w.libAt) < libRecent:
		w.heldID, w.heldDue = max(w.heldID, w.lastID), due
		w.learnID = w.heldID
		if !w.holding {
			w.holding = true
			w.holdAt = time.Now()
			if w.wait == 0 {
				w.wait = coverWait
			}
			if w.grace == nil {
				w.grace = time.AfterFunc(w.wait, w.graceOver)
			} else {
				w.grace.Reset(w.wait)
			}
		}
	default:
		w.publish(due)
	}
}

// publish publishes a hint now; it covers a held one. Called with w.mu held.
func (w *watched) publish(due int64) {
	w.src.pub.Notify(w.subject, due)
	if w.holding {
		w.holding = false
		w.grace.Stop()
	}
}

// graceOver publishes the held hint: no library hint covered it in time.
func (w *watched) graceOver() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.holding {
		return
	}
	w.holding = false
	w.src.pub.Notify(w.subject, w.heldDue)
}

// hinted receives every hint on the queue's subject, the Source's own
// included; those of a library (with a LastID) cover its inserts.
func (w *watched) hinted(m *nats.Msg) {
	h, err := notify.ParseHint(m.Data)
	if err != nil || h.LastID <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	// A hint follows its commit, so an honest LastID is never above the
	// store's; a larger one is capped there.
	seq, ok := w.readLastID(ctx)
	if !ok {
		return
	}
	w.covered = max(w.covered, min(h.LastID, seq))
	w.libAt = time.Now()
	if w.learnID > 0 && w.learnID <= w.covered {
		w.wait = learnWait(max(w.wait, coverWait), w.libAt.Sub(w.holdAt))
		w.learnID = 0
	}
	if w.holding && w.heldID <= w.covered {
		w.holding = false
		w.grace.Stop()
	}
}

// arm sets the timer for next (null: none).
func (w *watched) arm(next sql.NullInt64) {
	if !next.Valid {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.next = 0
		return
	}
	if next.Int64 == w.next && w.timer != nil {
		return // already armed for it (a stopped timer is re-armed below only when next moves)
	}
	w.next = next.Int64
	d := time.Until(time.UnixMilli(next.Int64))
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
	} else {
		w.timer.Reset(d)
	}
}

// fire runs when the earliest known visible_at is reached.
func (w *watched) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = 0
	w.look(true)
}

// startSettle starts the re-checks after an event, or starts them over at
// 1 ms when they run already: the commit behind this event is a new one,
// and waiting for the current step (up to settleMaxStep) would make its hint
// late. Called with w.mu held.
func (w *watched) startSettle() {
	if w.closed {
		return
	}
	now := time.Now()
	w.settling, w.from = true, now
	// A change seen just now (by the look of this event) needs no fast start.
	w.fast = now.Sub(w.changeAt) >= settleQuiet
	if !w.fast {
		w.armStep()
		return
	}
	if w.settle != nil {
		w.settle.Stop() // fastRechecks arms it when it is done
	}
	if !w.fastRun {
		w.fastRun = true
		w.fastWG.Add(1)
		go w.fastRechecks()
	}
}

func (w *watched) armStep() {
	d := settleStep(time.Since(w.from), false)
	if w.settle == nil {
		w.settle = time.AfterFunc(d, w.recheck)
		return
	}
	w.settle.Reset(d)
}

// fastRechecks runs the fast start of the re-checks (see settleStep) until
// one sees a change or the steps reach settleMinStep, then hands the
// schedule to the timer. An event meanwhile moves w.from, and so the
// steps, back to the start.
func (w *watched) fastRechecks() {
	defer w.fastWG.Done()
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { w.fastRun = false }()
	for !w.closed && w.fast {
		d := settleStep(time.Since(w.from), true)
		if d >= settleMinStep {
			w.fast = false
			w.armStep()
			return
		}
		w.mu.Unlock()
		preciseSleep(d)
		w.mu.Lock()
		if w.closed || !w.fast {
			return // closed, or an event's look saw a change and armed the timer
		}
		if w.look(false) {
			w.from, w.fast = time.Now(), false
			w.armStep()
			return
		}
	}
}

// recheck is one settle re-check of the timer schedule.
func (w *watched) recheck() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.settling || w.fast {
		return // fastRechecks has the schedule
	}
	if w.look(false) {
		w.from = time.Now()
	} else if time.Since(w.from) >= settleFor {
		w.settling = false
		return
	}
	w.armStep()
}

func (w *watched) failed(what string, err error) {
	w.failures++
	if w.failures == 1 {
		w.src.log.Warn("hint source: "+what, logKeyBinding, w.binding, logKeyDir, w.dir, logKeyErr, err)
	}
}

// close stops the timers and the fast re-checks and returns the connection
// to the pool.
func (w *watched) close() {
	if w.sub != nil {
		_ = w.sub.Unsubscribe() // outside w.mu: a running hinted may hold it
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.settle != nil {
		w.settle.Stop()
	}
	if w.grace != nil {
		w.grace.Stop()
	}
	w.mu.Unlock()
	w.fastWG.Wait() // it sees closed within one step; it must not look at a returned connection
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.conn.Close(); err != nil {
		w.src.log.Warn("hint source: release connection", logKeyBinding, w.binding, logKeyErr, err)
	}
}
