package localcloudtest_test

import (
	"os"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/localcloudtest"
)

// TestStartJetStreamBindings: a stack with jetstream bindings runs in a
// test like any other; the handles are the JetStream engine's.
func TestStartJetStreamBindings(t *testing.T) {
	if _, set := os.LookupEnv("LOCALCLOUD_STACK_NAME"); set {
		t.Skip("LOCALCLOUD_STACK_NAME is set in this environment")
	}
	s := localcloudtest.Start(t, writeStack(t, `version: 1
name: shop
bindings:
  carts: {type: kv, engine: jetstream}
  orders: {type: queue, engine: jetstream, visibilityTimeout: 5s}
`))
	ctx := t.Context()
	kvs, q := s.KV("carts"), s.Queue("orders")
	if !strings.HasPrefix(kvs.Path(), "jetstream:") || !strings.HasPrefix(q.Path(), "jetstream:") {
		t.Fatalf("paths %s, %s", kvs.Path(), q.Path())
	}
	if _, err := kvs.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := q.Send(ctx, queue.Text("hello")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "hello" {
		t.Fatalf("receive: %v %+v", err, msgs)
	}
	if err := q.Ack(ctx, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
}

// TestStartJetStreamWithNotifyToken: with notify.token the embedded server
// asks every client for it; a jetstream binding's JSON names the variable
// that holds it (LOCALCLOUD_NATS_TOKEN), never the token.
func TestStartJetStreamWithNotifyToken(t *testing.T) {
	if _, set := os.LookupEnv("LOCALCLOUD_STACK_NAME"); set {
		t.Skip("LOCALCLOUD_STACK_NAME is set in this environment")
	}
	t.Setenv("LC_TEST_HINT_TOKEN", "hint-s3cret")
	s := localcloudtest.Start(t, writeStack(t, `version: 1
name: shop
notify: {listen: "127.0.0.1:0", token: "${LC_TEST_HINT_TOKEN}"}
bindings:
  carts: {type: kv, engine: jetstream}
`))
	env := s.Env()["LOCALCLOUD_BINDING_CARTS"]
	if !strings.Contains(env, `"tokenEnv":"LOCALCLOUD_NATS_TOKEN"`) || strings.Contains(env, "hint-s3cret") {
		t.Fatalf("binding JSON %s", env)
	}
	if _, err := s.KV("carts").Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
