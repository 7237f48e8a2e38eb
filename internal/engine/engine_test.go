package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	_ "github.com/localcloud/localcloud/internal/engine/jstools"
	_ "github.com/localcloud/localcloud/internal/engine/sqlitetools"
)

// TestForLooksUpTheBindingsEngine: each built-in engine is registered by
// its stack-file name; a binding without one gets the default; an unknown
// one is an error naming what the build has.
func TestForLooksUpTheBindingsEngine(t *testing.T) {
	if got := strings.Join(engine.Names(), ","); got != "jetstream,sqlite" {
		t.Fatalf("Names() = %s; want jetstream,sqlite", got)
	}
	for _, c := range []struct{ engine, want string }{
		{"", config.DefaultEngine},
		{config.EngineSQLite, "sqlite"},
		{config.EngineJetStream, "jetstream"},
	} {
		tl, err := engine.For(config.Binding{Name: "b", Engine: c.engine})
		if err != nil || tl.Name() != c.want {
			t.Errorf("For(engine %q) = %v, %v; want the tools of %s", c.engine, tl, err, c.want)
		}
	}
	_, err := engine.For(config.Binding{Name: "orders", Engine: "rabbitmq"})
	if err == nil || !strings.Contains(err.Error(), `binding orders: no engine "rabbitmq"`) || !strings.Contains(err.Error(), "jetstream, sqlite") {
		t.Errorf("For(rabbitmq) = %v; want an error naming the binding, the engine and the ones there are", err)
	}
}

type closer struct{ closed *int }

type other struct{}

func (other) Close() error { return nil }

func (c closer) Close() error { *c.closed++; return nil }

// TestEnvSharesUntilClose: Shared makes a value once per key and Env.Close
// closes each once; after Close nothing is handed out.
func TestEnvSharesUntilClose(t *testing.T) {
	env := &engine.Env{}
	made, closed := 0, 0
	open := func() (closer, error) { made++; return closer{&closed}, nil }
	for range 3 {
		if _, err := engine.Shared(env, "k", open); err != nil {
			t.Fatal(err)
		}
	}
	if made != 1 {
		t.Errorf("Shared made %d values for one key; want 1", made)
	}
	if _, err := engine.Shared(env, "k", func() (other, error) { return other{}, nil }); err == nil {
		t.Error("Shared handed a closer out as another type")
	}
	failed := errors.New("no server")
	if _, err := engine.Shared(env, "other", func() (closer, error) { return closer{}, failed }); !errors.Is(err, failed) {
		t.Errorf("Shared with a failing open = %v; want its error", err)
	}
	if err := env.Close(); err != nil || closed != 1 {
		t.Fatalf("Close: %v, closed %d; want the one value closed once", err, closed)
	}
	if _, err := engine.Shared(env, "k", open); err == nil || made != 1 {
		t.Errorf("Shared after Close = %v (made %d); want an error and nothing made", err, made)
	}
}
