package kv_test

import (
	"context"
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

// TestFromEnvPicksARegisteredEngine: a binding whose JSON names another
// service opens through the engine registered for it, with its JSON, and
// the public checks still apply.
func TestFromEnvPicksARegisteredEngine(t *testing.T) {
	var got driver.Config
	kv.Register("test-kv-engine", recordingEngine{&got})
	raw := `{"service":"test-kv-engine","bucket":"carts"}`
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
