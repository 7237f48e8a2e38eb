package jsengine_test

import (
	"context"
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/kv/kvtest"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// TestKVConformance runs the kv suite on the embedded single node, on
// server time.
func TestKVConformance(t *testing.T) {
	kvtest.Run(t, func(t *testing.T) kvtest.Harness {
		nc := connect(t)
		loc := freshName("kv")
		return kvtest.Harness{
			Open: func(t *testing.T, opts ...kv.Option) *kv.Store {
				s, err := kv.OpenEngine(context.Background(), jsengine.KVEngine{Conn: nc}, loc, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Persistent: true,
			Caps:       kvtest.Capabilities{},
		}
	})
}
