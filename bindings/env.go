package bindings

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Environment variables of the app contract: `localcloud env` and
// `localcloud run` set them, and the FromEnv functions of kv and queue read
// them. They are the one place these names are spelled.
const (
	// EnvStackName holds the stack's name.
	EnvStackName = "LOCALCLOUD_STACK_NAME"
	// EnvNATSURL holds the URL of the running up's hint server. It is
	// missing when up is not running and the stack picks a free port.
	EnvNATSURL = "LOCALCLOUD_NATS_URL"
	// EnvNATSToken holds the hint server's token; set only when the stack
	// sets notify.token.
	EnvNATSToken = "LOCALCLOUD_NATS_TOKEN"
	// EnvRuntimeFile holds the absolute path of the stack's runtime.json
	// (<dataDir>/runtime.json), which the running up rewrites with its
	// NATS URL (natsUrl): a client whose hint connection drops reads it
	// again to find an up restarted on another port. It is set whether or
	// not up runs; the file exists only while it does.
	EnvRuntimeFile = "LOCALCLOUD_RUNTIME_FILE"
	// EnvBindingPrefix starts the variable that carries one binding's JSON:
	// LOCALCLOUD_BINDING_<NAME>, NAME in upper case with - as _.
	EnvBindingPrefix = "LOCALCLOUD_BINDING_"
)

// EnvName returns the variable that carries the binding called name:
// EnvBindingPrefix and the name in upper case with - replaced by _
// ("user-sessions" gives LOCALCLOUD_BINDING_USER_SESSIONS).
func EnvName(name string) string {
	return EnvBindingPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// EnvSpec describes one kind of binding to ReadEnv: the service its JSON
// must name, the words its error messages use, and where the parts every
// binding has sit in its decoded JSON.
type EnvSpec[B any] struct {
	// Service is the "service" value the binding must carry ("local-kv").
	Service string
	// Kind names the binding in the hint for a missing variable
	// ("check that the stack has a kv binding called ...").
	Kind string
	// Title names the binding when the service is wrong
	// ("is \"carts\" a KV binding?").
	Title string
	// Example is the JSON shown when the value does not decode.
	Example string
	// PathField is the JSON name of the store's directory ("dataDir").
	PathField string
	// Fields returns the service, the store's directory and the
	// durability of a decoded binding.
	Fields func(b *B) (service, path, durability string)
}

// ReadEnv reads the binding called name with lookup, decodes its JSON into
// a B and checks what every binding has: the service, an absolute store
// directory and a valid durability. Unknown fields are ignored. Every
// problem is an error matching ErrBindingSetupFailed that names the
// variable.
func ReadEnv[B any](name string, lookup func(string) (string, bool), spec EnvSpec[B]) (B, error) {
	var zero B
	raw, err := EnvValue(name, lookup, spec.Kind)
	if err != nil {
		return zero, err
	}
	v := EnvName(name)
	var b B
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return zero, Wrap(CodeBindingSetupFailed, err, "%s: want JSON like %s, got %q", v, spec.Example, snippet(raw))
	}
	service, path, durability := spec.Fields(&b)
	if service != spec.Service {
		return zero, Errorf(CodeBindingSetupFailed,
			"%s: service is %q, want %q (is %q a %s binding?)", v, service, spec.Service, name, spec.Title)
	}
	if path == "" {
		return zero, Errorf(CodeBindingSetupFailed, "%s: %s is missing", v, spec.PathField)
	}
	if !filepath.IsAbs(path) {
		return zero, Errorf(CodeBindingSetupFailed,
			"%s: %s must be an absolute path, got %q", v, spec.PathField, path)
	}
	if _, err := ParseDurability(durability); err != nil {
		return zero, Errorf(CodeBindingSetupFailed,
			"%s: durability must be %q or %q, got %q", v, DurabilityNormal, DurabilityFull, durability)
	}
	return b, nil
}

// EnvValue returns the JSON of the binding called name, read with lookup:
// a missing or empty variable is an error naming it, what to run and the
// kind of binding ("kv", "queue") the stack should have.
func EnvValue(name string, lookup func(string) (string, bool), kind string) (string, error) {
	if name == "" {
		return "", Errorf(CodeBindingSetupFailed, "binding name: must not be empty")
	}
	v := EnvName(name)
	raw, ok := lookup(v)
	if !ok || strings.TrimSpace(raw) == "" {
		what := "is not set"
		if ok {
			what = "is empty"
		}
		return "", Errorf(CodeBindingSetupFailed,
			"%s %s; start the program with `localcloud run -- CMD` or `eval \"$(localcloud env)\"`, "+
				"and check that the stack has a %s binding called %q", v, what, kind, name)
	}
	return raw, nil
}

// Snippet shortens a malformed value for an error message.
func Snippet(s string) string { return snippet(s) }

// EnvBindings returns the names of the bindings in environ (KEY=VALUE
// entries) whose JSON names one of the services keep accepts, sorted: the
// stack's bindings, as FromEnv reports them when it finds no store.
func EnvBindings(environ []string, keep func(service string) bool) []string {
	var names []string
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		rest, isBinding := strings.CutPrefix(k, EnvBindingPrefix)
		if !ok || !isBinding || rest == "" || !keep(EnvService(v)) {
			continue
		}
		names = append(names, strings.ToLower(strings.ReplaceAll(rest, "_", "-")))
	}
	slices.Sort(names)
	return names
}

// NoStore adds to err, the error of FromEnv's open of the binding in
// variable v whose store does not exist (bindings.ErrNoStore), what to do
// and the bindings of this kind ("queue", "KV") that environ has: those
// whose service keep accepts.
func NoStore(err error, v, kind string, environ []string, keep func(service string) bool) error {
	list := "none"
	if have := EnvBindings(environ, keep); len(have) > 0 {
		list = strings.Join(have, ", ")
	}
	return fmt.Errorf("%w; FromEnv opens only a store the stack provisioned, and created nothing: check %s (%s bindings in this environment: %s); "+
		"`localcloud run` and `localcloud env` create the stack's stores", err, v, kind, list)
}

// snippet shortens a malformed value for an error message.
func snippet(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// EnvService returns the "service" value of a binding's JSON, "" when the
// value is not a JSON object with a string service. ReadEnv reports what is
// wrong with such a value; EnvService only lets FromEnv pick an engine.
func EnvService(raw string) string {
	var b struct {
		Service string `json:"service"`
	}
	if json.Unmarshal([]byte(raw), &b) != nil {
		return ""
	}
	return b.Service
}

// Engines is a registry of engines by the "service" value of their
// binding JSON, for FromEnv. It is safe for concurrent use.
type Engines[E any] struct {
	mu sync.RWMutex
	m  map[string]E
}

// Register adds e for service. Registering a service twice, or an empty
// one, panics: it is a programming error, like database/sql.Register.
func (r *Engines[E]) Register(service string, e E) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if service == "" {
		panic("bindings: Register with an empty service")
	}
	if _, dup := r.m[service]; dup {
		panic("bindings: Register called twice for service " + service)
	}
	if r.m == nil {
		r.m = map[string]E{}
	}
	r.m[service] = e
}

// Services returns the services registered, sorted.
func (r *Engines[E]) Services() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.m))
	for s := range r.m {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Lookup returns the engine registered for service.
func (r *Engines[E]) Lookup(service string) (E, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.m[service]
	return e, ok
}
