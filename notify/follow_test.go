package notify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// writeRuntime writes a runtime.json naming url, atomically as up does.
func writeRuntime(t *testing.T, file, url string) {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(`{"pid": 1, "natsUrl": "`+url+`", "bindings": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// TestFollowRuntimeAcrossRestarts: Watch and a Publisher given no URL but
// a runtime file connect to the server it names, and after that server is
// gone and another one on another port is written there, both reconnect to
// it: hints flow again end to end, token and all.
func TestFollowRuntimeAcrossRestarts(t *testing.T) {
	t.Parallel()
	const token, subject = "s3cret", "localcloud.shop.orders.available"
	file := filepath.Join(t.TempDir(), "runtime.json")
	srv := startTestServer(t, "", token)
	writeRuntime(t, file, srv.URL())

	var wakes atomic.Int64
	stop, err := Watch(context.Background(), "", token, subject, func() { wakes.Add(1) }, FollowRuntime(file))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	pub, err := DialPublisher("", token, PublisherOptions{Window: -1}, FollowRuntime(file))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	for round := range 3 {
		// The watcher's (re)connection wakes it once; hints published
		// after that wake it again once the publisher is connected too.
		testutil.CheckFor(t, waitTimeout, 5*time.Millisecond, "both connected to "+srv.URL(), func() bool {
			return pub.Conn().IsConnected() && wakes.Load() > 0
		})
		before := wakes.Load()
		testutil.CheckFor(t, waitTimeout, 20*time.Millisecond, "a hint woke the watcher", func() bool {
			pub.Notify(subject, 1)
			return wakes.Load() > before
		})
		t.Logf("round %d: hints flow through %s", round, srv.URL())
		if round == 2 {
			break
		}
		old := srv.URL()
		srv.Shutdown()
		srv = startTestServer(t, "", token)
		if srv.URL() == old {
			t.Fatalf("the new server took the old port %s", old)
		}
		wakes.Store(0)
		writeRuntime(t, file, srv.URL())
	}
}

// TestRuntimeAddrRefusesForeignServers: a runtime file is untrusted: only
// a nats:// URL with a port, no user, on loopback or the given URL's host,
// is followed; anything else leaves the given URL in force.
func TestRuntimeAddrRefusesForeignServers(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "runtime.json")
	for url, want := range map[string]string{
		"nats://127.0.0.1:4321":     "127.0.0.1:4321",
		"nats://[::1]:4321":         "[::1]:4321",
		"nats://localhost:4321":     "localhost:4321",
		"nats://10.1.2.3:4321":      "10.1.2.3:4321", // the given URL's host
		"nats://evil.example:4222":  "",
		"nats://192.168.1.9:4222":   "",
		"nats://u:p@127.0.0.1:4222": "",
		"tls://127.0.0.1:4222":      "",
		"http://127.0.0.1:4222":     "",
		"nats://127.0.0.1":          "",
		"nats://127.0.0.1:0":        "",
		"":                          "",
	} {
		writeRuntime(t, file, url)
		got, err := RuntimeAddr(file, "10.1.2.3")
		if got != want || (want == "") != (err != nil) {
			t.Errorf("natsUrl %q: %q, %v; want %q", url, got, err, want)
		}
	}
	if err := os.WriteFile(file, []byte(strings.Repeat("[", 1<<20)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RuntimeAddr(file, ""); err == nil {
		t.Error("a garbage runtime file gave an address")
	}
	d, err := newFollowDialer(file, "nats://127.0.0.1:5555")
	if err != nil {
		t.Fatal(err)
	}
	if addr, err := d.current(); addr != "127.0.0.1:5555" || err != nil {
		t.Errorf("with a garbage runtime file the dialer dials %q, %v; want the given URL", addr, err)
	}
	d, _ = newFollowDialer(filepath.Join(t.TempDir(), "missing.json"), "")
	if _, err := d.current(); err == nil || !strings.Contains(err.Error(), "no hint server known") {
		t.Errorf("without file and URL: %v", err)
	}
}
