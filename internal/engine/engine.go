// Package engine is the seam between localcloud's own tools (the CLI, up's
// supervisor, the explorer, the hint source) and the engines that keep a
// binding's store. Apps use the public packages bindings/kv and
// bindings/queue over the driver interfaces; the tools also need what the
// public API does not cover: turning a binding of the stack file into an
// open handle, whether a store exists, checking, backing up and restoring
// it, reading a queue without claiming, telling a receipt apart, the health
// of an open store, where it is and what it is. That is Tools, one
// implementation per engine (internal/engine/sqlitetools for the SQLite
// files and memory stores, internal/engine/jstools for NATS JetStream),
// registered by the engine's name in the stack file and looked up by a
// binding's engine (For). A tool calls Tools and the public API only, never
// an engine package, so a new engine or a new front door adds methods here,
// not switches there.
//
// The packages, and which may import which (an arrow: "imports"):
//
//	cmd/localcloud, internal/supervisor, explorer, internal/hintsrc
//	        │                     │
//	        ▼                     ▼
//	internal/engine (this: Tools, Handle, Env, registry) ──▶ bindings/kv, bindings/queue, config
//	        ▲
//	        │ register themselves (init)
//	internal/engine/sqlitetools, internal/engine/jstools
//	        │
//	        ▼
//	sqlitekv, sqlitequeue, jsengine (the engines, which the public packages import too)
//
// internal/supervisor links the built-in tools in (engines.go); nothing
// under cmd/ imports an engine package.
package engine

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
)

// Access says how a tool opens a binding's store.
type Access int

const (
	// Read opens an existing store read-only: nothing is created or
	// changed. A store that does not exist is an error saying that up
	// creates it.
	Read Access = iota
	// Write opens an existing store read-write; a missing one is the error
	// of Read.
	Write
	// Create opens the store read-write and creates (provisions) it when
	// it does not exist: what up, env and run do for every binding, and
	// kv put and queue send for theirs.
	Create
)

// HealthOK is the health of a store without problems.
const HealthOK = "ok"

// Traits say what an engine has, where the tools differ by it.
type Traits struct {
	// Hints: its queues wake consumers with localcloud's NATS hints, so up
	// watches them with its hint source and each has a hint subject. An
	// engine without wakes consumers itself.
	Hints bool
	// LeaseEnds: Peek shows a delivered message's lease end (VisibleAt).
	// Without, a delivered message shows a zero VisibleAt while its lease
	// runs (the server holds it).
	LeaseEnds bool
	// Replicas: its bindings are kept on a number of replicas.
	Replicas bool
	// Server: its stores live on up's NATS server (or the stack's
	// cluster): up opens them once its server runs.
	Server bool
	// Processes: several processes of a load test may share one of its
	// temporary stores.
	Processes bool
	// CloseIdle: an open KV store of it holds descriptors of its own and
	// its files keep everything once it is closed, so up closes one while
	// nothing uses it and opens it again on demand (Handle.Reopen).
	CloseIdle bool
}

// Place is where a binding's store is, field by field; a field the engine
// has none of is zero.
type Place struct {
	Dir      string // the store's directory
	File     string // its database file
	Stream   string // its stream
	Replicas int    // the replicas it is kept on
}

// Needs is what a binding asks of up's embedded NATS server.
type Needs struct {
	// JetStream: the server must run JetStream; SyncAlways: with a file
	// store that syncs every write.
	JetStream, SyncAlways bool
	// Warnings are what up logs about the binding at start and reload.
	Warnings []string
}

// Tools is what localcloud's tools do with the stores of one engine beyond
// the public API. Every method is safe for concurrent use.
type Tools interface {
	// Name is the engine's name in the stack file ("sqlite", "jetstream").
	Name() string
	// Traits says what the engine has.
	Traits() Traits
	// Location is what a dead-letter policy and a redrive name b's store
	// by: the driver's Config.Location, queue.WithDeadLetter, RedriveTo.
	Location(b config.Binding) string
	// Place says where b's store is.
	Place(b config.Binding) Place
	// Where says where b's store is, for people, in one word.
	Where(b config.Binding) string
	// Describe names the engine and format of b's store for people:
	// "file (localqueue.v1)", "jetstream R3".
	Describe(b config.Binding) string
	// Needs says what b asks of up's embedded NATS server in stack st.
	Needs(st *config.Stack, b config.Binding) Needs
	// AppBinding returns the value of b's LOCALCLOUD_BINDING_<NAME>
	// variable, to be encoded as JSON: what FromEnv reads. natsURL is up's
	// NATS URL, "" when unknown.
	AppBinding(st *config.Stack, b config.Binding, natsURL string) (any, error)

	// Open opens b's store. Errors a user can fix are *HintError.
	Open(ctx context.Context, env *Env, b config.Binding, a Access) (Handle, error)
	// Exists reports whether b's store exists, creating nothing.
	Exists(ctx context.Context, env *Env, b config.Binding) (bool, error)
	// Health is the health of b's store while no up serves it: HealthOK,
	// or the problems joined by "; " (up's own check is Handle.Health).
	Health(ctx context.Context, env *Env, b config.Binding) string
	// Check verifies b's store without changing it.
	Check(ctx context.Context, env *Env, b config.Binding) (Report, error)
	// Backup writes a verified copy of b's store to dest, a new file or a
	// folder to put one in. An engine whose stores are no files refuses
	// with a *HintError naming its own tooling.
	Backup(ctx context.Context, env *Env, b config.Binding, dest string, now time.Time) (Backup, error)
	// Restore replaces b's store with the backup src, keeping the store
	// it replaced, holding env.Exclusive meanwhile. Refusals as Backup's.
	Restore(ctx context.Context, env *Env, b config.Binding, src string, now time.Time) (Restored, error)
	// DropEmpty deletes b's store when it holds nothing, as migrate
	// leaves a source, where an empty store left in place would still
	// look like data to a look that cannot count it (a stream while up's
	// server runs without JetStream). An engine whose empty store counts
	// as empty everywhere keeps it. A store holding anything is kept and
	// the error says what it holds.
	DropEmpty(ctx context.Context, env *Env, b config.Binding) error
	// Remove deletes b's store and all it holds: the SQS API's DeleteQueue
	// of a queue it created. It refuses a binding of the stack file
	// (b.Created false). No handle may be open on the store.
	Remove(ctx context.Context, env *Env, b config.Binding) error
	// ValidReceipt is nil when r is a receipt b's queue could have
	// issued, else an INVALID_INPUT error saying what is wrong: Ack and
	// Nack take such a string as never issued, a no-op success, so a tool
	// that must not report an ack that did not happen checks first.
	ValidReceipt(b config.Binding, r string) error
	// Scratch makes a temporary store for a load test, which Remove
	// deletes. A spec the engine cannot serve is a *HintError.
	Scratch(ctx context.Context, env *Env, spec ScratchSpec) (Scratch, error)
	// OpenScratch opens the temporary store at loc (Scratch.Location) again
	// in another process of a load test (Traits.Processes).
	OpenScratch(ctx context.Context, loc string, spec ScratchSpec) (Scratch, error)
}

// Handle is an open binding: the public handle and what the tools need of
// the engine's beside it. It is safe for concurrent use.
type Handle interface {
	// KV is the public handle of a KV binding, nil for a queue; Queue the
	// one of a queue binding, nil for a KV store.
	KV() *kv.Store
	Queue() *queue.Queue
	// Describe is Tools.Describe of the open store ("memory" for an
	// in-memory one).
	Describe() string
	// Health is up's periodic look at the open store: HealthOK, or the
	// problems joined by "; ". It only stats files and reads state the
	// handle holds.
	Health() string
	// Tail returns up to limit messages of the queue that arrived after
	// the one with ID after (0: from the first), in arrival order, without
	// claiming or changing them.
	Tail(ctx context.Context, after int64, limit int) ([]qdriver.PeekedMessage, error)
	// LastID is the ID of the newest message of the queue: Tail after it
	// reads what arrives from then on.
	LastID(ctx context.Context) (int64, error)
	// Arrivals calls fn, from another goroutine and lossily, when a
	// message may have arrived in the queue, until stop is called. Whoever
	// waits on it polls as well.
	Arrivals(ctx context.Context, fn func()) (stop func(), err error)
	// Probe returns what up's hint source watches the queue with, or an
	// error matching ErrNoProbe for a store it cannot watch (Traits.Hints
	// false, or a store in memory).
	Probe(ctx context.Context) (Probe, error)
	// QueueMover returns what `localcloud migrate` reads and writes the
	// queue's store through (Migrate), holding what it exports from a
	// queue whose engine must claim messages to read them for lease. Close
	// it before the handle.
	QueueMover(ctx context.Context, lease time.Duration) (QueueMover, error)
	// Reopen opens again, as Open did for writing and creating nothing,
	// the KV store of this handle after its Close (Traits.CloseIdle), and
	// returns the new handle. It fails, opening nothing, when the store at
	// the binding's path is no longer the one this handle opened (deleted
	// or replaced since): up never serves another store under a binding's
	// name. Health and Describe keep working on the closed handle (they
	// only stat). A queue, a store in memory or an engine without
	// CloseIdle returns an error matching ErrNoReopen.
	Reopen(ctx context.Context) (Handle, error)
	// Close closes the handle and what was opened for it. A store whose
	// files were replaced since the open is left open (closing could touch
	// the files now at its path); the error matches ErrReplaced.
	Close() error
}

// ErrNoReopen is matched by the error of Handle.Reopen for a handle that
// is not closed while idle.
var ErrNoReopen = errors.New("the store is kept open while up serves it, never closed while idle and reopened")

// ErrReplaced is matched by the error of Handle.Close on a store whose
// directory or file was deleted or replaced since the open.
var ErrReplaced = errors.New("store was deleted or replaced; its handle is left open until the process exits, so closing it cannot touch the files now at its path")

// ErrNoProbe is matched by the error of Handle.Probe for a store up's hint
// source cannot watch.
var ErrNoProbe = errors.New("no store directory to watch for foreign writers")

// Probe answers up's hint source about one queue store on a connection of
// its own: has another connection committed, how many messages are due,
// when is the next one due, the last id. Not safe for concurrent use.
type Probe interface {
	// Dir is the store's directory and File the base name of its database
	// file, which the hint source watches.
	Dir() string
	File() string
	// DataVersion changes when another connection committed.
	DataVersion(ctx context.Context) (int64, error)
	// CountDue counts the messages due at now (unix ms), up to max.
	CountDue(ctx context.Context, now, max int64) (int64, error)
	// NextVisible is the earliest time (unix ms) after now at which a
	// message becomes due; not Valid when none waits.
	NextVisible(ctx context.Context, now int64) (sql.NullInt64, error)
	// LastID is the largest message id ever inserted.
	LastID(ctx context.Context) (int64, error)
	Close() error
}

// Problem is one finding of Check.
type Problem struct {
	Kind string `json:"kind"`
	// Object is what the problem is about (a schema object, a file, a
	// stream), or "".
	Object  string `json:"object,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string { return p.Kind + ": " + p.Message }

// Report is what Check found in one binding's store; its JSON is one store
// of `localcloud check --json` (docs/CLI.md).
type Report struct {
	Binding  string    `json:"binding"`
	Type     string    `json:"type"`
	Format   string    `json:"format"`
	Path     string    `json:"path"`
	File     string    `json:"file"`
	Exists   bool      `json:"exists"`
	OK       bool      `json:"ok"`
	Objects  int       `json:"objects"`
	Problems []Problem `json:"problems"`
	Notes    []string  `json:"notes"`
	// Engine, Stream, Replicas and Leader describe a store that is a
	// stream (Format "jetstream"; Path and File are then ""); absent for a
	// file. Skipped: not checked, a note says why.
	Engine   string `json:"engine,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Replicas int    `json:"replicas,omitempty"`
	Leader   string `json:"leader,omitempty"`
	Skipped  bool   `json:"skipped,omitempty"`
	// Summary is check's line for the store when it has no problem
	// ("ok (localqueue.v1, 9 schema objects, ...) FILE").
	Summary string `json:"-"`
}

// Backup is a backup that was written and verified.
type Backup struct {
	Format  string // what the backup holds ("localqueue.v1")
	Source  string // the store's file
	Path    string // the backup
	Bytes   int64
	Objects int // schema objects verified
}

// Restored is a finished restore.
type Restored struct {
	Format string
	Source string // the backup, as an absolute path
	Store  string // the store's file, now holding the backup's data
	// Replaced is where the store it replaced is kept; "" when there was
	// none.
	Replaced string
}

// ScratchSpec is a temporary store of a load test.
type ScratchSpec struct {
	Type       config.Type
	Durability string
	// Replicas is the replicas asked for; 0: the engine's default.
	Replicas int
	// Processes is how many processes share the store.
	Processes int
}

// Scratch is a temporary store of a load test: each Open gives a new
// handle on it, as each load process or worker group opens its own.
type Scratch interface {
	OpenKV(ctx context.Context) (*kv.Store, error)
	OpenQueue(ctx context.Context) (*queue.Queue, error)
	// Location is what OpenScratch takes in another process.
	Location() string
	// Place says where it is; Describe is what a report says of it beyond
	// its engine ("" for nothing).
	Place() Place
	Describe() string
	// Remove deletes the store (not in a process of OpenScratch).
	Remove(ctx context.Context) error
}

// HintError is a failure with what to do about it: the CLI prints Err and
// then "Try: " and Try.
type HintError struct {
	Err error
	Try string
}

func (e *HintError) Error() string { return e.Err.Error() }
func (e *HintError) Unwrap() error { return e.Err }

// Hint returns err with try as what to do about it.
func Hint(err error, try string) error { return &HintError{Err: err, Try: try} }

// Env is where a tool works: the stack, and what it has of the running up.
// Create it per command (or once in up) and Close it when done: it holds
// what the engines share between the handles opened through it (one
// connection to JetStream).
type Env struct {
	// Stack is the loaded stack file; nil when it could not be read.
	Stack *config.Stack
	// Logger receives the engines' warnings; nil discards them.
	Logger *slog.Logger
	// UpRunning reports that a localcloud up serves Stack's data dir, and
	// UpURL is its NATS URL ("" while it starts). Both are zero in up
	// itself.
	UpRunning bool
	UpURL     string
	// Connect connects to up's embedded NATS server in process; set by up
	// only.
	Connect func(name string) (*nats.Conn, error)
	// Exclusive takes what keeps an up from serving Stack (and starting)
	// until release is called: up's data-dir lock. Restore of a store in
	// files takes it; nil means the caller holds it already.
	Exclusive func() (release func(), err error)

	mu     sync.Mutex
	shared map[string]io.Closer
	closed bool
}

// Log returns env's logger, one that discards when it has none.
func (env *Env) Log() *slog.Logger {
	if env == nil || env.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return env.Logger
}

// Shared returns the value env holds under key, made with open on first
// use and closed by env.Close: what an engine shares between the handles
// of one Env.
func Shared[T io.Closer](env *Env, key string, open func() (T, error)) (T, error) {
	var zero T
	env.mu.Lock()
	defer env.mu.Unlock()
	if env.closed {
		return zero, errors.New("engine: the tools' environment is closed")
	}
	if c, ok := env.shared[key]; ok {
		v, ok := c.(T)
		if !ok {
			return zero, fmt.Errorf("engine: shared %q holds a %T", key, c)
		}
		return v, nil
	}
	v, err := open()
	if err != nil {
		return zero, err
	}
	if env.shared == nil {
		env.shared = map[string]io.Closer{}
	}
	env.shared[key] = v
	return v, nil
}

// Close closes what env shares. Close the handles first.
func (env *Env) Close() error {
	env.mu.Lock()
	defer env.mu.Unlock()
	env.closed = true
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(env.shared)) {
		errs = append(errs, env.shared[k].Close())
	}
	env.shared = nil
	return errors.Join(errs...)
}

// registry holds the Tools by engine name.
var registry struct {
	mu sync.RWMutex
	m  map[string]Tools
}

// Register makes t the tools of the engine t.Name(). Registering a name
// twice, or an empty one, panics: a programming error, as in
// database/sql.Register.
func Register(t Tools) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	name := t.Name()
	if name == "" {
		panic("engine: Register with an empty name")
	}
	if _, dup := registry.m[name]; dup {
		panic("engine: Register called twice for engine " + name)
	}
	if registry.m == nil {
		registry.m = map[string]Tools{}
	}
	registry.m[name] = t
}

// Lookup returns the tools of the engine called name.
func Lookup(name string) (Tools, bool) {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	t, ok := registry.m[name]
	return t, ok
}

// Names returns the registered engines' names, sorted.
func Names() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return slices.Sorted(maps.Keys(registry.m))
}

// For returns the tools of b's engine (config.DefaultEngine when b names
// none).
func For(b config.Binding) (Tools, error) {
	name := b.Engine
	if name == "" {
		name = config.DefaultEngine
	}
	t, ok := Lookup(name)
	if !ok {
		return nil, fmt.Errorf("binding %s: no engine %q in this build of localcloud (it has %s)", b.Name, name, strings.Join(Names(), ", "))
	}
	return t, nil
}
