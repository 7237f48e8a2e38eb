package main

// Helpers of the store commands on jetstream bindings: how the CLI reaches
// JetStream (as kv.FromEnv / queue.FromEnv do) and opens a binding through
// the engine behind the public API.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// jsWhere names where a stack's jetstream bindings live, for messages.
func jsWhere(st *config.Stack) string {
	if st.JetStream.External() {
		return "the JetStream cluster " + strings.Join(st.JetStream.Servers, ", ")
	}
	return "up's embedded JetStream"
}

// dialJetStream connects to the JetStream that serves binding b the way an
// app's FromEnv does: the stack's jetstream.servers (token from the
// variable the stack names, creds, TLS), or, without that section, the
// embedded server of the running up (its URL from runtime.json, the token
// notify.token). When up is not running, that is the error.
func dialJetStream(ctx context.Context, st *config.Stack, b config.Binding) (*nats.Conn, error) {
	url := ""
	if !st.JetStream.External() {
		rt, running, err := supervisor.Probe(st.DataDir)
		if err != nil {
			return nil, err
		}
		switch {
		case !running:
			return nil, &hintError{
				err: fmt.Errorf("%s binding %s (stream %s) is served by up's embedded JetStream; start localcloud up (it is not running for data dir %s)",
					b.Type, b.Name, supervisor.StreamName(b), st.DataDir),
				try: "localcloud up -f " + st.File + " (or set jetstream.servers in the stack file to use a cluster)",
			}
		case rt == nil || rt.NATSURL == "":
			return nil, &hintError{
				err: fmt.Errorf("%s binding %s (stream %s) is served by up's embedded JetStream, and localcloud up is still starting (no NATS URL published yet)",
					b.Type, b.Name, supervisor.StreamName(b)),
				try: "wait until localcloud status -f " + st.File + " exits 0, then run the command again",
			}
		}
		url = rt.NATSURL
	}
	c := supervisor.JetStreamConn(st, url)
	lookup := func(name string) (string, bool) {
		if !st.JetStream.External() && name == bindings.EnvNATSToken {
			return st.Notify.Token, true // what up's embedded server wants
		}
		return os.LookupEnv(name)
	}
	nc, err := jsengine.Dial(ctx, c, "localcloud-cli", lookup)
	if err != nil {
		return nil, fmt.Errorf("%s binding %s: %w", b.Type, b.Name, err)
	}
	return nc, nil
}

// needStream fails with a hint when the binding's stream does not exist:
// up provisions it, and commands other than kv put and queue send do not
// create it (as they do not create a SQLite store).
func needStream(ctx context.Context, st *config.Stack, b config.Binding, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.Stream(ctx, supervisor.StreamName(b))
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return &hintError{
			err: fmt.Errorf("%s binding %s has no stream yet (stream %s does not exist on %s)", b.Type, b.Name, supervisor.StreamName(b), jsWhere(st)),
			try: "localcloud up -f " + st.File + " creates every stream",
		}
	case err != nil:
		return fmt.Errorf("look up stream %s of %s binding %s: %w", supervisor.StreamName(b), b.Type, b.Name, err)
	}
	return nil
}

// openKVJetStream opens jetstream KV binding b through the engine. The
// returned close closes the store and the connection.
func openKVJetStream(ctx context.Context, st *config.Stack, b config.Binding, create bool, d bindings.Durability) (*kv.Store, func(), error) {
	nc, err := dialJetStream(ctx, st, b)
	if err != nil {
		return nil, nil, err
	}
	if !create {
		if err := needStream(ctx, st, b, nc); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	s, err := kv.OpenEngine(ctx, jsengine.KV{Conn: nc, Replicas: b.Replicas}, b.Name, kv.WithDurability(d))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open kv binding %s on jetstream (stream %s): %w", b.Name, supervisor.StreamName(b), err)
	}
	return s, func() { s.Close(); nc.Close() }, nil
}

// openQueueJetStream opens jetstream queue binding b through the engine,
// with the binding's settings and the stack's dead-letter policy. The
// returned close closes the queue and the connection.
func openQueueJetStream(ctx context.Context, st *config.Stack, b config.Binding, access queueAccess, d bindings.Durability) (*queue.Queue, func(), error) {
	nc, err := dialJetStream(ctx, st, b)
	if err != nil {
		return nil, nil, err
	}
	if access != queueCreate {
		if err := needStream(ctx, st, b, nc); err != nil {
			nc.Close()
			return nil, nil, err
		}
	}
	opts := []queue.Option{queue.WithDurability(d), queue.WithBindingName(b.Name)}
	if access == queueRead {
		opts = append(opts, queue.WithReadOnly())
	} else {
		opts = append(opts, supervisor.QueueOptions(st, b)...)
	}
	if b.VisibilityTimeout > 0 {
		opts = append(opts, queue.WithDefaultVisibility(b.VisibilityTimeout))
	}
	q, err := queue.OpenEngine(ctx, jsengine.Queue{Conn: nc, Replicas: b.Replicas}, b.Name, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open queue binding %s on jetstream (stream %s): %w", b.Name, supervisor.StreamName(b), err)
	}
	return q, func() { q.Close(); nc.Close() }, nil
}

// sqliteOnly is the error of a command that needs what only the SQLite
// engine has, on jetstream binding b: what names the command, why says
// what it needs.
func sqliteOnly(b config.Binding, what, why, try string) error {
	return &hintError{
		err: fmt.Errorf("%s is not available on %s binding %s: it uses engine jetstream (stream %s), and %s", what, b.Type, b.Name, supervisor.StreamName(b), why),
		try: try,
	}
}

// problemStream is check's problem kind on a jetstream binding: its
// stream or consumer is missing a setting, has no leader, or cannot be
// reached.
const problemStream = "stream"

// checkJetStream is check on jetstream binding b: it reaches JetStream as
// the other commands do and opens the binding read-only through the engine,
// which checks that the stream exists with the settings the binding needs
// (subjects, retention, atomic publish, schedules, TTL, no direct get) and,
// for a queue, that its consumer exists, and waits for their leaders; then
// it reads the stream's info: replicas (against the binding's), leader and
// the replicas that are offline or lagging. A stream that does not exist
// yet is not a problem (up creates it), and neither is a stopped up serving
// an embedded server: check then says it did not check.
func checkJetStream(ctx context.Context, st *config.Stack, b config.Binding) checkStoreJSON {
	stream := supervisor.StreamName(b)
	r := checkStoreJSON{Binding: b.Name, Type: string(b.Type), Format: "jetstream", Engine: config.EngineJetStream, Stream: stream,
		Problems: []sqlstore.Problem{}, Notes: []string{}}
	add := func(msg string) {
		r.Problems = append(r.Problems, sqlstore.Problem{Kind: problemStream, Object: "stream " + stream, Message: msg})
	}
	if !st.JetStream.External() {
		if _, running, err := supervisor.Probe(st.DataDir); err == nil && !running {
			r.OK, r.Skipped = true, true
			r.Notes = append(r.Notes, "not checked: served by up's embedded JetStream, and localcloud up is not running; start it and run check again")
			return r
		}
	}
	nc, err := dialJetStream(ctx, st, b)
	if err != nil {
		add(err.Error())
		return r
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		add(err.Error())
		return r
	}
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		r.OK = true
		r.Notes = append(r.Notes, fmt.Sprintf("not provisioned yet (no stream %s on %s); localcloud up creates it", stream, jsWhere(st)))
		return r
	}
	if err != nil {
		add(fmt.Sprintf("look up the stream: %v", err))
		return r
	}
	r.Exists = true
	switch b.Type {
	case config.TypeKV:
		var s *kv.Store
		if s, err = kv.OpenEngine(ctx, jsengine.KV{Conn: nc, Replicas: b.Replicas}, b.Name, kv.WithReadOnly()); err == nil {
			s.Close()
		}
	case config.TypeQueue:
		var q *queue.Queue
		if q, err = queue.OpenEngine(ctx, jsengine.Queue{Conn: nc, Replicas: b.Replicas}, b.Name, queue.WithReadOnly()); err == nil {
			q.Close()
		}
	}
	if err != nil {
		add(err.Error())
	}
	info, err := s.Info(ctx)
	if err != nil {
		add(fmt.Sprintf("read the stream's info: %v", err))
		r.OK = len(r.Problems) == 0
		return r
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
	return r
}
