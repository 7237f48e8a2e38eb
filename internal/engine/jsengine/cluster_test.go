package jsengine_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/kv/kvtest"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/queuetest"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// cluster is a 3-node JetStream cluster on loopback, shared by the cluster
// tests of the package and started by the first of them.
var cluster struct {
	once sync.Once
	urls string // all three client URLs, comma-separated
	err  error
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts the cluster once; it stays up until the test binary
// ends (each node shut down by a Cleanup of the first test's parent would
// stop it under the other tests).
func startCluster(t testing.TB) string {
	t.Helper()
	cluster.once.Do(func() {
		ports := []int{freePort(t), freePort(t), freePort(t)}
		var routes []string
		for _, p := range ports {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
		var srvs []*server.Server
		var urls []string
		for i, p := range ports {
			dir, err := tempDir()
			if err != nil {
				cluster.err = err
				return
			}
			srv, err := server.NewServer(&server.Options{
				ServerName: fmt.Sprintf("n%d", i+1),
				Host:       "127.0.0.1",
				Port:       -1,
				NoSigs:     true,
				NoLog:      true,
				JetStream:  true,
				StoreDir:   dir,
				Cluster:    server.ClusterOpts{Name: "lc", Host: "127.0.0.1", Port: p},
				Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			})
			if err != nil {
				cluster.err = fmt.Errorf("configure node %d: %w", i+1, err)
				return
			}
			srv.Start()
			stopAtExit(srv)
			srvs = append(srvs, srv)
		}
		for i, srv := range srvs {
			if !srv.ReadyForConnections(10 * time.Second) {
				cluster.err = fmt.Errorf("node %d not ready", i+1)
				return
			}
			urls = append(urls, srv.ClientURL())
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			leader := false
			for _, srv := range srvs {
				leader = leader || srv.JetStreamIsLeader()
			}
			if leader {
				break
			}
			if time.Now().After(deadline) {
				cluster.err = fmt.Errorf("no JetStream meta leader after 20 s")
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		cluster.urls = strings.Join(urls, ",")
	})
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.urls
}

func connectCluster(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(startCluster(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// retryOpen retries an open while the cluster settles ("temporarily
// unavailable", "no suitable peers", a leader moving), for up to 20 s.
func retryOpen[T any](t *testing.T, open func() (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := open()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("open on the cluster: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKVConformanceCluster runs the kv suite on R3 buckets of a 3-node
// loopback cluster.
func TestKVConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	kvtest.Run(t, func(t *testing.T) kvtest.Harness {
		nc := connectCluster(t)
		loc := freshName("ckv")
		return kvtest.Harness{
			Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
				return retryOpen(t, func() (*kv.Store, error) {
					return kv.OpenEngine(context.Background(), jsengine.KVEngine{Conn: nc, Replicas: 3}, loc, opts...)
				})
			},
			Persistent: true,
		}
	})
}

// TestQueueConformanceCluster runs the queue suite on R3 queues of a 3-node
// loopback cluster.
func TestQueueConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		nc := connectCluster(t)
		loc := freshName("cq")
		open := func(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
			return retryOpen(t, func() (*queue.Queue, error) {
				return queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc, Replicas: 3}, loc, opts...)
			})
		}
		return queuetest.Harness{
			Open: func(t *testing.T, opts ...queue.Option) *queue.Queue { return open(t, loc, opts...) },
			OpenSibling: func(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
				return open(t, loc+"-"+name, opts...)
			},
			TryOpen: func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
				return queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc, Replicas: 3}, loc, opts...)
			},
			Persistent: true,
			Caps:       jsQueueCaps,
			RefuseAcks: refuseAcks(loc),
		}
	})
}
