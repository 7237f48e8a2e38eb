package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
)

func TestJetStreamBindings(t *testing.T) {
	dir := t.TempDir()
	src := `version: 1
name: shop
jetstream:
  servers: [nats://127.0.0.1:4222, tls://nats-2.internal:4222]
  token: ${NATS_TOKEN}
  creds: secrets/app.creds
  tls: {ca: ca.pem, cert: /etc/c.pem, key: k.pem}
bindings:
  carts:
    type: kv
    engine: jetstream
  orders:
    type: queue
    engine: jetstream
    replicas: 5
    durability: full
    maxAttempts: 3
    deadLetter: orders-dlq
    retryDelay: 2s
  orders-dlq:
    type: queue
    engine: jetstream
  files:
    type: kv
`
	s, err := parseIn(t, dir, src, config.WithLookupEnv(envOf(map[string]string{"NATS_TOKEN": "s3cret"})))
	if err != nil {
		t.Fatal(err)
	}
	js := s.JetStream
	if strings.Join(js.Servers, ",") != "nats://127.0.0.1:4222,tls://nats-2.internal:4222" || js.TokenEnv != "NATS_TOKEN" ||
		js.Creds != filepath.Join(dir, "secrets/app.creds") || js.TLS.CA != filepath.Join(dir, "ca.pem") ||
		js.TLS.Cert != "/etc/c.pem" || js.TLS.Key != filepath.Join(dir, "k.pem") {
		t.Fatalf("jetstream %+v", js)
	}
	if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(strings.Join([]string{js.TokenEnv, js.Creds}, ""), "NATS_TOKEN", ""), dir, ""), "s3cret") {
		t.Fatal("the token's value is kept")
	}
	carts, _ := s.Binding("carts")
	orders, _ := s.Binding("orders")
	files, _ := s.Binding("files")
	if carts.Engine != config.EngineJetStream || carts.Replicas != 3 || carts.Path != "" {
		t.Errorf("carts %+v: want jetstream, 3 replicas on a cluster, no path", carts)
	}
	if orders.Replicas != 5 || orders.MaxAttempts != 3 || orders.DeadLetter != "orders-dlq" || orders.Durability != "full" {
		t.Errorf("orders %+v", orders)
	}
	if files.Engine != config.EngineSQLite || files.Replicas != 0 || files.Path == "" {
		t.Errorf("files %+v: want sqlite with a path", files)
	}
	if !s.UsesJetStream() {
		t.Error("UsesJetStream false")
	}

	// Embedded: one replica by default.
	s, err = parseIn(t, dir, "version: 1\nname: shop\nbindings:\n  carts:\n    type: kv\n    engine: jetstream\n")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Binding("carts"); b.Replicas != 1 {
		t.Errorf("embedded replicas %d, want 1", b.Replicas)
	}
}

func TestJetStreamBindingMistakes(t *testing.T) {
	dir := t.TempDir()
	head := "version: 1\nname: shop\n"
	for _, c := range []struct{ src, want string }{
		{"bindings:\n  c:\n    type: kv\n    engine: dynamo\n", `bindings.c.engine: must be sqlite or jetstream, got "dynamo"`},
		{"bindings:\n  c:\n    type: kv\n    replicas: 3\n", `bindings.c.replicas: only jetstream bindings have replicas; c uses engine sqlite`},
		{"bindings:\n  c:\n    type: kv\n    engine: jetstream\n    replicas: 6\n", `bindings.c.replicas: must be an integer between 1 and 5, got 6`},
		{"bindings:\n  c:\n    type: kv\n    engine: jetstream\n    replicas: 0\n", `bindings.c.replicas: must be an integer between 1 and 5, got 0`},
		{"bindings:\n  c:\n    type: kv\n    engine: jetstream\n    path: kv/c\n", `bindings.c.path: a jetstream binding has no folder`},
		{"bindings:\n  q:\n    type: queue\n    maxAttempts: 2\n    deadLetter: d\n  d:\n    type: queue\n    engine: jetstream\n",
			`bindings.q.deadLetter: q uses engine sqlite but its dead-letter queue d uses engine jetstream`},
		{"jetstream:\n  servers: [nats://a:4222]\n  token: s3cret\nbindings: {}\n", `jetstream.token: must be ${VAR}`},
		{"jetstream:\n  servers: [http://a:4222]\nbindings: {}\n", `jetstream.servers[0]: must be a nats:// or tls:// URL with a host`},
		{"jetstream:\n  servers: [nats://u:pw@a:4222]\nbindings: {}\n", `jetstream.servers[0]: must not carry a user or password`},
		{"jetstream:\n  servers: []\nbindings: {}\n", `jetstream.servers: must list at least one`},
		{"jetstream:\n  token: ${T}\nbindings: {}\n", `jetstream.token: needs jetstream.servers`},
		{"jetstream:\n  servers: [nats://a:4222]\n  bogus: 1\nbindings: {}\n", `jetstream.bogus: unknown field`},
	} {
		_, err := parseIn(t, dir, head+c.src, config.WithLookupEnv(envOf(map[string]string{"T": "x"})))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.src, err, c.want)
		}
	}
	// A literal token is never echoed back in the problem.
	_, err := parseIn(t, dir, head+"jetstream:\n  servers: [nats://a:4222]\n  token: s3cret\nbindings: {}\n")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("literal token: %v (must not show the value)", err)
	}
}

// TestJetStreamDirIsReserved: with up's embedded JetStream in use, no
// sqlite binding may share, hold or sit inside <dataDir>/jetstream.
func TestJetStreamDirIsReserved(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"jetstream", "jetstream/x"} {
		src := "version: 1\nname: shop\nbindings:\n  a: {type: kv, engine: jetstream}\n  b: {type: kv, path: " + p + "}\n"
		_, err := parseIn(t, dir, src)
		if err == nil || !strings.Contains(err.Error(), "bindings.b.path") || !strings.Contains(err.Error(), "JetStream") {
			t.Errorf("path %s: %v", p, err)
		}
	}
	// Without a jetstream binding the folder is free, as before.
	if _, err := parseIn(t, dir, "version: 1\nname: shop\nbindings:\n  b: {type: kv, path: jetstream}\n"); err != nil {
		t.Error(err)
	}
}
