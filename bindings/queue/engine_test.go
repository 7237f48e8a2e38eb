package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

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
