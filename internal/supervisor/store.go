package supervisor

import (
	"context"
	"fmt"
	"github.com/localcloud/localcloud/internal/engine/admin"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/nats-io/nats.go"
)

// store is the open handle of one binding and what its health check
// compares against.
type store struct {
	cfg    config.Binding
	kv     *kv.Store    // set for a kv binding
	queue  *queue.Queue // set for a queue binding; later publishes hints and checks data_version
	file   string       // the database file
	dirID  fileID       // recorded right after the open
	fileID fileID
	// pageSize is the database's page size: its file is always a whole
	// number of pages.
	pageSize int64
	health   string
	// moves is the unfinished moves out of the store that up left in
	// place, read at the open (MoveProblems); "" if none.
	moves string
	// js is the connection of a jetstream binding (up's, shared by its
	// jetstream stores); nil for a sqlite binding, which has files.
	js *nats.Conn
}

// dbFile returns the database file of a binding.
func dbFile(b config.Binding) string {
	if b.Type == config.TypeQueue {
		return filepath.Join(b.Path, queue.FileName)
	}
	return filepath.Join(b.Path, kv.FileName)
}

// openStore opens or creates the store of b: directory 0700, file 0600,
// format marker checked. A store of another format is left untouched. A
// queue is opened with the stack's rules for moves (QueueOptions), so its
// open finishes the moves a killed process left toward destinations the
// stack names, and leaves the others, which its health then reports.
func openStore(ctx context.Context, st *config.Stack, b config.Binding, log *slog.Logger, jsc *nats.Conn) (*store, error) {
	d, err := bindings.ParseDurability(b.Durability)
	if err != nil {
		return nil, fmt.Errorf("open binding %s: %w", b.Name, err)
	}
	if b.Engine == config.EngineJetStream {
		return openJetStream(ctx, st, b, d, log, jsc)
	}
	s := &store{cfg: b, file: dbFile(b), health: HealthOK}
	l := log.With(keyBinding, b.Name)
	switch b.Type {
	case config.TypeKV:
		s.kv, err = kv.Open(ctx, b.Path, kv.WithDurability(d), kv.WithLogger(l))
	case config.TypeQueue:
		opts := append([]queue.Option{queue.WithDurability(d), queue.WithLogger(l), queue.WithBindingName(b.Name)}, QueueOptions(st, b)...)
		if b.VisibilityTimeout > 0 {
			opts = append(opts, queue.WithDefaultVisibility(b.VisibilityTimeout))
		}
		s.queue, err = queue.Open(ctx, b.Path, opts...)
	default:
		err = fmt.Errorf("unknown binding type %q", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s binding %s in %s: %w", b.Type, b.Name, b.Path, err)
	}
	di, err1 := os.Stat(b.Path)
	fi, err2 := os.Stat(s.file)
	if err1 != nil || err2 != nil {
		s.closeHandle()
		return nil, fmt.Errorf("open %s binding %s: stat store: %w", b.Type, b.Name, firstErr(err1, err2))
	}
	s.dirID, s.fileID = idOf(di), idOf(fi)
	if s.kv != nil {
		s.pageSize = admin.KVDB(s.kv).PageSize
	} else {
		eq, err := admin.Queue(s.queue)
		if err != nil {
			s.closeHandle()
			return nil, fmt.Errorf("open %s binding %s: %w", b.Type, b.Name, err)
		}
		s.pageSize = eq.DB().PageSize
		refs, err := eq.References(ctx)
		if err != nil {
			s.closeHandle()
			return nil, fmt.Errorf("open %s binding %s: %w", b.Type, b.Name, err)
		}
		s.moves = strings.Join(MoveProblems(st, b, refs), "; ")
	}
	return s, nil
}

// openJetStream provisions binding b on JetStream through jsc: the engine's
// Open creates the stream (and a queue's consumer) or checks an existing
// one, and fails closed on one whose settings contradict the binding.
// Nothing is ever deleted: a removed binding's stream stays.
func openJetStream(ctx context.Context, st *config.Stack, b config.Binding, d bindings.Durability, log *slog.Logger, jsc *nats.Conn) (*store, error) {
	if jsc == nil {
		return nil, fmt.Errorf("open %s binding %s on jetstream: no connection to JetStream", b.Type, b.Name)
	}
	s := &store{cfg: b, health: HealthOK, js: jsc}
	l := log.With(keyBinding, b.Name)
	var err error
	switch b.Type {
	case config.TypeKV:
		s.kv, err = kv.OpenEngine(ctx, jsengine.KV{Conn: jsc, Replicas: b.Replicas}, b.Name, kv.WithDurability(d), kv.WithLogger(l))
	case config.TypeQueue:
		opts := append([]queue.Option{queue.WithDurability(d), queue.WithLogger(l), queue.WithBindingName(b.Name)}, QueueOptions(st, b)...)
		if b.VisibilityTimeout > 0 {
			opts = append(opts, queue.WithDefaultVisibility(b.VisibilityTimeout))
		}
		s.queue, err = queue.OpenEngine(ctx, jsengine.Queue{Conn: jsc, Replicas: b.Replicas}, b.Name, opts...)
	default:
		err = fmt.Errorf("unknown binding type %q", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s binding %s on jetstream (stream %s): %w", b.Type, b.Name, StreamName(b), err)
	}
	return s, nil
}

// StreamName is the JetStream stream of a jetstream binding: LCKV_<name>
// for a KV binding, LCQ_<name> for a queue.
func StreamName(b config.Binding) string {
	if b.Type == config.TypeQueue {
		return "LCQ_" + b.Name
	}
	return "LCKV_" + b.Name
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *store) closeHandle() error {
	if s.kv != nil {
		return s.kv.Close()
	}
	if s.queue != nil {
		return s.queue.Close()
	}
	return nil
}

// close releases the handle, except when the store's directory or file is
// no longer the one that was opened: then closing would let SQLite
// checkpoint and delete "<file>-wal" by name, touching the files of
// whatever now sits at the path. The handle is then left to the process's
// exit. It reports whether the handle was closed.
func (s *store) close(log *slog.Logger) bool {
	if s.js != nil {
		if err := s.closeHandle(); err != nil {
			log.Warn("close store", keyBinding, s.cfg.Name, keyErr, err)
		}
		return true
	}
	if !s.sameIdentity() {
		log.Warn("store was deleted or replaced; leaving its handle open until exit so closing it cannot touch the files now at its path",
			keyBinding, s.cfg.Name, keyPath, s.cfg.Path)
		return false
	}
	if err := s.closeHandle(); err != nil {
		log.Warn("close store", keyBinding, s.cfg.Name, keyErr, err)
	}
	return true
}

// sameIdentity reports whether the directory and the file at the store's
// path are still the ones that were opened.
func (s *store) sameIdentity() bool {
	di, err := os.Stat(s.cfg.Path)
	if err != nil || idOf(di) != s.dirID {
		return false
	}
	fi, err := os.Stat(s.file)
	return err == nil && idOf(fi) == s.fileID
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
func openStores(ctx context.Context, st *config.Stack, bs []config.Binding, log *slog.Logger, jsc *nats.Conn) ([]*store, error) {
	out := make([]*store, len(bs))
	errs := make([]error, len(bs))
	sem := make(chan struct{}, openParallel)
	var wg sync.WaitGroup
	var opened atomic.Int64
	stop := reportProgress(log, &opened, len(bs))
	for i, b := range bs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = openStore(ctx, st, b, log, jsc)
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
		for _, s := range out {
			if s != nil {
				_ = s.closeHandle()
			}
		}
		return nil, joinErrors(failed)
	}
	return out, nil
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
