package jstools

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
)

// sharedConn is the key of the env's connection to JetStream.
const sharedConn = "jetstream"

// conn is a connection the env shares; Close flushes what is pending and
// closes it.
type conn struct{ nc *nats.Conn }

func (c conn) Close() error {
	_ = c.nc.FlushTimeout(time.Second)
	c.nc.Close()
	return nil
}

// connect returns env's connection to the JetStream that serves binding b,
// made on first use: in up, in process to its embedded server
// (env.Connect), else the way an app's FromEnv reaches it: the stack's
// jetstream.servers (token from the variable the stack names, creds, TLS),
// or, without that section, the embedded server of the running up (its URL
// from runtime.json, the token notify.token). When up is not running, that
// is the error.
func connect(ctx context.Context, env *engine.Env, b config.Binding) (*nats.Conn, error) {
	st := env.Stack
	if st == nil {
		return nil, fmt.Errorf("%s binding %s (stream %s): the stack file does not describe it, so its stream cannot be reached", b.Type, b.Name, Stream(b))
	}
	c, err := engine.Shared(env, sharedConn, func() (conn, error) {
		nc, err := dial(ctx, env, b)
		return conn{nc}, err
	})
	if err != nil {
		return nil, err
	}
	return c.nc, nil
}

func dial(ctx context.Context, env *engine.Env, b config.Binding) (*nats.Conn, error) {
	st := env.Stack
	switch {
	case st.JetStream.External():
		name := "localcloud-cli"
		if env.Connect != nil {
			name = "localcloud-up"
		}
		nc, err := jsengine.Dial(ctx, Conn(st, ""), name, os.LookupEnv)
		if err != nil {
			return nil, fmt.Errorf("connect to JetStream: %w", err)
		}
		return nc, nil
	case env.Connect != nil:
		nc, err := env.Connect("localcloud-up-jetstream")
		if err != nil {
			return nil, fmt.Errorf("connect to JetStream: %w", err)
		}
		return nc, nil
	case !env.UpRunning:
		return nil, engine.Hint(fmt.Errorf("%s binding %s (stream %s) is served by up's embedded JetStream; start localcloud up (it is not running for data dir %s)",
			b.Type, b.Name, Stream(b), st.DataDir),
			"localcloud up -f "+st.File+" (or set jetstream.servers in the stack file to use a cluster)")
	case env.UpURL == "":
		return nil, engine.Hint(fmt.Errorf("%s binding %s (stream %s) is served by up's embedded JetStream, and localcloud up is still starting (no NATS URL published yet)",
			b.Type, b.Name, Stream(b)),
			"wait until localcloud status -f "+st.File+" exits 0, then run the command again")
	}
	lookup := func(name string) (string, bool) {
		if name == bindings.EnvNATSToken {
			return st.Notify.Token, true // what up's embedded server wants
		}
		return os.LookupEnv(name)
	}
	nc, err := jsengine.Dial(ctx, Conn(st, env.UpURL), "localcloud-cli", lookup)
	if err != nil {
		return nil, fmt.Errorf("%s binding %s: %w", b.Type, b.Name, err)
	}
	return nc, nil
}

// jetStream is the JetStream API on env's connection.
func jetStream(ctx context.Context, env *engine.Env, b config.Binding) (jetstream.JetStream, error) {
	nc, err := connect(ctx, env, b)
	if err != nil {
		return nil, err
	}
	return jetstream.New(nc)
}
