package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
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

func init() { engines.Register(ServiceJetStream, jsengine.EnvQueue{}) }

// Service is the "service" value of a queue binding's JSON in the environment.
const Service = "local-queue"

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
	Service           string `json:"service"`
	QueuePath         string `json:"queuePath"`
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
// LOCALCLOUD_BINDING_<NAME>, checks that it describes a queue and opens the
// store in its queuePath with its visibility timeout (as the default
// visibility of Receive) and durability. When LOCALCLOUD_NATS_URL is set and
// the binding has a subject, it also turns hints on with
// WithHints(LOCALCLOUD_NATS_URL, LOCALCLOUD_NATS_TOKEN, subject), so Send
// and Nack wake consumers in other processes and ReceiveWait and Consume
// are woken by them; without it they rely on their fallback poll. opts are
// applied after the settings from the environment, so they win (pass
// WithHints("", "", "") to turn hints off).
//
// A missing variable, malformed JSON or a binding of another service gives
// an error matching bindings.ErrBindingSetupFailed whose message names the
// variable.
func FromEnv(ctx context.Context, name string, opts ...Option) (*Queue, error) {
	return fromEnv(ctx, name, os.LookupEnv, opts)
}

// engines holds the engines of other services (Register).
var engines bindings.Engines[driver.Engine]

// Register makes FromEnv open a binding whose JSON names service with the
// engine e, which gets the binding's JSON in driver.Config.Binding and the
// binding's name in driver.Config.BindingName. The SQLite engine
// ("local-queue", Service) is built in. Registering a service twice panics.
func Register(service string, e driver.Engine) {
	if service == Service {
		panic("queue: Register: " + Service + " is the built-in SQLite engine")
	}
	engines.Register(service, e)
}

func fromEnv(ctx context.Context, name string, lookup func(string) (string, bool), opts []Option) (*Queue, error) {
	if raw, ok := lookup(EnvName(name)); ok {
		if svc := bindings.EnvService(raw); svc == ServiceJetStream {
			return fromJetStreamEnv(ctx, name, raw, opts)
		} else if svc != Service {
			if e, ok := engines.Lookup(svc); ok {
				all := append([]Option{WithBindingName(name)}, opts...)
				q, err := openEngine(ctx, e, driver.Config{Binding: []byte(raw)}, all)
				if err != nil {
					return nil, fmt.Errorf("open queue binding from %s: %w", EnvName(name), err)
				}
				return q, nil
			}
		}
	}
	b, err := readEnv(name, lookup)
	if err != nil {
		return nil, err
	}
	d, _ := bindings.ParseDurability(b.Durability) // checked by readEnv
	all := []Option{WithDurability(d)}
	if vt, ok, _ := envVisibility(EnvName(name), b); ok { // checked by readEnv
		all = append(all, WithDefaultVisibility(vt))
	}
	all = append(all, WithBindingName(name))
	pol, _ := envPolicy(EnvName(name), b) // checked by readEnv
	all = append(all, pol...)
	if b.MaxAttempts > 0 {
		all = append(all, WithDeadLetter(b.MaxAttempts, b.DeadLetter.QueuePath)) // checked by readEnv
	}
	url, _ := lookup(bindings.EnvNATSURL)
	rt, _ := lookup(bindings.EnvRuntimeFile)
	if (url != "" || rt != "") && b.Subject != "" {
		token, _ := lookup(bindings.EnvNATSToken)
		all = append(all, WithHints(url, token, b.Subject), WithHintsRuntime(rt))
	}
	q, err := Open(ctx, b.QueuePath, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("open queue binding from %s: %w", EnvName(name), err)
	}
	return q, nil
}

// fromJetStreamEnv opens a jetstream queue binding: the engine reads its
// connection from the JSON, the queue settings become Open options as for
// a local-queue binding.
func fromJetStreamEnv(ctx context.Context, name, raw string, opts []Option) (*Queue, error) {
	v := EnvName(name)
	var b EnvBinding
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "%s: decode binding JSON", v)
	}
	all := []Option{WithBindingName(name)}
	vt, ok, err := envVisibility(v, b)
	if err != nil {
		return nil, err
	}
	if ok {
		all = append(all, WithDefaultVisibility(vt))
	}
	pol, err := envPolicy(v, b)
	if err != nil {
		return nil, err
	}
	all = append(all, pol...)
	switch {
	case b.MaxAttempts < 0 || b.MaxAttempts > MaxAttemptsLimit:
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: maxAttempts must be between 1 and %d, got %d", v, MaxAttemptsLimit, b.MaxAttempts)
	case b.MaxAttempts > 0 && (b.DeadLetter == nil || b.DeadLetter.Name == ""):
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: maxAttempts needs deadLetter.name: a message past maxAttempts must have somewhere to go", v)
	case b.MaxAttempts > 0:
		all = append(all, WithDeadLetter(b.MaxAttempts, b.DeadLetter.Name))
	}
	if b.Durability != "" {
		d, err := bindings.ParseDurability(b.Durability)
		if err != nil {
			return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"%s: durability must be %q or %q, got %q", v, bindings.DurabilityNormal, bindings.DurabilityFull, b.Durability)
		}
		all = append(all, WithDurability(d))
	}
	q, err := openEngine(ctx, jsengine.EnvQueue{}, driver.Config{Binding: []byte(raw)}, append(all, opts...))
	if err != nil {
		return nil, fmt.Errorf("open queue binding from %s: %w", v, err)
	}
	return q, nil
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
	if _, _, err := envVisibility(v, b); err != nil {
		return EnvBinding{}, err
	}
	if _, err := envPolicy(v, b); err != nil {
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
func envVisibility(v string, b EnvBinding) (time.Duration, bool, error) {
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
func envPolicy(v string, b EnvBinding) ([]Option, error) {
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
