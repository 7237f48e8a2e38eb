package jstools

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	qdriver "github.com/localcloud/localcloud/bindings/queue/driver"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// Open opens b through the engine on env's connection, with the binding's
// settings and the stack's dead-letter policy (engine.QueueOptions), so the
// tools run the engine an app runs. The engine's Open provisions: with
// engine.Create it creates the stream (and a queue's consumer) or checks an
// existing one, failing closed on one whose settings contradict the
// binding; otherwise the stream must exist.
func (Tools) Open(ctx context.Context, env *engine.Env, b config.Binding, a engine.Access) (engine.Handle, error) {
	nc, err := connect(ctx, env, b)
	if err != nil {
		return nil, err
	}
	if a != engine.Create {
		if err := needStream(ctx, env, b); err != nil {
			return nil, err
		}
	}
	h := &handle{b: b, nc: nc}
	log := env.Log().With("binding", b.Name)
	switch b.Type {
	case config.TypeKV:
		opts := append(engine.KVOptions(b, a), kv.WithLogger(log))
		h.kv, err = kv.OpenEngine(ctx, jsengine.KVEngine{Conn: nc, Replicas: b.Replicas}, b.Name, opts...)
	case config.TypeQueue:
		opts := engine.ReadQueueOptions(b)
		if a != engine.Read {
			opts = engine.QueueOptions(env.Stack, b)
		}
		opts = append(opts, queue.WithLogger(log))
		h.q, err = queue.OpenEngine(ctx, jsengine.QueueEngine{Conn: nc, Replicas: b.Replicas}, b.Name, opts...)
	default:
		err = fmt.Errorf("unknown binding type %q", b.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s binding %s on jetstream (stream %s): %w", b.Type, b.Name, Stream(b), err)
	}
	return h, nil
}

// handle is an open binding of the JetStream engine, on its env's
// connection.
type handle struct {
	b  config.Binding
	nc *nats.Conn
	kv *kv.Store
	q  *queue.Queue
}

func (h *handle) KV() *kv.Store       { return h.kv }
func (h *handle) Queue() *queue.Queue { return h.q }
func (h *handle) Describe() string    { return Tools{}.Describe(h.b) }

// Health is the connection's status: the server holds the stream.
func (h *handle) Health() string {
	if st := h.nc.Status(); st != nats.CONNECTED {
		return fmt.Sprintf("not connected to JetStream (connection %s); it reconnects on its own", strings.ToLower(st.String()))
	}
	return engine.HealthOK
}

// Tail reads the stream after sequence after (jsengine.Tail), never
// through the consumer (a work-queue stream allows no second consumer on
// its subject): IDs are stream sequences, Attempt is 1 for a message the
// consumer has delivered, and VisibleAt is zero (the server holds lease
// ends).
func (h *handle) Tail(ctx context.Context, after int64, limit int) ([]qdriver.PeekedMessage, error) {
	return jsengine.Tail(ctx, h.nc, h.b.Name, uint64(max(after, 0)), limit)
}

// LastID is the stream's last sequence.
func (h *handle) LastID(ctx context.Context) (int64, error) {
	seq, err := jsengine.LastSeq(ctx, h.nc, h.b.Name)
	return int64(seq), err
}

// Arrivals subscribes to the queue's own subject: a core NATS subscription
// sees every publish to it.
func (h *handle) Arrivals(_ context.Context, fn func()) (func(), error) {
	sub, err := h.nc.Subscribe("lcq."+h.b.Name, func(*nats.Msg) { fn() })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Probe: JetStream wakes its consumers itself; up's hint source has
// nothing to watch.
func (h *handle) Probe(context.Context) (engine.Probe, error) {
	return nil, fmt.Errorf("binding %s is on jetstream (stream %s): %w", h.b.Name, Stream(h.b), engine.ErrNoProbe)
}

// Reopen: a JetStream handle holds no descriptor of its own (the
// connection is the env's), so up never closes one while idle.
func (h *handle) Reopen(context.Context) (engine.Handle, error) {
	return nil, fmt.Errorf("binding %s is on jetstream: %w", h.b.Name, engine.ErrNoReopen)
}

// Close closes the handle; the connection is the env's.
func (h *handle) Close() error {
	if h.kv != nil {
		return h.kv.Close()
	}
	return h.q.Close()
}
