package kv_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/kv/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

type recordingEngine struct{ got *driver.Config }

func (e recordingEngine) Open(ctx context.Context, cfg driver.Config) (driver.Store, error) {
	*e.got = cfg
	cfg.Location = kv.MemoryPrefix + "registered-engine"
	return sqlitekv.Engine{}.Open(ctx, cfg)
}

// registerRuns numbers the runs of TestFromEnvPicksARegisteredEngine.
var registerRuns atomic.Int64

// TestFromEnvPicksARegisteredEngine: a binding whose JSON names another
// service opens through the engine registered for it, with its JSON, and
// the public checks still apply.
func TestFromEnvPicksARegisteredEngine(t *testing.T) {
	var got driver.Config
	// A service name of its own per run: Register panics on a second
	// registration (go test -count=2).
	svc := fmt.Sprintf("test-kv-engine-%d", registerRuns.Add(1))
	kv.Register(svc, recordingEngine{&got})
	raw := `{"service":"` + svc + `","bucket":"carts"}`
	t.Setenv(kv.EnvName("reg"), raw)
	s, err := kv.FromEnv(context.Background(), "reg")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if string(got.Binding) != raw {
		t.Errorf("engine got binding %q; want %q", got.Binding, raw)
	}
	if _, err := s.Put(context.Background(), "bad key", []byte("x")); err == nil {
		t.Error("Put of an invalid key through a registered engine succeeded")
	}
}
