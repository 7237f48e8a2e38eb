package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
)

// The claim-latency workload.
const (
	claimProcs    = 4
	claimWorkers  = 4 // goroutines per process
	claimMessages = 10_000
	claimDeadline = 2 * time.Minute // one run, start to last exit
)

// Environment switch of the worker process.
const (
	envHelper  = "LOCALCLOUD_BENCH_HELPER" // "claim" makes TestBenchHelperProcess a worker
	envDir     = "LOCALCLOUD_BENCH_DIR"    // queue store directory
	envOut     = "LOCALCLOUD_BENCH_OUT"    // file the worker writes its samples to
	envWorkers = "LOCALCLOUD_BENCH_WORKERS"
)

// BenchmarkClaimLatency4x4: 4 OS processes (this test binary re-executed)
// with 4 goroutines each drain one queue of 10,000 pre-filled messages with
// Receive(1)+Ack. Each worker times every Receive that returned a message
// (call to return, lock waits included); the parent merges the samples of
// all processes and reports p50/p99/max and claims/s over the run (first
// worker start to last worker end). One op is one whole run; ns/op is
// suppressed since the rates say it better.
func BenchmarkClaimLatency4x4(b *testing.B) {
	var lat []time.Duration
	var span time.Duration
	claims := 0
	for range b.N {
		r := runClaimProcesses(b)
		lat = append(lat, r.lat...)
		span += r.span
		claims += len(r.lat)
		b.Logf("run: %d claims in %s by %d processes x %d workers; claims per process %v; %s",
			len(r.lat), r.span.Round(time.Millisecond), claimProcs, claimWorkers, r.perProc, r.slowest)
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(claims)/span.Seconds(), "claims/s")
	b.ReportMetric(ms(pct(0.50)), "p50-ms")
	b.ReportMetric(ms(pct(0.99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

type claimResult struct {
	lat     []time.Duration
	span    time.Duration
	perProc []int
	slowest string // where the tail is: count over 10 and 50 ms, the 5 slowest claims
}

type claimChild struct {
	cmd    *exec.Cmd
	out    string
	stdin  io.WriteCloser
	stderr bytes.Buffer
	ready  chan error
}

// runClaimProcesses does one run: pre-fill, start the workers, release them
// together, wait, merge and check the samples.
func runClaimProcesses(b *testing.B) claimResult {
	b.StopTimer()
	dir := b.TempDir()
	prefillQueue(b, dir, claimMessages)

	ctx, cancel := context.WithTimeout(context.Background(), claimDeadline)
	defer cancel()
	children := make([]*claimChild, claimProcs)
	// Kill by pid whatever is still running when the run ends, however it
	// ends, and reap it.
	defer func() {
		for _, c := range children {
			if c == nil || c.cmd.Process == nil {
				continue
			}
			if c.cmd.ProcessState == nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	}()
	for i := range children {
		c, err := startClaimChild(ctx, dir, filepath.Join(dir, fmt.Sprintf("samples-%d.txt", i)))
		if err != nil {
			b.Fatalf("start worker process %d: %v", i, err)
		}
		children[i] = c
	}
	for i, c := range children {
		select {
		case err := <-c.ready:
			if err != nil {
				b.Fatalf("worker process %d not ready: %v; stderr:\n%s", i, err, c.stderr.String())
			}
		case <-ctx.Done():
			b.Fatalf("worker process %d not ready: %v", i, ctx.Err())
		}
	}
	b.StartTimer()
	for i, c := range children {
		if _, err := c.stdin.Write([]byte("g")); err != nil {
			b.Fatalf("release worker process %d: %v", i, err)
		}
		_ = c.stdin.Close()
	}
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			b.Fatalf("worker process %d: %v; stderr:\n%s", i, err, c.stderr.String())
		}
	}
	b.StopTimer()

	var res claimResult
	seen := make(map[int64]int, claimMessages)
	var first, last int64
	type slow struct {
		proc int
		x    claimSample
	}
	var all []slow
	for i, c := range children {
		s, err := readSamples(c.out)
		if err != nil {
			b.Fatalf("worker process %d samples: %v", i, err)
		}
		if first == 0 || s.start < first {
			first = s.start
		}
		last = max(last, s.end)
		for _, x := range s.claims {
			seen[x.id]++
			if seen[x.id] > 1 {
				b.Fatalf("message %d claimed more than once", x.id)
			}
			res.lat = append(res.lat, x.lat)
			all = append(all, slow{i, x})
		}
		res.perProc = append(res.perProc, len(s.claims))
	}
	if len(seen) != claimMessages {
		b.Fatalf("%d distinct messages claimed, want %d", len(seen), claimMessages)
	}
	res.span = time.Duration(last - first)
	slices.SortFunc(all, func(a, b slow) int { return int(b.x.lat - a.x.lat) })
	over := func(d time.Duration) int {
		n, _ := slices.BinarySearchFunc(all, d, func(s slow, d time.Duration) int {
			if s.x.lat > d {
				return -1
			}
			return 1
		})
		return n
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "claims over 10 ms: %d, over 50 ms: %d; slowest (process, ms into the run: latency):",
		over(10*time.Millisecond), over(50*time.Millisecond))
	for _, s := range all[:min(5, len(all))] {
		fmt.Fprintf(&sb, " p%d +%.0fms: %.1fms", s.proc, float64(s.x.at-first)/1e6, float64(s.x.lat)/1e6)
	}
	res.slowest = sb.String()
	return res
}

func startClaimChild(ctx context.Context, dir, out string) (*claimChild, error) {
	c := &claimChild{out: out, ready: make(chan error, 1)}
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBenchHelperProcess$", "-test.count=1", "-test.timeout=5m")
	c.cmd.Env = append(os.Environ(),
		envHelper+"=claim", envDir+"="+dir, envOut+"="+out, envWorkers+"="+strconv.Itoa(claimWorkers))
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				c.ready <- nil
				_, _ = io.Copy(io.Discard, stdout) // drain the test framework's output
				return
			}
		}
		c.ready <- errors.New("exited before it was ready")
	}()
	return c, nil
}

type claimSample struct {
	id  int64
	at  int64 // unix nanoseconds when Receive was called
	lat time.Duration
}

type samples struct {
	start, end int64 // unix nanoseconds
	claims     []claimSample
}

// The sample file: "start <ns> end <ns>" then one "<id> <call unix ns>
// <latency ns>" line per claim.
func readSamples(path string) (samples, error) {
	var s samples
	f, err := os.Open(path)
	if err != nil {
		return s, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return s, fmt.Errorf("%s: empty", path)
	}
	if _, err := fmt.Sscanf(sc.Text(), "start %d end %d", &s.start, &s.end); err != nil {
		return s, fmt.Errorf("%s: header %q: %v", path, sc.Text(), err)
	}
	for sc.Scan() {
		var x claimSample
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d %d", &x.id, &x.at, &n); err != nil {
			return s, fmt.Errorf("%s: line %q: %v", path, sc.Text(), err)
		}
		x.lat = time.Duration(n)
		s.claims = append(s.claims, x)
	}
	return s, sc.Err()
}

// TestBenchHelperProcess is a worker process of BenchmarkClaimLatency4x4,
// not a test: without the environment switch it skips.
func TestBenchHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) != "claim" {
		t.Skip("worker process of BenchmarkClaimLatency4x4; runs only when that benchmark starts it")
	}
	if err := claimWorker(os.Getenv(envDir), os.Getenv(envOut), os.Getenv(envWorkers)); err != nil {
		fmt.Fprintln(os.Stderr, "claim worker:", err)
		os.Exit(1)
	}
}

// claimWorker opens the queue, says "ready", waits for a byte on stdin,
// then drains the queue with n goroutines doing Receive(1)+Ack and writes
// the samples file.
func claimWorker(dir, out, workers string) error {
	n, err := strconv.Atoi(workers)
	if err != nil || n < 1 {
		return fmt.Errorf("%s=%q: want a positive count", envWorkers, workers)
	}
	ctx := context.Background()
	q, err := queue.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer q.Close()
	fmt.Println("ready")
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		return fmt.Errorf("wait for the start signal: %w", err)
	}
	start := time.Now()
	per := make([][]claimSample, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for {
				t0 := time.Now()
				msgs, err := q.Receive(ctx, 1)
				d := time.Since(t0)
				if err != nil {
					errs[w] = err
					return
				}
				if len(msgs) == 0 {
					// Every message was pre-filled and leases are 30 s:
					// nothing due means nothing left to claim.
					return
				}
				per[w] = append(per[w], claimSample{id: msgs[0].ID, at: t0.UnixNano(), lat: d})
				if err := q.Ack(ctx, msgs[0].ReceiptHandle); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	end := time.Now()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "start %d end %d\n", start.UnixNano(), end.UnixNano())
	for _, s := range per {
		for _, x := range s {
			fmt.Fprintf(&buf, "%d %d %d\n", x.id, x.at, int64(x.lat))
		}
	}
	return os.WriteFile(out, buf.Bytes(), 0o600)
}
