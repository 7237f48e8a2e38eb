package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchBindings is the size of the stack the startup benchmark brings up.
const benchBindings = 20

// BenchmarkUpReady20 measures the time from exec of `localcloud up` to its
// ready line with 20 bindings (10 KV, 10 queues), on a fresh data dir (every
// store created) and on an existing one (every store opened), and the idle
// RSS of up with those 20 bindings. Each iteration stops up with SIGTERM;
// ns/op is the whole cycle, ms/ready the part the target (<= 300 ms) is
// about.
func BenchmarkUpReady20(b *testing.B) {
	if binary == "" {
		b.Skip("no binary")
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
			existing := writeBenchStack(b)
			if mode == "existing" {
				stop(b, startReady(b, existing))
			}
			var total, worst time.Duration
			for b.Loop() {
				file := existing
				if mode == "fresh" {
					b.StopTimer()
					file = writeBenchStack(b)
					b.StartTimer()
				}
				u := startReady(b, file)
				total += u.ready
				worst = max(worst, u.ready)
				stop(b, u)
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/ready")
			b.ReportMetric(float64(worst.Microseconds())/1000, "ms/worst-ready")

			// Idle RSS: one more up, left alone for a second after ready.
			b.StopTimer()
			u := startReady(b, existing)
			time.Sleep(time.Second) // the measurement's idle period, not a synchronisation
			rss, err := vmRSS(u.cmd.Process.Pid)
			stop(b, u)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(rss)/1024, "rss-MiB")
		})
	}
}

type benchUp struct {
	cmd   *exec.Cmd
	ready time.Duration
	rest  chan struct{} // closed when stderr is drained
}

// startReady execs up on file and returns once it logged msg=ready.
func startReady(b *testing.B, file string) *benchUp {
	b.Helper()
	cmd := exec.Command(binary, "up", "-f", file)
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

// vmRSS returns the resident set size of pid in KiB.
func vmRSS(pid int) (int64, error) { return procStatus(pid, "VmRSS:") }
