package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/testutil"
)

// TestJetStreamOnlyWhenABindingUsesIt: the embedded server runs JetStream
// (store under <dataDir>/jetstream) only for a stack with a jetstream
// binding, and syncs every write only when one asks for durability full.
func TestJetStreamOnlyWhenABindingUsesIt(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, stackText("  carts:\n    type: kv"), Options{NoWatch: true})
	if on, _ := s.nats.JetStream(); on {
		t.Error("JetStream on for a stack without jetstream bindings")
	}
	if _, err := os.Stat(filepath.Join(s.dataDir, "jetstream")); err == nil {
		t.Error("jetstream store dir created for a stack without jetstream bindings")
	}

	s, _, _ = start(t, stackText("  carts:\n    type: kv\n    engine: jetstream"), Options{NoWatch: true})
	on, always := s.nats.JetStream()
	if !on || always {
		t.Errorf("jetstream binding, durability normal: JetStream %v, SyncAlways %v; want on, lazy", on, always)
	}
	if fi, err := os.Stat(filepath.Join(s.dataDir, "jetstream")); err != nil || !fi.IsDir() {
		t.Errorf("no store dir <dataDir>/jetstream: %v", err)
	}
	rb, _ := s.Runtime().Binding("carts")
	if rb.Engine != "jetstream" || rb.Health != HealthOK {
		t.Errorf("runtime binding %+v", rb)
	}

	s, _, _ = start(t, stackText("  carts:\n    type: kv\n    engine: jetstream", "  orders:\n    type: queue\n    engine: jetstream\n    durability: full"), Options{NoWatch: true})
	if on, always := s.nats.JetStream(); !on || !always {
		t.Errorf("durability full: JetStream %v, SyncAlways %v; want both", on, always)
	}
}

// TestJetStreamProvisionAndReload: up creates the streams at start and on
// reload, serves them, and keeps a removed binding's stream and messages.
func TestJetStreamProvisionAndReload(t *testing.T) {
	t.Parallel()
	s, file, _ := start(t, stackText("  orders:\n    type: queue\n    engine: jetstream\n    visibilityTimeout: 45s"), Options{NoWatch: true})
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.Stream(ctx, "LCQ_orders"); err != nil {
		t.Fatalf("stream of orders after start: %v", err)
	}
	q, ok := s.Queue("orders")
	if !ok {
		t.Fatal("no handle for orders")
	}
	if err := q.Send(ctx, queue.Text("kept")); err != nil {
		t.Fatal(err)
	}

	writeFile(t, file, stackText("  orders:\n    type: queue\n    engine: jetstream", "  carts:\n    type: kv\n    engine: jetstream"))
	if _, err := s.Reload(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, "LCKV_carts"); err != nil {
		t.Fatalf("bucket of carts after reload: %v", err)
	}
	kvs, release, err := s.KV(ctx, "carts")
	if err != nil {
		t.Fatalf("no handle for carts: %v", err)
	}
	if _, err := kvs.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	release()

	writeFile(t, file, stackText("  other:\n    type: kv"))
	d, err := s.Reload(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Removed) != 2 {
		t.Fatalf("diff %+v, want orders and carts removed", d)
	}
	st, err := js.Stream(ctx, "LCQ_orders")
	if err != nil {
		t.Fatalf("stream of a removed binding: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("removed binding's stream holds %+v (%v), want its 1 message", info, err)
	}
	if _, err := js.Stream(ctx, "LCKV_carts"); err != nil {
		t.Fatalf("bucket of a removed binding: %v", err)
	}
}

// TestJetStreamContradictingStreamFailsClosed: an existing stream whose
// settings contradict the binding stops up with the binding named.
func TestJetStreamContradictingStreamFailsClosed(t *testing.T) {
	t.Parallel()
	url := startExternal(t, "")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LCQ_orders", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeFile(t, file, fmt.Sprintf("version: 1\nname: shop\nnotify: {listen: 127.0.0.1:0}\njetstream: {servers: [%s]}\nbindings:\n  orders: {type: queue, engine: jetstream, replicas: 1}\n", url))
	_, err = Start(ctx, load(t, file), Options{HealthInterval: -1, NoWatch: true})
	if err == nil || !strings.Contains(err.Error(), "orders") || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("start on a contradicting stream: %v", err)
	}
}

// TestJetStreamExternalCluster: with jetstream.servers up leaves its own
// server without JetStream, provisions on the cluster with the token from
// the variable the stack names, and warns that it cannot set durability.
func TestJetStreamExternalCluster(t *testing.T) {
	const token = "ext-secret"
	url := startExternal(t, token)
	t.Setenv("LC_SUP_TEST_TOKEN", token)
	text := fmt.Sprintf("version: 1\nname: shop\nnotify: {listen: 127.0.0.1:0}\njetstream: {servers: [%s], token: \"${LC_SUP_TEST_TOKEN}\"}\n"+
		"bindings:\n  carts: {type: kv, engine: jetstream, replicas: 1, durability: full}\n", url)
	s, _, logs := start(t, text, Options{NoWatch: true})
	if on, _ := s.nats.JetStream(); on {
		t.Error("embedded JetStream on although the stack names a cluster")
	}
	kvs, release, err := s.KV(ctx, "carts")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := kvs.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "carts") || !strings.Contains(logs.String(), "sync_interval") {
		t.Errorf("no durability warning naming the binding:\n%s", logs)
	}
	raw, _ := os.ReadFile(filepath.Join(s.dataDir, "runtime.json"))
	if strings.Contains(string(raw), token) {
		t.Error("runtime.json holds the token")
	}

	// The variable unset: a setup failure naming it.
	os.Unsetenv("LC_SUP_TEST_TOKEN")
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeFile(t, file, strings.Replace(text, "name: shop", "name: shop2", 1))
	_, err = Start(ctx, load(t, file), Options{HealthInterval: -1, NoWatch: true})
	if err == nil || !strings.Contains(err.Error(), "LC_SUP_TEST_TOKEN") {
		t.Fatalf("start without the token variable: %v", err)
	}
}

// startExternal starts a JetStream server standing for an outside
// cluster, with a token, on a free loopback port.
func startExternal(t *testing.T, token string) string {
	t.Helper()
	return testutil.StartJetStream(t, token)
}

// TestJetStreamReloadNeedsRestart: a reload that would need another
// embedded server (JetStream turned on, or a sync per write) is refused
// and the last good stack keeps being served.
func TestJetStreamReloadNeedsRestart(t *testing.T) {
	t.Parallel()
	s, file, _ := start(t, stackText("  carts:\n    type: kv"), Options{NoWatch: true})
	writeFile(t, file, stackText("  carts:\n    type: kv", "  orders:\n    type: queue\n    engine: jetstream"))
	if _, err := s.Reload(ctx, "test"); !errors.Is(err, ErrNeedsRestart) {
		t.Fatalf("reload adding the first jetstream binding: %v, want ErrNeedsRestart", err)
	}
	if _, ok := s.Queue("orders"); ok {
		t.Error("orders served after a refused reload")
	}

	s, file, _ = start(t, stackText("  orders:\n    type: queue\n    engine: jetstream"), Options{NoWatch: true})
	writeFile(t, file, stackText("  orders:\n    type: queue\n    engine: jetstream\n    durability: full"))
	if _, err := s.Reload(ctx, "test"); !errors.Is(err, ErrNeedsRestart) {
		t.Fatalf("reload asking for durability full: %v, want ErrNeedsRestart", err)
	}
}

// TestJetStreamReloadOntoAContradictingStream: a binding added by a reload
// whose stream exists with other settings fails the reload, naming the
// binding in the error and in runtime.json; the last good stack stays.
func TestJetStreamReloadOntoAContradictingStream(t *testing.T) {
	t.Parallel()
	s, file, _ := start(t, stackText("  carts:\n    type: kv\n    engine: jetstream"), Options{NoWatch: true})
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LCQ_orders", Subjects: []string{"elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, stackText("  carts:\n    type: kv\n    engine: jetstream", "  orders:\n    type: queue\n    engine: jetstream"))
	_, err = s.Reload(ctx, "test")
	if err == nil || !strings.Contains(err.Error(), "binding orders") || !strings.Contains(err.Error(), "other settings") {
		t.Fatalf("reload onto a contradicting stream: %v", err)
	}
	if rt := s.Runtime(); !strings.Contains(rt.LastReloadError, "orders") {
		t.Errorf("runtime.json lastReloadError %q does not name orders", rt.LastReloadError)
	}
	if _, release, err := s.KV(ctx, "carts"); err != nil {
		t.Errorf("carts no longer served after the failed reload: %v", err)
	} else {
		release()
	}
}
