package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// EnvVar is one variable of the app contract.
type EnvVar struct{ Name, Value string }

// String returns NAME=VALUE, as exec.Cmd.Env wants it.
func (v EnvVar) String() string { return v.Name + "=" + v.Value }

// AppEnv returns the environment an app of st needs, in this order: the
// stack name, the NATS URL (left out when natsURL is ""), the token when the
// stack sets one, the runtime file (always), and per binding
// LOCALCLOUD_BINDING_<NAME> holding the binding's JSON on one line, as its
// engine writes it (engine.Tools.AppBinding). `localcloud env`, `localcloud run` and
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
		t, err := engine.For(b)
		if err != nil {
			return nil, err
		}
		v, err := t.AppBinding(st, b, natsURL)
		if err != nil {
			return nil, err
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
