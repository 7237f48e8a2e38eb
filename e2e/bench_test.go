package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchBindings is the size of the stack the startup benchmark brings up.
const benchBindings = 20

// upReadyRounds is how many times each binary is brought up per mode and
// benchmark iteration; the figures are medians over them.
const upReadyRounds = 10

// BenchmarkUpReady20 measures the time from exec of `localcloud up` to its
// ready line with 20 bindings (10 KV, 10 queues), on a fresh data dir (every
// store created) and on an existing one (every store opened), and the idle
// RSS of up with those 20 bindings. One iteration is upReadyRounds rounds;
// each starts every binary once and stops it with SIGTERM; ms/ready is the
// median of the rounds, ms/worst-ready the slowest, cpu-ms/ready the
// median CPU time up had used when its ready line was read (every thread,
// from /proc: what a loaded machine stretches into the wait, and stretches
// much less itself). With
// LOCALCLOUD_BENCH_BINARY set (a binary of another commit) that binary runs
// in the same rounds, interleaved (the order alternates from one round to
// the next), and its figures are reported with the suffix -base, with
// x-base = median / base median.
//
// Run it with -benchtime 1x: one iteration is 20 or 40 starts.
func BenchmarkUpReady20(b *testing.B) {
	if binary == "" {
		b.Skip("no binary")
	}
	bins := []benchBin{{name: "", path: binary}}
	if v := os.Getenv(envBenchBinary); v != "" {
		bins = append(bins, benchBin{name: "-base", path: v})
	}
	var text strings.Builder
	text.WriteString("version: 1\nname: bench\nnotify:\n  listen: 127.0.0.1:0\nexplorer:\n  listen: 127.0.0.1:0\nbindings:\n")
	for i := range benchBindings {
		typ := "kv"
		if i%2 == 1 {
			typ = "queue"
		}
		fmt.Fprintf(&text, "  b%02d:\n    type: %s\n", i, typ)
	}
	writeBenchStack := func(b *testing.B) string {
		file := filepath.Join(b.TempDir(), "stack.yaml")
		if err := os.WriteFile(file, []byte(text.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		return file
	}

	for _, mode := range []string{"fresh", "existing"} {
		b.Run(mode, func(b *testing.B) {
			existing := make([]string, len(bins)) // each binary's own data dir
			for i, bin := range bins {
				existing[i] = writeBenchStack(b)
				if mode == "existing" {
					stop(b, startReady(b, bin.path, existing[i]))
				}
			}
			times := make([][]time.Duration, len(bins))
			cpus := make([][]time.Duration, len(bins))
			for b.Loop() {
				for round := range upReadyRounds {
					for k := range bins {
						i := k
						if round%2 == 1 {
							i = len(bins) - 1 - k
						}
						file := existing[i]
						if mode == "fresh" {
							b.StopTimer()
							file = writeBenchStack(b)
							b.StartTimer()
						}
						u := startReady(b, bins[i].path, file)
						times[i] = append(times[i], u.ready)
						cpus[i] = append(cpus[i], u.cpu)
						stop(b, u)
					}
				}
			}
			medians := make([]float64, len(bins))
			for i, bin := range bins {
				medians[i] = ms(median(times[i]))
				b.ReportMetric(medians[i], "ms/ready"+bin.name)
				b.ReportMetric(ms(slices.Max(times[i])), "ms/worst-ready"+bin.name)
				b.ReportMetric(ms(median(cpus[i])), "cpu-ms/ready"+bin.name)
			}
			if len(bins) == 2 {
				b.ReportMetric(medians[0]/medians[1], "x-base")
			}

			// Idle RSS: one more up, left alone for a second after ready.
			b.StopTimer()
			for i, bin := range bins {
				u := startReady(b, bin.path, existing[i])
				time.Sleep(time.Second) // the measurement's idle period, not a synchronisation
				rss, err := vmRSS(u.cmd.Process.Pid)
				stop(b, u)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(rss)/1024, "rss-MiB"+bin.name)
			}
		})
	}
}

// benchBin is a localcloud binary a benchmark runs; name is the suffix of
// its metrics.
type benchBin struct {
	name, path string
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median returns the median of ds (the mean of the middle two of an even
// count); ds is not changed.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

type benchUp struct {
	cmd   *exec.Cmd
	ready time.Duration
	cpu   time.Duration // CPU time of up when its ready line was read
	rest  chan struct{} // closed when stderr is drained
}

// startReady execs bin's up on file and returns once it logged msg=ready.
func startReady(b *testing.B, bin, file string) *benchUp {
	b.Helper()
	cmd := exec.Command(bin, "up", "-f", file)
	cmd.Env = environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	u := &benchUp{cmd: cmd, rest: make(chan struct{})}
	b.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-u.rest
			_ = cmd.Wait()
		}
	})
	ready := make(chan time.Duration, 1)
	var log strings.Builder
	go func() {
		defer close(u.rest)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "msg=ready") {
				ready <- time.Since(began)
				break
			}
			log.WriteString(sc.Text() + "\n")
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case u.ready = <-ready:
		if u.cpu, err = procCPU(cmd.Process.Pid); err != nil {
			b.Fatal(err)
		}
	case <-u.rest:
		b.Fatalf("up ended before ready:\n%s", log.String())
	case <-time.After(readyTimeout):
		b.Fatalf("no ready line within %s", readyTimeout)
	}
	return u
}

// stop sends SIGTERM and waits for a clean exit.
func stop(b *testing.B, u *benchUp) {
	b.Helper()
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	<-u.rest
	if err := u.cmd.Wait(); err != nil {
		b.Fatalf("up after SIGTERM: %v", err)
	}
}

// procCPU returns the CPU time pid has run so far, summed over its
// threads (/proc/<pid>/task/*/schedstat, in nanoseconds).
func procCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(data))
		if len(f) == 0 {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %q", pid, t.Name(), data)
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %w", pid, t.Name(), err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// vmRSS returns the resident set size of pid in KiB.
func vmRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS:") }
