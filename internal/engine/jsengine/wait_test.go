package jsengine_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// longPoll is the fallback poll interval of the wake-up tests: far longer
// than any wake-up they accept, so a wake-up they see came from the server.
const longPoll = time.Minute

// wakeBound is the longest a wake-up may take in the tests.
const wakeBound = time.Second

// openOn opens the queue name on a connection of its own to the single
// node, with the long fallback poll.
func openOn(t testing.TB, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	return openOnURL(t, node.url, 1, name, opts...)
}

func openOnURL(t testing.TB, url string, replicas int, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	nc, err := natsConnect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	deadline := time.Now().Add(20 * time.Second) // a cluster may still settle
	for {
		q, err := queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc, Replicas: replicas}, name,
			append([]queue.Option{queue.WithPollInterval(longPoll)}, opts...)...)
		if err == nil {
			t.Cleanup(func() { _ = q.Close() })
			return q
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConsumeWakesOnOtherConnection: a Consume idle on one connection
// claims a message another connection sends within wakeBound, with a
// fallback poll of a minute: the wake-up is the server's answer to a
// pending pull request.
func TestConsumeWakesOnOtherConnection(t *testing.T) {
	name := freshName("wake")
	testConsumeWakes(t, openOn(t, name), openOn(t, name))
}

// TestConsumeWakesOnOtherConnectionCluster is the same on an R3 queue of
// the 3-node cluster, the two connections on different nodes.
func TestConsumeWakesOnOtherConnectionCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	urls := strings.Split(startCluster(t), ",")
	name := freshName("cwake")
	testConsumeWakes(t, openOnURL(t, urls[0], 3, name), openOnURL(t, urls[2], 3, name))
}

func testConsumeWakes(t *testing.T, consumer, sender *queue.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan time.Time, 10)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Consume(ctx, func(context.Context, queue.Message) error {
			got <- time.Now()
			return nil
		}, queue.ConsumePollInterval(longPoll), queue.ConsumeWorkers(1))
	}()
	for i := range 3 {
		time.Sleep(300 * time.Millisecond) // the consumer is idle, waiting
		sent := time.Now()
		if err := sender.Send(context.Background(), queue.Text("m"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-got:
			if d := at.Sub(sent); d > wakeBound {
				t.Fatalf("message %d handled %s after the send; want under %s (poll %s)", i, d, wakeBound, longPoll)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not handled 5 s after its send (fallback poll %s): no wake-up", i, longPoll)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReceiveWaitWakesOnOtherConnection is the same for ReceiveWait, and
// a ReceiveWait whose ctx ends claims nothing: the message sent after it
// gave up is received at once by the next Receive.
func TestReceiveWaitWakesOnOtherConnection(t *testing.T) {
	name := freshName("wake")
	receiver, sender := openOn(t, name), openOn(t, name)
	bg := context.Background()
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = sender.Send(bg, queue.Text("hello"))
	}()
	start := time.Now()
	msgs, err := receiver.ReceiveWait(bg, 1, 10*time.Second)
	if err != nil || len(msgs) != 1 || msgs[0].Payload.Data != "hello" {
		t.Fatalf("ReceiveWait = %+v, %v; want hello", msgs, err)
	}
	if d := time.Since(start); d > 300*time.Millisecond+wakeBound {
		t.Fatalf("ReceiveWait returned after %s; want within %s of the send", d, wakeBound)
	}
	if err := receiver.Ack(bg, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	if msgs, err := receiver.ReceiveWait(ctx, 1, 10*time.Second); err != context.DeadlineExceeded || len(msgs) != 0 {
		t.Fatalf("ReceiveWait past its ctx = %+v, %v; want nothing, DeadlineExceeded", msgs, err)
	}
	if err := sender.Send(bg, queue.Text("after")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wakeBound)
	for {
		msgs, err := sender.Receive(bg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 1 {
			if msgs[0].Payload.Data != "after" {
				t.Fatalf("received %q; want after", msgs[0].Payload.Data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the message sent after a given-up ReceiveWait is not receivable %s later: the abandoned wait kept it", wakeBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkWakeLatency measures how long an idle Consume takes to handle a
// message another connection sends: one message at a time, the consumer
// idle before each send; p50 and p99 of send-to-handler.
func BenchmarkWakeLatency(b *testing.B) {
	name := freshName("wakebench")
	consumer, sender := openOn(b, name), openOn(b, name)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan time.Time, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = consumer.Consume(ctx, func(context.Context, queue.Message) error {
			got <- time.Now()
			return nil
		}, queue.ConsumePollInterval(longPoll), queue.ConsumeWorkers(1))
	}()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		sent := time.Now()
		if err := sender.Send(context.Background(), queue.Text("x")); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-got:
			lat = append(lat, at.Sub(sent))
		case <-time.After(10 * time.Second):
			b.Fatal("no wake-up in 10 s")
		}
		time.Sleep(5 * time.Millisecond) // let the consumer go idle again
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
}

// TestConsumeStopsOnClose: closing the handle under a Consume waiting on
// the server ends the Consume with an error, promptly.
func TestConsumeStopsOnClose(t *testing.T) {
	q := openOn(t, freshName("wclose"))
	done := make(chan error, 1)
	go func() {
		done <- q.Consume(context.Background(), func(context.Context, queue.Message) error { return nil },
			queue.ConsumePollInterval(longPoll))
	}()
	time.Sleep(300 * time.Millisecond) // waiting on the server
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Consume returned nil after Close; want the closed error")
		}
	case <-time.After(wakeBound):
		t.Fatalf("Consume still running %s after Close", wakeBound)
	}
}
