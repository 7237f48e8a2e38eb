package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestEnvCarriesDeadLetterPolicy: a queue binding's JSON carries its
// maxAttempts and the path of its dead-letter binding, so queue.FromEnv
// enforces the policy in every process of the app.
func TestEnvCarriesDeadLetterPolicy(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, `version: 1
name: shop
bindings:
  orders:
    type: queue
    maxAttempts: 3
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
`)
	code, stdout, stderr := runApp(t, nil, "env", "-f", stack, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var vars map[string]string
	if err := json.Unmarshal([]byte(stdout), &vars); err != nil {
		t.Fatal(err)
	}
	var orders, dlq queue.EnvBinding
	if err := json.Unmarshal([]byte(vars["LOCALCLOUD_BINDING_ORDERS"]), &orders); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(vars["LOCALCLOUD_BINDING_ORDERS_DLQ"]), &dlq); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(filepath.Dir(stack), ".localcloud", "queue", "orders-dlq")
	if orders.MaxAttempts != 3 || orders.DeadLetter == nil || orders.DeadLetter.Binding != "orders-dlq" || orders.DeadLetter.QueuePath != want {
		t.Fatalf("orders = %+v (deadLetter %+v); want maxAttempts 3 into orders-dlq at %s", orders, orders.DeadLetter, want)
	}
	if dlq.MaxAttempts != 0 || dlq.DeadLetter != nil {
		t.Fatalf("orders-dlq = %+v; want no policy", dlq)
	}
}
