package notify

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

const (
	// DefaultWindow is the Publisher's coalescing window per subject.
	DefaultWindow = 2 * time.Millisecond

	// DefaultReconnectWait is the pause between reconnect attempts of the connections this
	// package dials (DialPublisher, Watch).
	DefaultReconnectWait = 250 * time.Millisecond

	// closeFlushTimeout bounds the wait in Publisher.Close for the server to take pending hints.
	closeFlushTimeout = time.Second

	// reconnectBufSize is what a dialed connection buffers while reconnecting; hints are ~60
	// bytes, and older ones are worthless once a newer one is queued.
	reconnectBufSize = 256 * 1024
)

// PublisherOptions configures a Publisher.
type PublisherOptions struct {
	// Window is the shortest time between two hints on one subject. A call to Notify publishes at
	// once when the subject's last hint is at least Window old; otherwise it folds into one hint
	// published at the end of the window. A negative Window publishes on every call. Defaults to
	// DefaultWindow (2 ms).
	Window time.Duration

	// Logger receives publish failures at debug level. Defaults to discarding them.
	Logger *slog.Logger
}

// PublisherStats counts what a Publisher did. Notified = Published + Failed + Coalesced, once
// no hint is pending.
type PublisherStats struct {
	Notified  uint64 // calls to Notify before Close
	Published uint64 // hints handed to the NATS connection
	Failed    uint64 // hints the connection refused (closed, reconnect buffer full)
	Coalesced uint64 // calls folded into a hint published for another call
}

// Publisher publishes hints, coalescing them per subject (see the package doc). It is safe for
// concurrent use.
type Publisher struct {
	nc     *nats.Conn
	owned  bool // Close closes nc
	window time.Duration
	log    *slog.Logger

	mu       sync.Mutex
	closed   bool
	subjects map[string]*subjectState
	inflight sync.WaitGroup // publishes decided under mu, not yet handed to nc

	notified  atomic.Uint64
	published atomic.Uint64
	failed    atomic.Uint64
	coalesced atomic.Uint64
}

// subjectState is one subject's coalescing state, guarded by Publisher.mu.
type subjectState struct {
	subject string
	last    time.Time   // when the last hint was decided; zero before the first
	pending bool        // a trailing hint is scheduled
	due     int64       // Due of the latest call, published by the trailing hint
	lastID  int64       // largest LastID of the calls folded into the trailing hint
	timer   *time.Timer // fires the trailing hint
}

// NewPublisher returns a Publisher that publishes on nc. Close does not close nc.
func NewPublisher(nc *nats.Conn, opts PublisherOptions) *Publisher {
	window := opts.Window
	if window == 0 {
		window = DefaultWindow
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{nc: nc, window: window, log: log, subjects: make(map[string]*subjectState)}
}

// DialPublisher connects to url and returns a Publisher that owns the connection. The
// connection reconnects forever, every DefaultReconnectWait, and does not fail when the server
// is not up yet; hints published while disconnected are buffered (up to 256 KiB) and sent on
// reconnect. With FollowRuntime, url may be "" and every (re)connection goes to the server the
// runtime file names then.
func DialPublisher(url, token string, opts PublisherOptions, dial ...DialOption) (*Publisher, error) {
	u, o, err := dialOptions(url, token, dial)
	if err == nil && u == "" {
		err = errNoURL
	}
	if err != nil {
		return nil, fmt.Errorf("connect hint publisher to %s: %w", url, err)
	}
	nc, err := nats.Connect(u, o...)
	if err != nil {
		return nil, fmt.Errorf("connect hint publisher to %s: %w", url, err)
	}
	p := NewPublisher(nc, opts)
	p.owned = true
	return p, nil
}

// Notify reports that the queue behind subject has a message available; due is the number of
// due messages, or DueUnknown. The hint is published now if the subject's last hint is at least
// one window old, otherwise at the end of that window with the due value of the latest call.
// Either way a hint is published after this call. Notify never blocks on the network. After
// Close it does nothing.
func (p *Publisher) Notify(subject string, due int64) { p.notify(subject, due, 0) }

// NotifySent is Notify for sends whose largest inserted message id is lastID: the hint
// carries it as Hint.LastID (the largest of the calls it reports), so that `localcloud up`
// knows the hint covers those inserts.
func (p *Publisher) NotifySent(subject string, due, lastID int64) {
	p.notify(subject, due, max(lastID, 0))
}

func (p *Publisher) notify(subject string, due, lastID int64) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.notified.Add(1)
	st := p.subjects[subject]
	if st == nil {
		st = &subjectState{subject: subject}
		p.subjects[subject] = st
	}
	st.due = due
	st.lastID = max(st.lastID, lastID)
	if st.pending {
		p.mu.Unlock()
		p.coalesced.Add(1)
		return
	}
	now := time.Now()
	if !st.last.IsZero() && p.window > 0 {
		if wait := p.window - now.Sub(st.last); wait > 0 {
			st.pending = true
			if st.timer == nil {
				st.timer = time.AfterFunc(wait, func() { p.fire(st) })
			} else {
				st.timer.Reset(wait)
			}
			p.mu.Unlock()
			return
		}
	}
	st.last = now
	lastID, st.lastID = st.lastID, 0
	p.inflight.Add(1)
	p.mu.Unlock()
	p.publish(subject, due, lastID)
	p.inflight.Done()
}

// fire publishes a subject's trailing hint.
func (p *Publisher) fire(st *subjectState) {
	p.mu.Lock()
	if !st.pending || p.closed {
		p.mu.Unlock()
		return
	}
	st.pending = false
	st.last = time.Now()
	due, lastID := st.due, st.lastID
	st.lastID = 0
	p.inflight.Add(1)
	p.mu.Unlock()
	p.publish(st.subject, due, lastID)
	p.inflight.Done()
}

func (p *Publisher) publish(subject string, due, lastID int64) {
	_, binding, _ := ParseSubject(subject)
	data, err := json.Marshal(Hint{Binding: binding, Due: due, At: time.Now().UnixMilli(), LastID: lastID})
	if err == nil {
		err = p.nc.Publish(subject, data)
	}
	if err != nil {
		p.failed.Add(1)
		p.log.Debug("publish hint", "subject", subject, "err", err)
		return
	}
	p.published.Add(1)
}

// Conn returns the NATS connection the Publisher publishes on.
func (p *Publisher) Conn() *nats.Conn { return p.nc }

// Stats returns the counters so far.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Notified:  p.notified.Load(),
		Published: p.published.Load(),
		Failed:    p.failed.Load(),
		Coalesced: p.coalesced.Load(),
	}
}

// Close publishes every pending trailing hint at once, waits up to a second for the server to
// acknowledge them, and closes the connection if DialPublisher opened it. It is safe to call
// more than once.
func (p *Publisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	type pendingHint struct {
		subject     string
		due, lastID int64
	}
	var flush []pendingHint
	for _, st := range p.subjects {
		if st.timer != nil {
			st.timer.Stop()
		}
		if st.pending {
			st.pending = false
			flush = append(flush, pendingHint{st.subject, st.due, st.lastID})
			st.lastID = 0
		}
	}
	p.mu.Unlock()

	for _, h := range flush {
		p.publish(h.subject, h.due, h.lastID)
	}
	p.inflight.Wait()
	if p.nc.IsConnected() {
		if err := p.nc.FlushTimeout(closeFlushTimeout); err != nil {
			p.log.Debug("flush hints on close", "err", err)
		}
	}
	if p.owned {
		p.nc.Close()
	}
}
