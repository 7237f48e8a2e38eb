// Package jstools is engine.Tools of the NATS JetStream engine (engine:
// jetstream): a binding's store is the stream LCKV_<name> or LCQ_<name>
// on up's embedded server or the stack's cluster (jetstream.servers). It
// reaches JetStream as an app's FromEnv does (the stack's servers with the
// token from the variable it names, or the running up's embedded server)
// on one connection per engine.Env, opens a binding through the engine
// behind the public API with the binding's settings, checks a stream's
// settings, leader and replicas, tails a queue by stream sequence (never
// through the consumer), and refuses backup and restore, pointing at
// `nats stream backup` / `restore`.
//
// It is a package of its own, not a file of jsengine: jsengine is linked
// into every app (the public packages import it for FromEnv), and these
// tools import the public packages and the stack file's config.
package jstools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

func init() { engine.Register(Tools{}) }

// Tools is engine.Tools of the JetStream engine. Its zero value is ready.
type Tools struct{}

// Name is "jetstream".
func (Tools) Name() string { return config.EngineJetStream }

// Traits are replicas, on up's server (or the stack's cluster). JetStream
// wakes its consumers itself (no hints) and keeps a delivered message's
// lease end to itself; a load test's processes would each need their own
// connection, unlike an app's stores, so a temporary store is one
// process's.
func (Tools) Traits() engine.Traits { return engine.Traits{Replicas: true, Server: true} }

// Stream is the stream of b: LCKV_<name> for a KV binding, LCQ_<name> for
// a queue.
func Stream(b config.Binding) string {
	if b.Type == config.TypeQueue {
		return "LCQ_" + b.Name
	}
	return "LCKV_" + b.Name
}

// Location is the binding's name (the engine's location).
func (Tools) Location(b config.Binding) string { return b.Name }

// Place is the stream and its replicas.
func (Tools) Place(b config.Binding) engine.Place {
	return engine.Place{Stream: Stream(b), Replicas: b.Replicas}
}

// Where is "jetstream:<stream>".
func (Tools) Where(b config.Binding) string { return "jetstream:" + Stream(b) }

// Describe is "jetstream R<replicas>".
func (Tools) Describe(b config.Binding) string {
	return "jetstream R" + strconv.Itoa(max(b.Replicas, 1))
}

// Needs asks for JetStream on up's embedded server, unless the stack names a
// cluster; a file store that syncs every write for durability full, which
// up cannot set on a cluster of others (a warning).
func (Tools) Needs(st *config.Stack, b config.Binding) engine.Needs {
	full := b.Durability == config.DurabilityFull
	if !st.JetStream.External() {
		return engine.Needs{JetStream: true, SyncAlways: full}
	}
	if full {
		return engine.Needs{Warnings: []string{"durability full cannot be set from here: on an outside cluster the servers' own sync_interval governs " +
			"(set sync_interval: always in their jetstream config); localcloud up provisions the stream only"}}
	}
	return engine.Needs{}
}

// Conn returns how the bindings of st reach JetStream: the stack's cluster
// (jetstream.servers, the token by its variable's name, creds, TLS), or
// up's embedded server at natsURL (none when natsURL is "") with
// notify.token, which apps find in LOCALCLOUD_NATS_TOKEN.
func Conn(st *config.Stack, natsURL string) jsengine.Conn {
	if st.JetStream.External() {
		c := jsengine.Conn{Servers: st.JetStream.Servers, TokenEnv: st.JetStream.TokenEnv, Creds: st.JetStream.Creds}
		if t := st.JetStream.TLS; t != (config.TLS{}) {
			c.TLS = &jsengine.EnvTLS{CA: t.CA, Cert: t.Cert, Key: t.Key}
		}
		return c
	}
	c := jsengine.Conn{Servers: []string{}}
	if natsURL != "" {
		c.Servers = []string{natsURL}
	}
	if st.Notify.Token != "" {
		c.TokenEnv = bindings.EnvNATSToken
	}
	return c
}

// appBinding is a jetstream binding's JSON: the engine's part, then the
// queue settings of a queue binding (queue.EnvSettings).
type appBinding struct {
	Service string `json:"service"`
	Name    string `json:"name"`
	jsengine.Conn
	Replicas int `json:"replicas,omitempty"`
	queue.EnvSettings
}

// AppBinding is the JSON jsengine.EnvKVEngine and jsengine.EnvQueueEngine read: the
// connection (no secret: the token by its variable's name), the name and
// replicas; for a queue its settings and the dead-letter queue by name.
func (Tools) AppBinding(st *config.Stack, b config.Binding, natsURL string) (any, error) {
	v := appBinding{Name: b.Name, Conn: Conn(st, natsURL), Replicas: b.Replicas}
	switch b.Type {
	case config.TypeKV:
		v.Service = kv.ServiceJetStream
		v.Durability = b.Durability
	case config.TypeQueue:
		v.Service = queue.ServiceJetStream
		v.EnvSettings = engine.QueueEnvSettings(b)
		if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 {
			v.MaxAttempts = b.MaxAttempts
			v.DeadLetter = &queue.EnvDeadLetter{Binding: dl.Name, Name: dl.Name}
		}
	default:
		return nil, fmt.Errorf("binding %s: unknown type %q", b.Name, b.Type)
	}
	return v, nil
}

// ValidReceipt checks r against the receipts b's queue issues
// (jsengine.ValidReceipt).
func (Tools) ValidReceipt(b config.Binding, r string) error {
	if !jsengine.ValidReceipt(b.Name, r) {
		return bindings.Errorf(bindings.CodeInvalidInput, "receipt: %q is not a receipt of jetstream queue %s (they look like js1:DEADLINE:LEASE:$JS.ACK.LCQ_%s.lc...)",
			clip(r, 80), b.Name, b.Name)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// where names where a stack's jetstream bindings live, for messages.
func where(st *config.Stack) string {
	if st.JetStream.External() {
		return "the JetStream cluster " + strings.Join(st.JetStream.Servers, ", ")
	}
	return "up's embedded JetStream"
}

// Exists reports whether b's stream exists.
func (Tools) Exists(ctx context.Context, env *engine.Env, b config.Binding) (bool, error) {
	js, err := jetStream(ctx, env, b)
	if err != nil {
		return false, err
	}
	_, err = js.Stream(ctx, Stream(b))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount),
		errors.Is(err, nats.ErrNoResponders):
		// A server without JetStream answers no API request.
		return onDisk(env, b)
	}
	return false, fmt.Errorf("look up stream %s of %s binding %s: %w", Stream(b), b.Type, b.Name, err)
}

// needStream fails with a hint when b's stream does not exist: up
// provisions it, and only an engine.Create open makes it.
func needStream(ctx context.Context, env *engine.Env, b config.Binding) error {
	ok, err := Tools{}.Exists(ctx, env, b)
	if err != nil || ok {
		return err
	}
	return engine.Hint(fmt.Errorf("%s binding %s has no stream yet (stream %s does not exist on %s)", b.Type, b.Name, Stream(b), where(env.Stack)),
		"localcloud up -f "+env.Stack.File+" creates every stream")
}

// onDisk answers Exists while up's embedded server runs without JetStream
// (no binding of the stack uses it): the stream cannot be read then, but
// its folder in the server's file store tells whether it was ever made. One
// that was is an error, as nobody can tell what it holds: the caller fails
// closed (engine.Stranded).
func onDisk(env *engine.Env, b config.Binding) (bool, error) {
	st := env.Stack
	if st == nil || st.JetStream.External() {
		return false, fmt.Errorf("look up stream %s of %s binding %s: JetStream is not enabled on the server", Stream(b), b.Type, b.Name)
	}
	dir := filepath.Join(st.DataDir, config.JetStreamDir, "jetstream", "$G", "streams", Stream(b))
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("look up stream %s of %s binding %s: %w", Stream(b), b.Type, b.Name, err)
	}
	return false, fmt.Errorf("stream %s of %s binding %s is kept in %s, but up's server runs without JetStream (no binding of the stack uses engine jetstream), so what it holds cannot be counted",
		Stream(b), b.Type, b.Name, dir)
}
