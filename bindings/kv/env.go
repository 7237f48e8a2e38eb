package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

// ServiceJetStream is the "service" value of a jetstream KV binding's JSON:
//
//	{"service":"jetstream-kv","name":"carts","servers":["nats://127.0.0.1:4222"],
//	 "replicas":1,"tokenEnv":"NATS_TOKEN","creds":"/abs/app.creds",
//	 "tls":{"ca":"/abs/ca.pem"},"durability":"normal"}
//
// FromEnv opens it on the JetStream engine, built in like the SQLite one:
// one connection per distinct server list and credentials in a process,
// shared by its stores and closed with the last of them. The token is read
// from the variable tokenEnv names; the JSON never holds a secret.
const ServiceJetStream = jsengine.ServiceKV

// Service is the "service" value of a local-kv binding's JSON in the
// environment: the SQLite engine's.
const Service = "local-kv"

// The built-in engines, registered as any other (Register): no blank
// import needed.
func init() {
	engines.Register(Service, sqlitekv.Engine{})
	engines.Register(ServiceJetStream, jsengine.EnvKVEngine{})
}

// EnvBindingPrefix starts the variable that carries a binding to a program.
const EnvBindingPrefix = bindings.EnvBindingPrefix

// EnvBinding is the JSON that `localcloud env` and `localcloud run` put in
// LOCALCLOUD_BINDING_<NAME> for a KV binding:
//
//	{"service":"local-kv","dataDir":"/abs/.localcloud/kv/carts","durability":"normal"}
//
// service and dataDir are the shape of the Rust implementation's local
// binding JSON; durability is localcloud's own and may be missing (normal).
// Unknown fields are ignored, so newer writers do not break older readers.
type EnvBinding struct {
	Service    string `json:"service"`
	DataDir    string `json:"dataDir"`
	Durability string `json:"durability,omitempty"`
}

// EnvName returns the variable that carries the binding called name:
// LOCALCLOUD_BINDING_ and the name in upper case with - replaced by _
// ("user-sessions" gives LOCALCLOUD_BINDING_USER_SESSIONS).
func EnvName(name string) string { return bindings.EnvName(name) }

// ReadEnv reads and checks the binding called name from the environment
// without opening it. Every problem is an error matching
// bindings.ErrBindingSetupFailed that names the variable.
func ReadEnv(name string) (EnvBinding, error) { return readEnv(name, os.LookupEnv) }

// FromEnv opens the KV binding called name from the environment that
// `localcloud run` (or `eval "$(localcloud env)"`) sets up: it reads
// LOCALCLOUD_BINDING_<NAME>, looks up the engine its "service" names (the
// SQLite engine for "local-kv", JetStream for "jetstream-kv", or one given
// to Register) and opens the binding's store with it, with its durability.
// The engine reads where the store is from the rest of the JSON. opts are
// applied after the settings from the environment, so they win.
//
// FromEnv never creates a store: the stack provisions them (localcloud up,
// run and env). A binding whose store does not exist (a dataDir or a
// stream name edited by hand, in another case) is an error wrapping
// bindings.ErrNoStore that names the binding, what was looked for and the
// KV bindings the environment has. Open and OpenMemory create.
//
// A missing variable, malformed JSON or a binding of another service gives
// an error matching bindings.ErrBindingSetupFailed whose message names the
// variable.
func FromEnv(ctx context.Context, name string, opts ...Option) (*Store, error) {
	return fromEnv(ctx, name, os.LookupEnv, opts)
}

// engines holds the engines by service (Register).
var engines bindings.Engines[driver.Engine]

// environ lists the environment, for the bindings an error names.
var environ = os.Environ

// Register makes FromEnv open a binding whose JSON names service with the
// engine e, which gets the binding's JSON in driver.Config.Binding (its
// Location empty: the engine reads it from the JSON) and NoCreate set. The
// built-in engines are registered the same way ("local-kv",
// "jetstream-kv"). Registering a service twice panics.
func Register(service string, e driver.Engine) { engines.Register(service, e) }

func fromEnv(ctx context.Context, name string, lookup func(string) (string, bool), opts []Option) (*Store, error) {
	raw, err := bindings.EnvValue(name, lookup, "kv")
	if err != nil {
		return nil, err
	}
	v := EnvName(name)
	var b struct {
		Durability string `json:"durability"`
	}
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return nil, bindings.Wrap(bindings.CodeBindingSetupFailed, err, "%s: want JSON like %s, got %q",
			v, `{"service":"`+Service+`","dataDir":"/abs/dir"}`, bindings.Snippet(raw))
	}
	svc := bindings.EnvService(raw)
	e, ok := engines.Lookup(svc)
	if !ok {
		return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: service is %q, which no KV engine of this program serves (it has %s); is %q a KV binding?",
			v, svc, strings.Join(engines.Services(), ", "), name)
	}
	var all []Option
	if b.Durability != "" {
		d, err := bindings.ParseDurability(b.Durability)
		if err != nil {
			return nil, bindings.Errorf(bindings.CodeBindingSetupFailed,
				"%s: durability must be %q or %q, got %q", v, bindings.DurabilityNormal, bindings.DurabilityFull, b.Durability)
		}
		all = append(all, WithDurability(d))
	}
	s, err := openEngine(ctx, e, driver.Config{Binding: []byte(raw), NoCreate: true}, append(all, opts...))
	if err != nil {
		if errors.Is(err, bindings.ErrNoStore) {
			err = bindings.NoStore(err, v, "KV", environ(), func(svc string) bool { _, ok := engines.Lookup(svc); return ok })
		}
		return nil, fmt.Errorf("open KV binding from %s: %w", v, err)
	}
	return s, nil
}

// envSpec is what bindings.ReadEnv needs to read a KV binding.
var envSpec = bindings.EnvSpec[EnvBinding]{
	Service:   Service,
	Kind:      "kv",
	Title:     "KV",
	Example:   `{"service":"` + Service + `","dataDir":"/abs/dir"}`,
	PathField: "dataDir",
	Fields:    func(b *EnvBinding) (string, string, string) { return b.Service, b.DataDir, b.Durability },
}

func readEnv(name string, lookup func(string) (string, bool)) (EnvBinding, error) {
	return bindings.ReadEnv(name, lookup, envSpec)
}
