package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/hintserver"
)

// migrateCommand moves a binding's data to its store on another engine.
type migrateCommand struct{ app *app }

// migrateJSON is migrate's --json output.
type migrateJSON struct {
	Binding string `json:"binding"`
	Type    string `json:"type"`
	From    string `json:"from"`
	To      string `json:"to"`
	Source  string `json:"source"`
	Dest    string `json:"destination"`
	// Moved counts the messages or keys moved by this run; Already those
	// of them a killed run had copied already; Dedup the dedup keys.
	Moved   int `json:"moved"`
	Already int `json:"already"`
	Dedup   int `json:"dedupKeys"`
}

func (c *migrateCommand) flags() (f *flag.FlagSet, file *string, to *string, wait, lease *time.Duration, batch *int, asJSON *bool) {
	f = newFlagSet("migrate")
	file = stackFlag(f)
	to = f.String("to", "", "the engine to move the binding's data to: "+strings.Join(engine.Names(), " or "))
	wait = f.Duration("wait", 0, "wait up to `D` for consumers' leases on the source to end (default: refuse at once)")
	lease = f.Duration("lease", time.Minute, "hold the messages read from a jetstream queue for `D` while they move (a rerun after a kill waits for it)")
	batch = f.Int("batch", 500, "move `N` messages or keys per step (1-1000)")
	asJSON = jsonFlag(f)
	return f, file, to, wait, lease, batch, asJSON
}

func (c *migrateCommand) Run(ctx context.Context, args []string) error {
	fs, file, to, wait, lease, batch, asJSON := c.flags()
	pos, err := parseWantArgs(fs, args, 1, 1, "BINDING --to ENGINE")
	if err != nil {
		return err
	}
	switch {
	case !slices.Contains(engine.Names(), *to):
		return &usageError{msg: fmt.Sprintf("--to must be %s, got %q", strings.Join(engine.Names(), " or "), *to), try: "localcloud migrate -h"}
	case *batch < 1 || *batch > 1000:
		return &usageError{msg: fmt.Sprintf("--batch must be between 1 and 1000, got %d", *batch), try: "localcloud migrate -h"}
	case *lease < time.Second || *lease > 12*time.Hour:
		return &usageError{msg: fmt.Sprintf("--lease must be between 1s and 12h, got %s", *lease), try: "localcloud migrate -h"}
	case *wait < 0 || *wait > 12*time.Hour:
		return &usageError{msg: fmt.Sprintf("--wait must be between 0 and 12h, got %s", *wait), try: "localcloud migrate -h"}
	}
	st, b, err := c.app.findBinding(*file, pos[0], "")
	if err != nil {
		return err
	}
	// The source is the binding's store on the engine it is not moving
	// to: the stack may name either (before or after the edit).
	from := b.Engine
	if from == "" {
		from = config.DefaultEngine
	}
	if from == *to {
		for _, n := range engine.Names() {
			if n != *to {
				from = n
			}
		}
	}
	// Moving opens both stores without the stack's dead-letter policies:
	// nothing moves between queues meanwhile, and a policy naming a queue
	// of the other engine cannot apply to either. The tools see a stack
	// of this one binding.
	b.MaxAttempts, b.DeadLetter = 0, ""
	one := *st
	one.Bindings = []config.Binding{b}
	src, dst := engine.As(&one, b, from), engine.As(&one, b, *to)
	env := engineEnv(&one)
	defer env.Close()
	stop, err := c.ownJetStream(ctx, &one, env)
	if err != nil {
		return err
	}
	defer stop()
	ft, _ := engine.Lookup(from)
	tt, _ := engine.Lookup(*to)
	out := migrateJSON{Binding: b.Name, Type: string(b.Type), From: from, To: *to, Source: ft.Where(src), Dest: tt.Where(dst)}
	ok, err := ft.Exists(ctx, env, src)
	if err != nil {
		return err
	}
	if ok {
		res, err := c.move(ctx, env, ft, tt, src, dst, engine.MigrateOptions{Batch: *batch, Lease: *lease, Wait: *wait})
		out.Moved, out.Already, out.Dedup = res.Moved, res.Already, res.Dedup
		if err != nil {
			return fmt.Errorf("migrate %s from %s (%s) to %s (%s): %w; what moved is in %s, the rest still in %s, and running the same command again finishes it",
				b.Name, from, out.Source, *to, out.Dest, err, *to, from)
		}
	}
	if *asJSON {
		return c.app.printJSON(out)
	}
	unit := "key"
	if b.Type == config.TypeQueue {
		unit = "message"
	}
	if !ok {
		fmt.Fprintf(c.app.stdout, "nothing to move: %s has no %s store (%s)\n", b.Name, from, out.Source)
	} else {
		fmt.Fprintf(c.app.stdout, "moved %s of %s from %s (%s) to %s (%s), each verified in %s before it left %s",
			engine.Count(int64(out.Moved), unit), b.Name, from, out.Source, *to, out.Dest, *to, from)
		if out.Already > 0 {
			fmt.Fprintf(c.app.stdout, " (%d of them copied by an earlier run)", out.Already)
		}
		if out.Dedup > 0 {
			fmt.Fprintf(c.app.stdout, "; %s carried over", engine.Count(int64(out.Dedup), "dedup key"))
		}
		fmt.Fprintln(c.app.stdout)
	}
	if engineName(b) != *to {
		fmt.Fprintf(c.app.stdout, "now set engine: %s for %s in %s (up serves the %s store from then on)\n", *to, b.Name, st.File, *to)
	}
	return nil
}

func engineName(b config.Binding) string {
	if b.Engine == "" {
		return config.DefaultEngine
	}
	return b.Engine
}

// move opens both stores and moves the data.
func (c *migrateCommand) move(ctx context.Context, env *engine.Env, ft, tt engine.Tools, src, dst config.Binding, o engine.MigrateOptions) (engine.MigrateResult, error) {
	sh, err := ft.Open(ctx, env, src, engine.Write)
	if err != nil {
		return engine.MigrateResult{}, err
	}
	dh, err := tt.Open(ctx, env, dst, engine.Create)
	if err != nil {
		return engine.MigrateResult{}, err
	}
	defer dh.Close()
	closed := false
	defer func() {
		if !closed {
			_ = sh.Close()
		}
	}()
	next := 2000
	o.Progress = func(n int) {
		if n >= next {
			fmt.Fprintf(c.app.stderr, "moved %d so far\n", n)
			next = n + 2000
		}
	}
	res, err := engine.Migrate(ctx, env, sh, dh, o)
	if err != nil {
		return res, err
	}
	closed = true
	if err := sh.Close(); err != nil {
		return res, err
	}
	return res, ft.DropEmpty(ctx, env, src)
}

// ownJetStream starts JetStream on the stack's data dir when the stack
// keeps jetstream bindings on up's embedded server and up is not running:
// migrate then holds up's data-dir lock (up cannot start meanwhile, and no
// app reaches the streams) and serves the streams itself on a loopback
// port of its own.
func (c *migrateCommand) ownJetStream(ctx context.Context, st *config.Stack, env *engine.Env) (stop func(), err error) {
	if env.UpRunning || st.JetStream.External() {
		return func() {}, nil
	}
	release, err := holdDataDir(st)
	if err != nil {
		return nil, err
	}
	srv, err := hintserver.StartServer(ctx, hintserver.ServerOptions{Listen: "127.0.0.1:0", Token: st.Notify.Token,
		JetStreamDir: filepath.Join(st.DataDir, config.JetStreamDir)})
	if err != nil {
		release()
		return nil, fmt.Errorf("start JetStream on %s: %w", filepath.Join(st.DataDir, config.JetStreamDir), err)
	}
	env.Connect = func(name string) (*nats.Conn, error) { return srv.Connect(nats.Name(name)) }
	return func() {
		_ = env.Close()
		srv.Shutdown()
		release()
	}, nil
}

func (c *migrateCommand) Usage() {
	fs, _, _, _, _, _, _ := c.flags()
	fmt.Fprint(c.app.stdout, `Move a binding's data to its store on another engine.

Usage:
  localcloud migrate [-f FILE] [--json] BINDING --to jetstream|sqlite [--wait D] [--lease D] [--batch N]

migrate copies a queue (every message with its attempts, delay, last error
and dead-letter origin, and the dedup keys the queue remembers) or a KV
store (every key with its value and TTL) from the binding's store on one
engine to its store on the other, page by page: it copies, reads the copy
back, and only then removes it from the source. Killed at any point and run
again, it finishes with nothing lost and nothing twice (a queue's import
records the source's message ids in the destination).

The source is the binding's store on the engine it is not moving to, so
migrate works before or after you edit the stack's engine. localcloud up
refuses a binding whose engine changed while its old store holds data; once
migrate has emptied it, set engine: in the stack file and up serves the new
store.

Messages leased to consumers (received and not yet acked, or nacked with a
delay) are not moved: migrate refuses, naming how many and until when, or
waits up to --wait for their leases to end. Stop the apps that use the
binding while it runs. With up running, migrate uses up's JetStream; with
up stopped and jetstream bindings on up's embedded server, it holds up's
data dir lock and starts JetStream on the data dir itself.

Examples:
  localcloud migrate orders --to jetstream
  localcloud migrate -f stack.yaml carts --to sqlite --json

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
