package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/internal/testutil"
)

// startJetStream starts a real embedded JetStream server on a free
// loopback port with its store in a temp dir, stopped at the end of the
// test, and returns its URL.
func startJetStream(t *testing.T) string {
	t.Helper()
	return testutil.StartJetStream(t, "")
}

// jetStreamStack is a stack whose jetstream bindings live on the server at
// url: a KV, a queue with a dead-letter queue, and a sqlite queue.
func jetStreamStack(t *testing.T, url string) string {
	return writeStack(t, fmt.Sprintf(`version: 1
name: shop
notify: {listen: "127.0.0.1:0"}
jetstream:
  servers: [%s]
bindings:
  carts: {type: kv, engine: jetstream, replicas: 1}
  orders: {type: queue, engine: jetstream, replicas: 1, maxAttempts: 2, deadLetter: orders-dlq, visibilityTimeout: 30s}
  orders-dlq: {type: queue, engine: jetstream, replicas: 1}
  files: {type: queue}
`, url))
}

// TestKVCommandsOnJetStream: kv put/get/exists/scan/delete on a jetstream
// binding, with the --json shapes of the sqlite bindings.
func TestKVCommandsOnJetStream(t *testing.T) {
	t.Parallel()
	stack := jetStreamStack(t, startJetStream(t))
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "k"); code != 1 || !strings.Contains(stderr, "has no stream yet (stream LCKV_carts does not exist") {
		t.Errorf("get before the stream exists: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runIn(t, []byte("v\x00bin"), "kv", "put", "-f", stack, "carts", "cart:1", "-"); code != 0 {
		t.Fatalf("put: exit %d, %s", code, stderr)
	}
	if code, out, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "cart:1"); code != 0 || string(out) != "v\x00bin" {
		t.Fatalf("get: exit %d, %q, %s", code, out, stderr)
	}
	if code, out, stderr := runIn(t, nil, "kv", "put", "-f", stack, "carts", "cart:2", "two", "--ttl", "1h", "--json"); code != 0 || !strings.Contains(string(out), `"ttlMillis": 3600000`) {
		t.Fatalf("put --ttl --json: exit %d, %s, %s", code, out, stderr)
	}
	code, out, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "cart:2", "--json")
	var g struct {
		Found     bool            `json:"found"`
		ValueText string          `json:"valueText"`
		ExpiresAt json.RawMessage `json:"expiresAt"`
	}
	if code != 0 || json.Unmarshal(out, &g) != nil || !g.Found || g.ValueText != "two" || string(g.ExpiresAt) == "null" {
		t.Errorf("get --json: exit %d, %s, %s", code, out, stderr)
	}
	if code, _, _ := runIn(t, nil, "kv", "put", "-f", stack, "carts", "cart:2", "x", "--if-not-exists"); code != 1 {
		t.Errorf("put --if-not-exists on a live key: exit %d", code)
	}
	code, out, stderr = runIn(t, nil, "kv", "scan", "-f", stack, "carts", "cart:", "--limit", "1", "--all", "--json")
	var sc kvScanJSON
	if code != 0 || json.Unmarshal(out, &sc) != nil || len(sc.Items) != 2 || sc.Items[0].Key != "cart:1" || sc.Items[1].Key != "cart:2" || sc.NextCursor != "" {
		t.Errorf("scan --all --json: exit %d, %s, %s", code, out, stderr)
	}
	if code, out, _ := runIn(t, nil, "kv", "exists", "-f", stack, "carts", "cart:1"); code != 0 || string(out) != "true\n" {
		t.Errorf("exists: %d %q", code, out)
	}
	if code, _, stderr := runIn(t, nil, "kv", "delete", "-f", stack, "carts", "cart:1"); code != 0 {
		t.Errorf("delete: %d %s", code, stderr)
	}
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "cart:1"); code != 1 || !strings.Contains(stderr, `key "cart:1" not found`) {
		t.Errorf("get after delete: %d %s", code, stderr)
	}
}

// TestQueueCommandsOnJetStream: send, stats, peek, receive, nack, ack,
// tail and purge on a jetstream queue, with the --json shapes of the
// sqlite bindings; a string that is no receipt of the queue fails.
func TestQueueCommandsOnJetStream(t *testing.T) {
	t.Parallel()
	stack := jetStreamStack(t, startJetStream(t))
	if code, _, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders", `{"order":1}`, "--json-payload"); code != 0 {
		t.Fatalf("send: exit %d, %s", code, stderr)
	}
	code, out, stderr := runIn(t, nil, "queue", "stats", "-f", stack, "orders", "--json")
	var s queueStatsJSON
	if code != 0 || json.Unmarshal(out, &s) != nil || s.Total != 1 || s.Due != 1 {
		t.Errorf("stats: exit %d, %s, %s", code, out, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "receive", "-f", stack, "orders", "--json")
	var r queueReceiveJSON
	if code != 0 || json.Unmarshal(out, &r) != nil || len(r.Messages) != 1 || compactJSON(r.Messages[0].JSON) != `{"order":1}` ||
		!strings.HasPrefix(r.Messages[0].Receipt, "js1:") || r.Messages[0].Attempt != 1 {
		t.Fatalf("receive: exit %d, %s, %s", code, out, stderr)
	}
	receipt := r.Messages[0].Receipt
	code, out, stderr = runIn(t, nil, "queue", "peek", "-f", stack, "orders", "--json")
	var p queuePeekJSON
	if code != 0 || json.Unmarshal(out, &p) != nil || len(p.Messages) != 1 || p.Messages[0].State != stateInFlight || p.Messages[0].VisibleAt != "" {
		t.Errorf("peek of a received message: exit %d, %s, %s", code, out, stderr)
	}
	for _, bad := range []string{"17:0b6f4f7e-8d2c-4c39-9d0e-2b9f4c1a7e55", "js1:1:1:nonsense"} {
		if code, _, stderr := runIn(t, nil, "queue", "ack", "-f", stack, "orders", bad); code != 1 || !strings.Contains(stderr, "is not a receipt of jetstream queue orders") {
			t.Errorf("ack %q: exit %d, %s", bad, code, stderr)
		}
	}
	if code, _, stderr := runIn(t, nil, "queue", "nack", "-f", stack, "orders", receipt); code != 0 {
		t.Fatalf("nack: exit %d, %s", code, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "receive", "-f", stack, "orders", "--wait", "5s", "--json")
	if code != 0 || json.Unmarshal(out, &r) != nil || len(r.Messages) != 1 || r.Messages[0].Attempt != 2 {
		t.Fatalf("receive after nack: exit %d, %s, %s", code, out, stderr)
	}
	if code, out, stderr := runIn(t, nil, "queue", "ack", "-f", stack, "orders", r.Messages[0].Receipt, "--json"); code != 0 || !strings.Contains(string(out), `"ok": true`) {
		t.Fatalf("ack: exit %d, %s, %s", code, out, stderr)
	}
	if code, _, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders", "tailed"); code != 0 {
		t.Fatalf("send: exit %d, %s", code, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "tail", "-f", stack, "orders", "--existing", "--max", "1", "--json")
	var tl queueTailJSON
	if code != 0 || json.Unmarshal(out, &tl) != nil || tl.Payload != "tailed" || tl.Attempt != 0 {
		t.Errorf("tail: exit %d, %s, %s", code, out, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "receive", "-f", stack, "orders", "--visibility", "5s", "--json")
	if code != 0 || json.Unmarshal(out, &r) != nil || len(r.Messages) != 1 {
		t.Fatalf("receive: exit %d, %s, %s", code, out, stderr)
	}
	if code, out, stderr := runIn(t, nil, "queue", "extend", "-f", stack, "orders", r.Messages[0].Receipt, "1m", "--json"); code != 0 || !strings.Contains(string(out), `"visibleUntil"`) {
		t.Errorf("extend: exit %d, %s, %s", code, out, stderr)
	}
	if code, _, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders", "later", "--delay", "1h"); code != 0 {
		t.Fatalf("send --delay: exit %d, %s", code, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "peek", "-f", stack, "orders", "--json")
	if code != 0 || json.Unmarshal(out, &p) != nil || len(p.Messages) != 2 || p.Messages[1].State != stateDelayed || p.Messages[1].Payload != "later" {
		t.Errorf("peek with a delayed send: exit %d, %s, %s", code, out, stderr)
	}
	if code, _, stderr := runIn(t, nil, "queue", "redrive", "-f", stack, "orders-dlq", "--to", "files"); code != exitUsage || !strings.Contains(stderr, "redrive moves messages between queues of one engine") {
		t.Errorf("redrive --to a sqlite queue: exit %d, %s", code, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "purge", "-f", stack, "orders", "--yes", "--json")
	if code != 0 || !strings.Contains(string(out), `"messagesBefore": 2`) {
		t.Errorf("purge: exit %d, %s, %s", code, out, stderr)
	}
	if code, out, stderr := runIn(t, nil, "queue", "stats", "-f", stack, "orders"); code != 0 || !strings.Contains(string(out), "orders  0    0          0        0      -") {
		t.Errorf("stats after purge: exit %d\n%s%s", code, out, stderr)
	}
}

// TestStatusCheckBackupOnJetStream: status counts jetstream bindings and
// names their stream and replicas; check says what it checked; backup and
// restore refuse with a pointer to the NATS tooling, naming the stream.
func TestStatusCheckBackupOnJetStream(t *testing.T) {
	t.Parallel()
	stack := jetStreamStack(t, startJetStream(t))
	dir := filepath.Dir(stack)
	code, out, stderr := runIn(t, nil, "check", "-f", stack, "orders")
	if code != 0 || !strings.Contains(string(out), "orders: not provisioned yet (engine jetstream, stream LCQ_orders)") {
		t.Errorf("check before the stream exists: exit %d\n%s%s", code, out, stderr)
	}
	runIn(t, nil, "queue", "send", "-f", stack, "orders", "one")
	runIn(t, nil, "queue", "send", "-f", stack, "orders", "two")
	runIn(t, nil, "kv", "put", "-f", stack, "carts", "k", "v")
	code, out, stderr = runIn(t, nil, "status", "-f", stack, "--json")
	var rep statusReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	found := 0
	for _, b := range rep.Bindings {
		switch b.Name {
		case "orders":
			found++
			if b.Stream != "LCQ_orders" || b.Replicas != 1 || b.Queue == nil || b.Queue.Due != 2 || b.CountError != "" {
				t.Errorf("status of orders: %+v (queue %+v)", b, b.Queue)
			}
		case "carts":
			found++
			if b.Stream != "LCKV_carts" || b.Replicas != 1 || b.KV == nil || b.KV.Live != 1 {
				t.Errorf("status of carts: %+v", b)
			}
		}
	}
	if found != 2 {
		t.Errorf("status lists %d of the 2 bindings: %s", found, out)
	}
	if _, out, _ := runIn(t, nil, "status", "-f", stack); !strings.Contains(string(out), "2 due, 0 in flight") || !strings.Contains(string(out), "jetstream:LCQ_orders (1 replica(s))") {
		t.Errorf("status text:\n%s", out)
	}
	code, out, stderr = runIn(t, nil, "check", "-f", stack, "orders", "carts", "--json")
	var cj checkJSON
	if code != 0 || json.Unmarshal(out, &cj) != nil || !cj.OK || len(cj.Stores) != 2 || !cj.Stores[0].Exists || cj.Stores[0].Replicas != 1 || cj.Stores[0].Skipped {
		t.Errorf("check --json: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := runIn(t, nil, "check", "-f", stack, "orders"); code != 0 || !strings.Contains(string(out), "orders: ok (engine jetstream, stream LCQ_orders with the expected settings, 1 replica(s), consumer lc") {
		t.Errorf("check text: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"backup", "carts", filepath.Join(dir, "b.sqlite")},
		{"restore", "orders", stack},
	} {
		code, _, stderr := runIn(t, nil, append(args, "-f", stack)...)
		stream := map[string]string{"carts": "LCKV_carts", "orders": "LCQ_orders"}[args[1]]
		if code != 1 || !strings.Contains(stderr, "uses engine jetstream (stream "+stream) || !strings.Contains(stderr, "Try: nats stream backup "+stream) ||
			!strings.Contains(stderr, "nats stream restore") {
			t.Errorf("%v: exit %d, %s", args, code, stderr)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sqlite") {
			t.Errorf("backup wrote %s", e.Name())
		}
	}
}

// TestJetStreamCommandsNeedUpForTheEmbeddedServer: without a jetstream
// section the bindings live on up's embedded server; with up stopped the
// commands say so, and never open or create a file for them.
func TestJetStreamCommandsNeedUpForTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, `version: 1
name: shop
notify: {listen: "127.0.0.1:0"}
bindings:
  carts: {type: kv, engine: jetstream}
  orders: {type: queue, engine: jetstream}
`)
	dir := filepath.Dir(stack)
	for _, args := range [][]string{
		{"kv", "get", "carts", "k"},
		{"kv", "put", "carts", "k", "v"},
		{"queue", "send", "orders", "hello"},
		{"queue", "peek", "orders"},
		{"queue", "tail", "orders"},
	} {
		code, _, stderr := runApp(t, nil, append(args, "-f", stack)...)
		if code != 1 || !strings.Contains(stderr, "is served by up's embedded JetStream; start localcloud up") || !strings.Contains(stderr, "Try: localcloud up -f") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
	if code, _, stderr := runApp(t, nil, "bench", "queue", "--engine", "jetstream", "-f", stack); code != 1 || !strings.Contains(stderr, "up's embedded server (no jetstream.servers); start localcloud up") {
		t.Errorf("bench --engine jetstream without up: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := runApp(t, nil, "check", "-f", stack)
	if code != 0 || !strings.Contains(stdout, "carts: skipped") || !strings.Contains(stdout, "localcloud up is not running") {
		t.Errorf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sqlite") || e.Name() == "kv" || e.Name() == "queue" {
			t.Errorf("a command created %s next to the stack", e.Name())
		}
	}
}

// TestAsyncAPILeavesOutJetStreamQueues: a jetstream queue gets no hint
// channel (JetStream wakes its consumers itself).
func TestAsyncAPILeavesOutJetStreamQueues(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, "version: 1\nname: shop\nbindings:\n  jobs: {type: queue}\n  orders: {type: queue, engine: jetstream}\n")
	code, stdout, stderr := runApp(t, nil, "asyncapi", "-f", stack, "--json")
	if code != 0 || !strings.Contains(stdout, "localcloud.shop.jobs.available") || strings.Contains(stdout, "localcloud.shop.orders.available") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
}

// TestBenchOnJetStream: bench queue and kv --engine jetstream run their
// load through the engine on a temporary stream of the stack's JetStream
// and delete it; the stack's own streams stay.
func TestBenchOnJetStream(t *testing.T) {
	t.Parallel()
	url := startJetStream(t)
	stack := jetStreamStack(t, url)
	if code, _, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders", "kept"); code != 0 {
		t.Fatalf("send: %d %s", code, stderr)
	}
	code, out, stderr := runIn(t, nil, "bench", "-f", stack, "--engine", "jetstream", "--replicas", "1", "--duration", "300ms", "--workers", "2", "--json")
	var res benchJSON
	if code != 0 || json.Unmarshal(out, &res) != nil || len(res.Benches) != 2 {
		t.Fatalf("bench: exit %d\n%s%s", code, out, stderr)
	}
	for _, b := range res.Benches {
		if b.Engine != "jetstream" || b.Replicas != 1 || !strings.Contains(b.Stream, "_bench-") || b.FirstError != "" {
			t.Errorf("bench %s: %+v", b.Kind, b)
		}
		for _, o := range b.Ops {
			if o.Count == 0 || o.Errors != 0 {
				t.Errorf("bench %s op %s: %+v", b.Kind, o.Op, o)
			}
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var names []string
	for n := range js.StreamNames(context.Background()).Name() {
		names = append(names, n)
	}
	if all := strings.Join(names, ","); strings.Contains(all, "bench") || !strings.Contains(all, "LCQ_orders") {
		t.Errorf("streams after bench: %v, want LCQ_orders and no bench stream", names)
	}
	if code, _, stderr := runIn(t, nil, "bench", "--engine", "jetstream", "--processes", "2", "-f", stack); code != exitUsage || !strings.Contains(stderr, "--processes must be 1 with --engine jetstream") {
		t.Errorf("bench --processes 2 on jetstream: %d %s", code, stderr)
	}
}

// TestJetStreamCommandsUseTheStackToken: on a cluster with a token the CLI
// reads it from the variable the stack names (jetstream.token: ${VAR}), as
// FromEnv does; with the variable empty it says which one. Not parallel:
// it sets the process environment, where the token is read at dial time.
func TestJetStreamCommandsUseTheStackToken(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: t.TempDir(), Authorization: "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("JetStream server not ready")
	}
	stack := writeStack(t, fmt.Sprintf(`version: 1
name: shop
notify: {listen: "127.0.0.1:0"}
jetstream:
  servers: [%s]
  token: ${LC_JSCLI_TOKEN}
bindings:
  carts: {type: kv, engine: jetstream, replicas: 1}
`, srv.ClientURL()))
	t.Setenv("LC_JSCLI_TOKEN", "s3cret-token")
	if code, _, stderr := runIn(t, nil, "kv", "put", "-f", stack, "carts", "k", "v"); code != 0 {
		t.Fatalf("put with the token: exit %d, %s", code, stderr)
	}
	if code, out, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "k"); code != 0 || string(out) != "v" {
		t.Fatalf("get with the token: exit %d, %q, %s", code, out, stderr)
	}
	t.Setenv("LC_JSCLI_TOKEN", "")
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "k"); code != 1 || !strings.Contains(stderr, "environment variable LC_JSCLI_TOKEN, which holds the JetStream token, is not set") {
		t.Errorf("get without the token: exit %d, %s", code, stderr)
	}
}

// TestQueueSendDedupKeyOnJetStream: queue send --dedup-key on a jetstream
// binding adds once and says so the second time (the engine's dedup keys).
func TestQueueSendDedupKeyOnJetStream(t *testing.T) {
	t.Parallel()
	stack := jetStreamStack(t, startJetStream(t))
	code, out, stderr := runIn(t, nil, "queue", "send", "-f", stack, "orders", "hello", "--dedup-key", "order:7", "--json")
	if code != 0 || !strings.Contains(compactJSON(out), `"duplicate":false`) {
		t.Fatalf("first send: exit %d, %s, %s", code, out, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "send", "-f", stack, "orders", "hello again", "--dedup-key", "order:7")
	if code != 0 || !strings.Contains(string(out), "nothing added") {
		t.Fatalf("second send: exit %d, %s, %s", code, out, stderr)
	}
	code, out, stderr = runIn(t, nil, "queue", "stats", "-f", stack, "orders", "--json")
	var s queueStatsJSON
	if code != 0 || json.Unmarshal(out, &s) != nil || s.Total != 1 {
		t.Errorf("stats after two keyed sends: exit %d, %s, %s; want 1 message", code, out, stderr)
	}
}
