package supervisor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

func envJSON(t *testing.T, vars []EnvVar, name string) map[string]any {
	t.Helper()
	for _, v := range vars {
		if v.Name == config.EnvName(name) {
			var m map[string]any
			if err := json.Unmarshal([]byte(v.Value), &m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no variable for %s in %v", name, vars)
	return nil
}

func TestAppEnvJetStream(t *testing.T) {
	dir := t.TempDir()
	src := `version: 1
name: shop
notify: {listen: "127.0.0.1:0", token: "${HINT_TOKEN}"}
bindings:
  carts: {type: kv, engine: jetstream}
  orders: {type: queue, engine: jetstream, visibilityTimeout: 45s, maxAttempts: 3, deadLetter: orders-dlq}
  orders-dlq: {type: queue, engine: jetstream}
`
	lookup := func(k string) (string, bool) {
		return map[string]string{"HINT_TOKEN": "hint-secret", "NATS_TOKEN": "js-secret"}[k], true
	}
	st, err := config.Parse(strings.NewReader(src), "stack.yaml", dir, config.WithLookupEnv(lookup))
	if err != nil {
		t.Fatal(err)
	}
	vars, err := AppEnv(st, "nats://127.0.0.1:4999")
	if err != nil {
		t.Fatal(err)
	}
	kvj := envJSON(t, vars, "carts")
	if kvj["service"] != "jetstream-kv" || kvj["name"] != "carts" || kvj["replicas"] != 1.0 ||
		kvj["tokenEnv"] != "LOCALCLOUD_NATS_TOKEN" || kvj["servers"].([]any)[0] != "nats://127.0.0.1:4999" {
		t.Errorf("kv JSON %v", kvj)
	}
	q := envJSON(t, vars, "orders")
	dl, _ := q["deadLetter"].(map[string]any)
	if q["service"] != "jetstream-queue" || q["visibilityTimeoutMs"] != 45000.0 || q["retryDelayMs"] != 1000.0 ||
		q["dedupWindowMs"] != 300000.0 || q["maxAttempts"] != 3.0 || dl["name"] != "orders-dlq" || q["queuePath"] != nil {
		t.Errorf("queue JSON %v", q)
	}

	// A cluster: its servers, the token by name only, creds and TLS paths.
	src2 := `version: 1
name: shop
jetstream:
  servers: [nats://10.0.0.1:4222, nats://10.0.0.2:4222]
  token: ${NATS_TOKEN}
  creds: app.creds
  tls: {ca: ca.pem}
bindings:
  orders: {type: queue, engine: jetstream}
`
	st, err = config.Parse(strings.NewReader(src2), "stack.yaml", dir, config.WithLookupEnv(lookup))
	if err != nil {
		t.Fatal(err)
	}
	vars, err = AppEnv(st, "nats://127.0.0.1:4999")
	if err != nil {
		t.Fatal(err)
	}
	q = envJSON(t, vars, "orders")
	tls, _ := q["tls"].(map[string]any)
	if q["tokenEnv"] != "NATS_TOKEN" || q["replicas"] != 3.0 || len(q["servers"].([]any)) != 2 ||
		q["creds"] != dir+"/app.creds" || tls["ca"] != dir+"/ca.pem" {
		t.Errorf("cluster queue JSON %v", q)
	}
	for _, v := range vars {
		if strings.Contains(v.Value, "js-secret") {
			t.Errorf("%s carries the cluster token: %s", v.Name, v.Value)
		}
	}
}
