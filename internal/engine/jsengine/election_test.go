package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
)

// TestAckWhileStreamElects: an Ack whose +ACK the consumer's leader
// confirmed returns nil once the stream drops the message, even when the
// stream's leader goes down right then and the stream elects a new one
// (the fault test saw such acks fail with "get message: context deadline
// exceeded": one read of the stream waited out the caller's whole
// deadline).
func TestAckWhileStreamElects(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster with a node shut down")
	}
	c := newFaultCluster(t)
	nc, err := faultConnect(c.urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	q, err := faultOpen(nc, "elect")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const stream = "LCQ_elect"
	// The consumer's leader must live on a node other than the stream's,
	// so that the ack is confirmed while the stream elects: step the
	// stream's leader down until it does.
	var streamLeader, consLeader string
	for deadline := time.Now().Add(30 * time.Second); ; {
		s, err := readStream(js, stream)
		cons, err2 := js.Consumer(ctx, stream, "lc")
		consLeader = ""
		if err2 == nil {
			if ci, err := cons.Info(ctx); err == nil && ci.Cluster != nil {
				consLeader = ci.Cluster.Leader
			}
		}
		if err == nil && s.leader != "" && consLeader != "" && s.leader != consLeader {
			streamLeader = s.leader
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream leader %q, consumer leader %q: not apart after 30 s", s.leader, consLeader)
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
		time.Sleep(500 * time.Millisecond)
	}
	if err := q.Send(ctx, queue.Text("m")); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1, queue.WithVisibility(20*time.Second))
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	// Leave the consumer's leader alone: the stream has no quorum, no
	// leader, while the ack is confirmed; bring one node back after 1 s.
	var down []int
	for name, i := range c.nameToIx {
		if name != consLeader {
			c.stop(i)
			down = append(down, i)
		}
	}
	back := time.AfterFunc(time.Second, func() { c.start(down[0]) })
	defer back.Stop()
	actx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	began := time.Now()
	err = q.Ack(actx, msgs[0].ReceiptHandle)
	t.Logf("ack with the stream's leader %s and one more node down, one back after 1 s: %v after %s",
		streamLeader, err, time.Since(began).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("ack while the stream elects: %v; want nil once the new leader has dropped the message", err)
	}
	c.start(down[1])
	st, err := q.Stats(ctx)
	if err != nil || st.Total != 0 {
		t.Fatalf("after the ack: %+v, %v; want the queue empty", st, err)
	}
}
