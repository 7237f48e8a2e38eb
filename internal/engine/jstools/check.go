package jstools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
)

// ProblemStream is check's problem kind on a jetstream binding: its stream
// or consumer is missing a setting, has no leader, or cannot be reached.
const ProblemStream = "stream"

// Check reaches JetStream as Open does and opens the binding read-only
// through the engine, which checks that the stream exists with the
// settings the binding needs (subjects, retention, atomic publish,
// schedules, TTL, no direct get) and, for a queue, that its consumer
// exists, and waits for their leaders; then it reads the stream's info:
// replicas (against the binding's), leader and the replicas that are
// offline or lagging. A stream that does not exist yet is no problem (up
// creates it), and neither is a stopped up serving an embedded server:
// the report then says it did not check.
func (t Tools) Check(ctx context.Context, env *engine.Env, b config.Binding) (engine.Report, error) {
	stream := Stream(b)
	r := engine.Report{Binding: b.Name, Type: string(b.Type), Format: "jetstream", Engine: config.EngineJetStream, Stream: stream,
		Problems: []engine.Problem{}, Notes: []string{}}
	add := func(msg string) {
		r.Problems = append(r.Problems, engine.Problem{Kind: ProblemStream, Object: "stream " + stream, Message: msg})
	}
	if env.Stack != nil && !env.Stack.JetStream.External() && !env.UpRunning && env.Connect == nil {
		r.OK, r.Skipped = true, true
		r.Notes = append(r.Notes, "not checked: served by up's embedded JetStream, and localcloud up is not running; start it and run check again")
		r.Summary = fmt.Sprintf("skipped (engine jetstream, stream %s)", stream)
		return r, nil
	}
	js, err := jetStream(ctx, env, b)
	if err != nil {
		add(err.Error())
		return r, nil
	}
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		r.OK = true
		r.Notes = append(r.Notes, fmt.Sprintf("not provisioned yet (no stream %s on %s); localcloud up creates it", stream, where(env.Stack)))
		r.Summary = fmt.Sprintf("not provisioned yet (engine jetstream, stream %s)", stream)
		return r, nil
	}
	if err != nil {
		add(fmt.Sprintf("look up the stream: %v", err))
		return r, nil
	}
	r.Exists = true
	if h, err := t.Open(ctx, env, b, engine.Read); err != nil {
		add(err.Error())
	} else {
		_ = h.Close()
	}
	info, err := s.Info(ctx)
	if err != nil {
		add(fmt.Sprintf("read the stream's info: %v", err))
		r.OK = len(r.Problems) == 0
		return r, nil
	}
	r.Replicas = info.Config.Replicas
	if b.Replicas > 0 && info.Config.Replicas != b.Replicas {
		r.Notes = append(r.Notes, fmt.Sprintf("the stream has %d replica(s), the binding says replicas: %d (up checks the other settings, not this one; nats stream edit %s --replicas %d changes it)",
			info.Config.Replicas, b.Replicas, stream, b.Replicas))
	}
	if c := info.Cluster; c != nil {
		r.Leader = c.Leader
		if c.Leader == "" {
			add("the stream has no leader elected")
		}
		for _, p := range c.Replicas {
			switch {
			case p.Offline:
				r.Notes = append(r.Notes, fmt.Sprintf("replica %s is offline", p.Name))
			case !p.Current:
				r.Notes = append(r.Notes, fmt.Sprintf("replica %s is not current (lagging by %d operations)", p.Name, p.Lag))
			}
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d message(s), %d bytes", info.State.Msgs, info.State.Bytes))
	r.OK = len(r.Problems) == 0
	what := ""
	if b.Type == config.TypeQueue {
		what = ", consumer lc"
	}
	if r.Leader != "" {
		what += ", leader " + r.Leader
	}
	r.Summary = fmt.Sprintf("ok (engine jetstream, stream %s with the expected settings, %d replica(s)%s)", stream, r.Replicas, what)
	return r, nil
}

// Health while no up runs: not checked (status reads a stream's counts
// through Open where it can).
func (Tools) Health(_ context.Context, env *engine.Env, _ config.Binding) string {
	if env.Stack != nil && env.Stack.JetStream.External() {
		return "not checked: localcloud up is not running (the counts come from the cluster)"
	}
	return "not checked: a jetstream binding on up's embedded JetStream; localcloud status reads it only while localcloud up runs"
}

// refused is the error of backup and restore: they copy files; a stream is
// backed up and restored with the NATS tooling, which names the stream.
func refused(env *engine.Env, b config.Binding, cmd string) error {
	stream := Stream(b)
	return engine.Hint(fmt.Errorf("%s copies SQLite store files; %s binding %s uses engine jetstream (stream %s on %s): use the NATS tooling for it",
		cmd, b.Type, b.Name, stream, where(env.Stack)),
		fmt.Sprintf("nats stream backup %s ./%s-backup (and nats stream restore ./%s-backup to restore it)", stream, stream, stream))
}

// Backup refuses, naming `nats stream backup`.
func (Tools) Backup(_ context.Context, env *engine.Env, b config.Binding, _ string, _ time.Time) (engine.Backup, error) {
	return engine.Backup{}, refused(env, b, "backup")
}

// Restore refuses, naming `nats stream restore`.
func (Tools) Restore(_ context.Context, env *engine.Env, b config.Binding, _ string, _ time.Time) (engine.Restored, error) {
	return engine.Restored{}, refused(env, b, "restore")
}
