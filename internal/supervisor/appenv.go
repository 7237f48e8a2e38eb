package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
)

// EnvVar is one variable of the app contract.
type EnvVar struct{ Name, Value string }

// String returns NAME=VALUE, as exec.Cmd.Env wants it.
func (v EnvVar) String() string { return v.Name + "=" + v.Value }

// AppEnv returns the environment an app of st needs, in this order: the
// stack name, the NATS URL (left out when natsURL is ""), the token when the
// stack sets one, and per binding LOCALCLOUD_BINDING_<NAME> holding the
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
	for _, b := range st.Bindings {
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
		default:
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
