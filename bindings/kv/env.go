package kv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/localcloud/localcloud/bindings"
)

// Service is the "service" value of a KV binding's JSON in the environment.
const Service = "local-kv"

// EnvBindingPrefix starts the variable that carries a binding to a program.
const EnvBindingPrefix = "LOCALCLOUD_BINDING_"

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
func EnvName(name string) string {
	return EnvBindingPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

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

func fromEnv(ctx context.Context, name string, lookup func(string) (string, bool), opts []Option) (*Store, error) {
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

func readEnv(name string, lookup func(string) (string, bool)) (EnvBinding, error) {
	if name == "" {
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed, "binding name: must not be empty")
	}
	v := EnvName(name)
	raw, ok := lookup(v)
	if !ok || strings.TrimSpace(raw) == "" {
		what := "is not set"
		if ok {
			what = "is empty"
		}
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s %s; start the program with `localcloud run -- CMD` or `eval \"$(localcloud env)\"`, "+
				"and check that the stack has a kv binding called %q", v, what, name)
	}
	var b EnvBinding
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		return EnvBinding{}, bindings.Wrap(bindings.CodeBindingSetupFailed, err,
			"%s: want JSON like {\"service\":%q,\"dataDir\":\"/abs/dir\"}, got %q", v, Service, snippet(raw))
	}
	if b.Service != Service {
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: service is %q, want %q (is %q a KV binding?)", v, b.Service, Service, name)
	}
	if b.DataDir == "" {
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed, "%s: dataDir is missing", v)
	}
	if !filepath.IsAbs(b.DataDir) {
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: dataDir must be an absolute path, got %q", v, b.DataDir)
	}
	if _, err := bindings.ParseDurability(b.Durability); err != nil {
		return EnvBinding{}, bindings.Errorf(bindings.CodeBindingSetupFailed,
			"%s: durability must be %q or %q, got %q", v, bindings.DurabilityNormal, bindings.DurabilityFull, b.Durability)
	}
	return b, nil
}

// snippet shortens a malformed value for an error message.
func snippet(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
