package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/jsengine"
	"github.com/localcloud/localcloud/internal/supervisor"
)

// Defaults of bench.
const (
	DefaultBenchDuration  = 5 * time.Second
	DefaultBenchWorkers   = 4
	DefaultBenchProcesses = 1
	DefaultBenchBatch     = 1
	// DefaultBenchAck is how the queue bench acks: one Ack per message.
	DefaultBenchAck = benchAckEach
	// benchValueBytes is the size of a KV value; benchKeysPerWorker the keys
	// each worker cycles through.
	benchValueBytes    = 128
	benchKeysPerWorker = 10000
	// benchStartDelay lets every worker process exec and open the store
	// before the common start time.
	benchStartDelay = 500 * time.Millisecond
	// benchTick is how often progress is shown and reported.
	benchTick = 250 * time.Millisecond
)

// The queue bench's ack modes (--ack) and receiver modes (--receivers).
const (
	benchAckEach          = "each"    // one Ack per message
	benchAckBatch         = "batch"   // one AckBatch per receive
	benchReceiversLoop    = "loop"    // receive + ack loops
	benchReceiversConsume = "consume" // Consume with --workers workers
)

// benchWorkerName is the hidden command a bench --processes run execs.
const benchWorkerName = "bench-worker"

// benchCommand runs a load against a temporary store.
type benchCommand struct {
	app *app
}

// benchWorkerCommand is one load process of bench --processes.
type benchWorkerCommand struct {
	app *app
}

// benchConfig is one bench run.
type benchConfig struct {
	Kind       string
	Duration   time.Duration
	Workers    int
	Processes  int
	Batch      int
	Durability bindings.Durability
	// Engine is "sqlite" (a temporary folder) or "jetstream" (a temporary
	// stream on the stack's JetStream, reached through js, named jsName,
	// with Replicas replicas).
	Engine   string
	js       *nats.Conn
	jsName   string
	Replicas int
	// Queue only: Ack is benchAckEach or benchAckBatch; Senders > 0 runs
	// that many sending goroutines per process beside the --workers
	// receivers (which then only receive); Receivers is benchReceiversLoop
	// or benchReceiversConsume (needs Senders).
	Ack       string
	Senders   int
	Receivers string
}

// benchJSON is bench's --json output.
type benchJSON struct {
	Benches []benchResultJSON `json:"benches"`
}

type benchResultJSON struct {
	Kind           string `json:"kind"`
	DurationMillis int64  `json:"durationMillis"`
	ElapsedMillis  int64  `json:"elapsedMillis"`
	Workers        int    `json:"workers"`
	Processes      int    `json:"processes"`
	Batch          int    `json:"batch"`
	Ack            string `json:"ack,omitempty"`
	Senders        int    `json:"senders,omitempty"`
	Receivers      string `json:"receivers,omitempty"`
	Durability     string `json:"durability"`
	// Engine is "sqlite" or "jetstream"; on jetstream Stream names the
	// temporary stream and Replicas its replicas.
	Engine         string   `json:"engine"`
	Stream         string   `json:"stream,omitempty"`
	Replicas       int      `json:"replicas,omitempty"`
	CPUs           int      `json:"cpus"`
	ValueBytes     int      `json:"valueBytes"`
	MessagesPerSec float64  `json:"messagesPerSec,omitempty"`
	Ops            []opJSON `json:"ops"`
	FirstError     string   `json:"firstError,omitempty"`
}

type opJSON struct {
	Op        string  `json:"op"`
	Count     uint64  `json:"count"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50Micros float64 `json:"p50Micros"`
	P99Micros float64 `json:"p99Micros"`
	MaxMicros float64 `json:"maxMicros"`
	Errors    uint64  `json:"errors"`
}

// The operations each kind measures, in table order.
var benchOps = map[string][]string{
	"kv":    {"put", "get"},
	"queue": {"send", "receive", "ack", "e2e"},
}

// benchFlags are bench's flags, parsed into a config.
type benchFlags struct {
	fs         *flag.FlagSet
	cfg        benchConfig
	durability string
	asJSON     bool
	file       *string
}

func (c *benchCommand) flags() *benchFlags {
	f := &benchFlags{fs: newFlagSet("bench")}
	fs := f.fs
	f.file = stackFlag(fs) // read only with --engine jetstream
	fs.StringVar(&f.cfg.Engine, "engine", "sqlite", "`E`: sqlite (a temporary folder) or jetstream (a temporary stream on the stack's JetStream)")
	fs.IntVar(&f.cfg.Replicas, "replicas", 0, "jetstream: the temporary stream's replicas `R` (default: 1 on up's embedded server, 3 on jetstream.servers)")
	fs.DurationVar(&f.cfg.Duration, "duration", DefaultBenchDuration, "run each load for `D`")
	fs.IntVar(&f.cfg.Workers, "workers", DefaultBenchWorkers, "`N` concurrent workers in each process")
	fs.IntVar(&f.cfg.Processes, "processes", DefaultBenchProcesses, "`P` processes (more than 1 re-runs this binary as load processes)")
	fs.IntVar(&f.cfg.Batch, "batch", DefaultBenchBatch, fmt.Sprintf("queue: messages sent, then claimed per receive, 1-%d", queue.MaxReceiveBatch))
	fs.StringVar(&f.cfg.Ack, "ack", DefaultBenchAck, "queue: ack `MODE`: each (one Ack per message) or batch (one AckBatch per receive)")
	fs.IntVar(&f.cfg.Senders, "senders", 0, "queue: `S` goroutines per process only send, at full rate, while the --workers only receive (0: every worker sends and receives)")
	fs.StringVar(&f.cfg.Receivers, "receivers", benchReceiversLoop, "queue: `MODE` of the --workers: loop (receive + ack) or consume (Consume's handlers; needs --senders)")
	fs.StringVar(&f.durability, "durability", string(bindings.DurabilityNormal), "store durability: normal or full")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object (schema in docs/CLI.md) instead of text")
	return f
}

func (c *benchCommand) Run(ctx context.Context, args []string) error {
	f := c.flags()
	fs, cfg, asJSON := f.fs, &f.cfg, &f.asJSON
	pos, err := parseWantArgs(fs, args, 0, 1, "[kv|queue]")
	if err != nil {
		return err
	}
	d, err := bindings.ParseDurability(f.durability)
	if err != nil {
		return &usageError{msg: "--durability: " + err.Error(), try: "localcloud bench --durability full"}
	}
	cfg.Durability = d
	kinds := []string{"kv", "queue"}
	if len(pos) == 1 {
		if _, ok := benchOps[pos[0]]; !ok {
			return &usageError{msg: fmt.Sprintf("bench runs kv or queue, got %q", pos[0]), try: "localcloud bench queue"}
		}
		kinds = pos[:1]
	}
	switch {
	case cfg.Duration <= 0:
		return &usageError{msg: "--duration must be positive", try: "localcloud bench --duration 5s"}
	case cfg.Workers < 1 || cfg.Workers > 1024:
		return &usageError{msg: fmt.Sprintf("--workers must be 1-1024, got %d", cfg.Workers), try: "localcloud bench --workers 4"}
	case cfg.Processes < 1 || cfg.Processes > 64:
		return &usageError{msg: fmt.Sprintf("--processes must be 1-64, got %d", cfg.Processes), try: "localcloud bench --processes 2"}
	case cfg.Batch < 1 || cfg.Batch > queue.MaxReceiveBatch:
		return &usageError{msg: fmt.Sprintf("--batch must be 1-%d, got %d", queue.MaxReceiveBatch, cfg.Batch), try: "localcloud bench queue --batch 10"}
	case cfg.Engine != config.EngineSQLite && cfg.Engine != config.EngineJetStream:
		return &usageError{msg: fmt.Sprintf("--engine must be sqlite or jetstream, got %q", cfg.Engine), try: "localcloud bench queue --engine jetstream"}
	case cfg.Engine == config.EngineJetStream && cfg.Processes > 1:
		return &usageError{msg: fmt.Sprintf("--processes must be 1 with --engine jetstream, got %d (the workers share one connection, as an app's stores do)", cfg.Processes),
			try: "localcloud bench queue --engine jetstream --workers 8"}
	case cfg.Engine == config.EngineSQLite && cfg.Replicas != 0:
		return &usageError{msg: "--replicas applies to --engine jetstream only", try: "localcloud bench queue --engine jetstream --replicas 3"}
	case cfg.Replicas < 0 || cfg.Replicas > config.ReplicasMax:
		return &usageError{msg: fmt.Sprintf("--replicas must be %d-%d, got %d", config.ReplicasMin, config.ReplicasMax, cfg.Replicas), try: "localcloud bench queue --engine jetstream --replicas 3"}
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
		return &usageError{msg: fmt.Sprintf("--%s applies to the queue bench only", queueOnly), try: "localcloud bench queue --" + queueOnly + " ..."}
	}
	switch {
	case cfg.Ack != benchAckEach && cfg.Ack != benchAckBatch:
		return &usageError{msg: fmt.Sprintf("--ack must be each or batch, got %q", cfg.Ack), try: "localcloud bench queue --ack batch --batch 10"}
	case cfg.Senders < 0 || cfg.Senders > 1024:
		return &usageError{msg: fmt.Sprintf("--senders must be 0-1024, got %d", cfg.Senders), try: "localcloud bench queue --senders 1"}
	case cfg.Receivers != benchReceiversLoop && cfg.Receivers != benchReceiversConsume:
		return &usageError{msg: fmt.Sprintf("--receivers must be loop or consume, got %q", cfg.Receivers), try: "localcloud bench queue --senders 1 --receivers consume"}
	case cfg.Receivers == benchReceiversConsume && cfg.Senders == 0:
		return &usageError{msg: "--receivers consume needs --senders 1 or more (Consume only receives)", try: "localcloud bench queue --senders 1 --receivers consume --workers 8"}
	case cfg.Receivers == benchReceiversConsume && cfg.Workers > queue.MaxWorkers:
		return &usageError{msg: fmt.Sprintf("--workers must be 1-%d with --receivers consume, got %d", queue.MaxWorkers, cfg.Workers), try: "localcloud bench queue --senders 1 --receivers consume --workers 8"}
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	if cfg.Engine == config.EngineJetStream {
		closeJS, err := c.jetStream(ctx, *f.file, cfg)
		if err != nil {
			return err
		}
		defer closeJS()
	}
	var out benchJSON
	for _, kind := range kinds {
		k := *cfg
		k.Kind = kind
		if kind == "kv" {
			k.Batch, k.Ack, k.Senders, k.Receivers = 1, "", 0, ""
		}
		res, err := c.runBench(ctx, k)
		if err != nil {
			if ctx.Err() != nil {
				return &exitCodeError{code: 130}
			}
			return err
		}
		out.Benches = append(out.Benches, res)
		if !*asJSON {
			printBench(c.app.stdout, res)
		}
	}
	if *asJSON {
		return c.app.printJSON(out)
	}
	return nil
}

// jetStream connects cfg to the JetStream of the stack file, as the store
// commands do (dialJetStream), and picks the temporary name and replicas.
func (c *benchCommand) jetStream(ctx context.Context, file string, cfg *benchConfig) (closeJS func(), err error) {
	st, err := c.app.loadStack(file)
	if err != nil {
		return nil, err
	}
	if !st.JetStream.External() {
		if _, running, err := supervisor.Probe(st.DataDir); err == nil && !running {
			return nil, &hintError{
				err: fmt.Errorf("bench --engine jetstream runs on the JetStream of stack %s, which is up's embedded server (no jetstream.servers); start localcloud up (it is not running for data dir %s)", st.Name, st.DataDir),
				try: "localcloud up -f " + st.File + " in another terminal, then run the bench again",
			}
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	cfg.jsName = fmt.Sprintf("bench-%x", suffix)
	if cfg.Replicas == 0 {
		cfg.Replicas = config.DefaultReplicasEmbedded
		if st.JetStream.External() {
			cfg.Replicas = config.DefaultReplicasCluster
		}
	}
	nc, err := dialJetStream(ctx, st, config.Binding{Name: cfg.jsName, Type: config.TypeQueue, Engine: config.EngineJetStream, Replicas: cfg.Replicas})
	if err != nil {
		return nil, err
	}
	cfg.js = nc
	return nc.Close, nil
}

// benchStream is the temporary stream of a jetstream bench of kind.
func benchStream(cfg benchConfig) string {
	t := config.TypeKV
	if cfg.Kind == "queue" {
		t = config.TypeQueue
	}
	return supervisor.StreamName(config.Binding{Name: cfg.jsName, Type: t})
}

// runBench runs one kind against a new temporary store and removes it.
func (c *benchCommand) runBench(ctx context.Context, cfg benchConfig) (benchResultJSON, error) {
	if cfg.js != nil {
		// The temporary stream goes at the end, as the folder does.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if js, err := jetstream.New(cfg.js); err == nil {
				if err := js.DeleteStream(dctx, benchStream(cfg)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					fmt.Fprintf(c.app.stderr, "localcloud bench: delete the temporary stream %s: %v (remove it with nats stream rm %s)\n", benchStream(cfg), err, benchStream(cfg))
				}
			}
		}()
	}
	dir, err := os.MkdirTemp("", "localcloud-bench-")
	if err != nil {
		return benchResultJSON{}, err
	}
	defer os.RemoveAll(dir)
	// Create the store once, so worker processes do not race to create it.
	if err := provision(ctx, cfg, dir); err != nil {
		return benchResultJSON{}, err
	}
	live := isTerminal(c.app.stderr)
	var progress *benchProgress
	if live {
		progress = &benchProgress{w: c.app.stderr, kind: cfg.Kind, total: cfg.Duration, ops: benchOps[cfg.Kind]}
		defer progress.clear()
	}
	var res loadResult
	if cfg.Processes == 1 {
		start := time.Now()
		res, err = runLoad(ctx, cfg, dir, 0, start, start.Add(cfg.Duration), progress.update)
	} else {
		res, err = c.runProcesses(ctx, cfg, dir, progress)
	}
	if err != nil {
		return benchResultJSON{}, err
	}
	return res.summary(cfg), nil
}

func provision(ctx context.Context, cfg benchConfig, dir string) error {
	if cfg.Kind == "kv" {
		s, err := openBenchKV(ctx, cfg, dir)
		if err != nil {
			return err
		}
		return s.Close()
	}
	q, err := openBenchQueue(ctx, cfg, dir)
	if err != nil {
		return err
	}
	return q.Close()
}

// openBenchKV opens the bench's KV store: the folder dir, or the temporary
// stream on cfg.js.
func openBenchKV(ctx context.Context, cfg benchConfig, dir string) (*kv.Store, error) {
	if cfg.js != nil {
		return kv.OpenEngine(ctx, jsengine.KV{Conn: cfg.js, Replicas: cfg.Replicas}, cfg.jsName, kv.WithDurability(cfg.Durability))
	}
	return kv.Open(ctx, dir, kv.WithDurability(cfg.Durability))
}

// openBenchQueue opens the bench's queue: the folder dir, or the temporary
// stream on cfg.js.
func openBenchQueue(ctx context.Context, cfg benchConfig, dir string) (*queue.Queue, error) {
	if cfg.js != nil {
		return queue.OpenEngine(ctx, jsengine.Queue{Conn: cfg.js, Replicas: cfg.Replicas}, cfg.jsName, queue.WithDurability(cfg.Durability))
	}
	return queue.Open(ctx, dir, queue.WithDurability(cfg.Durability))
}

// runProcesses execs cfg.Processes worker processes of this binary on dir
// and merges what they report.
func (c *benchCommand) runProcesses(ctx context.Context, cfg benchConfig, dir string, progress *benchProgress) (loadResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return loadResult{}, fmt.Errorf("find this binary to start load processes: %w", err)
	}
	start := time.Now().Add(benchStartDelay)
	end := start.Add(cfg.Duration)
	type child struct {
		cmd    *exec.Cmd
		result loadResult
		err    error
		counts []atomic.Uint64
	}
	children := make([]*child, cfg.Processes)
	var wg sync.WaitGroup
	for i := range children {
		cmd := exec.Command(exe, benchWorkerName,
			"--kind", cfg.Kind, "--dir", dir, "--index", strconv.Itoa(i),
			"--workers", strconv.Itoa(cfg.Workers), "--batch", strconv.Itoa(cfg.Batch),
			"--ack", cfg.Ack, "--senders", strconv.Itoa(cfg.Senders), "--receivers", cfg.Receivers,
			"--durability", string(cfg.Durability),
			"--start", strconv.FormatInt(start.UnixNano(), 10), "--end", strconv.FormatInt(end.UnixNano(), 10))
		cmd.Stderr = c.app.stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return loadResult{}, err
		}
		if err := cmd.Start(); err != nil {
			for _, ch := range children[:i] {
				_ = ch.cmd.Process.Kill()
				_ = ch.cmd.Wait()
			}
			return loadResult{}, fmt.Errorf("start load process: %w", err)
		}
		ch := &child{cmd: cmd, counts: make([]atomic.Uint64, len(benchOps[cfg.Kind]))}
		children[i] = ch
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch.result, ch.err = readWorker(stdout, ch.counts)
			if werr := cmd.Wait(); ch.err == nil && werr != nil {
				ch.err = fmt.Errorf("load process %d: %w", cmd.Process.Pid, werr)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(benchTick)
	defer tick.Stop()
	for {
		select {
		case <-done:
			var merged loadResult
			for _, ch := range children {
				if ch.err != nil {
					return loadResult{}, ch.err
				}
				merged.merge(ch.result)
			}
			return merged, nil
		case <-ctx.Done():
			for _, ch := range children {
				_ = ch.cmd.Process.Kill() // by pid; Wait runs in its goroutine
			}
			<-done
			return loadResult{}, ctx.Err()
		case <-tick.C:
			if progress != nil {
				counts := make([]uint64, len(benchOps[cfg.Kind]))
				for _, ch := range children {
					for i := range counts {
						counts[i] += ch.counts[i].Load()
					}
				}
				progress.show(time.Since(start), counts)
			}
		}
	}
}

// workerLine is one line a load process prints on stdout: progress counts
// while it runs, then its result.
type workerLine struct {
	Progress []uint64    `json:"progress,omitempty"`
	Result   *loadResult `json:"result,omitempty"`
}

func readWorker(r io.Reader, counts []atomic.Uint64) (loadResult, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var l workerLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return loadResult{}, fmt.Errorf("load process printed %q: %w", sc.Text(), err)
		}
		for i, n := range l.Progress {
			if i < len(counts) {
				counts[i].Store(n)
			}
		}
		if l.Result != nil {
			_, _ = io.Copy(io.Discard, r)
			return *l.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return loadResult{}, err
	}
	return loadResult{}, errors.New("load process ended without a result")
}

func (c *benchWorkerCommand) Run(ctx context.Context, args []string) error {
	fs := newFlagSet(benchWorkerName)
	var cfg benchConfig
	fs.StringVar(&cfg.Kind, "kind", "", "")
	dir := fs.String("dir", "", "")
	index := fs.Int("index", 0, "")
	fs.IntVar(&cfg.Workers, "workers", 1, "")
	fs.IntVar(&cfg.Batch, "batch", 1, "")
	fs.StringVar(&cfg.Ack, "ack", "", "")
	fs.IntVar(&cfg.Senders, "senders", 0, "")
	fs.StringVar(&cfg.Receivers, "receivers", "", "")
	durability := fs.String("durability", "", "")
	startNs := fs.Int64("start", 0, "")
	endNs := fs.Int64("end", 0, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	d, err := bindings.ParseDurability(*durability)
	if err != nil {
		return err
	}
	cfg.Durability = d
	if _, ok := benchOps[cfg.Kind]; !ok || *dir == "" || *endNs <= *startNs {
		return &usageError{msg: "bench-worker is started by localcloud bench --processes", try: "localcloud bench -h"}
	}
	ctx, stop := c.app.interruptible(ctx)
	defer stop()
	enc := json.NewEncoder(c.app.stdout)
	var mu sync.Mutex
	report := func(counts []uint64) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(workerLine{Progress: counts})
	}
	res, err := runLoad(ctx, cfg, *dir, *index, time.Unix(0, *startNs), time.Unix(0, *endNs), report)
	if err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return enc.Encode(workerLine{Result: &res})
}

func (c *benchWorkerCommand) Usage() {
	fmt.Fprintln(c.app.stdout, "Usage: localcloud bench-worker (started by localcloud bench --processes; not for direct use)")
}

// loadResult is what one or more load processes measured.
type loadResult struct {
	// Ops holds one histogram per operation of the kind, in benchOps order.
	Ops []*histogram `json:"ops"`
	// ElapsedNanos is the longest time a process spent from start to its
	// last finished operation.
	ElapsedNanos int64  `json:"elapsedNanos"`
	FirstError   string `json:"firstError,omitempty"`
}

func (r *loadResult) merge(o loadResult) {
	if r.Ops == nil {
		r.Ops = make([]*histogram, len(o.Ops))
		for i := range r.Ops {
			r.Ops[i] = &histogram{}
		}
	}
	for i, h := range o.Ops {
		r.Ops[i].merge(h)
	}
	r.ElapsedNanos = max(r.ElapsedNanos, o.ElapsedNanos)
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
}

func (r loadResult) summary(cfg benchConfig) benchResultJSON {
	elapsed := time.Duration(r.ElapsedNanos)
	out := benchResultJSON{
		Kind: cfg.Kind, DurationMillis: cfg.Duration.Milliseconds(), ElapsedMillis: elapsed.Milliseconds(),
		Workers: cfg.Workers, Processes: cfg.Processes, Batch: cfg.Batch, Durability: string(cfg.Durability), Engine: cfg.Engine,
		Ack: cfg.Ack, Senders: cfg.Senders, Receivers: cfg.Receivers,
		CPUs: runtime.NumCPU(), ValueBytes: benchValueBytes, FirstError: r.FirstError, Ops: []opJSON{},
	}
	secs := elapsed.Seconds()
	if secs <= 0 {
		secs = 1
	}
	for i, name := range benchOps[cfg.Kind] {
		h := r.Ops[i]
		out.Ops = append(out.Ops, opJSON{
			Op: name, Count: h.N, OpsPerSec: round1(float64(h.N) / secs),
			P50Micros: micros(h.quantile(0.50)), P99Micros: micros(h.quantile(0.99)), MaxMicros: micros(h.Max),
			Errors: h.Errors,
		})
	}
	if cfg.Kind == "queue" {
		out.MessagesPerSec = out.Ops[2].OpsPerSec // acked messages
		if cfg.Receivers == benchReceiversConsume {
			out.MessagesPerSec = out.Ops[3].OpsPerSec // handled messages
		}
	}
	if cfg.js != nil {
		out.Stream, out.Replicas = benchStream(cfg), cfg.Replicas
	}
	return out
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func micros(ns int64) float64 { return round1(float64(ns) / 1e3) }

// runLoad runs cfg.Workers workers on the store in dir from start until
// end and returns their merged histograms. tick, if not nil, gets the
// operation counts so far every benchTick.
func runLoad(ctx context.Context, cfg benchConfig, dir string, index int, start, end time.Time, tick func([]uint64)) (loadResult, error) {
	ops := benchOps[cfg.Kind]
	var kvs *kv.Store
	var q *queue.Queue
	var err error
	if cfg.Kind == "kv" {
		kvs, err = openBenchKV(ctx, cfg, dir)
		if err == nil {
			defer kvs.Close()
		}
	} else {
		q, err = openBenchQueue(ctx, cfg, dir)
		if err == nil {
			defer q.Close()
		}
	}
	if err != nil {
		return loadResult{}, err
	}
	type worker struct {
		hs     []*histogram
		counts []atomic.Uint64
		err    error
	}
	n := cfg.Workers
	consume := cfg.Kind == "queue" && cfg.Receivers == benchReceiversConsume
	if consume {
		n = 1 // one goroutine runs Consume with cfg.Workers handlers
	}
	if cfg.Kind == "queue" {
		n += cfg.Senders
	}
	workers := make([]*worker, n)
	var wg sync.WaitGroup
	var lastEnd atomic.Int64
	for i := range workers {
		w := &worker{hs: make([]*histogram, len(ops)), counts: make([]atomic.Uint64, len(ops))}
		for j := range w.hs {
			w.hs[j] = &histogram{}
		}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			if d := time.Until(start); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			var recMu sync.Mutex // Consume's handlers record concurrently
			rec := func(op int, began time.Time, err error) {
				recMu.Lock()
				defer recMu.Unlock()
				h := w.hs[op]
				if err != nil {
					h.Errors++
					if w.err == nil {
						w.err = err
					}
					return
				}
				h.record(time.Since(began).Nanoseconds())
				w.counts[op].Add(1)
			}
			switch {
			case cfg.Kind == "kv":
				kvWorker(ctx, kvs, fmt.Sprintf("p%dw%d:", index, i), end, rec)
			case cfg.Senders == 0:
				queueWorker(ctx, q, cfg, end, rec)
			case i >= n-cfg.Senders:
				sendWorker(ctx, q, end, rec)
			case consume:
				consumeWorker(ctx, q, cfg.Workers, end, rec)
			default:
				receiveWorker(ctx, q, cfg, end, rec)
			}
			now := time.Now().UnixNano()
			for {
				old := lastEnd.Load()
				if now <= old || lastEnd.CompareAndSwap(old, now) {
					break
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(benchTick)
	defer t.Stop()
	counts := func() []uint64 {
		out := make([]uint64, len(ops))
		for _, w := range workers {
			for j := range out {
				out[j] += w.counts[j].Load()
			}
		}
		return out
	}
wait:
	for {
		select {
		case <-done:
			break wait
		case <-t.C:
			if tick != nil {
				tick(counts())
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	res := loadResult{Ops: make([]*histogram, len(ops)), ElapsedNanos: lastEnd.Load() - start.UnixNano()}
	for j := range res.Ops {
		res.Ops[j] = &histogram{}
	}
	for _, w := range workers {
		for j, h := range w.hs {
			res.Ops[j].merge(h)
		}
		if w.err != nil && res.FirstError == "" {
			res.FirstError = w.err.Error()
		}
	}
	return res, nil
}

// kvWorker alternates a put of one of its keys (a fresh random value) and a
// get of a random key it has written, until end.
func kvWorker(ctx context.Context, s *kv.Store, prefix string, end time.Time, rec func(int, time.Time, error)) {
	value := make([]byte, benchValueBytes)
	keys := make([]string, benchKeysPerWorker)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	written := 0
	for n := 0; ctx.Err() == nil && time.Now().Before(end); n++ {
		_, _ = rand.Read(value)
		began := time.Now()
		_, err := s.Put(ctx, keys[n%len(keys)], value)
		rec(0, began, err)
		if err == nil && written < len(keys) {
			written++
		}
		if written == 0 {
			continue
		}
		began = time.Now()
		_, ok, err := s.Get(ctx, keys[mrand.IntN(written)])
		if err == nil && !ok {
			err = errors.New("get: a written key is missing")
		}
		rec(1, began, err)
	}
}

// queueWorker runs a closed loop until end: send batch messages, claim up to
// batch with one receive, ack them (each, or all in one AckBatch). The
// backlog stays around workers*batch, so latencies are not those of an
// ever-growing queue. Each payload carries its send time, for the
// send-to-receive latency.
func queueWorker(ctx context.Context, q *queue.Queue, cfg benchConfig, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		for range cfg.Batch {
			sendOne(ctx, q, rec)
		}
		receiveOnce(ctx, q, cfg, rec)
	}
}

// sendWorker sends one message at a time until end (--senders).
func sendWorker(ctx context.Context, q *queue.Queue, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		sendOne(ctx, q, rec)
	}
}

// receiveWorker receives and acks until end (--senders: others send). An
// empty receive waits a little for the senders instead of spinning.
func receiveWorker(ctx context.Context, q *queue.Queue, cfg benchConfig, end time.Time, rec func(int, time.Time, error)) {
	for ctx.Err() == nil && time.Now().Before(end) {
		if receiveOnce(ctx, q, cfg, rec) == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// consumeWorker runs Consume with workers handlers until end; each handled
// message records its e2e latency (Consume acks it after the handler).
func consumeWorker(ctx context.Context, q *queue.Queue, workers int, end time.Time, rec func(int, time.Time, error)) {
	cctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	err := q.Consume(cctx, func(_ context.Context, m queue.Message) error {
		recE2E(m, rec)
		return nil
	}, queue.ConsumeWorkers(workers), queue.ConsumeVisibility(time.Minute))
	if err != nil {
		rec(3, time.Now(), err)
	}
}

func sendOne(ctx context.Context, q *queue.Queue, rec func(int, time.Time, error)) {
	began := time.Now()
	err := q.Send(ctx, queue.Text(strconv.FormatInt(began.UnixNano(), 10)+strings.Repeat(".", 44)))
	rec(0, began, err)
}

// recE2E records the time from m's send to now.
func recE2E(m queue.Message, rec func(int, time.Time, error)) {
	sent, perr := strconv.ParseInt(strings.TrimRight(m.Payload.Data, "."), 10, 64)
	if perr == nil {
		rec(3, time.Unix(0, sent), nil)
	}
}

// receiveOnce claims up to cfg.Batch messages and acks them as cfg.Ack
// says; it returns how many it claimed. With --ack batch each message's ack
// latency is that of the one AckBatch.
func receiveOnce(ctx context.Context, q *queue.Queue, cfg benchConfig, rec func(int, time.Time, error)) int {
	began := time.Now()
	msgs, err := q.Receive(ctx, cfg.Batch, queue.ReceiveVisibility(time.Minute))
	rec(1, began, err)
	for _, m := range msgs {
		recE2E(m, rec)
	}
	if cfg.Ack == benchAckBatch && len(msgs) > 0 {
		receipts := make([]string, len(msgs))
		for i, m := range msgs {
			receipts[i] = m.ReceiptHandle
		}
		began := time.Now()
		out, err := q.AckBatch(ctx, receipts)
		for i := range msgs {
			e := err
			if e == nil && out[i] != queue.AckCurrent {
				e = fmt.Errorf("ack batch: receipt %d: outcome %v", i, out[i])
			}
			rec(2, began, e)
		}
		return len(msgs)
	}
	for _, m := range msgs {
		began := time.Now()
		rec(2, began, q.Ack(ctx, m.ReceiptHandle))
	}
	return len(msgs)
}

// histogram records latencies in nanoseconds with about 1.6% precision:
// values below 64 exactly, above in 64 steps per power of two.
type histogram struct {
	Counts map[int]uint64 `json:"counts"`
	N      uint64         `json:"n"`
	Max    int64          `json:"max"`
	Errors uint64         `json:"errors"`
}

func bucketOf(v int64) int {
	if v < 64 {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 7
	return (e+1)*64 + int(v>>e) - 64
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) int64 {
	if i < 64 {
		return int64(i)
	}
	e := i/64 - 1
	m := int64(i%64 + 64)
	return m<<e + (int64(1)<<e)/2
}

func (h *histogram) record(v int64) {
	if h.Counts == nil {
		h.Counts = map[int]uint64{}
	}
	h.Counts[bucketOf(v)]++
	h.N++
	h.Max = max(h.Max, v)
}

func (h *histogram) merge(o *histogram) {
	if o == nil {
		return
	}
	if h.Counts == nil {
		h.Counts = map[int]uint64{}
	}
	for b, n := range o.Counts {
		h.Counts[b] += n
	}
	h.N += o.N
	h.Errors += o.Errors
	h.Max = max(h.Max, o.Max)
}

// quantile returns the value below which a fraction q of the records lie.
func (h *histogram) quantile(q float64) int64 {
	if h.N == 0 {
		return 0
	}
	idx := make([]int, 0, len(h.Counts))
	for b := range h.Counts {
		idx = append(idx, b)
	}
	slices.Sort(idx)
	rank := uint64(q*float64(h.N-1)) + 1
	var seen uint64
	for _, b := range idx {
		seen += h.Counts[b]
		if seen >= rank {
			return min(bucketValue(b), h.Max)
		}
	}
	return h.Max
}

// benchProgress shows a live line on a terminal.
type benchProgress struct {
	w     io.Writer
	kind  string
	total time.Duration
	ops   []string
	mu    sync.Mutex
	began time.Time
	shown bool
}

// update shows counts of an in-process run (elapsed from the first call).
func (p *benchProgress) update(counts []uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.began.IsZero() {
		p.began = time.Now().Add(-benchTick)
	}
	el := time.Since(p.began)
	p.mu.Unlock()
	p.show(el, counts)
}

func (p *benchProgress) show(elapsed time.Duration, counts []uint64) {
	if p == nil || elapsed <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\r\x1b[Kbench %s %4.1fs/%s", p.kind, min(elapsed, p.total).Seconds(), p.total)
	for i, n := range counts {
		fmt.Fprintf(&b, "  %s %d (%.0f/s)", p.ops[i], n, float64(n)/elapsed.Seconds())
	}
	_, _ = io.WriteString(p.w, b.String())
	p.shown = true
}

func (p *benchProgress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		_, _ = io.WriteString(p.w, "\r\x1b[K")
	}
}

// opNotes explain what one operation of each kind is.
var opNotes = map[string]string{
	"put":     "upsert of a 128-byte value",
	"get":     "point read of a written key",
	"send":    "one message",
	"receive": "one claim of up to --batch messages",
	"ack":     "one message",
	"e2e":     "send to receive, per message",
}

func printBench(w io.Writer, r benchResultJSON) {
	s := "es"
	if r.Processes == 1 {
		s = ""
	}
	batch := ""
	if r.Kind == "queue" {
		batch = fmt.Sprintf(", batch %d, ack %s", r.Batch, r.Ack)
		if r.Senders > 0 {
			batch += fmt.Sprintf(", %d senders + %s receivers", r.Senders, r.Receivers)
		}
	}
	engine := ""
	if r.Engine == config.EngineJetStream {
		engine = fmt.Sprintf(", engine jetstream (temporary stream %s, %d replica(s))", r.Stream, r.Replicas)
	}
	fmt.Fprintf(w, "bench %s: %s, %d workers x %d process%s%s, durability %s%s, %d CPUs\n",
		r.Kind, time.Duration(r.DurationMillis)*time.Millisecond, r.Workers, r.Processes, s, batch, r.Durability, engine, r.CPUs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OP\tCOUNT\tOPS/S\tP50\tP99\tMAX\tERRORS\t\t")
	for _, o := range r.Ops {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%d\t\t%s\n", o.Op, o.Count, o.OpsPerSec,
			fmtMicros(o.P50Micros), fmtMicros(o.P99Micros), fmtMicros(o.MaxMicros), o.Errors, opNotes[o.Op])
	}
	tw.Flush()
	if r.Kind == "queue" {
		fmt.Fprintf(w, "messages through the queue: %.0f/s\n", r.MessagesPerSec)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", r.FirstError)
	}
	fmt.Fprintln(w)
}

func fmtMicros(us float64) string {
	d := time.Duration(us * 1e3)
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", us)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", us/1e3)
	}
	return fmt.Sprintf("%.2fs", us/1e6)
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
