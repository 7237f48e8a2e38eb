// Package loadgen is the load generator of `localcloud bench`: workers
// that put and get keys, or send, receive and ack messages (in receive
// loops or through Consume), against one store for a fixed time, in this
// process or in several processes at once, with a latency histogram per
// operation and a report. The CLI keeps the flags, picks the store (a
// temporary one of the chosen engine, engine.Tools.Scratch) and prints the
// report; this package knows nothing of engines: it works through the
// public kv and queue API on what a Store opens.
package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
)

// Defaults and fixed sizes of a load.
const (
	DefaultDuration  = 5 * time.Second
	DefaultWorkers   = 4
	DefaultProcesses = 1
	DefaultBatch     = 1
	// DefaultAck is how the queue load acks: one Ack per message.
	DefaultAck = AckEach
	// ValueBytes is the size of a KV value; keysPerWorker the keys each
	// worker cycles through.
	ValueBytes    = 128
	keysPerWorker = 10000
	// StartDelay is how long after the last load process said it is ready
	// (its store open) the run starts: time for the start line to reach
	// every process.
	StartDelay = 50 * time.Millisecond
	// Tick is how often progress is shown and reported.
	Tick = 250 * time.Millisecond
)

// The queue load's ack modes (Config.Ack) and receiver modes
// (Config.Receivers).
const (
	AckEach          = "each"    // one Ack per message
	AckBatch         = "batch"   // one AckBatch per receive
	ReceiversLoop    = "loop"    // receive + ack loops
	ReceiversConsume = "consume" // Consume with Workers handlers
)

// Ops are the operations each kind measures, in table order.
var Ops = map[string][]string{
	"kv":    {"put", "get"},
	"queue": {"send", "receive", "ack", "e2e"},
}

// Config is one load.
type Config struct {
	Kind       string // "kv" or "queue"
	Duration   time.Duration
	Workers    int
	Processes  int
	Batch      int
	Durability string
	// Queue only: Ack is AckEach or AckBatch; Senders > 0 runs that many
	// sending goroutines per process beside the Workers receivers (which
	// then only receive); Receivers is ReceiversLoop or ReceiversConsume
	// (needs Senders).
	Ack       string
	Senders   int
	Receivers string
}

// Store is what a load runs against: each Open gives a new handle on the
// same store, as each load process opens its own (engine.Scratch is one).
type Store interface {
	OpenKV(ctx context.Context) (*kv.Store, error)
	OpenQueue(ctx context.Context) (*queue.Queue, error)
}

// Result is what one or more load processes measured.
type Result struct {
	// Ops holds one histogram per operation of the kind, in Ops order.
	Ops []*Histogram `json:"ops"`
	// ElapsedNanos is the longest time a process spent from start to its
	// last finished operation.
	ElapsedNanos int64  `json:"elapsedNanos"`
	FirstError   string `json:"firstError,omitempty"`
}

// Merge adds o's measurements to r.
func (r *Result) Merge(o Result) {
	if r.Ops == nil {
		r.Ops = make([]*Histogram, len(o.Ops))
		for i := range r.Ops {
			r.Ops[i] = &Histogram{}
		}
	}
	for i, h := range o.Ops {
		r.Ops[i].Merge(h)
	}
	r.ElapsedNanos = max(r.ElapsedNanos, o.ElapsedNanos)
	if r.FirstError == "" {
		r.FirstError = o.FirstError
	}
}

// Run runs cfg.Workers workers on store from start until end and returns
// their merged histograms. tick, if not nil, gets the operation counts so
// far every Tick. index numbers the process (its keys are its own).
func Run(ctx context.Context, cfg Config, store Store, index int, start, end time.Time, tick func([]uint64)) (Result, error) {
	ops := Ops[cfg.Kind]
	var kvs *kv.Store
	var q *queue.Queue
	var err error
	if cfg.Kind == "kv" {
		kvs, err = store.OpenKV(ctx)
		if err == nil {
			defer kvs.Close()
		}
	} else {
		q, err = store.OpenQueue(ctx)
		if err == nil {
			defer q.Close()
		}
	}
	if err != nil {
		return Result{}, err
	}
	type worker struct {
		hs     []*Histogram
		counts []atomic.Uint64
		err    error
	}
	n := cfg.Workers
	consume := cfg.Kind == "queue" && cfg.Receivers == ReceiversConsume
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
		w := &worker{hs: make([]*Histogram, len(ops)), counts: make([]atomic.Uint64, len(ops))}
		for j := range w.hs {
			w.hs[j] = &Histogram{}
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
				h.Record(time.Since(began).Nanoseconds())
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
	t := time.NewTicker(Tick)
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
		return Result{}, err
	}
	res := Result{Ops: make([]*Histogram, len(ops)), ElapsedNanos: lastEnd.Load() - start.UnixNano()}
	for j := range res.Ops {
		res.Ops[j] = &Histogram{}
	}
	for _, w := range workers {
		for j, h := range w.hs {
			res.Ops[j].Merge(h)
		}
		if w.err != nil && res.FirstError == "" {
			res.FirstError = w.err.Error()
		}
	}
	return res, nil
}
