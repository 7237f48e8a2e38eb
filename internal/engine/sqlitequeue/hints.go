package sqlitequeue

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/notify"
)

// Log attribute keys of this package.
const (
	logKeyErr     = "err"
	logKeyStore   = "store"
	logKeyURL     = "url"
	logKeySubject = "subject"
	logKeyID      = "id"
	logKeyAttempt = "attempt"
	logKeyRetryIn = "retry_in"
	logKeyStack   = "stack"
)

// wakeOptions are the options about waking waiters.
type wakeOptions struct {
	url, token, subject string
	runtimeFile         string // notify.FollowRuntime's file; "" for a fixed url
	noLocalWake         bool
}

// on reports whether hints go over NATS: a URL, or a runtime file to
// find one in.
func (w wakeOptions) on() bool { return w.url != "" || w.runtimeFile != "" }

func (w wakeOptions) validate() error {
	if w.on() && w.subject == "" {
		return bindings.Errorf(bindings.CodeInvalidInput, "hints: subject must not be empty when a NATS URL (%q) or runtime file (%q) is given", w.url, w.runtimeFile)
	}
	return nil
}

// hintState is one handle's share of the process-wide wake machinery.
type hintState struct {
	opts  wakeOptions
	log   *slog.Logger
	local *localGroup      // waiters on this store in this process
	pub   *sharedPublisher // nil without a NATS URL
	subMu sync.Mutex       // guards sub, tried
	sub   *hintSub         // lazily made by the first waiter
	tried bool             // sub was asked for (it may have failed)
	done  chan struct{}    // closed by close
	once  sync.Once
}

func newHintState(o options, store string) *hintState {
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &hintState{opts: o.wake, log: log, local: acquireLocal(store), done: make(chan struct{})}
	if h.opts.on() {
		h.pub = acquirePublisher(h.opts.url, h.opts.token, h.opts.runtimeFile, log)
	}
	return h
}

// messageDue runs after every commit that made a message due now (a Send,
// a Nack): it wakes this process's waiters on the store, then hints other
// processes. lastID is the largest message id the commit inserted (0: none
// or unknown); the hint carries it (notify.Hint.LastID).
func (h *hintState) messageDue(lastID int64) {
	if !h.opts.noLocalWake {
		h.local.bc.broadcast()
	}
	if h.pub != nil {
		h.pub.notify(h.opts.subject, lastID)
	}
}

// wakeLocal wakes this process's waiters on the store, without a hint.
func (h *hintState) wakeLocal() { h.local.bc.broadcast() }

// waitChans returns channels that are closed by the next in-process wake
// and by the next NATS hint (nil without hints). Take them BEFORE looking
// at the store: a commit after that moment is then never missed.
func (h *hintState) waitChans() (local, hint <-chan struct{}) {
	local = h.local.bc.wait()
	if s := h.subscription(); s != nil {
		hint = s.bc.wait()
	}
	return local, hint
}

// subscription returns the handle's NATS subscription, making it on first
// use. It is nil without hints, after Close, or when the URL is unusable.
func (h *hintState) subscription() *hintSub {
	if !h.opts.on() {
		return nil
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	if !h.tried {
		select {
		case <-h.done:
			return nil
		default:
		}
		h.tried = true
		h.sub = acquireSub(h.opts.url, h.opts.token, h.opts.subject, h.opts.runtimeFile, h.log)
	}
	return h.sub
}

// close releases the shared publisher and subscription. Safe to call twice.
func (h *hintState) close() {
	h.once.Do(func() {
		close(h.done)
		h.subMu.Lock()
		sub := h.sub
		h.sub = nil
		h.tried = true
		h.subMu.Unlock()
		if sub != nil {
			sub.release()
		}
		if h.pub != nil {
			h.pub.release()
		}
		h.local.release()
	})
}

// broadcaster wakes every goroutine waiting on it. A waiter takes the
// current channel; a broadcast closes it. When nobody took the channel, a
// broadcast costs one uncontended lock.
type broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcaster) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcaster) broadcast() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// localGroup is the in-process wake registry entry of one store file.
type localGroup struct {
	key  string
	refs int // guarded by locals.Mutex
	bc   broadcaster
}

var locals = struct {
	sync.Mutex
	m map[string]*localGroup
}{m: map[string]*localGroup{}}

func acquireLocal(store string) *localGroup {
	locals.Lock()
	defer locals.Unlock()
	g := locals.m[store]
	if g == nil {
		g = &localGroup{key: store}
		locals.m[store] = g
	}
	g.refs++
	return g
}

func (g *localGroup) release() {
	locals.Lock()
	defer locals.Unlock()
	g.refs--
	if g.refs == 0 {
		delete(locals.m, g.key)
	}
}

// sharedPublisher is the process-wide hint publisher of one (url, token,
// runtime file).
type sharedPublisher struct {
	key  [3]string
	refs int // guarded by pubs.Mutex
	log  *slog.Logger

	mu     sync.Mutex
	pub    *notify.Publisher
	failed bool // the URL is unusable; do not dial again
	closed bool
}

var pubs = struct {
	sync.Mutex
	m map[[3]string]*sharedPublisher
}{m: map[[3]string]*sharedPublisher{}}

func acquirePublisher(url, token, runtimeFile string, log *slog.Logger) *sharedPublisher {
	key := [3]string{url, token, runtimeFile}
	pubs.Lock()
	defer pubs.Unlock()
	p := pubs.m[key]
	if p == nil {
		p = &sharedPublisher{key: key, log: log}
		pubs.m[key] = p
	}
	p.refs++
	return p
}

// publisher returns the Publisher, dialing it on first use. DialPublisher
// does not wait for a server that is down; it connects in the background.
func (p *sharedPublisher) publisher() *notify.Publisher {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub != nil || p.failed || p.closed {
		return p.pub
	}
	pub, err := notify.DialPublisher(p.key[0], p.key[1], notify.PublisherOptions{Logger: p.log}, follow(p.key[2]))
	if err != nil {
		p.failed = true
		p.log.Warn("hints off: cannot use the NATS URL; consumers fall back to polling", logKeyURL, p.key[0], logKeyErr, err)
		return nil
	}
	p.pub = pub
	return pub
}

func (p *sharedPublisher) notify(subject string, lastID int64) {
	if pub := p.publisher(); pub != nil {
		pub.NotifySent(subject, notify.DueUnknown, lastID)
	}
}

// stats returns the shared publisher's counters (zero before the first
// hint), for tests and benchmarks.
func (p *sharedPublisher) stats() notify.PublisherStats {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub == nil {
		return notify.PublisherStats{}
	}
	return pub.Stats()
}

func (p *sharedPublisher) release() {
	pubs.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(pubs.m, p.key)
	}
	pubs.Unlock()
	if !last {
		return
	}
	p.mu.Lock()
	p.closed = true
	pub := p.pub
	p.mu.Unlock()
	if pub != nil {
		pub.Close() // publishes a pending trailing hint first
	}
}

// hintSub is the process-wide subscription to one hint subject, fanned out
// to every waiter.
type hintSub struct {
	key   [4]string
	refs  int // guarded by subs.Mutex
	stop  func()
	bc    broadcaster
	wakes atomic.Uint64 // hints and reconnections seen, for tests
}

var subs = struct {
	sync.Mutex
	m map[[4]string]*hintSub
}{m: map[[4]string]*hintSub{}}

// acquireSub returns the shared subscription, or nil when the URL is
// unusable (logged; waiters then rely on the fallback poll).
func acquireSub(url, token, subject, runtimeFile string, log *slog.Logger) *hintSub {
	key := [4]string{url, token, subject, runtimeFile}
	subs.Lock()
	defer subs.Unlock()
	if s := subs.m[key]; s != nil {
		s.refs++
		return s
	}
	s := &hintSub{key: key, refs: 1}
	stop, err := notify.Watch(context.Background(), url, token, subject, func() {
		s.wakes.Add(1)
		s.bc.broadcast()
	}, follow(runtimeFile))
	if err != nil {
		log.Warn("hints off: cannot subscribe; falling back to polling", logKeyURL, url, logKeySubject, subject, logKeyErr, err)
		return nil
	}
	s.stop = stop
	subs.m[key] = s
	return s
}

func (s *hintSub) release() {
	subs.Lock()
	s.refs--
	last := s.refs == 0
	if last {
		delete(subs.m, s.key)
	}
	subs.Unlock()
	if last {
		s.stop()
	}
}

// follow is notify.FollowRuntime(file), or nothing for "".
func follow(file string) notify.DialOption {
	if file == "" {
		return nil
	}
	return notify.FollowRuntime(file)
}
