package explorer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/supervisor"
	"github.com/localcloud/localcloud/notify"
)

// Event kinds of the live feed.
const (
	KindHint       = "hint"       // a wake-up hint was published for a queue
	KindSent       = "sent"       // a queue's total grew (count delta)
	KindReceived   = "received"   // a queue's leased messages grew: received (count delta)
	KindRemoved    = "removed"    // a queue's total shrank: acked, purged or moved out (count delta)
	KindDeadLetter = "deadLetter" // dead letters arrived in a queue (count delta)
	KindKeys       = "keys"       // a KV store's live keys changed (count delta)
	KindHealth     = "health"     // a binding's health changed
	KindAction     = "action"     // a change made through the explorer
	KindStats      = "stats"      // a binding's counts changed: Stats holds them
)

// Event is one entry of the live feed, sent as the data of one
// Server-Sent Event (JSON).
type Event struct {
	ID      int64  `json:"id"`
	Kind    string `json:"kind"`
	Binding string `json:"binding,omitempty"`
	At      int64  `json:"at"` // unix ms
	// Count is the size of a count delta; 0 for other kinds.
	Count int64  `json:"count,omitempty"`
	Text  string `json:"text"`
	// Stats is the binding with its counts, for KindStats.
	Stats *bindingJSON `json:"stats,omitempty"`
}

const (
	clientBuffer = 256
	historySize  = 200
	keepAlive    = 15 * time.Second
	// idlePollInterval is how often the counts are read while no tab
	// listens: the activity is recorded always, so a tab opened later
	// shows it, at a lower rate than a listener gets.
	idlePollInterval = time.Second
)

// feed turns what up observes into events: hints from the embedded NATS
// server, and the counts and health of every binding, read every
// PollInterval while a client listens, every idlePollInterval otherwise
// (and at once after a hint). up sees the files, not the calls, so sends,
// receives and acks are count deltas between two reads: several changes
// between two reads show as their sum. The last historySize activity
// events (not hints, not stats) are kept from up's start on, so a tab
// opened later shows what happened; one user action is one row.
type feed struct {
	s *Server

	mu      sync.Mutex
	clients map[chan Event]struct{}
	history []Event // the last historySize activity events (not hints, not stats)
	nextID  int64
	prev    map[string]bindingJSON // the last counts read
	// acted marks the bindings an explorer action just changed, with the
	// number of reads begun before it: its row says what happened, so the
	// count deltas there are not rows of their own until a read that began
	// after the action (and so saw all of it) has been compared.
	acted map[string]uint64
	// polls counts the reads begun (guarded by mu).
	polls uint64
	// busy counts the explorer actions under way per binding: a read
	// while one writes makes no rows there either.
	busy     map[string]int
	lastPoll time.Time // when the last read began (guarded by mu)
	// pollTook is how long the last read took: without a listener the
	// reads are at least 10 times that apart (a stack of thousands of
	// bindings is read less often, at most a tenth of one core).
	pollTook time.Duration

	poke      chan struct{}
	startOnce sync.Once
	stopOnce  sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	sub       *nats.Subscription
}

func newFeed(s *Server) *feed {
	ctx, cancel := context.WithCancel(context.Background())
	return &feed{s: s, clients: map[chan Event]struct{}{}, prev: map[string]bindingJSON{}, acted: map[string]uint64{}, busy: map[string]int{},
		poke: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
}

// start subscribes to the hints and starts the poll loop. Idempotent.
func (f *feed) start() {
	f.startOnce.Do(func() {
		if nc := f.s.opts.Conn; nc != nil {
			stack := f.s.opts.Source.Runtime().Stack
			sub, err := nc.Subscribe(notify.Subject(stack, "*"), f.onHint)
			if err != nil {
				f.s.log.Warn("explorer: no hints in the live feed", "err", err)
			} else {
				f.sub = sub
			}
		}
		// The first read at once: the counts it finds are the baseline the
		// activity is measured from.
		f.poke <- struct{}{}
		f.wg.Add(1)
		go f.loop()
	})
}

func (f *feed) stop() {
	f.stopOnce.Do(func() {
		f.startOnce.Do(func() {}) // a feed never started stays stopped
		if f.sub != nil {
			_ = f.sub.Unsubscribe()
		}
		f.cancel()
		f.wg.Wait()
	})
}

func (f *feed) onHint(m *nats.Msg) {
	_, binding, ok := notify.ParseSubject(m.Subject)
	if !ok {
		return
	}
	text := "wake-up hint"
	if h, err := notify.ParseHint(m.Data); err == nil && h.Due >= 0 {
		text = fmt.Sprintf("wake-up hint: %d due", h.Due)
	}
	f.emit(Event{Kind: KindHint, Binding: binding, Text: text})
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// hint publishes a wake-up hint for a queue the explorer just filled, as a
// library sender does (up's hint source would see the write too, later).
func (f *feed) hint(b supervisor.RuntimeBinding) {
	f.mu.Lock()
	f.acted[b.Name] = f.polls
	f.mu.Unlock()
	nc := f.s.opts.Conn
	if nc == nil || b.Subject == "" {
		return
	}
	data, _ := json.Marshal(notify.Hint{Binding: b.Name, Due: notify.DueUnknown, At: time.Now().UnixMilli()})
	if err := nc.Publish(b.Subject, data); err != nil {
		f.s.log.Debug("explorer: publish hint", "binding", b.Name, "err", err)
	}
}

// begin marks an explorer action on binding under way, until the
// returned func is called (after action): the reads meanwhile make no
// count-delta rows there, the action's own row says what changed.
func (f *feed) begin(binding string) (end func()) {
	f.mu.Lock()
	f.busy[binding]++
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		if f.busy[binding]--; f.busy[binding] <= 0 {
			delete(f.busy, binding)
		}
		f.mu.Unlock()
	}
}

// action records a change made through the explorer.
func (f *feed) action(binding, kind, text string) {
	f.mu.Lock()
	f.acted[binding] = f.polls
	f.mu.Unlock()
	f.emit(Event{Kind: KindAction, Binding: binding, Text: text})
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

func (f *feed) emit(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	e.ID = f.nextID
	if e.At == 0 {
		e.At = time.Now().UnixMilli()
	}
	if e.Kind != KindStats && e.Kind != KindHint {
		f.history = append(f.history, e)
		if len(f.history) > historySize {
			f.history = f.history[len(f.history)-historySize:]
		}
	}
	for c := range f.clients {
		select {
		case c <- e:
		default: // a slow client loses events, never blocks the feed
		}
	}
}

func (f *feed) loop() {
	defer f.wg.Done()
	t := time.NewTicker(f.s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
			f.mu.Lock()
			idle := len(f.clients) == 0 && time.Since(f.lastPoll) < max(idlePollInterval, 10*f.pollTook)
			f.mu.Unlock()
			if idle {
				continue
			}
		case <-f.poke:
		}
		start := time.Now()
		f.poll()
		f.mu.Lock()
		f.lastPoll, f.pollTook = start, time.Since(start)
		f.mu.Unlock()
	}
}

// poll reads every binding and emits what changed since the last read.
func (f *feed) poll() {
	ctx, cancel := context.WithTimeout(f.ctx, opTimeout)
	defer cancel()
	seen := map[string]bool{}
	f.mu.Lock()
	f.polls++
	started := f.polls
	f.mu.Unlock()
	all := f.s.allBindings(ctx)
	// Which bindings an action changed, looked at after the read: an
	// action whose change this read saw had begun (busy) before it, so it
	// is still busy or has marked acted by now. A mark made before this
	// read began is spent by it; a later one waits for the next read,
	// which may be the first to see the change.
	f.mu.Lock()
	acted := map[string]bool{}
	for name, at := range f.acted {
		acted[name] = true
		if at < started {
			delete(f.acted, name)
		}
	}
	for name := range f.busy {
		acted[name] = true
	}
	f.mu.Unlock()
	for _, b := range all {
		seen[b.Name] = true
		p, had := f.prev[b.Name]
		f.prev[b.Name] = b
		if !had {
			f.emit(Event{Kind: KindStats, Binding: b.Name, Stats: &b})
			continue
		}
		if acted[b.Name] {
			// The explorer's action row says what changed.
			if !sameCounts(p, b) {
				f.emit(Event{Kind: KindStats, Binding: b.Name, Stats: &b})
			}
			continue
		}
		changed := false
		if p.Health != b.Health {
			changed = true
			f.emit(Event{Kind: KindHealth, Binding: b.Name, Text: "health: " + b.Health})
		}
		if p.Queue != nil && b.Queue != nil {
			pq, q := p.Queue, b.Queue
			dDL := q.DeadLetters - pq.DeadLetters
			dTotal := q.Total - pq.Total
			if dDL > 0 {
				f.emit(Event{Kind: KindDeadLetter, Binding: b.Name, Count: dDL, Text: fmt.Sprintf("%d dead letter(s) arrived", dDL)})
			}
			if sent := dTotal - max(dDL, 0); sent > 0 {
				f.emit(Event{Kind: KindSent, Binding: b.Name, Count: sent, Text: fmt.Sprintf("%d message(s) sent", sent)})
			} else if dTotal < 0 {
				f.emit(Event{Kind: KindRemoved, Binding: b.Name, Count: -dTotal, Text: fmt.Sprintf("%d message(s) acked, purged or moved out", -dTotal)})
			}
			if dTotal >= 0 {
				// Leased messages grew with no message gone: received.
				if got := q.InFlight - pq.InFlight; got > 0 {
					f.emit(Event{Kind: KindReceived, Binding: b.Name, Count: got, Text: fmt.Sprintf("%d message(s) received", got)})
				}
			}
			changed = changed || !sameQueueCounts(pq, q)
		}
		if p.KV != nil && b.KV != nil {
			if d := b.KV.Live - p.KV.Live; d != 0 {
				f.emit(Event{Kind: KindKeys, Binding: b.Name, Count: abs(d), Text: fmt.Sprintf("%+d live key(s)", d)})
			}
			changed = changed || *p.KV != *b.KV
		}
		if (p.Queue == nil) != (b.Queue == nil) || (p.KV == nil) != (b.KV == nil) || p.CountError != b.CountError {
			changed = true
		}
		if changed {
			f.emit(Event{Kind: KindStats, Binding: b.Name, Stats: &b})
		}
	}
	for name := range f.prev {
		if !seen[name] {
			delete(f.prev, name)
			f.emit(Event{Kind: KindHealth, Binding: name, Text: "no longer served (removed from the stack file)"})
		}
	}
}

// sameCounts reports whether a binding's counts and health are unchanged.
func sameCounts(p, b bindingJSON) bool {
	switch {
	case p.Health != b.Health || p.CountError != b.CountError || (p.Queue == nil) != (b.Queue == nil) || (p.KV == nil) != (b.KV == nil):
		return false
	case p.Queue != nil && !sameQueueCounts(p.Queue, b.Queue):
		return false
	case p.KV != nil && *p.KV != *b.KV:
		return false
	}
	return true
}

// sameQueueCounts compares the counts, not the age (which grows by itself).
func sameQueueCounts(a, b *queueStatsJSON) bool {
	return a.Due == b.Due && a.Delayed == b.Delayed && a.InFlight == b.InFlight && a.Total == b.Total &&
		a.DeadLetters == b.DeadLetters && a.Moving == b.Moving && a.Oldest == b.Oldest
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// serve streams the feed as Server-Sent Events: first the recent activity
// since up started (up to 200 events, hints left out), then every event as
// it happens (hints too).
func (f *feed) serve(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, &httpError{status: http.StatusInternalServerError, msg: "events: streaming not supported"})
		return
	}
	f.start()
	c := make(chan Event, clientBuffer)
	f.mu.Lock()
	history := append([]Event(nil), f.history...)
	f.clients[c] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.clients, c)
		f.mu.Unlock()
	}()
	select { // a fresh listener gets every binding's counts at once
	case f.poke <- struct{}{}:
	default:
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 1000\n\n")
	for _, e := range history {
		writeEvent(w, e)
	}
	fl.Flush()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-f.ctx.Done():
			return
		case <-ping.C:
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
		case e := <-c:
			writeEvent(w, e)
		}
		fl.Flush()
	}
}

func writeEvent(w http.ResponseWriter, e Event) {
	data, _ := json.Marshal(e)
	// JSON never holds a raw line break, so one data line carries it.
	_, _ = fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.ID, strings.ReplaceAll(string(data), "\n", ""))
}
