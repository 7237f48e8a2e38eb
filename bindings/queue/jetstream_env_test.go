package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/testutil"
)

// startJetStream starts an embedded JetStream server on a free loopback
// port and returns its URL; t.Cleanup stops it.
func startJetStream(t *testing.T) string {
	t.Helper()
	return testutil.StartJetStream(t, "")
}

// TestFromEnvJetStream opens a jetstream-queue binding with FromEnv (no
// blank import), takes its queue settings from the JSON, and sends and
// consumes through two handles sharing one connection.
func TestFromEnvJetStream(t *testing.T) {
	url := startJetStream(t)
	js := fmt.Sprintf(`{"service":"jetstream-queue","name":"orders","servers":[%q],"replicas":1,`+
		`"visibilityTimeout":"45s","visibilityTimeoutMs":45000,"retryDelay":"200ms","retryDelayMs":200,`+
		`"maxRetryDelay":"1s","maxRetryDelayMs":1000,"dedupWindow":"5m","dedupWindowMs":300000,"durability":"normal"}`, url)
	t.Setenv(EnvName("orders"), js)
	ctx := t.Context()
	provisionStream(t, url, "orders")
	base := jsengine.SharedConns()
	prod, err := FromEnv(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	cons, err := FromEnv(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if cons.visibility != 45*time.Second || cons.retry.Base != 200*time.Millisecond {
		t.Errorf("visibility %s retry %+v: want 45s and 200ms from the JSON", cons.visibility, cons.retry)
	}
	if n := jsengine.SharedConns() - base; n != 1 {
		t.Errorf("%d shared connections, want 1", n)
	}
	for i := range 3 {
		if err := prod.Send(ctx, Text(fmt.Sprintf("order-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := map[string]bool{}
	err = cons.Consume(cctx, func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.Payload.Data] = true
		if len(got) == 3 {
			cancel()
		}
		return nil
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("consumed %v, want order-0..2", got)
	}
	cons.Close()
	waitFor(t, func() bool { return jsengine.SharedConns()-base == 1 })
	prod.Close()
	waitFor(t, func() bool { return jsengine.SharedConns()-base == 0 })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFromEnvJetStreamMistakes(t *testing.T) {
	for _, c := range []struct{ js, want string }{
		{`{"service":"jetstream-queue","name":"orders","servers":["nats://127.0.0.1:1"],"maxAttempts":3}`, "deadLetter.name"},
		{`{"service":"jetstream-queue","name":"orders","servers":["nats://127.0.0.1:1"],"visibilityTimeout":"1h","visibilityTimeoutMs":5}`, "disagree"},
		{`{"service":"jetstream-queue","name":"orders","servers":["nats://127.0.0.1:1"],"tokenEnv":"LC_TEST_NO_SUCH_TOKEN"}`, "LC_TEST_NO_SUCH_TOKEN"},
		{`{"service":"jetstream-queue","name":"a.b","servers":["nats://127.0.0.1:1"]}`, "name"},
	} {
		t.Setenv(EnvName("orders"), c.js)
		_, err := FromEnv(t.Context(), "orders")
		if !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant BINDING_SETUP_FAILED with %q", c.js, err, c.want)
		}
	}
}

// provisionStream creates the queue name on the server at url, as up does
// before an app's FromEnv.
func provisionStream(t *testing.T, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	q, err := OpenEngine(t.Context(), jsengine.QueueEngine{Conn: nc}, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFromEnvJetStreamCreatesNoStream: a jetstream-queue binding whose
// name, or whose dead-letter queue's, is a typo ("ordres") or another case
// ("Orders") of a provisioned queue's is refused, naming the stream it
// looked for and the environment's queue bindings; no stream is created.
func TestFromEnvJetStreamCreatesNoStream(t *testing.T) {
	url := startJetStream(t)
	provisionStream(t, url, "orders")
	provisionStream(t, url, "orders-dlq")
	binding := func(name, dlq string) string {
		return fmt.Sprintf(`{"service":"jetstream-queue","name":%q,"servers":[%q],"replicas":1,"maxAttempts":3,"deadLetter":{"binding":"dlq","name":%q}}`, name, url, dlq)
	}
	t.Setenv(EnvName("orders"), binding("orders", "orders-dlq"))
	for _, c := range []struct{ name, dlq, missing, what string }{
		{"ordres", "orders-dlq", "LCQ_ordres", "queue"},
		{"Orders", "orders-dlq", "LCQ_Orders", "queue"},
		{"orders", "orders-dql", "LCQ_orders-dql", "dead-letter queue"},
	} {
		t.Setenv(EnvName("payments"), binding(c.name, c.dlq))
		q, err := FromEnv(t.Context(), "payments")
		if err == nil {
			q.Close()
			t.Fatalf("FromEnv of %s (dead letters into %s) opened a queue", c.name, c.dlq)
		}
		for _, want := range []string{"LOCALCLOUD_BINDING_PAYMENTS", "the " + c.what + " stream " + c.missing + " does not exist",
			"queue bindings in this environment: orders, payments"} {
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
	slices.Sort(streams)
	if strings.Join(streams, ",") != "LCQ_orders,LCQ_orders-dlq" {
		t.Errorf("streams on the server: %v; want only LCQ_orders and LCQ_orders-dlq", streams)
	}
}
