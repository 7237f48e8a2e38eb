package notify

import (
	"context"
	"github.com/localcloud/localcloud/internal/hintserver"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/testutil"
)

// interest reports whether a client subscription matches subject on s.
func interest(s *hintserver.Server, subject string) bool {
	return s.HasInterest(subject)
}

// publishRaw publishes one hint as any NATS client could.
func publishRaw(t testing.TB, nc *nats.Conn, subject string) {
	t.Helper()
	if err := nc.Publish(subject, []byte(`{"binding":"orders","due":-1,"at":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchWakesOnHint(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	var wakes counter
	stop, err := Watch(context.Background(), s.URL(), "", subject, wakes.inc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	// Wait for the subscription to reach the server before the first publish.
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the server", func() bool { return interest(s, subject) })
	pub := connect(t, s.URL())
	n := wakes.get()
	publishRaw(t, pub, subject)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake after a hint", func() bool { return wakes.get() > n })

	// Hints on another subject do not wake.
	n = wakes.get()
	publishRaw(t, pub, Subject("shop", "other"))
	publishRaw(t, pub, subject)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake after the second hint", func() bool { return wakes.get() > n })
	if got := wakes.get(); got != n+1 {
		t.Fatalf("wakes went from %d to %d for one matching hint", n, got)
	}
}

// TestWatchSurvivesServerRestart: the server goes away and a new one starts on the same address;
// the watcher reconnects, wakes once for the reconnection, and then wakes for new hints.
func TestWatchSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	addr := loopback(testutil.FreePort(t))
	s1 := startTestServer(t, addr, "tok")
	subject := Subject("shop", "orders")
	var wakes counter
	stop, err := Watch(context.Background(), s1.URL(), "tok", subject, wakes.inc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the first server", func() bool { return interest(s1, subject) })
	pub1 := connect(t, s1.URL(), nats.Token("tok"))
	n := wakes.get()
	publishRaw(t, pub1, subject)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake from the first server", func() bool { return wakes.get() > n })

	s1.Shutdown()
	n = wakes.get()
	s2 := startTestServer(t, addr, "tok")
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake for the reconnection", func() bool { return wakes.get() > n })
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the new server", func() bool { return interest(s2, subject) })

	// Only a hint can wake it now.
	pub2 := connect(t, s2.URL(), nats.Token("tok"))
	n = wakes.get()
	publishRaw(t, pub2, subject)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake from the new server", func() bool { return wakes.get() > n })
}

// TestWatchStartsWithoutServer: Watch neither blocks nor fails when nothing listens yet.
func TestWatchStartsWithoutServer(t *testing.T) {
	t.Parallel()
	addr := loopback(testutil.FreePort(t))
	subject := Subject("shop", "orders")
	var wakes counter
	start := time.Now()
	stop, err := Watch(context.Background(), "nats://"+addr, "", subject, wakes.inc)
	if err != nil {
		t.Fatalf("Watch without a server: %v", err)
	}
	defer stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Watch blocked for %s without a server", d)
	}

	s := startTestServer(t, addr, "")
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake for the first connection", func() bool { return wakes.get() > 0 })
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the server", func() bool { return interest(s, subject) })
	pub := connect(t, s.URL())
	n := wakes.get()
	publishRaw(t, pub, subject)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "wake from a hint", func() bool { return wakes.get() > n })
}

func TestWatchStop(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	subject := Subject("shop", "orders")
	var wakes atomic.Int64
	stop, err := Watch(context.Background(), s.URL(), "", subject, func() { wakes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the server", func() bool { return interest(s, subject) })
	stop()
	stop()
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription removed", func() bool { return !interest(s, subject) })
	n := wakes.Load()
	publishRaw(t, connect(t, s.URL()), subject)
	if wakes.Load() != n {
		t.Fatal("wake called after stop")
	}
}

func TestWatchContextCancel(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	ctx, cancel := context.WithCancel(context.Background())
	subject := Subject("shop", "orders")
	stop, err := Watch(ctx, s.URL(), "", subject, func() {})
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription on the server", func() bool { return interest(s, subject) })
	cancel()
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "subscription removed after cancel", func() bool { return !interest(s, subject) })
	stop()
}

func TestWatchNilWake(t *testing.T) {
	t.Parallel()
	if _, err := Watch(context.Background(), "nats://127.0.0.1:1", "", "x", nil); err == nil {
		t.Fatal("Watch accepted a nil wake")
	}
}
