package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// recordingEngine is an engine of another service: it opens the SQLite
// memory engine and records the config FromEnv handed it.
type recordingEngine struct{ got *driver.Config }

func (e recordingEngine) Open(ctx context.Context, cfg driver.Config) (driver.Queue, error) {
	*e.got = cfg
	cfg.Location = queue.MemoryPrefix + "registered-engine"
	return sqlitequeue.Engine{}.Open(ctx, cfg)
}

// registerRuns numbers the runs of TestFromEnvPicksARegisteredEngine.
var registerRuns atomic.Int64

// TestFromEnvPicksARegisteredEngine: a binding whose JSON names another
// service opens through the engine registered for it, with its JSON.
func TestFromEnvPicksARegisteredEngine(t *testing.T) {
	var got driver.Config
	// A service name of its own per run: Register panics on a second
	// registration (go test -count=2).
	svc := fmt.Sprintf("test-queue-engine-%d", registerRuns.Add(1))
	queue.Register(svc, recordingEngine{&got})
	raw := `{"service":"` + svc + `","stream":"orders"}`
	t.Setenv(queue.EnvName("reg"), raw)
	q, err := queue.FromEnv(context.Background(), "reg")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if string(got.Binding) != raw || got.BindingName != "reg" {
		t.Errorf("engine got binding %q name %q; want %q, reg", got.Binding, got.BindingName, raw)
	}
	if err := q.Send(context.Background(), queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	// An unknown service is still BINDING_SETUP_FAILED naming the variable.
	t.Setenv(queue.EnvName("other"), `{"service":"nobody"}`)
	if _, err := queue.FromEnv(context.Background(), "other"); !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Fatalf("unknown service: %v; want BINDING_SETUP_FAILED", err)
	}
}

// TestNewWrapsAnEngineHandle: a tool that opens the engine's queue itself
// (EngineConfig, the engine's Open) keeps the engine's own handle and gets
// the public one from New, with the options applied on both sides.
func TestNewWrapsAnEngineHandle(t *testing.T) {
	ctx := context.Background()
	opts := []queue.Option{queue.WithDefaultVisibility(7 * time.Second), queue.WithBindingName("orders")}
	cfg, err := queue.EngineConfig(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Visibility != 7*time.Second || cfg.BindingName != "orders" || cfg.Logger == nil || cfg.Clock == nil {
		t.Fatalf("EngineConfig = %+v; want the options' visibility and binding name, a logger and a clock", cfg)
	}
	d, err := sqlitequeue.Engine{}.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eq := d.(*sqlitequeue.Queue) // the engine's own type, as the tool opened it
	q, err := queue.New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Send(ctx, queue.Text("x")); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := eq.DB().R.QueryRowContext(ctx, "SELECT COUNT(*) FROM messages").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the engine's handle sees %d messages (%v); want the 1 sent through New's", n, err)
	}
	start := time.Now()
	ms, err := q.Receive(ctx, 1)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %v, %v", ms, err)
	}
	var vis int64
	if err := eq.DB().R.QueryRowContext(ctx, "SELECT visible_at FROM messages").Scan(&vis); err != nil {
		t.Fatal(err)
	}
	if lease := time.UnixMilli(vis).Sub(start); lease < 6*time.Second || lease > 8*time.Second {
		t.Errorf("lease of a Receive through New: %s; want the 7s of WithDefaultVisibility", lease)
	}

	if _, err := queue.New(nil); !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Errorf("New(nil) = %v; want BINDING_SETUP_FAILED", err)
	}
	if _, err := queue.New(d, queue.WithDefaultVisibility(-1)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Errorf("New with a negative visibility = %v; want INVALID_INPUT", err)
	}
	if _, err := queue.EngineConfig("x", queue.WithDefaultVisibility(-1)); !errors.Is(err, bindings.ErrInvalidInput) {
		t.Errorf("EngineConfig with a negative visibility = %v; want INVALID_INPUT", err)
	}
}
