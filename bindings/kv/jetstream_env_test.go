package kv

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/testutil"
)

// startJetStream starts an embedded JetStream server on a free loopback
// port, with token, and returns its URL; t.Cleanup stops it.
func startJetStream(t *testing.T, token string) string {
	t.Helper()
	return testutil.StartJetStream(t, token)
}

// TestFromEnvJetStream opens a jetstream-kv binding with FromEnv, no blank
// import: both handles share one connection, which closes with the last.
func TestFromEnvJetStream(t *testing.T) {
	url := startJetStream(t, "s3cret")
	t.Setenv("LC_TEST_JS_TOKEN", "s3cret")
	js := fmt.Sprintf(`{"service":"jetstream-kv","name":"carts","servers":[%q],"replicas":1,"tokenEnv":"LC_TEST_JS_TOKEN","durability":"normal"}`, url)
	t.Setenv(EnvName("carts"), js)
	t.Setenv(EnvName("carts2"), js)
	ctx := t.Context()
	provisionStream(t, url, "s3cret", "carts")
	base := jsengine.SharedConns()
	a, err := FromEnv(ctx, "carts")
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromEnv(ctx, "carts2")
	if err != nil {
		t.Fatal(err)
	}
	if n := jsengine.SharedConns() - base; n != 1 {
		t.Errorf("%d shared connections for two stores on one server, want 1", n)
	}
	if !strings.HasPrefix(a.Path(), "jetstream:") {
		t.Errorf("Path %q, want the jetstream engine's", a.Path())
	}
	for _, k := range []string{"user:1", "user:2", "order:1"} {
		if _, err := a.Put(ctx, k, []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	page, err := b.Scan(ctx, "user:", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 || page.Items[0].Key != "user:1" || string(page.Items[1].Value) != "v-user:2" {
		t.Fatalf("scan through the second handle: %+v", page.Items)
	}
	a.Close()
	if n := jsengine.SharedConns() - base; n != 1 {
		t.Errorf("%d shared connections after one of two closed, want 1", n)
	}
	if _, _, err := b.Get(ctx, "user:1"); err != nil {
		t.Fatalf("get after the other handle closed: %v", err)
	}
	b.Close()
	if n := jsengine.SharedConns() - base; n != 0 {
		t.Errorf("%d shared connections after both closed, want 0", n)
	}
}

func TestFromEnvJetStreamMissingToken(t *testing.T) {
	url := startJetStream(t, "s3cret")
	t.Setenv(EnvName("carts"), fmt.Sprintf(`{"service":"jetstream-kv","name":"carts","servers":[%q],"tokenEnv":"LC_TEST_NO_SUCH_TOKEN"}`, url))
	_, err := FromEnv(t.Context(), "carts")
	if !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), "LC_TEST_NO_SUCH_TOKEN") {
		t.Fatalf("got %v, want BINDING_SETUP_FAILED naming LC_TEST_NO_SUCH_TOKEN", err)
	}
	t.Setenv(EnvName("carts"), `{"service":"jetstream-kv","name":"carts","servers":[]}`)
	if _, err := FromEnv(t.Context(), "carts"); !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), "servers") {
		t.Fatalf("no servers: got %v", err)
	}
}

// provisionStream creates the bucket name on the server at url, as up does
// before an app's FromEnv.
func provisionStream(t *testing.T, url, token, name string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := OpenEngine(t.Context(), jsengine.KVEngine{Conn: nc}, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFromEnvJetStreamCreatesNoStream: a jetstream-kv binding whose name is
// a typo ("crats") or another case ("Carts") of the provisioned bucket's is
// refused, naming the stream it looked for and the environment's KV
// bindings; no stream is created.
func TestFromEnvJetStreamCreatesNoStream(t *testing.T) {
	url := startJetStream(t, "")
	provisionStream(t, url, "", "carts")
	binding := func(name string) string {
		return fmt.Sprintf(`{"service":"jetstream-kv","name":%q,"servers":[%q],"replicas":1}`, name, url)
	}
	t.Setenv(EnvName("carts"), binding("carts"))
	for _, typo := range []string{"crats", "Carts"} {
		t.Setenv(EnvName("sessions"), binding(typo))
		s, err := FromEnv(t.Context(), "sessions")
		if err == nil {
			s.Close()
			t.Fatalf("FromEnv with name %s opened a store", typo)
		}
		for _, want := range []string{"LOCALCLOUD_BINDING_SESSIONS", "stream LCKV_" + typo + " does not exist", "KV bindings in this environment: carts, sessions"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q lacks %q", err, want)
			}
		}
		if !errors.Is(err, bindings.ErrNoStore) {
			t.Errorf("error %v: want ErrNoStore", err)
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for n := range js.StreamNames(t.Context()).Name() {
		streams = append(streams, n)
	}
	if strings.Join(streams, ",") != "LCKV_carts" {
		t.Errorf("streams on the server: %v; want only LCKV_carts", streams)
	}
}
