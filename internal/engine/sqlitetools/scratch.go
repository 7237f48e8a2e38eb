package sqlitetools

import (
	"context"
	"os"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine"
)

// Scratch creates a store in a new temporary folder ($TMPDIR), which
// Remove deletes. It is created here, once, so the load processes do not
// race to create it.
func (t Tools) Scratch(ctx context.Context, _ *engine.Env, spec engine.ScratchSpec) (engine.Scratch, error) {
	dir, err := os.MkdirTemp("", "localcloud-bench-")
	if err != nil {
		return nil, err
	}
	s := &scratch{dir: dir, durability: bindings.Durability(spec.Durability), queue: spec.Type == "queue"}
	if err := s.create(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// OpenScratch opens the temporary store in the folder loc.
func (Tools) OpenScratch(_ context.Context, loc string, spec engine.ScratchSpec) (engine.Scratch, error) {
	return &scratch{dir: loc, durability: bindings.Durability(spec.Durability), queue: spec.Type == "queue"}, nil
}

type scratch struct {
	dir        string
	durability bindings.Durability
	queue      bool
}

func (s *scratch) create(ctx context.Context) error {
	if s.queue {
		q, err := s.OpenQueue(ctx)
		if err != nil {
			return err
		}
		return q.Close()
	}
	k, err := s.OpenKV(ctx)
	if err != nil {
		return err
	}
	return k.Close()
}

func (s *scratch) OpenKV(ctx context.Context) (*kv.Store, error) {
	return kv.Open(ctx, s.dir, kv.WithDurability(s.durability))
}

func (s *scratch) OpenQueue(ctx context.Context) (*queue.Queue, error) {
	return queue.Open(ctx, s.dir, queue.WithDurability(s.durability))
}

func (s *scratch) Location() string             { return s.dir }
func (s *scratch) Place() engine.Place          { return engine.Place{Dir: s.dir} }
func (s *scratch) Describe() string             { return "" }
func (s *scratch) Remove(context.Context) error { return os.RemoveAll(s.dir) }
