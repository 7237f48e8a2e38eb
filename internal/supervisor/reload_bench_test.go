package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

// BenchmarkReload is a reload of up serving n KV bindings whose stack file
// did not change: the stack is read and checked again, compared with the
// one served, and runtime.json rewritten. start-ms is the time Start took
// to create the n stores, restart-ms that of a Start on them once they
// exist (once per size each, not per reload). up holds a KV
// store open only while it is used (idle.go), so no size needs more open
// files than an ordinary limit.
func BenchmarkReload(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000, 10000} {
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			var sb strings.Builder
			sb.WriteString("version: 1\nname: big\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n")
			for i := range n {
				fmt.Fprintf(&sb, "  kv-%05d:\n    type: kv\n", i)
			}
			file := filepath.Join(b.TempDir(), "stack.yaml")
			if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			st, err := config.Load(file)
			if err != nil {
				b.Fatal(err)
			}
			began := time.Now()
			s, err := Start(ctx, st, Options{Logger: slog.New(slog.DiscardHandler), HealthInterval: -1, NoWatch: true})
			if err != nil {
				b.Fatal(err)
			}
			took := time.Since(began)
			for b.Loop() {
				d, err := s.Reload(ctx, "bench")
				if err != nil || !d.Empty() {
					b.Fatalf("reload: %+v, %v", d, err)
				}
			}
			b.StopTimer()
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			began = time.Now()
			s, err = Start(ctx, st, Options{Logger: slog.New(slog.DiscardHandler), HealthInterval: -1, NoWatch: true})
			if err != nil {
				b.Fatal(err)
			}
			again := time.Since(began)
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			// After the loop: its start deletes the metrics reported before.
			b.ReportMetric(float64(took.Milliseconds()), "start-ms")
			b.ReportMetric(float64(again.Milliseconds()), "restart-ms")
		})
	}
}

// TestProvisioningProgress: while it opens stores, up says how many are
// open every progressEvery (shortened here so the test sees lines at
// all; not parallel, as it changes the package's interval).
func TestProvisioningProgress(t *testing.T) {
	old := progressEvery
	progressEvery = time.Millisecond
	t.Cleanup(func() { progressEvery = old })
	var lines []string
	for i := range 200 {
		lines = append(lines, fmt.Sprintf("  kv-%03d:\n    type: kv", i))
	}
	_, _, logs := start(t, stackText(lines...), Options{NoWatch: true})
	out := logs.String()
	if !strings.Contains(out, `msg="provisioning stores" opened=`) || !strings.Contains(out, " of=200") {
		t.Fatalf("no progress line while opening 200 stores:\n%s", out)
	}
}

// BenchmarkStranded is what the engine-change check (engine.Stranded)
// adds to every binding up opens, at start and on a reload that adds or
// reopens bindings: one look at the binding's store on the other engine.
// jetstream=off: a stack of n sqlite KV bindings, up's server without
// JetStream (a stat of the stream's folder each); jetstream=on: one
// jetstream binding beside them, so each is a stream lookup.
func BenchmarkStranded(b *testing.B) {
	for _, js := range []bool{false, true} {
		for _, n := range []int{1000, 2000} {
			name := fmt.Sprintf("jetstream=off/bindings=%d", n)
			if js {
				name = fmt.Sprintf("jetstream=on/bindings=%d", n)
			}
			b.Run(name, func(b *testing.B) {
				var sb strings.Builder
				sb.WriteString("version: 1\nname: big\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n")
				for i := range n {
					fmt.Fprintf(&sb, "  kv-%05d:\n    type: kv\n", i)
				}
				if js {
					sb.WriteString("  js:\n    type: kv\n    engine: jetstream\n")
				}
				file := filepath.Join(b.TempDir(), "stack.yaml")
				if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
					b.Fatal(err)
				}
				st, err := config.Load(file)
				if err != nil {
					b.Fatal(err)
				}
				s, err := Start(ctx, st, Options{Logger: slog.New(slog.DiscardHandler), HealthInterval: -1, NoWatch: true})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				for b.Loop() {
					if err := checkStranded(ctx, s.env, st.Bindings); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
