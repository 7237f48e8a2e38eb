package loadgen

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Report is one load's result as `localcloud bench --json` prints it
// (docs/CLI.md).
type Report struct {
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
	// Engine is the store's engine; on a stream Stream names it and
	// Replicas its replicas (set by the caller, which picked the store).
	Engine         string  `json:"engine"`
	Stream         string  `json:"stream,omitempty"`
	Replicas       int     `json:"replicas,omitempty"`
	CPUs           int     `json:"cpus"`
	ValueBytes     int     `json:"valueBytes"`
	MessagesPerSec float64 `json:"messagesPerSec,omitempty"`
	Ops            []Op    `json:"ops"`
	FirstError     string  `json:"firstError,omitempty"`
	// Where is what the table's header says of the store beyond its
	// engine ("" for nothing).
	Where string `json:"-"`
}

// Op is one operation's line of a Report.
type Op struct {
	Op        string  `json:"op"`
	Count     uint64  `json:"count"`
	OpsPerSec float64 `json:"opsPerSec"`
	P50Micros float64 `json:"p50Micros"`
	P99Micros float64 `json:"p99Micros"`
	MaxMicros float64 `json:"maxMicros"`
	Errors    uint64  `json:"errors"`
}

// Summarize turns a Result of cfg into its Report.
func (r Result) Summarize(cfg Config) Report {
	elapsed := time.Duration(r.ElapsedNanos)
	out := Report{
		Kind: cfg.Kind, DurationMillis: cfg.Duration.Milliseconds(), ElapsedMillis: elapsed.Milliseconds(),
		Workers: cfg.Workers, Processes: cfg.Processes, Batch: cfg.Batch, Durability: cfg.Durability,
		Ack: cfg.Ack, Senders: cfg.Senders, Receivers: cfg.Receivers,
		CPUs: runtime.NumCPU(), ValueBytes: ValueBytes, FirstError: r.FirstError, Ops: []Op{},
	}
	secs := elapsed.Seconds()
	if secs <= 0 {
		secs = 1
	}
	for i, name := range Ops[cfg.Kind] {
		h := r.Ops[i]
		out.Ops = append(out.Ops, Op{
			Op: name, Count: h.N, OpsPerSec: round1(float64(h.N) / secs),
			P50Micros: micros(h.Quantile(0.50)), P99Micros: micros(h.Quantile(0.99)), MaxMicros: micros(h.Max),
			Errors: h.Errors,
		})
	}
	if cfg.Kind == "queue" {
		out.MessagesPerSec = out.Ops[2].OpsPerSec // acked messages
		if cfg.Receivers == ReceiversConsume {
			out.MessagesPerSec = out.Ops[3].OpsPerSec // handled messages
		}
	}
	return out
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func micros(ns int64) float64 { return round1(float64(ns) / 1e3) }

// Progress shows a live line on a terminal.
type Progress struct {
	W     io.Writer
	Kind  string
	Total time.Duration
	Ops   []string
	mu    sync.Mutex
	began time.Time
	shown bool
}

// Update shows counts of an in-process run (elapsed from the first call).
func (p *Progress) Update(counts []uint64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.began.IsZero() {
		p.began = time.Now().Add(-Tick)
	}
	el := time.Since(p.began)
	p.mu.Unlock()
	p.Show(el, counts)
}

func (p *Progress) Show(elapsed time.Duration, counts []uint64) {
	if p == nil || elapsed <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\r\x1b[Kbench %s %4.1fs/%s", p.Kind, min(elapsed, p.Total).Seconds(), p.Total)
	for i, n := range counts {
		fmt.Fprintf(&b, "  %s %d (%.0f/s)", p.Ops[i], n, float64(n)/elapsed.Seconds())
	}
	_, _ = io.WriteString(p.W, b.String())
	p.shown = true
}

func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		_, _ = io.WriteString(p.W, "\r\x1b[K")
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

// Print writes r as a table, with where the store was (Report.Where).
func Print(w io.Writer, r Report) {
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
	if r.Where != "" {
		engine = ", " + r.Where
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
