package supervisor

// Lazy stores: up holds a SQLite KV store open only while it is used.
//
// An open SQLite store costs about six descriptors (the database, its -wal
// and -shm on two connections, the lock file), so a stack of thousands of
// KV bindings held open would pass any ordinary open-file limit. A KV
// binding of an engine with engine.Traits.CloseIdle is opened (created,
// its format checked) at start and on a reload, and closed at once; what
// reads it in up (the explorer, through KV) opens it again on demand
// (engine.Handle.Reopen, which refuses a store deleted or replaced since),
// and it is closed again once unused for Options.StoreIdleTimeout, or when
// more than Options.MaxIdleStores unused ones are open (the least recently
// used first; by default as many as a quarter of the open-file limit
// holds). A caller holds the handle between KV and its release: it is
// never closed under it, by idleness or by a reload (which leaves the close
// of a store it drops to the last release). The health check of a closed
// store stats its files against the identity its first open recorded, as
// for an open one.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/config"
)

// Defaults of Options for lazy stores.
const (
	// DefaultStoreIdleTimeout is how long a KV store up opened on demand
	// stays open after its last use: the explorer's reads of one binding
	// come in bursts (a page, then its keys), and a reopen costs about a
	// millisecond. Defaults to 30 seconds.
	DefaultStoreIdleTimeout = 30 * time.Second
	// minIdleStores and maxIdleStores bound the default of
	// Options.MaxIdleStores (defaultMaxIdleStores).
	minIdleStores, maxIdleStores = 16, 1024
)

// storeFDs is about what one open SQLite store holds: the database, its
// -wal and -shm on two connections, and the lock file.
const storeFDs = 6

// defaultMaxIdleStores is the default of Options.MaxIdleStores: as many
// stores as a quarter of the open-file soft limit holds (833 under 20,000),
// within [16, 1024]. A stack whose KV stores fit stays as fast as if all
// were open (the explorer reads every binding's counts about every second,
// so none of them idles), while a larger one bounds its descriptors; the
// rest of the limit is left to the queues, which stay open, and to
// clients.
func defaultMaxIdleStores() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return minIdleStores
	}
	return int(min(max(lim.Cur/4/storeFDs, minIdleStores), maxIdleStores))
}

// ErrNotServed is matched by the error of KV for a name that is no KV
// binding up serves.
var ErrNotServed = errors.New("no such KV binding is served")

// idleStores is the list of lazy stores that are open and unused, the
// most recently released first.
type idleStores struct {
	max int // at most this many stay in the list
	mu  sync.Mutex
	lru list.List // of *store
}

// push puts x, just released, at the front of the list and returns the
// stores that fell off its end, to be closed. The caller holds x.mu.
func (l *idleStores) push(x *store, now time.Time) (drop []*store) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x.lastUsed = now
	if x.elem != nil {
		l.lru.MoveToFront(x.elem)
	} else {
		x.elem = l.lru.PushFront(x)
	}
	for l.lru.Len() > l.max {
		drop = append(drop, l.take(l.lru.Back()))
	}
	return drop
}

// take removes e from the list and returns its store. The caller holds
// l.mu.
func (l *idleStores) take(e *list.Element) *store {
	x := l.lru.Remove(e).(*store)
	x.elem = nil
	return x
}

// remove takes x out of the list, if it is in it. Safe on nil.
func (l *idleStores) remove(x *store) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if x.elem != nil {
		l.take(x.elem)
	}
}

// listed reports whether x is in the list. Safe on nil.
func (l *idleStores) listed(x *store) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return x.elem != nil
}

// olderThan takes out of the list, and returns, the stores released
// before cutoff.
func (l *idleStores) olderThan(cutoff time.Time) (drop []*store) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for e := l.lru.Back(); e != nil && e.Value.(*store).lastUsed.Before(cutoff); e = l.lru.Back() {
		drop = append(drop, l.take(e))
	}
	return drop
}

// pin counts a user of x. The caller holds Supervisor.mu, so no reload
// retires x between its lookup and the pin.
func (x *store) pin(idle *idleStores) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.refs++
	idle.remove(x)
}

// ensureOpen returns the open handle of a pinned store, opening a closed
// lazy one again.
func (x *store) ensureOpen(ctx context.Context) (*kv.Store, error) {
	x.openMu.Lock()
	defer x.openMu.Unlock()
	x.mu.Lock()
	h, open, retired := x.h, x.open, x.retired
	x.mu.Unlock()
	switch {
	case open:
		return h.KV(), nil
	case retired:
		return nil, fmt.Errorf("kv binding %s: no longer served (a reload of the stack just dropped or replaced this store, or up is stopping); try again", x.name)
	}
	nh, err := h.Reopen(ctx)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.h, x.open = nh, true
	x.mu.Unlock()
	return nh.KV(), nil
}

// unpin ends a use of x: the last one puts an open lazy store in the idle
// list (closing those that fall off its end) and closes a retired store.
func (x *store) unpin(idle *idleStores, log *slog.Logger) {
	x.mu.Lock()
	x.refs--
	if x.refs > 0 {
		x.mu.Unlock()
		return
	}
	if x.retired {
		x.mu.Unlock()
		x.shut(idle, log, false)
		return
	}
	var drop []*store
	if x.lazy && x.open && !x.stuck {
		drop = idle.push(x, time.Now())
	}
	x.mu.Unlock()
	for _, d := range drop {
		d.shut(idle, log, false)
	}
}

// retire closes a store a reload dropped, or leaves that to its last
// user's release.
func (x *store) retire(idle *idleStores, log *slog.Logger) {
	x.mu.Lock()
	x.retired = true
	idle.remove(x)
	x.mu.Unlock()
	x.shut(idle, log, false)
}

// KV returns the handle of the KV binding called name, opening its store
// again if it was closed while idle, and release, which the caller must
// call once done with the handle: until then neither idleness nor a
// reload closes it. The error matches ErrNotServed for a name that is no
// KV binding served; a store deleted or replaced since up opened it is
// not opened again (engine.ErrReplaced).
func (s *Supervisor) KV(ctx context.Context, name string) (k *kv.Store, release func(), err error) {
	s.mu.Lock()
	x := s.stores[name]
	if s.closed || x == nil || x.cfg.Type != config.TypeKV {
		s.mu.Unlock()
		return nil, nil, fmt.Errorf("binding %s: %w", name, ErrNotServed)
	}
	x.pin(s.idle)
	s.mu.Unlock()
	k, err = x.ensureOpen(ctx)
	if err != nil {
		x.unpin(s.idle, s.log)
		return nil, nil, err
	}
	var once sync.Once
	return k, func() { once.Do(func() { x.unpin(s.idle, s.log) }) }, nil
}

// closeIdle closes the lazy stores unused since before cutoff.
func (s *Supervisor) closeIdle(cutoff time.Time) {
	for _, x := range s.idle.olderThan(cutoff) {
		x.shut(s.idle, s.log, false)
	}
}

// openLazy counts the lazy stores whose handle is open now.
func (s *Supervisor) openLazy() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.stores {
		x.mu.Lock()
		if x.lazy && x.open {
			n++
		}
		x.mu.Unlock()
	}
	return n
}

// idleLoop closes the stores idle for StoreIdleTimeout, looking every
// half of it: a store is closed between one and one and a half times the
// timeout after its last use.
func (s *Supervisor) idleLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(max(s.opts.StoreIdleTimeout/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.closeIdle(now.Add(-s.opts.StoreIdleTimeout))
		}
	}
}
