package sqlitetools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/notify"
)

// OpenQueue opens the SQLite queue at loc (a directory or "memory:NAME")
// with opts and returns the public handle with the engine's own beside
// it: the one place a queue of this engine is opened for the tools (and
// for localcloud's own tests that read its tables). Close the public one.
func OpenQueue(ctx context.Context, loc string, opts ...queue.Option) (*queue.Queue, *sqlitequeue.Queue, error) {
	cfg, err := queue.EngineConfig(loc, opts...)
	if err != nil {
		return nil, nil, err
	}
	d, err := sqlitequeue.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	q, err := queue.New(d, opts...)
	if err != nil {
		_ = d.Close()
		return nil, nil, err
	}
	return q, d, nil
}

// OpenKV opens the SQLite KV store at loc with opts, as OpenQueue opens a
// queue.
func OpenKV(ctx context.Context, loc string, opts ...kv.Option) (*kv.Store, *sqlitekv.Store, error) {
	cfg, err := kv.EngineConfig(loc, opts...)
	if err != nil {
		return nil, nil, err
	}
	d, err := sqlitekv.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := kv.New(d)
	if err != nil {
		_ = d.Close()
		return nil, nil, err
	}
	return s, d, nil
}

// Open opens b's store with the stack's rules: a queue with its settings
// and dead-letter policy, and the moves it may finish (engine.QueueOptions);
// a writer joins the hints of a running up (env.UpURL), so a send or nack
// from the command line wakes consumers at once. A store that does not
// exist is created only with engine.Create. With Create it also reads the
// unfinished moves the open left in place (their destination is not one
// the stack names), which Health then reports.
func (t Tools) Open(ctx context.Context, env *engine.Env, b config.Binding, a engine.Access) (engine.Handle, error) {
	if _, err := durability(b); err != nil {
		return nil, err
	}
	if a != engine.Create {
		if err := needStore(env, b); err != nil {
			return nil, err
		}
	}
	h := &handle{b: b, file: File(b)}
	var err error
	switch b.Type {
	case config.TypeKV:
		opts := engine.KVOptions(b, a)
		opts = append(opts, kv.WithLogger(env.Log().With("binding", b.Name)))
		h.kv, h.ekv, err = OpenKV(ctx, b.Path, opts...)
		if err == nil {
			h.db = h.ekv.DB()
		}
	case config.TypeQueue:
		opts := engine.ReadQueueOptions(b)
		if a != engine.Read {
			opts = engine.QueueOptions(env.Stack, b)
			if env.UpURL != "" && env.Stack != nil {
				opts = append(opts, queue.WithHints(env.UpURL, env.Stack.Notify.Token, config.Subject(env.Stack.Name, b.Name)))
			}
		}
		opts = append(opts, queue.WithLogger(env.Log().With("binding", b.Name)))
		h.q, h.eq, err = OpenQueue(ctx, b.Path, opts...)
		if err == nil {
			h.db = h.eq.DB()
		}
	default:
		err = fmt.Errorf("unknown binding type %q", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s binding %s in %s: %w", b.Type, b.Name, b.Path, err)
	}
	h.env, h.up = env, env.UpURL
	if err := h.recordIdentity(); err != nil {
		_ = h.closeHandle()
		return nil, fmt.Errorf("open %s binding %s: stat store: %w", b.Type, b.Name, err)
	}
	if a == engine.Create && h.eq != nil && env.Stack != nil {
		refs, err := h.eq.References(ctx)
		if err != nil {
			_ = h.closeHandle()
			return nil, fmt.Errorf("open %s binding %s: %w", b.Type, b.Name, err)
		}
		h.moves = strings.Join(MoveProblems(env.Stack, b, refs), "; ")
	}
	return h, nil
}

// needStore fails with a hint when b's store was never created.
func needStore(env *engine.Env, b config.Binding) error {
	ok, err := fileExists(File(b))
	if err != nil || ok {
		return err
	}
	try := "localcloud up creates every store"
	if env.Stack != nil {
		try = "localcloud up -f " + env.Stack.File + " creates every store"
	}
	return engine.Hint(fmt.Errorf("%s binding %s has no store yet (%s does not exist)", b.Type, b.Name, File(b)), try)
}

// fileExists reports whether path is an existing file; a stat error other
// than "does not exist" is returned.
func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, err
}

// handle is an open binding of the SQLite engine.
type handle struct {
	b    config.Binding
	env  *engine.Env
	up   string // the running up's NATS URL at the open, for Arrivals
	file string
	kv   *kv.Store
	ekv  *sqlitekv.Store
	q    *queue.Queue
	eq   *sqlitequeue.Queue
	db   *sqlstore.DB
	// dirID and fileID are the store's directory and file right after the
	// open: Health and Close compare them.
	dirID, fileID fileID
	// moves are the unfinished moves out of the store the open left in
	// place (MoveProblems); "" if none.
	moves string
}

func (h *handle) KV() *kv.Store       { return h.kv }
func (h *handle) Queue() *queue.Queue { return h.q }

// Describe is "memory" for an in-memory store, else Tools.Describe.
func (h *handle) Describe() string {
	if h.db.Dir == "" {
		return "memory"
	}
	return Tools{}.Describe(h.b)
}

// recordIdentity records the directory and file the open found.
func (h *handle) recordIdentity() error {
	if h.db.Dir == "" {
		return nil
	}
	di, err := os.Stat(h.b.Path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(h.file)
	if err != nil {
		return err
	}
	h.dirID, h.fileID = idOf(di), idOf(fi)
	return nil
}

// Tail reads the queue by id (sqlitequeue.Queue.Tail).
func (h *handle) Tail(ctx context.Context, after int64, limit int) ([]qdriver.PeekedMessage, error) {
	if h.eq == nil {
		return nil, fmt.Errorf("binding %s is a %s, not a queue", h.b.Name, h.b.Type)
	}
	return h.eq.Tail(ctx, after, limit)
}

// LastID is the newest message's id.
func (h *handle) LastID(ctx context.Context) (int64, error) {
	if h.eq == nil {
		return 0, fmt.Errorf("binding %s is a %s, not a queue", h.b.Name, h.b.Type)
	}
	return h.eq.LastID(ctx)
}

// Arrivals watches the queue's hint subject on the running up's NATS
// server (none without a running up: whoever waits polls).
func (h *handle) Arrivals(ctx context.Context, fn func()) (func(), error) {
	if h.up == "" || h.env.Stack == nil {
		return func() {}, nil
	}
	return notify.Watch(ctx, h.up, h.env.Stack.Notify.Token, config.Subject(h.env.Stack.Name, h.b.Name), fn)
}

// Probe takes a connection of the queue's reader pool for up's hint
// source.
func (h *handle) Probe(ctx context.Context) (engine.Probe, error) {
	if h.eq == nil {
		return nil, fmt.Errorf("binding %s is a %s: %w", h.b.Name, h.b.Type, engine.ErrNoProbe)
	}
	return Probe(ctx, h.eq)
}

// Probe takes a connection of eq's reader pool for up's hint source; a
// store in memory has nothing to watch (engine.ErrNoProbe).
func Probe(ctx context.Context, eq *sqlitequeue.Queue) (engine.Probe, error) {
	p, err := eq.NewProbe(ctx)
	if errors.Is(err, sqlitequeue.ErrNoDirectory) {
		return nil, fmt.Errorf("%w: %w", engine.ErrNoProbe, err)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (h *handle) closeHandle() error {
	if h.kv != nil {
		return h.kv.Close()
	}
	return h.q.Close()
}

// Close closes the handle, unless the store's directory or file is no
// longer the one that was opened: closing would then let SQLite
// checkpoint and delete "<file>-wal" by name, touching the files of
// whatever now sits at the path. The handle is then left to the process's
// exit, and the error matches ErrReplaced.
func (h *handle) Close() error {
	if h.db.Dir != "" && !h.sameIdentity() {
		return fmt.Errorf("binding %s (%s): %w", h.b.Name, h.b.Path, engine.ErrReplaced)
	}
	return h.closeHandle()
}

// Reopen opens the KV store of a closed handle again for writing
// (creating nothing), after checking with stat(2) that the directory and
// file at its path are the ones the first open found, and again after
// the open: a store deleted or replaced meanwhile is never served under
// the binding's name. The new handle keeps the first open's identity, so
// Health and Close compare against it.
func (h *handle) Reopen(ctx context.Context) (engine.Handle, error) {
	if h.kv == nil || h.db.Dir == "" {
		return nil, fmt.Errorf("%s binding %s: %w", h.b.Type, h.b.Name, engine.ErrNoReopen)
	}
	gone := func() error {
		return fmt.Errorf("kv binding %s (%s): %s since localcloud up opened it; it is not opened again: %w",
			h.b.Name, h.b.Path, h.Health(), engine.ErrReplaced)
	}
	if !h.sameIdentity() {
		return nil, gone()
	}
	nh, err := Tools{}.Open(ctx, h.env, h.b, engine.Write)
	if err != nil {
		return nil, err
	}
	n := nh.(*handle)
	if n.dirID != h.dirID || n.fileID != h.fileID {
		_ = n.closeHandle()
		return nil, gone()
	}
	return n, nil
}

// sameIdentity reports whether the directory and the file at the store's
// path are still the ones that were opened.
func (h *handle) sameIdentity() bool {
	di, err := os.Stat(h.b.Path)
	if err != nil || idOf(di) != h.dirID {
		return false
	}
	fi, err := os.Stat(h.file)
	return err == nil && idOf(fi) == h.fileID
}

// fileID is a file's identity: device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(fi fs.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}
	}
	return fileID{}
}
