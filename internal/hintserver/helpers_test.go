package hintserver

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/notify"
)

// waitTimeout is the generous deadline of every wait in these tests: long enough for a loaded
// 2-core machine, and only ever reached when something is broken.
const waitTimeout = 20 * time.Second

// startTestServer starts a hint server on 127.0.0.1 (a free port unless listen says otherwise)
// and shuts it down when the test ends.
func startTestServer(t testing.TB, listen, token string) *Server {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	s, err := StartServer(context.Background(), ServerOptions{Listen: listen, Token: token})
	if err != nil {
		t.Fatalf("StartServer(%q): %v", listen, err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// connect opens a plain nats.go client, as a third-party consumer would.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// hintRecorder collects the hints a third-party style subscriber receives.
type hintRecorder struct {
	mu    sync.Mutex
	hints []notify.Hint
	recv  []time.Time
	bad   int
}

func (r *hintRecorder) handle(m *nats.Msg) {
	now := time.Now()
	h, err := notify.ParseHint(m.Data)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.bad++
		return
	}
	r.hints = append(r.hints, h)
	r.recv = append(r.recv, now)
}

func (r *hintRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hints)
}

// subscribe records every hint on subject through a new client connection; it returns once the
// server has registered the subscription.
func subscribe(t testing.TB, url, subject string, opts ...nats.Option) *hintRecorder {
	t.Helper()
	nc := connect(t, url, opts...)
	rec := &hintRecorder{}
	if _, err := nc.Subscribe(subject, rec.handle); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return rec
}
