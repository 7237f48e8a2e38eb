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
