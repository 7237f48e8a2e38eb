package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/localcloud/localcloud/config"
)

// An engine change of a binding whose old store holds data is never made
// silently: the stores of one binding on two engines are two stores, and
// opening the new, empty one would leave the old one's data unserved while
// every health check said ok. Stranded finds such data; up refuses the
// binding with it (at start and on reload, where the old handle keeps
// serving), naming the command that moves the data: localcloud migrate.

// As returns b as a binding of the engine called name: the same name,
// type and settings, the defaults of that engine for its place (the
// default folder <dataDir>/<type>/<name> of a sqlite binding, the default
// replicas of a jetstream one). A binding that is of that engine already is
// returned as it is.
func As(st *config.Stack, b config.Binding, name string) config.Binding {
	if engineOf(b) == name {
		return b
	}
	b.Engine = name
	b.Path, b.AbsolutePathGiven, b.Replicas = "", false, 0
	if name == config.EngineSQLite {
		if st != nil {
			b.Path = filepath.Join(st.DataDir, string(b.Type), b.Name)
		}
		return b
	}
	b.Replicas = config.DefaultReplicasEmbedded
	if st != nil && st.JetStream.External() {
		b.Replicas = config.DefaultReplicasCluster
	}
	return b
}

func engineOf(b config.Binding) string {
	if b.Engine == "" {
		return config.DefaultEngine
	}
	return b.Engine
}

// Holds says what b's store holds, for people ("5 messages", "12 keys"),
// and how many; "" and 0 when the store does not exist or is empty. It
// opens the store read-only and creates nothing.
func Holds(ctx context.Context, env *Env, b config.Binding) (string, int64, error) {
	t, err := For(b)
	if err != nil {
		return "", 0, err
	}
	ok, err := t.Exists(ctx, env, b)
	if err != nil || !ok {
		return "", 0, err
	}
	h, err := t.Open(ctx, env, b, Read)
	if err != nil {
		return "", 0, err
	}
	defer h.Close()
	var n int64
	unit := "key"
	if q := h.Queue(); q != nil {
		s, err := q.Stats(ctx)
		if err != nil {
			return "", 0, err
		}
		n, unit = s.Total, "message"
	} else {
		s, err := h.KV().Stats(ctx)
		if err != nil {
			return "", 0, err
		}
		n = s.Live
	}
	return Count(n, unit), n, nil
}

// Count is "1 message", "5 messages".
func Count(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.FormatInt(n, 10) + " " + unit + "s"
}

// ErrStranded is matched by the error of Stranded.
var ErrStranded = errors.New("the binding's store on another engine still holds data")

// strandedTimeout bounds one look at another engine's store.
const strandedTimeout = 30 * time.Second

// Stranded returns an error matching ErrStranded when the store of binding
// b on an engine other than b's holds data: b's engine was changed in the
// stack file and that data would no longer be served. The error names the
// binding, both engines, what the old store holds and the command that
// moves it. An old store it cannot look at is an error too (fail closed).
func Stranded(ctx context.Context, env *Env, b config.Binding) error {
	cur := engineOf(b)
	for _, name := range Names() {
		if name == cur {
			continue
		}
		ob := As(env.Stack, b, name)
		ot, _ := Lookup(name)
		cctx, cancel := context.WithTimeout(ctx, strandedTimeout)
		what, n, err := Holds(cctx, env, ob)
		cancel()
		file := ""
		if env.Stack != nil && env.Stack.File != "" {
			file = " -f " + env.Stack.File
		}
		switch {
		case err != nil:
			return fmt.Errorf("%w: %s binding %s is of engine %s, and its %s store (%s) could not be looked at to make sure it holds nothing (%w); "+
				"localcloud does not switch engines while the old store may hold data: move what it holds with localcloud migrate %s --to %s%s "+
				"(with up stopped, migrate reaches a store of up's embedded server itself), or set engine: %s back",
				ErrStranded, b.Type, b.Name, cur, name, ot.Where(ob), err, b.Name, cur, file, name)
		case n > 0:
			return fmt.Errorf("%w: %s binding %s is now of engine %s, but its %s store (%s) holds %s; "+
				"localcloud does not switch engines silently (they would no longer be served): move them with localcloud migrate %s --to %s%s, or set engine: %s back",
				ErrStranded, b.Type, b.Name, cur, name, ot.Where(ob), what, b.Name, cur, file, name)
		}
	}
	return nil
}
