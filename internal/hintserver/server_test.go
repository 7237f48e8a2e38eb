package hintserver

import (
	"context"
	"errors"
	"github.com/localcloud/localcloud/notify"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/internal/testutil"
)

func TestServerURLAndShutdownTwice(t *testing.T) {
	t.Parallel()
	s, err := StartServer(context.Background(), ServerOptions{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL()
	if !strings.HasPrefix(url, "nats://127.0.0.1:") || strings.HasSuffix(url, ":0") || strings.HasSuffix(url, ":4222") {
		t.Fatalf("URL() = %q, want nats://127.0.0.1:<random port>", url)
	}
	nc := connect(t, url)
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush against running server: %v", err)
	}

	s.Shutdown()
	s.Shutdown() // second call is a no-op
	var nilServer *Server
	nilServer.Shutdown()

	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "client to notice shutdown", func() bool { return !nc.IsConnected() })
	if _, err := nats.Connect(url, nats.Timeout(time.Second)); err == nil {
		t.Fatal("connect after Shutdown succeeded")
	}
	if s.URL() != url {
		t.Fatalf("URL() changed after Shutdown: %q", s.URL())
	}
}

func TestServerShutdownConcurrent(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
}

func TestServerDefaultListenIsLoopbackRandomPort(t *testing.T) {
	t.Parallel()
	s, err := StartServer(context.Background(), ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(s.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	if host != "127.0.0.1" || port == "0" || port == "4222" {
		t.Fatalf("URL() = %q, want loopback and a random port", s.URL())
	}
}

func TestServerEmptyHostMeansLoopback(t *testing.T) {
	t.Parallel()
	s, err := StartServer(context.Background(), ServerOptions{Listen: ":0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	if !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Fatalf("URL() = %q, want 127.0.0.1", s.URL())
	}
}

func TestServerFixedPort(t *testing.T) {
	t.Parallel()
	addr := loopback(testutil.FreePort(t))
	s := startTestServer(t, addr, "")
	if s.URL() != "nats://"+addr {
		t.Fatalf("URL() = %q, want nats://%s", s.URL(), addr)
	}
}

// holdPort keeps a loopback port taken for the rest of the test.
func holdPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func checkAddrInUse(t *testing.T, err error, addr string) {
	t.Helper()
	if err == nil {
		t.Fatal("started on a taken port")
	}
	if !errors.Is(err, ErrAddrInUse) {
		t.Errorf("error does not wrap ErrAddrInUse: %v", err)
	}
	for _, want := range []string{addr, "already in use", `listen: 127.0.0.1:0`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestServerTakenPort(t *testing.T) {
	t.Parallel()
	addr := holdPort(t)
	s, err := StartServer(context.Background(), ServerOptions{Listen: addr})
	if s != nil {
		s.Shutdown()
	}
	checkAddrInUse(t, err, addr)
}

// TestServerTakenPortAfterProbe covers the race where the port is taken between the probe and
// the server's own listen: the server's failure must become the same clear error, not an exit.
func TestServerTakenPortAfterProbe(t *testing.T) {
	t.Parallel()
	addr := holdPort(t)
	host, portStr, _ := net.SplitHostPort(addr)
	port, _ := net.LookupPort("tcp", portStr)
	start := time.Now()
	s, err := startNATS(context.Background(), host, port, "", slog.New(slog.DiscardHandler), DefaultReadyTimeout, ServerOptions{})
	if s != nil {
		s.Shutdown()
	}
	checkAddrInUse(t, err, addr)
	if d := time.Since(start); d >= DefaultReadyTimeout {
		t.Errorf("failure took %s: it waited for the ready timeout instead of noticing the listen error", d)
	}
}

func TestServerInvalidListen(t *testing.T) {
	t.Parallel()
	for _, listen := range []string{"127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1"} {
		s, err := StartServer(context.Background(), ServerOptions{Listen: listen})
		if s != nil {
			s.Shutdown()
		}
		if !errors.Is(err, ErrInvalidAddr) {
			t.Errorf("Listen %q: err = %v, want ErrInvalidAddr", listen, err)
		}
	}
}

func TestServerCanceledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := StartServer(ctx, ServerOptions{})
	if s != nil {
		s.Shutdown()
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestServerToken(t *testing.T) {
	t.Parallel()
	s := startTestServer(t, "", "s3cret")

	if nc, err := nats.Connect(s.URL()); err == nil {
		nc.Close()
		t.Fatal("client without a token was accepted")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Logf("refused without token: %v", err)
	}
	if nc, err := nats.Connect(s.URL(), nats.Token("wrong")); err == nil {
		nc.Close()
		t.Fatal("client with a wrong token was accepted")
	}

	// With the token: a subscriber and a publisher both work.
	subject := notify.Subject("stack", "orders")
	rec := subscribe(t, s.URL(), subject, nats.Token("s3cret"))
	pub, err := notify.DialPublisher(s.URL(), "s3cret", notify.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pub.Notify(subject, 1)
	testutil.CheckFor(t, waitTimeout, 2*time.Millisecond, "hint through token-protected server", func() bool { return rec.count() > 0 })

	// The in-process connection carries the token too.
	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("in-process Connect with token: %v", err)
	}
	nc.Close()
}

func TestServerLogsToSlog(t *testing.T) {
	t.Parallel()
	var buf testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := StartServer(context.Background(), ServerOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	out := buf.String()
	for _, want := range []string{"component=nats", "hint server started", s.URL()} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
