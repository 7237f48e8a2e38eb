package localcloudtest_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/localcloudtest"
)

const stackYAML = `version: 1
name: shop
dataDir: /nonexistent/not-used   # replaced by the test's own data dir
notify:
  listen: 127.0.0.1:4222          # replaced by a free port
bindings:
  carts:
    type: kv
  orders:
    type: queue
    visibilityTimeout: 5s
`

func writeStack(t *testing.T, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "stack.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestStartServesAndCleanupLeavesNothing runs a stack in a subtest and checks,
// once the subtest's cleanups ran, that its data dir is gone, its NATS port
// closed and the environment as before.
func TestStartServesAndCleanupLeavesNothing(t *testing.T) {
	file := writeStack(t, stackYAML)
	if _, set := os.LookupEnv("LOCALCLOUD_STACK_NAME"); set {
		t.Skip("LOCALCLOUD_STACK_NAME is set in this environment")
	}
	var dataDir, natsAddr string
	t.Run("stack", func(t *testing.T) {
		s := localcloudtest.Start(t, file)
		dataDir = s.DataDir()
		u, err := url.Parse(s.NATSURL())
		if err != nil {
			t.Fatal(err)
		}
		natsAddr = u.Host
		if !strings.HasPrefix(natsAddr, "127.0.0.1:") || strings.HasSuffix(natsAddr, ":4222") {
			t.Errorf("NATS on %s, want a free port on 127.0.0.1", natsAddr)
		}
		if strings.HasPrefix(dataDir, "/nonexistent") {
			t.Errorf("data dir %s is the stack file's, want the test's own", dataDir)
		}
		env := s.Env()
		if env["LOCALCLOUD_STACK_NAME"] != "shop" || env["LOCALCLOUD_NATS_URL"] != s.NATSURL() {
			t.Errorf("Env() = %v", env)
		}
		for k, v := range env {
			if got := os.Getenv(k); got != v {
				t.Errorf("$%s = %q, want %q (set by Start)", k, got, v)
			}
		}
		if !strings.Contains(env["LOCALCLOUD_BINDING_ORDERS"], `"visibilityTimeoutMs":5000`) {
			t.Errorf("orders binding JSON = %s", env["LOCALCLOUD_BINDING_ORDERS"])
		}
		ctx := context.Background()
		if _, err := s.KV("carts").Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		// A message sent through another handle wakes a waiting receiver
		// through the stack's NATS hints long before the 1 s poll.
		other, err := queue.FromEnv(ctx, "orders")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		got := make(chan []queue.Message, 1)
		go func() {
			ms, _ := s.Queue("orders").ReceiveWait(ctx, 1, 10*time.Second)
			got <- ms
		}()
		time.Sleep(50 * time.Millisecond)
		if err := other.Send(ctx, queue.Text("hello")); err != nil {
			t.Fatal(err)
		}
		if ms := <-got; len(ms) != 1 || ms[0].Payload.Data != "hello" {
			t.Fatalf("received %v, want hello", ms)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "queue", "orders", "localqueue.sqlite")); err != nil {
			t.Errorf("queue store not in the test's data dir: %v", err)
		}
	})
	if dataDir == "" {
		t.Fatal("the subtest did not start the stack")
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir %s after Cleanup: %v; want it gone", dataDir, err)
	}
	if c, err := net.DialTimeout("tcp", natsAddr, time.Second); err == nil {
		c.Close()
		t.Errorf("NATS port %s still accepts connections after Cleanup", natsAddr)
	}
	if v, set := os.LookupEnv("LOCALCLOUD_STACK_NAME"); set {
		t.Errorf("LOCALCLOUD_STACK_NAME=%q after Cleanup; want it unset again", v)
	}
}

// fatalTB records the message of Fatalf and ends the goroutine, as
// testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestMissingStackFileSaysItOnce: the error names the file and says "load
// stack file" once.
func TestMissingStackFileSaysItOnce(t *testing.T) {
	t.Parallel()
	ft := &fatalTB{TB: t}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	done := make(chan struct{})
	go func() {
		defer close(done)
		localcloudtest.Start(ft, missing)
	}()
	<-done
	if strings.Count(ft.msg, "load stack file") != 1 || !strings.Contains(ft.msg, missing) {
		t.Errorf("Start with a missing file failed with %q; want the file named and \"load stack file\" once", ft.msg)
	}
}
