package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// startNode starts a single JetStream node on port (0: a free one) with its
// store in dir; the test stops it (and a restarted one) at the end.
func startNode(t *testing.T, port int, dir string) *server.Server {
	t.Helper()
	if port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv
}

// keyedSend sends one text with a dedup key and reports whether the queue
// called it a duplicate.
func keyedSend(t *testing.T, q *queue.Queue, text, key string) bool {
	t.Helper()
	var r queue.SendResult
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := q.Send(context.Background(), queue.Text(text), queue.WithDedupKey(key), queue.WithSendResult(&r))
		if err == nil {
			return r.Duplicate[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("send %s: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond) // the server is coming back
	}
}

// TestDedupAcrossRestart: a key is remembered over a restart of a single
// node within the window, the key of a consumed message too. The server
// alone rebuilds its keys from the messages still stored, and an acked
// message leaves the work-queue stream: measured before the engine kept a
// marker per key (dedup.go), the acked message's key was forgotten
// ("duplicate=false"), which is what this test caught.
func TestDedupAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	srv := startNode(t, 0, dir)
	port := srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, "restart", queue.WithDedupWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if keyedSend(t, q, "kept", "k:kept") || keyedSend(t, q, "acked", "k:acked") {
		t.Fatal("a first send was a duplicate")
	}
	msgs, err := q.Receive(ctx, 10)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	for _, m := range msgs {
		if m.Payload.Data == "acked" {
			if err := q.Ack(ctx, m.ReceiptHandle); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !keyedSend(t, q, "acked again", "k:acked") {
		t.Fatal("the key of an acked message was forgotten without a restart; want remembered for the window")
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	restarted := time.Now()
	startNode(t, port, dir)
	kept := keyedSend(t, q, "kept again", "k:kept")
	acked := keyedSend(t, q, "acked after restart", "k:acked")
	t.Logf("after a restart (%s down, within a 1m window): key of a stored message duplicate=%v, key of an acked message duplicate=%v",
		time.Since(restarted).Round(time.Millisecond), kept, acked)
	if !kept || !acked {
		t.Error("a key sent within the window was forgotten over the restart")
	}
}

// TestDedupServerTime is the suite's Dedup/SecondSendAddsNothing on server
// time (the suite's form needs a fake clock): a second send of a key adds
// nothing, through another handle too; a batch leaves out its repeats and
// the keys sent before (the server refuses the atomic batch, the engine
// then sends one at a time); after the window the key adds again.
func TestDedupServerTime(t *testing.T) { dedupServerTime(t, jsengine.QueueEngine{Conn: connect(t)}) }

// TestDedupServerTimeCluster is TestDedupServerTime on an R3 queue of the
// 3-node cluster.
func TestDedupServerTimeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	dedupServerTime(t, jsengine.QueueEngine{Conn: connectCluster(t), Replicas: 3})
}

func dedupServerTime(t *testing.T, eng jsengine.QueueEngine) {
	ctx := context.Background()
	loc := freshName("dd")
	const window = 600 * time.Millisecond
	open := func() *queue.Queue {
		q := retryOpen(t, func() (*queue.Queue, error) {
			return queue.OpenEngine(ctx, eng, loc, queue.WithDedupWindow(window))
		})
		t.Cleanup(func() { q.Close() })
		return q
	}
	q, q2 := open(), open()
	sent := time.Now()
	if keyedSend(t, q, "a", "order:1") {
		t.Fatal("first send: a duplicate")
	}
	if !keyedSend(t, q2, "a again", "order:1") {
		t.Fatal("second send through another handle: not a duplicate")
	}
	var r queue.SendResult
	if err := q.SendBatch(ctx, []queue.Payload{queue.Text("b"), queue.Text("a3"), queue.Text("c"), queue.Text("b2")},
		queue.WithDedupKeys("order:2", "order:1", "", "order:2"), queue.WithSendResult(&r)); err != nil {
		t.Fatal(err)
	}
	if r.Added != 2 || fmt.Sprint(r.Duplicate) != "[false true false true]" {
		t.Fatalf("batch: %+v; want b and c added", r)
	}
	if err := q.SendBatch(ctx, []queue.Payload{queue.Text("d"), queue.Text("e")},
		queue.WithDedupKeys("order:3", "order:4"), queue.WithSendResult(&r)); err != nil || r.Added != 2 {
		t.Fatalf("batch of new keys: %+v, %v", r, err)
	}
	if time.Since(sent) >= window {
		t.Skipf("the sends took %s, longer than the %s window", time.Since(sent), window)
	}
	msgs, err := q.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Payload.Data)
	}
	if fmt.Sprint(got) != "[a b c d e]" {
		t.Fatalf("stored %v; want [a b c d e]", got)
	}
	time.Sleep(window + 100*time.Millisecond)
	if keyedSend(t, q, "a4", "order:1") {
		t.Fatal("send after the window: a duplicate")
	}
	// A window different from the stream's fails closed, naming it.
	_, err = queue.OpenEngine(ctx, eng, loc, queue.WithDedupWindow(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "duplicate_window is 600ms, want 1m0s") {
		t.Fatalf("open with another window: %v; want a refusal naming both windows", err)
	}
}

// TestDedupClusterRestarts: on an R3 queue a key is remembered within the
// window over a restart of each node in turn (the cluster keeps a quorum)
// and over a restart of all three at once, the key of an acked message too
// (before the engine kept markers, the rolling restart forgot it).
func TestDedupClusterRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster restarted")
	}
	c := newFaultCluster(t)
	nc, err := faultConnect(c.urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	q := retryOpen(t, func() (*queue.Queue, error) {
		// Short leases: a receipt issued while a restart changed the
		// consumer's incarnation is refused (the contract), and its message
		// comes back when the lease ends.
		return queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc, Replicas: 3}, "ddr", queue.WithDedupWindow(time.Minute),
			queue.WithDefaultVisibility(2*time.Second))
	})
	defer q.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// sendTwo sends a kept and an acked message under fresh keys and acks
	// the second.
	sendTwo := func(kept, acked string) {
		t.Helper()
		if keyedSend(t, q, kept, kept) || keyedSend(t, q, acked, acked) {
			t.Fatal("a first send was a duplicate")
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			msgs, err := q.Receive(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			done := false
			for _, m := range msgs {
				if m.Payload.Data == acked {
					err := q.Ack(ctx, m.ReceiptHandle)
					if errors.Is(err, queue.ErrStaleReceipt) {
						continue // issued across a restart: received again after its lease
					}
					if err != nil {
						t.Fatal(err)
					}
					done = true
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not received", acked)
			}
		}
	}
	current := func(what string) {
		t.Helper()
		if _, err := waitStream(js, "LCQ_ddr", 30*time.Second, func(s streamState) bool { return s.current == 3 }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	sendTwo("k1.kept", "k1.acked")
	for i := range 3 {
		c.stop(i)
		c.start(i)
		current(fmt.Sprintf("node %d restarted", i+1))
	}
	rolling := [2]bool{keyedSend(t, q, "again", "k1.kept"), keyedSend(t, q, "again", "k1.acked")}
	sendTwo("k2.kept", "k2.acked")
	for i := range 3 {
		c.stop(i)
	}
	for i := range 3 {
		c.start(i)
	}
	current("cluster restarted")
	whole := [2]bool{keyedSend(t, q, "again", "k2.kept"), keyedSend(t, q, "again", "k2.acked")}
	t.Logf("duplicate? after each node restarted in turn: stored key %v, acked key %v; after all three restarted at once: stored key %v, acked key %v",
		rolling[0], rolling[1], whole[0], whole[1])
	if !rolling[0] || !rolling[1] || !whole[0] || !whole[1] {
		t.Error("a key sent within the window was forgotten over the restarts")
	}
}

// TestDedupSurvivesPurge: Purge removes the messages, not the dedup keys
// (as on the SQLite engine, whose purge leaves lc_dedup alone), also over a
// restart of the node.
func TestDedupSurvivesPurge(t *testing.T) {
	dir := t.TempDir()
	srv := startNode(t, 0, dir)
	port := srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	q, err := queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc}, "purged", queue.WithDedupWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if keyedSend(t, q, "a", "k:a") {
		t.Fatal("first send: a duplicate")
	}
	if err := q.Send(ctx, queue.Text("b"), queue.WithDelay(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := q.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Total != 0 {
		t.Fatalf("after the purge: %+v, %v; want nothing left", st, err)
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	startNode(t, port, dir)
	if !keyedSend(t, q, "a again", "k:a") {
		t.Fatal("after a purge and a restart the key was forgotten")
	}
}
