package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCLIOnJetStreamBindingsUnderUp: with localcloud up serving jetstream
// bindings on its embedded server, the binary's queue send, receive and
// nack use up a message's maxAttempts: 2, the next receive moves it to the
// jetstream dead-letter queue, peek of the DLQ shows it with its origin,
// redrive sends it back, and kv put/get/scan work.
func TestCLIOnJetStreamBindingsUnderUp(t *testing.T) {
	t.Parallel()
	s := newStack(t, `  carts:
    type: kv
    engine: jetstream
  orders:
    type: queue
    engine: jetstream
    maxAttempts: 2
    deadLetter: orders-dlq
    visibilityTimeout: 10s
  orders-dlq:
    type: queue
    engine: jetstream
`)
	up, _ := s.up(t)
	lc := func(args ...string) (int, string, string) {
		t.Helper()
		return lcIn(t, s.dir, nil, append(args, "-f", s.file)...)
	}
	must := func(args ...string) string {
		t.Helper()
		code, out, stderr := lc(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s\nup: %s", args, code, out, stderr, up.stderr())
		}
		return out
	}
	type received struct {
		Messages []struct {
			Receipt string `json:"receipt"`
			Attempt int    `json:"attempt"`
			Payload string `json:"payload"`
		} `json:"messages"`
	}
	receive := func() received {
		t.Helper()
		var r received
		if out := must("queue", "receive", "orders", "--wait", "3s", "--json"); json.Unmarshal([]byte(out), &r) != nil {
			t.Fatalf("receive printed %s", out)
		}
		return r
	}

	must("queue", "send", "orders", "job-1")
	for attempt := 1; attempt <= 2; attempt++ {
		r := receive()
		if len(r.Messages) != 1 || r.Messages[0].Attempt != attempt || r.Messages[0].Payload != "job-1" {
			t.Fatalf("receive %d: %+v", attempt, r)
		}
		must("queue", "nack", "orders", r.Messages[0].Receipt)
	}
	// The third delivery is past maxAttempts: the receive moves it to the
	// dead-letter queue instead of handing it out.
	if r := receive(); len(r.Messages) != 0 {
		t.Fatalf("receive after maxAttempts handed out %+v", r)
	}
	var peek struct {
		Messages []struct {
			Payload string `json:"payload"`
			State   string `json:"state"`
			Origin  *struct {
				Binding  string `json:"binding"`
				Attempts int    `json:"attempts"`
			} `json:"origin"`
		} `json:"messages"`
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		out := must("queue", "peek", "orders-dlq", "--json")
		if err := json.Unmarshal([]byte(out), &peek); err != nil {
			t.Fatalf("peek printed %s", out)
		}
		if len(peek.Messages) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(peek.Messages) != 1 || peek.Messages[0].Payload != "job-1" || peek.Messages[0].Origin == nil ||
		peek.Messages[0].Origin.Binding != "orders" || peek.Messages[0].Origin.Attempts != 2 {
		t.Fatalf("peek of the DLQ: %+v", peek)
	}
	if out := must("queue", "stats", "orders-dlq", "--json"); !strings.Contains(out, `"deadLetters": 1`) {
		t.Errorf("stats of the DLQ: %s", out)
	}
	if out := must("queue", "redrive", "orders-dlq", "--json"); !strings.Contains(out, `"moved": 1`) {
		t.Fatalf("redrive: %s", out)
	}
	if r := receive(); len(r.Messages) != 1 || r.Messages[0].Payload != "job-1" || r.Messages[0].Attempt != 1 {
		t.Fatalf("receive after the redrive: %+v", r)
	}

	must("kv", "put", "carts", "cart:1", "one")
	must("kv", "put", "carts", "cart:2", "two", "--ttl", "1h")
	if out := must("kv", "get", "carts", "cart:1"); out != "one" {
		t.Errorf("kv get printed %q", out)
	}
	var scan struct {
		Items []struct {
			Key       string `json:"key"`
			ValueText string `json:"valueText"`
		} `json:"items"`
	}
	out := must("kv", "scan", "carts", "cart:", "--json")
	if json.Unmarshal([]byte(out), &scan) != nil || len(scan.Items) != 2 || scan.Items[0].Key != "cart:1" || scan.Items[1].ValueText != "two" {
		t.Errorf("kv scan: %s", out)
	}
	if out := must("status", "--json"); !strings.Contains(out, `"stream": "LCQ_orders"`) || !strings.Contains(out, `"replicas": 1`) {
		t.Errorf("status: %s", out)
	}
}
