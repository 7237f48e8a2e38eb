package supervisor

import (
	"context"
	"errors"
	"fmt"
	"github.com/localcloud/localcloud/internal/hintserver"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/trace"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// Defaults of Options.
const (
	// DefaultHealthInterval is how often the stores are checked. Defaults
	// to 1 second.
	DefaultHealthInterval = time.Second
	// DefaultReloadDebounce is how long the stack file must be quiet after
	// an event before it is re-read: a plain save gives two writes
	// (truncate, then write), an editor's save a burst of events. Defaults
	// to 100 milliseconds.
	DefaultReloadDebounce = 100 * time.Millisecond
)

// Log attribute keys.
const (
	keyBinding = "binding"
	keyPath    = "path"
	keyErr     = "err"
	keyFile    = "file"
	keyProblem = "problem"
)

// Options configures Start.
type Options struct {
	// Logger receives up's log lines. Defaults to discarding them.
	Logger *slog.Logger
	// NATSLogger receives the embedded NATS server's own lines. Defaults
	// to Logger.
	NATSLogger *slog.Logger
	// LoadOptions are passed to config.Load on every reload (the same as
	// for the first load, so ${NAME} resolves the same way).
	LoadOptions []config.Option
	// HealthInterval is the period of the health check; negative disables
	// the loop (tests call CheckHealth). Defaults to DefaultHealthInterval.
	HealthInterval time.Duration
	// ReloadDebounce is the quiet time after a stack file event before the
	// reload. Defaults to DefaultReloadDebounce.
	ReloadDebounce time.Duration
	// NoWatch turns the stack file watcher off (SIGHUP still reloads).
	NoWatch bool
	// ExplorerURL is the address of the web explorer up serves, written
	// into runtime.json as explorerUrl; "" when it is off.
	ExplorerURL string
	// SQSEndpoint is the endpoint of the SQS API up serves, written into
	// runtime.json as sqsEndpoint; "" when it is off.
	SQSEndpoint string
	// StoreIdleTimeout is how long a KV store opened on demand (idle.go)
	// stays open after its last use; negative: until MaxIdleStores
	// closes it. Defaults to DefaultStoreIdleTimeout.
	StoreIdleTimeout time.Duration
	// MaxIdleStores is how many unused KV stores stay open at most;
	// negative: none (each is closed at its release). Defaults to as many
	// as a quarter of the open-file soft limit holds (about 6 descriptors
	// each), at least 16 and at most 1024.
	MaxIdleStores int
}

// Supervisor is a running up. Create it with Start; stop it with Close.
type Supervisor struct {
	opts      Options
	log       *slog.Logger
	dataDir   string
	stackFile string
	lock      *ownerLock
	nats      *hintserver.Server
	hints     *hints // nil when up's hints could not start (logged)
	// jsOn and jsSync are what the embedded server was started with:
	// JetStream, and a file store that syncs every write.
	jsOn, jsSync bool
	pid          int
	startedAt    time.Time

	// reloadMu serialises Reload and Apply, which read files (the stack
	// file, the stores they open) without holding mu.
	reloadMu sync.Mutex
	// sqsMu serialises the changes of the SQS state file (sqsqueues.go).
	sqsMu sync.Mutex

	mu           sync.Mutex // guards everything below; health checks and Close take it, never for a file read
	stack        *config.Stack
	watching     bool // watchAll has run: stores opened since are watched as they open
	stores       map[string]*store
	idle         *idleStores // the lazy stores open and unused (idle.go); its own lock
	health       string      // the owner lock's
	reloadErr    string
	writeFailing bool // the last runtime.json write failed (logged once)
	closed       bool
	// env is what the engines' tools share between up's stores (one
	// connection to JetStream); its Stack is the stack of the last open,
	// set under reloadMu.
	env *engine.Env

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start brings a checked stack up: data dir, owner lock, stores, NATS,
// runtime.json, then the watcher and health loops. ctx bounds the start
// only. On failure everything started is undone and nothing is left
// running; stores of another format are left untouched.
func Start(ctx context.Context, st *config.Stack, opts Options) (*Supervisor, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NATSLogger == nil {
		opts.NATSLogger = opts.Logger
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = DefaultHealthInterval
	}
	if opts.ReloadDebounce <= 0 {
		opts.ReloadDebounce = DefaultReloadDebounce
	}
	if opts.StoreIdleTimeout == 0 {
		opts.StoreIdleTimeout = DefaultStoreIdleTimeout
	}
	if opts.MaxIdleStores == 0 {
		opts.MaxIdleStores = defaultMaxIdleStores()
	}
	s := &Supervisor{
		opts:      opts,
		log:       opts.Logger,
		dataDir:   st.DataDir,
		stackFile: st.File,
		pid:       os.Getpid(),
		startedAt: time.Now().UTC().Truncate(time.Second),
		stack:     st,
		stores:    make(map[string]*store, len(st.Bindings)),
		idle:      &idleStores{max: max(opts.MaxIdleStores, 0)},
		health:    HealthOK,
	}
	// A taken NATS port fails the start before anything is created,
	// unless it is the stack's default port: then up takes a free one and
	// says so; apps that follow runtime.json (LOCALCLOUD_RUNTIME_FILE)
	// find it there.
	listen := st.Notify.Listen
	if err := hintserver.CheckListen(listen); err != nil {
		if st.Notify.ListenGiven || !errors.Is(err, hintserver.ErrAddrInUse) {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(listen) // checked by config
		listen = net.JoinHostPort(host, "0")
		s.log.Warn("the stack's default NATS port is taken; using a free port instead (apps find it through runtime.json; "+
			"set notify.listen to choose one)", "default", st.Notify.Listen, keyErr, err)
	}
	if err := os.MkdirAll(st.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	r := trace.StartRegion(ctx, "owner lock")
	lock, err := acquireOwnerLock(st.DataDir)
	r.End()
	if err != nil {
		return nil, err
	}
	s.lock = lock
	removeStaleTemps(st.DataDir)

	// NATS takes ~30 ms to listen; open the stores meanwhile.
	type natsResult struct {
		srv *hintserver.Server
		err error
	}
	natsDone := make(chan natsResult, 1)
	so := hintserver.ServerOptions{
		Listen: listen,
		Token:  st.Notify.Token,
		Logger: opts.NATSLogger,
	}
	s.jsOn, s.jsSync = embeddedJetStream(st)
	if s.jsOn {
		so.JetStreamDir, so.SyncAlways = filepath.Join(st.DataDir, JetStreamDir), s.jsSync
	}
	s.warnDurability(st)
	go func() {
		defer trace.StartRegion(ctx, "nats start").End()
		srv, err := hintserver.StartServer(ctx, so)
		natsDone <- natsResult{srv, err}
	}()
	s.env = &engine.Env{Stack: st, Logger: s.log, Connect: func(name string) (*nats.Conn, error) {
		return s.nats.Connect(nats.Name(name))
	}}
	// The stores in files open while NATS starts; those on its server (or
	// the stack's cluster) once it runs.
	var nr natsResult
	waited := false
	serverUp := func() error {
		nr, waited = <-natsDone, true
		s.nats = nr.srv
		return nr.err
	}
	r = trace.StartRegion(ctx, "open stores")
	stores, storeErr := openAll(ctx, s.env, st.Bindings, serverUp)
	r.End()
	if !waited {
		r = trace.StartRegion(ctx, "wait nats")
		_ = serverUp()
		r.End()
	}
	if storeErr != nil || nr.err != nil {
		closeAll(stores, slog.New(slog.DiscardHandler))
		_ = s.env.Close()
		nr.srv.Shutdown()
		lock.release()
		if storeErr != nil && nr.err != nil && errors.Is(storeErr, nr.err) {
			return nil, storeErr
		}
		return nil, joinErrors([]error{storeErr, nr.err})
	}
	s.syncJetStreamDirs(st.DataDir)
	r = trace.StartRegion(ctx, "hints")
	s.hints = s.startHints()
	for _, x := range stores {
		s.stores[x.cfg.Name] = x
	}
	r.End()

	r = trace.StartRegion(ctx, "health and runtime.json")
	s.mu.Lock()
	s.checkHealthLocked(false)
	err = s.writeRuntimeLocked()
	s.mu.Unlock()
	r.End()
	if err != nil {
		s.closeResources()
		return nil, err
	}

	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	r = trace.StartRegion(ctx, "watcher")
	defer r.End()
	if !opts.NoWatch && st.File != "" {
		if err := s.startWatcher(loopCtx); err != nil {
			// Not fatal: SIGHUP still reloads.
			s.log.Warn("cannot watch the stack file; reload with SIGHUP", keyFile, st.File, keyErr, err)
		}
	}
	if opts.HealthInterval > 0 {
		s.wg.Add(1)
		go s.healthLoop(loopCtx)
	}
	if opts.StoreIdleTimeout > 0 {
		s.wg.Add(1)
		go s.idleLoop(loopCtx)
	}
	s.wg.Add(1)
	go s.watchAll()
	return s, nil
}

// JetStreamDir is the folder under dataDir where up's embedded server
// keeps JetStream's data (config keeps sqlite bindings out of it).
const JetStreamDir = config.JetStreamDir

// embeddedJetStream says whether the embedded server must run JetStream
// for st and whether its file store must sync every write: what the
// stack's bindings need of it (engine.Tools.Needs).
func embeddedJetStream(st *config.Stack) (on, syncAlways bool) {
	for _, b := range st.Bindings {
		if t, err := engine.For(b); err == nil {
			n := t.Needs(st, b)
			on = on || n.JetStream
			syncAlways = syncAlways || n.SyncAlways
		}
	}
	return on, syncAlways
}

// warnDurability logs what the stack's bindings ask of up's server that it
// cannot give (durability full on an outside cluster).
func (s *Supervisor) warnDurability(st *config.Stack) {
	for _, b := range st.Bindings {
		if t, err := engine.For(b); err == nil {
			for _, w := range t.Needs(st, b).Warnings {
				s.log.Warn(w, keyBinding, b.Name)
			}
		}
	}
}

// joinErrors joins the non-nil errors; one error is returned as it is.
func joinErrors(errs []error) error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return errors.Join(out...)
}

// JetStream reports whether the embedded server runs JetStream and whether
// its file store syncs every write.
func (s *Supervisor) JetStream() (on, syncAlways bool) { return s.jsOn, s.jsSync }

// URL returns the NATS URL clients connect to.
func (s *Supervisor) URL() string { return s.nats.URL() }

// Stack returns the stack being served: the last good one.
func (s *Supervisor) Stack() *config.Stack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stack
}

// Runtime returns what runtime.json holds now.
func (s *Supervisor) Runtime() Runtime {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runtimeLocked()
}

func (s *Supervisor) runtimeLocked() Runtime {
	rt := Runtime{
		PID:             s.pid,
		StartedAt:       s.startedAt,
		NATSURL:         s.nats.URL(),
		ExplorerURL:     s.opts.ExplorerURL,
		SQSEndpoint:     s.opts.SQSEndpoint,
		Stack:           s.stack.Name,
		StackFile:       s.stackFile,
		DataDir:         s.dataDir,
		Health:          s.health,
		LastReloadError: s.reloadErr,
		Bindings:        make([]RuntimeBinding, 0, len(s.stores)),
	}
	for _, b := range s.stack.Bindings {
		x := s.stores[b.Name]
		if x == nil {
			continue
		}
		rb := RuntimeBinding{
			Name:       b.Name,
			Type:       string(b.Type),
			Engine:     b.Engine,
			Path:       b.Path,
			Durability: b.Durability,
			Health:     x.health,
		}
		if t, err := engine.For(b); err == nil {
			p := t.Place(b)
			rb.Stream, rb.Replicas = p.Stream, p.Replicas
			if b.Type == config.TypeQueue && t.Traits().Hints { // other engines wake consumers themselves
				rb.Subject = config.Subject(s.stack.Name, b.Name)
			}
		}
		if b.Type == config.TypeQueue {
			rb.VisibilityTimeout = b.VisibilityTimeout.String()
			rb.VisibilityTimeoutMs = b.VisibilityTimeout.Milliseconds()
			rb.MaxAttempts = b.MaxAttempts
			rb.DeadLetter = b.DeadLetter
			rb.RetryDelayMs = b.RetryDelay.Milliseconds()
			rb.MaxRetryDelayMs = b.MaxRetryDelay.Milliseconds()
			rb.DedupWindowMs = b.DedupWindow.Milliseconds()
			rb.CreatedBySQS = b.Created
			rb.SQSName = b.SQS.Name
		}
		rt.Bindings = append(rt.Bindings, rb)
	}
	return rt
}

// writeRuntimeLocked rewrites runtime.json, logging a failure once until a
// write succeeds again.
func (s *Supervisor) writeRuntimeLocked() error {
	rt := s.runtimeLocked()
	err := writeRuntime(s.dataDir, &rt)
	switch {
	case err != nil && !s.writeFailing:
		s.writeFailing = true
		s.log.Error("cannot update the runtime file; status and env may be out of date", keyErr, err)
	case err == nil && s.writeFailing:
		s.writeFailing = false
		s.log.Info("runtime file updated again")
	}
	return err
}

// Queue returns the open handle of the queue binding called name (queues
// keep theirs open while served). A reload may close it at any time; an
// operation on a closed handle fails with an error and changes nothing.
func (s *Supervisor) Queue(name string) (*queue.Queue, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x := s.stores[name]
	if x == nil || x.handle().Queue() == nil {
		return nil, false
	}
	return x.handle().Queue(), true
}

// Describe names the engine and format of the binding called name for
// people ("file (localqueue.v1)", "jetstream R3"); "" for a binding not
// served.
func (s *Supervisor) Describe(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.stores[name]; x != nil {
		return x.handle().Describe()
	}
	return ""
}

// Connect opens a client connection to the embedded NATS server, in
// process; the caller closes it (it cannot outlive Close).
func (s *Supervisor) Connect() (*nats.Conn, error) { return s.nats.Connect() }

// Bindings returns the names of the bindings being served, sorted.
func (s *Supervisor) Bindings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.stores))
	for n := range s.stores {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Close stops the loops and the hint source, closes the stores, shuts NATS
// down, removes runtime.json and releases the owner lock, in that order. It is safe to
// call more than once; later calls return the first result.
func (s *Supervisor) Close() error {
	s.closeOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
		s.closeErr = s.closeResources()
	})
	return s.closeErr
}

func (s *Supervisor) closeResources() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.hints.close() // holds a connection of every queue store
	for _, x := range s.stores {
		x.close(s.log) // also one in use: Close ends every use
	}
	s.stores = map[string]*store{}
	_ = s.env.Close() // up's connection to JetStream, flushed first
	s.nats.Shutdown()
	err := removeRuntime(s.dataDir)
	s.lock.release()
	return err
}
