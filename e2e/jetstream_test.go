package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// jetStreamAppMain holds the app modes of this file.
func jetStreamAppMain(mode string) (code int, ok bool) {
	if mode != "jetstream" {
		return 0, false
	}
	return jetStreamApp(), true
}

// jetStreamApp opens the jetstream bindings "carts" and "orders" with
// FromEnv, sends 5 orders, consumes them with Consume (recording each in
// carts), scans carts and prints what it found.
func jetStreamApp() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "app:", err)
		return 3
	}
	s, err := kv.FromEnv(ctx, "carts")
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	q, err := queue.FromEnv(ctx, "orders")
	if err != nil {
		return fail(err)
	}
	defer q.Close()
	if !strings.HasPrefix(s.Path(), "jetstream:") || !strings.HasPrefix(q.Path(), "jetstream:") {
		return fail(fmt.Errorf("paths %s, %s: not the jetstream engine", s.Path(), q.Path()))
	}
	const n = 5
	for i := range n {
		if err := q.Send(ctx, queue.Text(fmt.Sprintf("order-%d", i))); err != nil {
			return fail(err)
		}
	}
	cctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	seen := 0
	err = q.Consume(cctx, func(ctx context.Context, m queue.Message) error {
		if _, err := s.Put(ctx, "done:"+m.Payload.Data, []byte(fmt.Sprint(m.Attempt))); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == n {
			stop()
		}
		return nil
	}, queue.ConsumeWorkers(2))
	stop()
	if err != nil && cctx.Err() == nil {
		return fail(err)
	}
	page, err := s.Scan(ctx, "done:", 100, "")
	if err != nil {
		return fail(err)
	}
	var keys []string
	for _, it := range page.Items {
		keys = append(keys, it.Key+"="+string(it.Value))
	}
	sort.Strings(keys)
	st, err := q.Stats(ctx)
	if err != nil {
		return fail(err)
	}
	fmt.Printf("scanned %s\nleft %d\n", strings.Join(keys, ","), st.Total)
	return 0
}

// TestJetStreamBindingsUnderUp: localcloud up on a stack with a jetstream
// KV and a jetstream queue (the embedded server, port 0), then an app
// under localcloud run that opens both with FromEnv, sends, consumes and
// scans.
func TestJetStreamBindingsUnderUp(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n    engine: jetstream\n  orders:\n    type: queue\n    engine: jetstream\n    visibilityTimeout: 10s\n")
	up, _ := s.up(t)
	if !exists(s.dataDir() + "/jetstream") {
		t.Errorf("no JetStream store dir under the data dir")
	}
	p := app(t, s, "jetstream")
	if code := p.waitExit(90 * time.Second); code != 0 {
		t.Fatalf("app exit %d\nstdout: %s\nstderr: %s\nup: %s", code, p.stdout, p.stderr(), up.stderr())
	}
	want := "scanned done:order-0=1,done:order-1=1,done:order-2=1,done:order-3=1,done:order-4=1\nleft 0\n"
	if got := p.stdout.String(); got != want {
		t.Fatalf("app printed %q, want %q", got, want)
	}
	rt := s.runtime(t)
	for _, name := range []string{"carts", "orders"} {
		if h := rt.health(name); h != "ok" {
			t.Errorf("%s health %q", name, h)
		}
	}
	raw, err := os.ReadFile(s.dataDir() + "/runtime.json")
	if err != nil || !strings.Contains(strings.Join(strings.Fields(string(raw)), ""), `"stream":"LCQ_orders"`) {
		t.Errorf("runtime.json names no stream LCQ_orders: %v\n%s", err, raw)
	}
}
