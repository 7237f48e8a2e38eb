package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/loadgen"
)

// benchWorkerName is the hidden command a bench --processes run execs.
const benchWorkerName = "bench-worker"

// benchCommand runs a load (internal/loadgen) against a temporary store.
type benchCommand struct {
	app *app
}

// benchWorkerCommand is one load process of bench --processes.
type benchWorkerCommand struct {
	app *app
}

// benchJSON is bench's --json output.
type benchJSON struct {
	Benches []loadgen.Report `json:"benches"`
}

// benchFlags are bench's flags, parsed into a config.
type benchFlags struct {
	fs         *flag.FlagSet
	cfg        loadgen.Config
	engine     string
	replicas   int
	durability string
	asJSON     bool
	file       *string
}

func (c *benchCommand) flags() *benchFlags {
	f := &benchFlags{fs: newFlagSet("bench")}
	fs := f.fs
	f.file = stackFlag(fs) // read only for an engine on up's server
	fs.StringVar(&f.engine, "engine", config.DefaultEngine, "`E`: sqlite (a temporary folder) or jetstream (a temporary stream on the stack's JetStream)")
	fs.IntVar(&f.replicas, "replicas", 0, "jetstream: the temporary stream's replicas `R` (default: 1 on up's embedded server, 3 on jetstream.servers)")
	fs.DurationVar(&f.cfg.Duration, "duration", loadgen.DefaultDuration, "run each load for `D`")
	fs.IntVar(&f.cfg.Workers, "workers", loadgen.DefaultWorkers, "`N` concurrent workers in each process")
	fs.IntVar(&f.cfg.Processes, "processes", loadgen.DefaultProcesses, "`P` processes (more than 1 re-runs this binary as load processes)")
	fs.IntVar(&f.cfg.Batch, "batch", loadgen.DefaultBatch, fmt.Sprintf("queue: messages sent, then claimed per receive, 1-%d", queue.MaxReceiveBatch))
	fs.StringVar(&f.cfg.Ack, "ack", loadgen.DefaultAck, "queue: ack `MODE`: each (one Ack per message) or batch (one AckBatch per receive)")
	fs.IntVar(&f.cfg.Senders, "senders", 0, "queue: `S` goroutines per process only send, at full rate, while the --workers only receive (0: every worker sends and receives)")
	fs.StringVar(&f.cfg.Receivers, "receivers", loadgen.ReceiversLoop, "queue: `MODE` of the --workers: loop (receive + ack) or consume (Consume's handlers; needs --senders)")
	fs.StringVar(&f.durability, "durability", string(bindings.DurabilityNormal), "store durability: normal or full")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object (schema in docs/CLI.md) instead of text")
	return f
}

func (c *benchCommand) Run(ctx context.Context, args []string) error {
	f := c.flags()
	fs, cfg := f.fs, &f.cfg
	pos, err := parseWantArgs(fs, args, 0, 1, "[kv|queue]")
	if err != nil {
		return err
	}
	d, err := bindings.ParseDurability(f.durability)
	if err != nil {
		return &usageError{msg: "--durability: " + err.Error(), try: "localcloud bench --durability full"}
	}
	cfg.Durability = string(d)
	kinds := []string{"kv", "queue"}
	if len(pos) == 1 {
		if _, ok := loadgen.Ops[pos[0]]; !ok {
			return &usageError{msg: fmt.Sprintf("bench runs kv or queue, got %q", pos[0]), try: "localcloud bench queue"}
		}
		kinds = pos[:1]
	}
	t, err := c.check(fs, f, kinds)
	if err != nil {
		return err
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	var st *config.Stack
	if t.Traits().Server {
		if st, err = c.app.loadStack(*f.file); err != nil {
			return err
		}
	}
	env := engineEnv(st)
	defer env.Close()
	var out benchJSON
	for _, kind := range kinds {
		k := *cfg
		k.Kind = kind
		if kind == "kv" {
			k.Batch, k.Ack, k.Senders, k.Receivers = 1, "", 0, ""
		}
		res, err := c.runBench(ctx, t, env, k, f.replicas)
		if err != nil {
			if ctx.Err() != nil {
				return &exitCodeError{code: 130}
			}
			return err
		}
		out.Benches = append(out.Benches, res)
		if !f.asJSON {
			loadgen.Print(c.app.stdout, res)
		}
	}
	if f.asJSON {
		return c.app.printJSON(out)
	}
	return nil
}

// check checks the flags and returns the tools of the engine asked for.
func (c *benchCommand) check(fs *flag.FlagSet, f *benchFlags, kinds []string) (engine.Tools, error) {
	cfg := f.cfg
	t, ok := engine.Lookup(f.engine)
	switch {
	case cfg.Duration <= 0:
		return nil, &usageError{msg: "--duration must be positive", try: "localcloud bench --duration 5s"}
	case cfg.Workers < 1 || cfg.Workers > 1024:
		return nil, &usageError{msg: fmt.Sprintf("--workers must be 1-1024, got %d", cfg.Workers), try: "localcloud bench --workers 4"}
	case cfg.Processes < 1 || cfg.Processes > 64:
		return nil, &usageError{msg: fmt.Sprintf("--processes must be 1-64, got %d", cfg.Processes), try: "localcloud bench --processes 2"}
	case cfg.Batch < 1 || cfg.Batch > queue.MaxReceiveBatch:
		return nil, &usageError{msg: fmt.Sprintf("--batch must be 1-%d, got %d", queue.MaxReceiveBatch, cfg.Batch), try: "localcloud bench queue --batch 10"}
	case !ok:
		return nil, &usageError{msg: fmt.Sprintf("--engine must be %s, got %q", strings.Join(engine.Names(), " or "), f.engine), try: "localcloud bench queue --engine jetstream"}
	case !t.Traits().Processes && cfg.Processes > 1:
		return nil, &usageError{msg: fmt.Sprintf("--processes must be 1 with --engine %s, got %d (the workers share one connection, as an app's stores do)", f.engine, cfg.Processes),
			try: "localcloud bench queue --engine " + f.engine + " --workers 8"}
	case !t.Traits().Replicas && f.replicas != 0:
		return nil, &usageError{msg: fmt.Sprintf("--replicas applies to an engine with replicas, not to --engine %s", f.engine), try: "localcloud bench queue --engine jetstream --replicas 3"}
	case f.replicas < 0 || f.replicas > config.ReplicasMax:
		return nil, &usageError{msg: fmt.Sprintf("--replicas must be %d-%d, got %d", config.ReplicasMin, config.ReplicasMax, f.replicas), try: "localcloud bench queue --engine jetstream --replicas 3"}
	}
	queueOnly := ""
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "batch", "ack", "senders", "receivers":
			if queueOnly == "" {
				queueOnly = f.Name
			}
		}
	})
	if queueOnly != "" && len(kinds) == 1 && kinds[0] == "kv" {
		return nil, &usageError{msg: fmt.Sprintf("--%s applies to the queue bench only", queueOnly), try: "localcloud bench queue --" + queueOnly + " ..."}
	}
	switch {
	case cfg.Ack != loadgen.AckEach && cfg.Ack != loadgen.AckBatch:
		return nil, &usageError{msg: fmt.Sprintf("--ack must be each or batch, got %q", cfg.Ack), try: "localcloud bench queue --ack batch --batch 10"}
	case cfg.Senders < 0 || cfg.Senders > 1024:
		return nil, &usageError{msg: fmt.Sprintf("--senders must be 0-1024, got %d", cfg.Senders), try: "localcloud bench queue --senders 1"}
	case cfg.Receivers != loadgen.ReceiversLoop && cfg.Receivers != loadgen.ReceiversConsume:
		return nil, &usageError{msg: fmt.Sprintf("--receivers must be loop or consume, got %q", cfg.Receivers), try: "localcloud bench queue --senders 1 --receivers consume"}
	case cfg.Receivers == loadgen.ReceiversConsume && cfg.Senders == 0:
		return nil, &usageError{msg: "--receivers consume needs --senders 1 or more (Consume only receives)", try: "localcloud bench queue --senders 1 --receivers consume --workers 8"}
	case cfg.Receivers == loadgen.ReceiversConsume && cfg.Workers > queue.MaxWorkers:
		return nil, &usageError{msg: fmt.Sprintf("--workers must be 1-%d with --receivers consume, got %d", queue.MaxWorkers, cfg.Workers), try: "localcloud bench queue --senders 1 --receivers consume --workers 8"}
	}
	return t, nil
}

// runBench runs one kind against a new temporary store of engine t and
// removes the store.
func (c *benchCommand) runBench(ctx context.Context, t engine.Tools, env *engine.Env, cfg loadgen.Config, replicas int) (loadgen.Report, error) {
	spec := engine.ScratchSpec{Type: config.Type(cfg.Kind), Durability: cfg.Durability, Replicas: replicas, Processes: cfg.Processes}
	store, err := t.Scratch(ctx, env, spec)
	if err != nil {
		return loadgen.Report{}, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := store.Remove(rctx); err != nil {
			fmt.Fprintf(c.app.stderr, "localcloud bench: %v\n", err)
		}
	}()
	var progress *loadgen.Progress
	if isTerminal(c.app.stderr) {
		progress = &loadgen.Progress{W: c.app.stderr, Kind: cfg.Kind, Total: cfg.Duration, Ops: loadgen.Ops[cfg.Kind]}
		defer progress.Clear()
	}
	var res loadgen.Result
	if cfg.Processes == 1 {
		start := time.Now()
		res, err = loadgen.Run(ctx, cfg, store, 0, start, start.Add(cfg.Duration), progress.Update)
	} else {
		exe, xerr := os.Executable()
		if xerr != nil {
			return loadgen.Report{}, fmt.Errorf("find this binary to start load processes: %w", xerr)
		}
		spawn := func(i int) *exec.Cmd {
			return exec.Command(exe, benchWorkerName,
				"--kind", cfg.Kind, "--engine", t.Name(), "--location", store.Location(), "--index", strconv.Itoa(i),
				"--workers", strconv.Itoa(cfg.Workers), "--batch", strconv.Itoa(cfg.Batch),
				"--ack", cfg.Ack, "--senders", strconv.Itoa(cfg.Senders), "--receivers", cfg.Receivers,
				"--durability", cfg.Durability)
		}
		res, err = loadgen.RunProcesses(ctx, cfg, spawn, c.app.stderr, progress)
	}
	if err != nil {
		return loadgen.Report{}, err
	}
	rep := res.Summarize(cfg)
	p := store.Place()
	rep.Engine, rep.Stream, rep.Replicas, rep.Where = t.Name(), p.Stream, p.Replicas, store.Describe()
	return rep, nil
}

func (c *benchWorkerCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet(benchWorkerName)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Kind, "kind", "", "")
	eng := fs.String("engine", config.DefaultEngine, "")
	loc := fs.String("location", "", "")
	index := fs.Int("index", 0, "")
	fs.IntVar(&cfg.Workers, "workers", 1, "")
	fs.IntVar(&cfg.Batch, "batch", 1, "")
	fs.StringVar(&cfg.Ack, "ack", "", "")
	fs.IntVar(&cfg.Senders, "senders", 0, "")
	fs.StringVar(&cfg.Receivers, "receivers", "", "")
	fs.StringVar(&cfg.Durability, "durability", "", "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, err := bindings.ParseDurability(cfg.Durability)
	if err != nil {
		return err
	}
	cfg.Durability = string(d)
	t, ok := engine.Lookup(*eng)
	if _, kind := loadgen.Ops[cfg.Kind]; !kind || !ok || *loc == "" {
		return &usageError{msg: "bench-worker is started by localcloud bench --processes", try: "localcloud bench -h"}
	}
	store, err := t.OpenScratch(ctx, *loc, engine.ScratchSpec{Type: config.Type(cfg.Kind), Durability: cfg.Durability})
	if err != nil {
		return err
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	return loadgen.Work(ctx, cfg, store, *index, c.app.stdin, c.app.stdout)
}

func (c *benchWorkerCommand) Usage() {
	fmt.Fprintln(c.app.stdout, "Usage: localcloud bench-worker (started by localcloud bench --processes; not for direct use)")
}

func (c *benchCommand) Usage() {
	fs := c.flags().fs
	fmt.Fprint(c.app.stdout, `Measure KV and queue throughput and latency on a temporary store.

Usage:
  localcloud bench [kv|queue] [--duration D] [--workers N] [--processes P] [--batch N] [--json]
  localcloud bench queue [--ack each|batch] [--senders S] [--receivers loop|consume]
  localcloud bench [kv|queue] --engine jetstream [-f FILE] [--replicas R] [--duration D] [--workers N] [--batch N] [--json]

bench creates a store in a new temporary folder ($TMPDIR), runs a load for
--duration and removes the folder; it never touches a stack's stores (it
needs no stack file). Without kv or queue it runs both, one after the other.

With --engine jetstream it creates a temporary stream (LCQ_bench-XXXXXXXX or
LCKV_bench-XXXXXXXX) on the stack's JetStream instead, reached as the kv and
queue commands reach it (jetstream.servers, or the embedded server of the
running localcloud up), runs the same load through the JetStream engine and
deletes the stream; the stack's own streams are not touched. --replicas
sets its replicas (default 1 on up's embedded server, 3 on a cluster);
--processes must be 1.

  kv     each worker alternates a put (a fresh 128-byte value for one of its
         10000 keys) and a get of a key it wrote.
  queue  each worker runs a closed loop: send --batch messages, claim up to
         --batch with one receive, ack each. e2e is the time from a send to
         the receive that claimed the message. --ack batch acks all the
         messages of a receive in one AckBatch instead of one Ack each.
         --senders S splits the roles: S goroutines per process only send,
         one message per call, at full rate, while the --workers only
         receive and ack; --receivers consume makes the --workers Consume's
         handlers (queue.ConsumeWorkers) instead of receive loops, and e2e
         is then send to handler.

--workers goroutines share one store handle per process, as an app's would.
--processes P > 1 runs P load processes (this binary, re-executed) against
the same store, all starting together. The table shows per operation the
count, ops/s, p50, p99 and max latency (histogram precision about 2%) and
errors. On a terminal a progress line is shown on stderr while it runs.

Examples:
  localcloud bench
  localcloud bench queue --duration 10s --workers 8 --batch 10
  localcloud bench kv --processes 4 --json
  localcloud bench queue --workers 1 --batch 10 --ack batch
  localcloud bench queue --senders 1 --receivers consume --workers 8

Flags:
`)
	printDefaults(c.app.stdout, fs)
}
