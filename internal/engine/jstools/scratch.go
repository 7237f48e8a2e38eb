package jstools

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// Scratch makes a temporary stream (LCQ_bench-XXXXXXXX or
// LCKV_bench-XXXXXXXX) on the stack's JetStream, reached as Open reaches
// it, which Remove deletes; the stack's own streams are not touched. Its
// replicas default to 1 on up's embedded server, 3 on a cluster. One
// process only: the workers share one connection, as an app's stores do.
func (Tools) Scratch(ctx context.Context, env *engine.Env, spec engine.ScratchSpec) (engine.Scratch, error) {
	st := env.Stack
	if spec.Processes > 1 {
		return nil, engine.Hint(fmt.Errorf("--processes must be 1 with --engine jetstream, got %d (the workers share one connection, as an app's stores do)", spec.Processes),
			"localcloud bench queue --engine jetstream --workers 8")
	}
	if st == nil {
		return nil, errors.New("a temporary jetstream store needs the stack file's JetStream")
	}
	if !st.JetStream.External() && !env.UpRunning {
		return nil, engine.Hint(fmt.Errorf("bench --engine jetstream runs on the JetStream of stack %s, which is up's embedded server (no jetstream.servers); start localcloud up (it is not running for data dir %s)", st.Name, st.DataDir),
			"localcloud up -f "+st.File+" in another terminal, then run the bench again")
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	b := config.Binding{Name: fmt.Sprintf("bench-%x", suffix), Type: spec.Type, Engine: config.EngineJetStream, Replicas: spec.Replicas}
	if b.Replicas == 0 {
		b.Replicas = config.DefaultReplicasEmbedded
		if st.JetStream.External() {
			b.Replicas = config.DefaultReplicasCluster
		}
	}
	nc, err := connect(ctx, env, b)
	if err != nil {
		return nil, err
	}
	s := &scratch{b: b, nc: nc, durability: bindings.Durability(spec.Durability)}
	if spec.Type == config.TypeQueue {
		q, err := s.OpenQueue(ctx)
		if err != nil {
			return nil, err
		}
		_ = q.Close()
	} else {
		k, err := s.OpenKV(ctx)
		if err != nil {
			return nil, err
		}
		_ = k.Close()
	}
	return s, nil
}

// OpenScratch fails: a temporary stream is one process's.
func (Tools) OpenScratch(context.Context, string, engine.ScratchSpec) (engine.Scratch, error) {
	return nil, errors.New("a temporary jetstream store is not shared between processes")
}

type scratch struct {
	b          config.Binding
	nc         *nats.Conn
	durability bindings.Durability
}

func (s *scratch) OpenKV(ctx context.Context) (*kv.Store, error) {
	return kv.OpenEngine(ctx, jsengine.KVEngine{Conn: s.nc, Replicas: s.b.Replicas}, s.b.Name, kv.WithDurability(s.durability))
}

func (s *scratch) OpenQueue(ctx context.Context) (*queue.Queue, error) {
	return queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: s.nc, Replicas: s.b.Replicas}, s.b.Name, queue.WithDurability(s.durability))
}

func (s *scratch) Location() string    { return s.b.Name }
func (s *scratch) Place() engine.Place { return Tools{}.Place(s.b) }
func (s *scratch) Describe() string {
	return fmt.Sprintf("engine jetstream (temporary stream %s, %d replica(s))", Stream(s.b), s.b.Replicas)
}

// Remove deletes the temporary stream.
func (s *scratch) Remove(ctx context.Context) error {
	js, err := jetstream.New(s.nc)
	if err != nil {
		return err
	}
	if err := js.DeleteStream(ctx, Stream(s.b)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the temporary stream %s: %w (remove it with nats stream rm %s)", Stream(s.b), err, Stream(s.b))
	}
	return nil
}
