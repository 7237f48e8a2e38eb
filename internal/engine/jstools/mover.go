package jstools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings/queue"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/engine/moverec"
)

// QueueMover opens the queue's stream once more for localcloud migrate,
// with no dead-letter policy (nothing moves while it exports), and reads
// and writes it through jsengine's migrate.go: the messages due are
// claimed through the consumer for lease (their deliveries are counted
// there), the delayed ones read as they are.
func (h *handle) QueueMover(ctx context.Context, lease time.Duration) (engine.QueueMover, error) {
	if h.q == nil {
		return nil, fmt.Errorf("binding %s is a %s binding, not a queue", h.b.Name, h.b.Type)
	}
	opts := []queue.Option{queue.WithBindingName(h.b.Name), queue.WithDefaultVisibility(lease)}
	if h.b.DedupWindow > 0 {
		opts = append(opts, queue.WithDedupWindow(h.b.DedupWindow))
	}
	cfg, err := queue.EngineConfig(h.b.Name, opts...)
	if err != nil {
		return nil, err
	}
	d, err := jsengine.QueueEngine{Conn: h.nc, Replicas: h.b.Replicas}.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open queue %s on jetstream (stream %s): %w", h.b.Name, Stream(h.b), err)
	}
	ex, err := jsengine.NewExporter(d, lease)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &mover{b: h.b.Name, stream: Stream(h.b), d: d, ex: ex}, nil
}

type mover struct {
	b, stream string
	d         qdriver.Queue
	ex        *jsengine.Exporter
}

func (m *mover) Source() string { return "jetstream:" + m.stream }

func (m *mover) Leased(ctx context.Context) (int64, time.Time, error) { return m.ex.Leased(ctx) }
func (m *mover) Export(ctx context.Context, max int) ([]moverec.Message, error) {
	return m.ex.Next(ctx, max)
}
func (m *mover) Remove(ctx context.Context, ids []int64) error { return m.ex.Remove(ctx, ids) }
func (m *mover) Release()                                      { m.ex.Release() }
func (m *mover) Dedups(ctx context.Context) ([]moverec.Dedup, error) {
	return jsengine.Dedups(ctx, m.d)
}
func (m *mover) ClearDedup(ctx context.Context) error { return jsengine.ClearDedup(ctx, m.d) }
func (m *mover) Imported(ctx context.Context, source string) (map[int64]int64, error) {
	return jsengine.Imported(ctx, m.d, source)
}
func (m *mover) Import(ctx context.Context, source string, ms []moverec.Message, done map[int64]int64) error {
	return jsengine.Import(ctx, m.d, source, ms, done)
}
func (m *mover) ImportDedup(ctx context.Context, ds []moverec.Dedup, _ map[int64]int64) error {
	return jsengine.ImportDedup(ctx, m.d, ds)
}
func (m *mover) ReadBack(ctx context.Context, ids []int64) (map[int64]qdriver.Payload, error) {
	return jsengine.ReadBack(ctx, m.d, ids)
}
func (m *mover) Close() error { return m.d.Close() }

// dropWait bounds how long DropEmpty waits for a stream to be empty.
const dropWait = 10 * time.Second

// DropEmpty deletes b's stream (and a queue's stream of last errors) when
// it holds no message: while up's server runs without JetStream a stream
// cannot be counted, only seen on disk, so an empty one left behind by
// migrate would keep up refusing the binding on sqlite.
func (Tools) DropEmpty(ctx context.Context, env *engine.Env, b config.Binding) error {
	js, err := jetStream(ctx, env, b)
	if err != nil {
		return err
	}
	st, err := js.Stream(ctx, Stream(b))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", Stream(b), err)
	}
	// The acks of the last messages moved out may still be applying: a
	// work-queue stream drops a message once its ack is processed.
	for deadline := time.Now().Add(dropWait); ; {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("read stream %s: %w", Stream(b), err)
		}
		n := info.State.Msgs
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stream %s of %s binding %s still holds %d messages %s after the move; it is kept", Stream(b), b.Type, b.Name, n, dropWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := js.DeleteStream(ctx, Stream(b)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete the emptied stream %s: %w", Stream(b), err)
	}
	if b.Type == config.TypeQueue {
		if err := js.DeleteStream(ctx, "LCQE_"+b.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream LCQE_%s: %w", b.Name, err)
		}
	}
	return nil
}

// Remove deletes the streams of a queue the SQS API created.
func (Tools) Remove(ctx context.Context, env *engine.Env, b config.Binding) error {
	if !b.Created {
		return fmt.Errorf("remove the stream of binding %s: only a queue created through the SQS API is removed, never a binding of the stack file", b.Name)
	}
	js, err := jetStream(ctx, env, b)
	if err != nil {
		return err
	}
	for _, name := range []string{Stream(b), "LCQE_" + b.Name} {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s of queue %s: %w", name, b.Name, err)
		}
	}
	return nil
}
