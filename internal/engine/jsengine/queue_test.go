package jsengine_test

import (
	"context"
	"testing"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/queuetest"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestQueueConformance runs the queue suite on the embedded single node, on
// server time (the suite skips the cases that need a fake clock).
func TestQueueConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queuetest.Harness {
		nc := connect(t)
		loc := freshName("q")
		open := func(t *testing.T, loc string, opts ...queue.Option) *queue.Queue {
			q, err := queue.OpenEngine(context.Background(), jsengine.Queue{Conn: nc}, loc, opts...)
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
			Persistent: true,
			Caps:       queuetest.Capabilities{},
		}
	})
}
