package kv

import (
	"context"
	"fmt"
	"os"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
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

func init() { engines.Register(ServiceJetStream, jsengine.EnvKV{}) }

// Service is the "service" value of a KV binding's JSON in the environment.
const Service = "local-kv"

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
// LOCALCLOUD_BINDING_<NAME>, checks that it describes a KV store and opens
// the store in its dataDir with its durability. opts are applied after the
// settings from the environment, so they win.
//
// A missing variable, malformed JSON or a binding of another service gives
// an error matching bindings.ErrBindingSetupFailed whose message names the
// variable.
func FromEnv(ctx context.Context, name string, opts ...Option) (*Store, error) {
	return fromEnv(ctx, name, os.LookupEnv, opts)
}

// engines holds the engines of other services (Register).
var engines bindings.Engines[driver.Engine]

// Register makes FromEnv open a binding whose JSON names service with the
// engine e, which gets the binding's JSON in driver.Config.Binding. The
// SQLite engine ("local-kv", Service) is built in. Registering a service
// twice panics.
func Register(service string, e driver.Engine) {
	if service == Service {
		panic("kv: Register: " + Service + " is the built-in SQLite engine")
	}
	engines.Register(service, e)
}

func fromEnv(ctx context.Context, name string, lookup func(string) (string, bool), opts []Option) (*Store, error) {
	if raw, ok := lookup(EnvName(name)); ok {
		if svc := bindings.EnvService(raw); svc != Service {
			if e, ok := engines.Lookup(svc); ok {
				s, err := openEngine(ctx, e, driver.Config{Binding: []byte(raw)}, opts)
				if err != nil {
					return nil, fmt.Errorf("open KV binding from %s: %w", EnvName(name), err)
				}
				return s, nil
			}
		}
	}
	b, err := readEnv(name, lookup)
	if err != nil {
		return nil, err
	}
	d, _ := bindings.ParseDurability(b.Durability) // checked by readEnv
	all := append([]Option{WithDurability(d)}, opts...)
	s, err := Open(ctx, b.DataDir, all...)
	if err != nil {
		return nil, fmt.Errorf("open KV binding from %s: %w", EnvName(name), err)
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
