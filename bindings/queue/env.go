package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// ServiceJetStream is the "service" value of a jetstream queue binding's
// JSON: the connection fields of a jetstream KV binding (see
// kv.ServiceJetStream) and the queue settings of a local-queue binding,
// with the dead-letter queue by name:
//
//	{"service":"jetstream-queue","name":"orders","servers":["nats://127.0.0.1:4222"],
//	 "replicas":1,"visibilityTimeout":"30s","visibilityTimeoutMs":30000,...,
//	 "maxAttempts":5,"deadLetter":{"binding":"orders-dlq","name":"orders-dlq"}}
//
// FromEnv opens it on the JetStream engine, built in like the SQLite one.
const ServiceJetStream = jsengine.ServiceQueue

// Service is the "service" value of a local-queue binding's JSON in the
// environment: the SQLite engine's.
const Service = "local-queue"

// The built-in engines, registered as any other (Register): no blank
// import needed.
func init() {
	engines.Register(Service, sqlitequeue.Engine{})
	engines.Register(ServiceJetStream, jsengine.EnvQueueEngine{})
}

// EnvBindingPrefix starts the variable that carries a binding to a program.
const EnvBindingPrefix = bindings.EnvBindingPrefix

// EnvBinding is the JSON that `localcloud env` and `localcloud run` put in
// LOCALCLOUD_BINDING_<NAME> for a queue binding:
//
//	{"service":"local-queue","queuePath":"/abs/.localcloud/queue/orders",
//	 "subject":"localcloud.shop.orders.available","visibilityTimeout":"45s",
//	 "visibilityTimeoutMs":45000,"durability":"normal"}
//
// service, queuePath (the store directory) and subject are the shape of the
// Rust implementation's local binding JSON; visibilityTimeout (a Go
// duration), visibilityTimeoutMs (the same in whole milliseconds, for
// programs in languages without a Go-duration parser) and durability are
// localcloud's own and may be missing (30s, normal). A binding may carry
// either duration field or both; both must then agree to the millisecond
// (visibilityTimeoutMs is the string's duration rounded down to a whole
// millisecond), else the binding is refused, since one of them was edited
// and guessing which would change every lease silently. Unknown fields are
// ignored, so newer writers do not break older readers.
//
// A binding with a dead-letter policy also carries it, so every process of
// the app enforces it (WithDeadLetter):
//
//	"maxAttempts":5,"deadLetter":{"binding":"orders-dlq","queuePath":"/abs/.localcloud/queue/orders-dlq"}
type EnvBinding struct {
	Service   string `json:"service"`
	QueuePath string `json:"queuePath"`
	EnvSettings
}

// EnvSettings are the queue settings of a queue binding's JSON, the same
// on every engine: the engine's own fields (queuePath and subject of a
// local-queue binding, the connection and name of a jetstream-queue one)
// sit beside them. Every field may be missing (the defaults).
type EnvSettings struct {
	// Subject is the subject of the binding's wake-up hints on the stack's
	// NATS server; "" for an engine that wakes consumers itself.
	Subject           string `json:"subject,omitempty"`
	VisibilityTimeout string `json:"visibilityTimeout,omitempty"`
	// VisibilityTimeoutMs is VisibilityTimeout in whole milliseconds; nil
	// when missing.
	VisibilityTimeoutMs *int64         `json:"visibilityTimeoutMs,omitempty"`
	Durability          string         `json:"durability,omitempty"`
	MaxAttempts         int            `json:"maxAttempts,omitempty"`
	DeadLetter          *EnvDeadLetter `json:"deadLetter,omitempty"`
	// RetryDelay and MaxRetryDelay are Consume's retry back-off
	// (WithRetryDelay, WithMaxRetryDelay), DedupWindow how long dedup keys
	// are remembered (WithDedupWindow); each also in whole milliseconds
	// (...Ms), with the rule of visibilityTimeout and visibilityTimeoutMs.
	// Missing: the defaults (1s, 5m, 5m).
	RetryDelay      string `json:"retryDelay,omitempty"`
	RetryDelayMs    *int64 `json:"retryDelayMs,omitempty"`
	MaxRetryDelay   string `json:"maxRetryDelay,omitempty"`
	MaxRetryDelayMs *int64 `json:"maxRetryDelayMs,omitempty"`
	DedupWindow     string `json:"dedupWindow,omitempty"`
	DedupWindowMs   *int64 `json:"dedupWindowMs,omitempty"`
}

// EnvDeadLetter is the dead-letter queue of an EnvBinding.
type EnvDeadLetter struct {
	Binding   string `json:"binding"`
	QueuePath string `json:"queuePath,omitempty"`
	// Name is the dead-letter queue's name on a jetstream binding (its
	// stream LCQ_<name>); "" on a local-queue binding.
	Name string `json:"name,omitempty"`
}

// EnvName returns the variable that carries the binding called name:
// LOCALCLOUD_BINDING_ and the name in upper case with - replaced by _
// ("orders-dlq" gives LOCALCLOUD_BINDING_ORDERS_DLQ).
func EnvName(name string) string { return bindings.EnvName(name) }

// ReadEnv reads and checks the binding called name from the environment
// without opening it, for programs that also want its hint subject. Every
// problem is an error matching bindings.ErrBindingSetupFailed that names the
// variable.
func ReadEnv(name string) (EnvBinding, error) { return readEnv(name, os.LookupEnv) }

// FromEnv opens the queue binding called name from the environment that
// `localcloud run` (or `eval "$(localcloud env)"`) sets up: it reads
// LOCALCLOUD_BINDING_<NAME>, looks up the engine its "service" names (the
// SQLite engine for "local-queue", JetStream for "jetstream-queue", or one
// given to Register) and opens the binding's store with it, with the
// binding's queue settings (EnvSettings: visibility timeout as the default
// lease of Receive, durability, dead-letter policy, retry back-off, dedup
// window). The engine reads where the store is from the rest of the JSON.
// When LOCALCLOUD_NATS_URL is set and the binding has a hint subject (a
// local-queue binding), it also turns hints on with
// WithHints(LOCALCLOUD_NATS_URL, LOCALCLOUD_NATS_TOKEN, subject), so Send
// and Nack wake consumers in other processes and ReceiveWait and Consume
// are woken by them; without it they rely on their fallback poll. opts are
// applied after the settings from the environment, so they win (pass
// WithHints("", "", "") to turn hints off).
//
// FromEnv never creates a store: the stack provisions them (localcloud up,
// run and env). A binding whose store does not exist (a queuePath or a
// stream name edited by hand, in another case) is an error wrapping
// bindings.ErrNoStore that names the binding, what was looked for and the
// queue bindings the environment has. Open and OpenMemory create.
//
// A missing variable, malformed JSON or a binding of another service gives
// an error matching bindings.ErrBindingSetupFailed whose message names the
// variable.
func FromEnv(ctx context.Context, name string, opts ...Option) (*Queue, error) {
	return fromEnv(ctx, name, os.LookupEnv, opts)
}

// engines holds the engines by service (Register).
var engines bindings.Engines[driver.Engine]

// environ lists the environment, for the bindings an error names.
var environ = os.Environ

// Register makes FromEnv open a binding whose JSON names service with the
// engine e, which gets the binding's JSON in driver.Config.Binding (its
// Location empty: the engine reads it from the JSON), the binding's name in
// driver.Config.BindingName, NoCreate set, and the dead-letter policy's
// maxAttempts with the location for the engine to read from the JSON. The
// built-in engines are registered the same way ("local-queue",
// "jetstream-queue"). Registering a service twice panics.
func Register(service string, e driver.Engine) { engines.Register(service, e) }

func fromEnv(ctx context.Context, name string, lookup func(string) (string, bool), opts []Option) (*Queue, error) {
	raw, err := bindings.EnvValue(name, lookup, "queue")
	if err != nil {
		return nil, err
	}
	v := EnvName(name)
	var s EnvSettings
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "%s: want JSON like %s, got %q",
			v, `{"service":"`+Service+`","queuePath":"/abs/dir","subject":"..."}`, bindings.Snippet(raw))
	}
	svc := bindings.EnvService(raw)
	e, ok := engines.Lookup(svc)
	if !ok {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: service is %q, which no queue engine of this program serves (it has %s); is %q a queue binding?",
			v, svc, strings.Join(engines.Services(), ", "), name)
	}
	all, err := s.options(v)
	if err != nil {
		return nil, err
	}
	cfg := driver.Config{Binding: []byte(raw), NoCreate: true, DeadLetter: driver.DeadLetter{MaxAttempts: s.MaxAttempts}}
	url, _ := lookup(bindings.EnvNATSURL)
	rt, _ := lookup(bindings.EnvRuntimeFile)
	if (url != "" || rt != "") && s.Subject != "" {
		token, _ := lookup(bindings.EnvNATSToken)
		all = append(all, WithHints(url, token, s.Subject), WithHintsRuntime(rt))
	}
	all = append(all, WithBindingName(name))
	q, err := openEngine(ctx, e, cfg, append(all, opts...))
	if err != nil {
		if errors.Is(err, bindings.ErrNoStore) {
			err = bindings.NoStore(err, v, "queue", environ(), func(svc string) bool { _, ok := engines.Lookup(svc); return ok })
		}
		return nil, fmt.Errorf("open queue binding from %s: %w", v, err)
	}
	return q, nil
}

// options are the Open options of the settings s read from variable v, and
// checks the dead-letter policy's maxAttempts (the engine reads where the
// dead-letter queue is).
func (s EnvSettings) options(v string) ([]Option, error) {
	var all []Option
	if s.Durability != "" {
		d, err := bindings.ParseDurability(s.Durability)
		if err != nil {
			return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"%s: durability must be %q or %q, got %q", v, bindings.DurabilityNormal, bindings.DurabilityFull, s.Durability)
		}
		all = append(all, WithDurability(d))
	}
	vt, ok, err := envVisibility(v, s)
	if err != nil {
		return nil, err
	}
	if ok {
		all = append(all, WithDefaultVisibility(vt))
	}
	pol, err := envPolicy(v, s)
	if err != nil {
		return nil, err
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxAttemptsLimit {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: maxAttempts must be between 1 and %d, got %d", v, MaxAttemptsLimit, s.MaxAttempts)
	}
	return append(all, pol...), nil
}

// envSpec is what bindings.ReadEnv needs to read a queue binding.
var envSpec = bindings.EnvSpec[EnvBinding]{
	Service:   Service,
	Kind:      "queue",
	Title:     "queue",
	Example:   `{"service":"` + Service + `","queuePath":"/abs/dir","subject":"..."}`,
	PathField: "queuePath",
	Fields:    func(b *EnvBinding) (string, string, string) { return b.Service, b.QueuePath, b.Durability },
}

// readEnv reads a queue binding and checks, beyond what every binding has,
// its visibility timeout and dead-letter policy.
func readEnv(name string, lookup func(string) (string, bool)) (EnvBinding, error) {
	b, err := bindings.ReadEnv(name, lookup, envSpec)
	if err != nil {
		return EnvBinding{}, err
	}
	v := EnvName(name)
	if _, _, err := envVisibility(v, b.EnvSettings); err != nil {
		return EnvBinding{}, err
	}
	if _, err := envPolicy(v, b.EnvSettings); err != nil {
		return EnvBinding{}, err
	}
	switch {
	case b.MaxAttempts < 0 || b.MaxAttempts > MaxAttemptsLimit:
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: maxAttempts must be between 1 and %d, got %d", v, MaxAttemptsLimit, b.MaxAttempts)
	case b.MaxAttempts > 0 && (b.DeadLetter == nil || b.DeadLetter.QueuePath == ""):
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: maxAttempts needs deadLetter.queuePath: a message past maxAttempts must have somewhere to go", v)
	case b.DeadLetter != nil && !filepath.IsAbs(b.DeadLetter.QueuePath):
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: deadLetter.queuePath must be an absolute path, got %q", v, b.DeadLetter.QueuePath)
	}
	return b, nil
}

// envVisibility returns the visibility timeout of b read from variable v
// and whether b gives one: visibilityTimeout, visibilityTimeoutMs, or both
// when they agree to the millisecond (the string is then used, as it may
// be finer).
func envVisibility(v string, b EnvSettings) (time.Duration, bool, error) {
	var vt time.Duration
	if b.VisibilityTimeout != "" {
		var err error
		vt, err = time.ParseDuration(b.VisibilityTimeout)
		if err != nil || vt < MinVisibility || vt > MaxVisibility {
			return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"%s: visibilityTimeout must be a duration between %s and %s, got %q", v, MinVisibility, MaxVisibility, b.VisibilityTimeout)
		}
	}
	if b.VisibilityTimeoutMs == nil {
		return vt, b.VisibilityTimeout != "", nil
	}
	ms := *b.VisibilityTimeoutMs
	if ms < MinVisibility.Milliseconds() || ms > MaxVisibility.Milliseconds() {
		return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: visibilityTimeoutMs must be between %d and %d (milliseconds), got %d",
			v, MinVisibility.Milliseconds(), MaxVisibility.Milliseconds(), ms)
	}
	if b.VisibilityTimeout == "" {
		return time.Duration(ms) * time.Millisecond, true, nil
	}
	if vt.Milliseconds() != ms {
		return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: visibilityTimeout %q and visibilityTimeoutMs %d disagree (%q is %d ms); give one of them, or both with the same duration",
			v, b.VisibilityTimeout, ms, b.VisibilityTimeout, vt.Milliseconds())
	}
	return vt, true, nil
}

// envPolicy returns the Open options of b's retry back-off and dedup
// window, read from variable v.
func envPolicy(v string, b EnvSettings) ([]Option, error) {
	var opts []Option
	for _, f := range []struct {
		name     string
		s        string
		ms       *int64
		min, max time.Duration
		opt      func(time.Duration) Option
	}{
		{"retryDelay", b.RetryDelay, b.RetryDelayMs, 0, MaxDelay, WithRetryDelay},
		{"maxRetryDelay", b.MaxRetryDelay, b.MaxRetryDelayMs, 0, MaxDelay, WithMaxRetryDelay},
		{"dedupWindow", b.DedupWindow, b.DedupWindowMs, MinDedupWindow, MaxDedupWindow, WithDedupWindow},
	} {
		d, ok, err := envDuration(v, f.name, f.s, f.ms, f.min, f.max)
		if err != nil {
			return nil, err
		}
		if ok {
			opts = append(opts, f.opt(d))
		}
	}
	return opts, nil
}

// envDuration reads the duration field name (a Go duration s) and its
// milliseconds twin (name+"Ms") of a binding from variable v: either or
// both, which must then agree to the millisecond.
func envDuration(v, name, s string, ms *int64, lo, hi time.Duration) (time.Duration, bool, error) {
	var d time.Duration
	if s != "" {
		var err error
		d, err = time.ParseDuration(s)
		if err != nil || d < lo || d > hi {
			return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"%s: %s must be a duration between %s and %s, got %q", v, name, lo, hi, s)
		}
	}
	if ms == nil {
		return d, s != "", nil
	}
	if *ms < lo.Milliseconds() || *ms > hi.Milliseconds() {
		return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: %sMs must be between %d and %d (milliseconds), got %d", v, name, lo.Milliseconds(), hi.Milliseconds(), *ms)
	}
	if s == "" {
		return time.Duration(*ms) * time.Millisecond, true, nil
	}
	if d.Milliseconds() != *ms {
		return 0, false, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: %s %q and %sMs %d disagree (%q is %d ms); give one of them, or both with the same duration",
			v, name, s, name, *ms, s, d.Milliseconds())
	}
	return d, true, nil
}
