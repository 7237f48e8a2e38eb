package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
