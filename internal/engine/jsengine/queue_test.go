package jsengine_test

import (
	"context"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/queuetest"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// jsQueueCaps is what the JetStream engine lets the queue suite do: it runs
// on server time, its Peek cannot see the server's per-message lease ends
// and delivery counts, and due messages come in the server's delivery
// order (docs/ARCHITECTURE.md, "JetStream engine").
var jsQueueCaps = queuetest.Capabilities{PeekHidesLeases: true, ArrivalOrder: true, HandleLocalExtend: true, LastErrors: true, DedupKeys: true}

// TestQueueConformance runs the queue suite on the embedded single node, on
// server time (the suite's server-time forms of its timed cases).
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		nc := connect(t)
		loc := freshName("q")
		open := func(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
			q, err := queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc}, loc, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return q
		}
		return queuetest.Harness{
			Open: func(t *testing.T, opts ...queue.Option) *queue.Queue { return open(t, loc, opts...) },
			OpenSibling: func(t *testing.T, name string, opts ...queue.Option) *queue.Queue {
				return open(t, loc+"-"+name, opts...)
			},
			TryOpen: func(t *testing.T, opts ...queue.Option) (*queue.Queue, error) {
				return queue.OpenEngine(context.Background(), jsengine.QueueEngine{Conn: nc}, loc, opts...)
			},
			Persistent: true,
			Caps:       jsQueueCaps,
			RefuseAcks: refuseAcks(loc),
		}
	})
}

// refuseAcks is the suite's RefuseAcks on the queue loc: the acks of the
// message with that data get no reply (jsengine.RefuseAck).
func refuseAcks(loc string) func(t *testing.T, q *queue.Queue, data string) (undo func()) {
	return func(t *testing.T, q *queue.Queue, data string) func() {
		t.Helper()
		ms, err := q.Peek(t.Context(), queue.MaxPeekLimit)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Payload.Data == data {
				return jsengine.RefuseAck(loc, uint64(m.ID))
			}
		}
		t.Fatalf("no message %q to refuse the acks of", data)
		return nil
	}
}
