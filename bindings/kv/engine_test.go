package kv_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/localcloud/localcloud/bindings"
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

// TestNewWrapsAnEngineHandle: a tool that opens the engine's store itself
// keeps the engine's own handle and gets the public one from New.
func TestNewWrapsAnEngineHandle(t *testing.T) {
	ctx := context.Background()
	cfg, err := kv.EngineConfig(t.TempDir(), kv.WithDurability(bindings.DurabilityFull))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Durability != string(bindings.DurabilityFull) || cfg.Logger == nil || cfg.Clock == nil {
		t.Fatalf("EngineConfig = %+v; want durability full, a logger and a clock", cfg)
	}
	d, err := sqlitekv.Engine{}.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	es := d.(*sqlitekv.Store)
	s, err := kv.New(d)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	var v string
	if err := es.DB().R.QueryRowContext(ctx, "SELECT value FROM kv WHERE key = 'k'").Scan(&v); err != nil || v != "v" {
		t.Fatalf("the engine's handle reads %q (%v); want the value put through New's", v, err)
	}
	if _, err := kv.New(nil); !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Errorf("New(nil) = %v; want BINDING_SETUP_FAILED", err)
	}
	if _, err := kv.EngineConfig("x", kv.WithDurability("sometimes")); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Errorf("EngineConfig with a bad durability = %v; want INVALID_INPUT", err)
	}
}
