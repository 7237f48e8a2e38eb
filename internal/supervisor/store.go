package supervisor

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// store is one served binding: its handle and its last health.
//
// A lazy store (a KV binding of an engine with engine.Traits.CloseIdle:
// SQLite) holds its handle open only while it is used and for a while
// after (idle.go); in between h is the closed handle, whose Health and
// Describe only stat. Every other store keeps its handle open while it is
// served.
type store struct {
	cfg    config.Binding // guarded by Supervisor.mu
	health string         // guarded by Supervisor.mu
	// name, path and lazy (a KV store closed while idle) are set at the
	// open, then only read: a reload that changes a path opens another
	// store.
	name, path string
	lazy       bool

	// openMu serialises the opens and closes of the handle (file
	// operations); it is taken before mu.
	openMu sync.Mutex
	// mu guards the fields below; it is held briefly, never across a file
	// operation, and taken after Supervisor.mu where both are held.
	mu   sync.Mutex
	h    engine.Handle
	open bool // h is open
	// refs counts the callers that use the handle now (KV until its
	// release): the handle is never closed under them.
	refs int
	// retired: a reload dropped the store (the last release closes it),
	// or up closed it; it is not opened again.
	retired bool
	// stuck: Close refused (the store was deleted or replaced under the
	// open handle, engine.ErrReplaced), so the handle stays open until
	// the process exits, as the engine's Close says.
	stuck bool

	// elem and lastUsed are guarded by idleStores.mu: the store's place
	// in the list of open, unused lazy stores, and when it was last
	// released.
	elem     *list.Element
	lastUsed time.Time
}

// openStore opens or creates the store of b through its engine's tools,
// with the stack's rules (engine.QueueOptions): a SQLite store is a
// directory 0700 and a file 0600 with its format marker checked (one of
// another format is left untouched); a jetstream binding is provisioned,
// failing closed on a stream whose settings contradict it, and never
// deleted. A queue's open finishes the moves a killed process left toward
// destinations the stack names, and leaves the others, which its health
// then reports. A lazy store is closed again at once: provisioning holds
// no descriptor beyond the stores being opened.
func openStore(ctx context.Context, env *engine.Env, b config.Binding) (*store, error) {
	t, err := engine.For(b)
	if err != nil {
		return nil, err
	}
	h, err := t.Open(ctx, env, b, engine.Create)
	if err != nil {
		return nil, err
	}
	x := &store{cfg: b, h: h, health: HealthOK, open: true, name: b.Name, path: b.Path,
		lazy: b.Type == config.TypeKV && t.Traits().CloseIdle}
	if x.lazy {
		x.shut(nil, env.Log(), true)
	}
	return x, nil
}

// handle returns the store's handle: open, or a lazy store's closed one.
func (x *store) handle() engine.Handle {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.h
}

// shut closes the handle, unless it is closed already or stuck; unless
// force, only when nothing uses it and it is not in the idle list (it was
// taken out of the list to be closed, or retired). A handle whose store
// was replaced stays open (stuck), logged once.
func (x *store) shut(idle *idleStores, log *slog.Logger, force bool) {
	x.openMu.Lock()
	defer x.openMu.Unlock()
	x.mu.Lock()
	if !x.open || x.stuck || (!force && (x.refs > 0 || idle.listed(x))) {
		x.mu.Unlock()
		return
	}
	idle.remove(x)
	h := x.h
	x.open = false
	x.mu.Unlock()
	err := h.Close()
	if err == nil {
		return
	}
	if errors.Is(err, engine.ErrReplaced) {
		x.mu.Lock()
		x.open, x.stuck = true, true
		x.mu.Unlock()
	}
	log.Warn("close store", keyBinding, x.name, keyPath, x.path, keyErr, err)
}

// close closes the handle of a store that nothing reaches any more, even
// one in use (its caller gets errors from then on, and nothing changes),
// and keeps a caller between its KV and the open from opening it again.
func (x *store) close(log *slog.Logger) {
	x.mu.Lock()
	x.retired = true
	x.mu.Unlock()
	x.shut(nil, log, true)
}

// openParallel bounds the stores opened at once: creating a store waits on
// about six fsyncs, so overlapping them is what makes a start fast, while a
// bound keeps a huge stack from holding hundreds of descriptors in flight.
const openParallel = 16

// progressEvery is how often openStores says how far it got, while it
// runs longer than that: a stack of thousands of bindings takes seconds.
var progressEvery = time.Second

// openStores opens the stores of bs in parallel. On any failure it closes
// what it opened and returns every error.
func openStores(ctx context.Context, env *engine.Env, bs []config.Binding) ([]*store, error) {
	out := make([]*store, len(bs))
	errs := make([]error, len(bs))
	sem := make(chan struct{}, openParallel)
	var wg sync.WaitGroup
	var opened atomic.Int64
	stop := reportProgress(env.Log(), &opened, len(bs))
	for i, b := range bs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = openStore(ctx, env, b)
			opened.Add(1)
		}()
	}
	wg.Wait()
	stop()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		for _, x := range out {
			if x != nil {
				x.close(slog.New(slog.DiscardHandler))
			}
		}
		return nil, joinErrors(failed)
	}
	return out, nil
}

// splitEngines splits bindings into those whose engine keeps them in
// files and those on up's server (engine.Traits.Server), which open once
// the server runs.
func splitEngines(bs []config.Binding) (local, remote []config.Binding, err error) {
	for _, b := range bs {
		t, err := engine.For(b)
		if err != nil {
			return nil, nil, err
		}
		if t.Traits().Server {
			remote = append(remote, b)
		} else {
			local = append(local, b)
		}
	}
	return local, remote, nil
}

// openAll opens the stores of bs: those in files first, then, once up's
// server runs (serverUp), those on it.
func openAll(ctx context.Context, env *engine.Env, bs []config.Binding, serverUp func() error) ([]*store, error) {
	local, remote, err := splitEngines(bs)
	if err != nil {
		return nil, err
	}
	stores, err := openStores(ctx, env, local)
	if err != nil {
		return nil, err
	}
	// The server runs before any look at the stores of other engines
	// (engine.Stranded): a binding moved off jetstream has its old stream
	// there.
	if err := serverUp(); err != nil {
		closeAll(stores, slog.New(slog.DiscardHandler))
		return nil, err
	}
	if err := checkStranded(ctx, env, bs); err != nil {
		closeAll(stores, slog.New(slog.DiscardHandler))
		return nil, err
	}
	if len(remote) == 0 {
		return stores, nil
	}
	more, err := openStores(ctx, env, remote)
	if err != nil {
		closeAll(stores, slog.New(slog.DiscardHandler))
		return nil, err
	}
	return append(stores, more...), nil
}

// checkStranded fails when a binding of bs changed engine while its store
// on the other engine holds data (engine.Stranded), every such binding
// named. Its stores on the other engines are looked at in parallel.
func checkStranded(ctx context.Context, env *engine.Env, bs []config.Binding) error {
	errs := make([]error, len(bs))
	sem := make(chan struct{}, openParallel)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = engine.Stranded(ctx, env, b)
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return joinErrors(failed)
	}
	return nil
}

// reportProgress logs, every progressEvery until stop is called, how many
// of total stores are open.
func reportProgress(log *slog.Logger, opened *atomic.Int64, total int) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				log.Info("provisioning stores", "opened", opened.Load(), "of", total)
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
