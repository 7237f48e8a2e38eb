package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// EnvVar is one variable of the app contract.
type EnvVar struct{ Name, Value string }

// String returns NAME=VALUE, as exec.Cmd.Env wants it.
func (v EnvVar) String() string { return v.Name + "=" + v.Value }

// AppEnv returns the environment an app of st needs, in this order: the
// stack name, the NATS URL (left out when natsURL is ""), the token when the
// stack sets one, the runtime file (always), and per binding LOCALCLOUD_BINDING_<NAME> holding the
// binding's JSON on one line. `localcloud env`, `localcloud run` and
// localcloudtest all use it.
func AppEnv(st *config.Stack, natsURL string) ([]EnvVar, error) {
	vars := []EnvVar{{bindings.EnvStackName, st.Name}}
	if natsURL != "" {
		vars = append(vars, EnvVar{bindings.EnvNATSURL, natsURL})
	}
	if st.Notify.Token != "" {
		vars = append(vars, EnvVar{bindings.EnvNATSToken, st.Notify.Token})
	}
	// Where a client whose hint connection dropped finds the URL of an up
	// restarted on another port (notify.FollowRuntime).
	vars = append(vars, EnvVar{bindings.EnvRuntimeFile, filepath.Join(st.DataDir, RuntimeFileName)})
	for _, b := range st.Bindings {
		v := sqliteEnv(st, b)
		if b.Engine == config.EngineJetStream {
			v = jetStreamEnv(st, b, natsURL)
		}
		if v == nil {
			continue
		}
		js, err := MarshalCompact(v)
		if err != nil {
			return nil, fmt.Errorf("encode binding %s: %w", b.Name, err)
		}
		vars = append(vars, EnvVar{config.EnvName(b.Name), js})
	}
	return vars, nil
}

// JetStreamConn returns how the bindings of st reach JetStream: the
// stack's cluster (jetstream.servers, the token by its variable's name,
// creds, TLS), or up's embedded server at natsURL (none when natsURL is
// "") with notify.token, which apps find in LOCALCLOUD_NATS_TOKEN.
func JetStreamConn(st *config.Stack, natsURL string) jsengine.Conn {
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

// jsQueueEnv is a jetstream queue binding's JSON: the engine's part and
// the queue settings of a local-queue binding (queue.ServiceJetStream).
type jsQueueEnv struct {
	jsengine.EnvBinding
	VisibilityTimeout   string               `json:"visibilityTimeout"`
	VisibilityTimeoutMs *int64               `json:"visibilityTimeoutMs"`
	MaxAttempts         int                  `json:"maxAttempts,omitempty"`
	DeadLetter          *queue.EnvDeadLetter `json:"deadLetter,omitempty"`
	RetryDelay          string               `json:"retryDelay"`
	RetryDelayMs        *int64               `json:"retryDelayMs"`
	MaxRetryDelay       string               `json:"maxRetryDelay"`
	MaxRetryDelayMs     *int64               `json:"maxRetryDelayMs"`
	DedupWindow         string               `json:"dedupWindow"`
	DedupWindowMs       *int64               `json:"dedupWindowMs"`
}

func jetStreamEnv(st *config.Stack, b config.Binding, natsURL string) any {
	eb := jsengine.EnvBinding{Name: b.Name, Conn: JetStreamConn(st, natsURL), Replicas: b.Replicas, Durability: b.Durability}
	switch b.Type {
	case config.TypeKV:
		eb.Service = kv.ServiceJetStream
		return eb
	case config.TypeQueue:
		eb.Service = queue.ServiceJetStream
		q := jsQueueEnv{
			EnvBinding:          eb,
			VisibilityTimeout:   b.VisibilityTimeout.String(),
			VisibilityTimeoutMs: ptrTo(b.VisibilityTimeout.Milliseconds()),
			RetryDelay:          b.RetryDelay.String(),
			RetryDelayMs:        ptrTo(b.RetryDelay.Milliseconds()),
			MaxRetryDelay:       b.MaxRetryDelay.String(),
			MaxRetryDelayMs:     ptrTo(b.MaxRetryDelay.Milliseconds()),
			DedupWindow:         b.DedupWindow.String(),
			DedupWindowMs:       ptrTo(b.DedupWindow.Milliseconds()),
		}
		if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 {
			q.MaxAttempts = b.MaxAttempts
			q.DeadLetter = &queue.EnvDeadLetter{Binding: dl.Name, Name: dl.Name}
		}
		return q
	}
	return nil
}

// sqliteEnv is a sqlite binding's JSON (kv.EnvBinding, queue.EnvBinding); nil for an unknown type.
func sqliteEnv(st *config.Stack, b config.Binding) any {
	var v any
	switch b.Type {
	case config.TypeKV:
		v = kv.EnvBinding{Service: kv.Service, DataDir: b.Path, Durability: b.Durability}
	case config.TypeQueue:
		ms := b.VisibilityTimeout.Milliseconds()
		eb := queue.EnvBinding{
			Service:           queue.Service,
			QueuePath:         b.Path,
			Subject:           config.Subject(st.Name, b.Name),
			VisibilityTimeout: b.VisibilityTimeout.String(),
			// The same in milliseconds, for apps in any language.
			VisibilityTimeoutMs: &ms,
			Durability:          b.Durability,
			// Consume's retry back-off and the dedup window, so every
			// process of the app applies the same policy.
			RetryDelay:      b.RetryDelay.String(),
			RetryDelayMs:    ptrTo(b.RetryDelay.Milliseconds()),
			MaxRetryDelay:   b.MaxRetryDelay.String(),
			MaxRetryDelayMs: ptrTo(b.MaxRetryDelay.Milliseconds()),
			DedupWindow:     b.DedupWindow.String(),
			DedupWindowMs:   ptrTo(b.DedupWindow.Milliseconds()),
		}
		// The dead-letter policy travels with the binding so every
		// process of the app enforces it (config checked deadLetter).
		if dl, ok := st.Binding(b.DeadLetter); ok && b.MaxAttempts > 0 {
			eb.MaxAttempts = b.MaxAttempts
			eb.DeadLetter = &queue.EnvDeadLetter{Binding: dl.Name, QueuePath: dl.Path}
		}
		v = eb
	}
	return v
}

// MarshalCompact encodes v as one line of JSON without HTML escaping, so
// paths stay readable.
func MarshalCompact(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

func ptrTo[T any](v T) *T { return &v }
