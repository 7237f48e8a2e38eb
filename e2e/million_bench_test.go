package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// millionRows is how many keys and messages BenchmarkMillionRows loads.
const millionRows = 1_000_000

// envBenchBinary names another localcloud binary for BenchmarkMillionRows
// to run instead of the one TestMain built: main's, to measure before and
// after interleaved.
const envBenchBinary = "LOCALCLOUD_BENCH_BINARY"

// BenchmarkMillionRows runs the CLI and the explorer on a KV store of 1M
// keys and a queue of 1M messages, built once per run with raw batched
// inserts in the spec's format:
//
//   - kv-scan-all/{text,json}: `kv scan carts --all` as a child process;
//     first-key-ms is from exec to its first key on stdout, peak-MiB the
//     child's VmHWM from /proc/<pid>/status (sampled every 5 ms while it
//     runs; its rusage maxrss is reported beside it);
//   - queue-peek: `queue peek orders --limit 1000 --json`, the same figures;
//   - explorer: up serving both stores, then its KV page followed through
//     20 pages of 1000 keys and its queue page; peak-MiB is up's VmHWM.
//
// Run it with -benchtime 1x: one scan of 1M keys is one iteration.
func BenchmarkMillionRows(b *testing.B) {
	bin := binary
	if v := os.Getenv(envBenchBinary); v != "" {
		bin = v
	}
	if bin == "" {
		b.Skip("no binary")
	}
	dir := b.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	if err := os.WriteFile(file, []byte("version: 1\nname: big\nnotify:\n  listen: 127.0.0.1:0\nexplorer:\n  listen: 127.0.0.1:0\n"+
		"bindings:\n  carts:\n    type: kv\n  orders:\n    type: queue\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	loadMillion(b, filepath.Join(dir, ".localcloud"))
	b.Logf("loaded %d keys and %d messages in %s", millionRows, millionRows, time.Since(began).Round(time.Millisecond))

	for _, mode := range []string{"text", "json"} {
		b.Run("kv-scan-all/"+mode, func(b *testing.B) {
			args := []string{"kv", "scan", "carts", "--all", "-f", file}
			if mode == "json" {
				args = append(args, "--json")
			}
			for b.Loop() {
				r := runMeasured(b, bin, args, `k:0000000`)
				if r.lines < millionRows {
					b.Fatalf("kv scan printed %d lines, want at least %d", r.lines, millionRows)
				}
				r.report(b)
			}
		})
	}
	b.Run("queue-peek", func(b *testing.B) {
		for b.Loop() {
			r := runMeasured(b, bin, []string{"queue", "peek", "orders", "--limit", "1000", "--json", "-f", file}, `"id": 1,`)
			r.report(b)
		}
	})
	b.Run("explorer", func(b *testing.B) {
		cmd := exec.Command(bin, "up", "-f", file)
		cmd.Env = environ()
		stderr, err := cmd.StderrPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		u := &benchUp{cmd: cmd, rest: make(chan struct{})}
		ready := make(chan string, 1)
		go func() {
			defer close(u.rest)
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if l := sc.Text(); strings.Contains(l, "msg=ready") {
					ready <- l
					break
				}
			}
			_, _ = io.Copy(io.Discard, stderr)
		}()
		b.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				<-u.rest
				_ = cmd.Wait()
			}
		})
		var line string
		select {
		case line = <-ready:
		case <-u.rest:
			b.Fatal("up ended before ready")
		case <-time.After(2 * readyTimeout):
			b.Fatal("up not ready")
		}
		_, exp, _ := strings.Cut(line, "explorer=")
		exp, _, _ = strings.Cut(exp, " ")
		for b.Loop() {
			cursor := ""
			for range 20 {
				page := getBody(b, exp+"api/kv/carts/keys?limit=1000&cursor="+cursor)
				var p struct {
					Keys       []json.RawMessage `json:"keys"`
					NextCursor string            `json:"nextCursor"`
				}
				if err := json.Unmarshal(page, &p); err != nil || len(p.Keys) != 1000 {
					b.Fatalf("kv keys page: %v, %d keys: %.200s", err, len(p.Keys), page)
				}
				cursor = p.NextCursor
			}
			if page := getBody(b, exp+"kv/carts?limit=1000"); !strings.Contains(string(page), "k:0000999") {
				b.Fatalf("kv page lacks k:0000999")
			}
			if page := getBody(b, exp+"queues/orders"); !strings.Contains(string(page), "m-1") {
				b.Fatalf("queue page lacks message m-1")
			}
		}
		hwm, err := procStatus(cmd.Process.Pid, "VmHWM:")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hwm)/1024, "peak-MiB")
		stop(b, u)
	})
}

// loadMillion creates the stores of carts and orders under dataDir and
// fills them with raw batched inserts in the spec's format: keys k:0000000
// .. with 100-byte values, text messages m-1 .. due now.
func loadMillion(b *testing.B, dataDir string) {
	ctx := context.Background()
	kdir, qdir := filepath.Join(dataDir, "kv", "carts"), filepath.Join(dataDir, "queue", "orders")
	k, err := kv.Open(ctx, kdir)
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.Open(ctx, qdir)
	if err != nil {
		b.Fatal(err)
	}
	if err := k.Close(); err != nil {
		b.Fatal(err)
	}
	if err := q.Close(); err != nil {
		b.Fatal(err)
	}
	value := []byte(strings.Repeat("v", 100))
	now := time.Now().UnixMilli()
	insert(b, filepath.Join(kdir, sqlitekv.FileName), "INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, NULL)", func(i int) []any {
		return []any{fmt.Sprintf("k:%07d", i), value}
	})
	insert(b, filepath.Join(qdir, sqlitequeue.FileName), "INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES ('text', ?1, ?2, ?2, 0)",
		func(i int) []any { return []any{fmt.Sprintf("m-%d", i+1), now} })
}

// insert runs stmt millionRows times in transactions of 20,000 rows.
func insert(b *testing.B, dbFile, stmt string, args func(i int) []any) {
	db, err := sql.Open("sqlite", "file:"+dbFile+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_pragma=synchronous(off)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	const batch = 20_000
	for i := 0; i < millionRows; i += batch {
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.Prepare(stmt)
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < min(i+batch, millionRows); j++ {
			if _, err := st.Exec(args(j)...); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		b.Fatal(err)
	}
}

// measured is one child process: when it printed first, how many lines,
// its peak RSS.
type measured struct {
	first          time.Duration
	lines          int
	hwmKiB, maxrss int64
}

func (r measured) report(b *testing.B) {
	b.ReportMetric(float64(r.first.Microseconds())/1000, "first-key-ms")
	b.ReportMetric(float64(r.hwmKiB)/1024, "peak-MiB")
	b.ReportMetric(float64(r.maxrss)/1024, "maxrss-MiB")
}

// runMeasured runs bin with args, timing the first stdout line holding
// first and sampling the child's VmHWM until it exits 0.
func runMeasured(b *testing.B, bin string, args []string, first string) measured {
	b.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var r measured
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // VmHWM only grows: the last sample before the exit is the peak
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := procStatus(cmd.Process.Pid, "VmHWM:"); err == nil {
				r.hwmKiB = max(r.hwmKiB, v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if r.first == 0 && strings.Contains(sc.Text(), first) {
			r.first = time.Since(began)
		}
		r.lines++
	}
	close(done)
	wg.Wait()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%v: %v\n%s", args, err, stderr.String())
	}
	if r.first == 0 {
		b.Fatalf("%v never printed %q", args, first)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxrss = ru.Maxrss
	}
	return r
}

// procStatus returns a "Name: N kB" field of /proc/<pid>/status, in KiB.
func procStatus(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func getBody(b *testing.B, url string) []byte {
	b.Helper()
	res, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v %.300s", url, res.StatusCode, err, body)
	}
	return body
}

// BenchmarkValidateCLI is `localcloud validate` of a stack of n KV
// bindings, the whole process: exec, read, check, print a line per binding.
func BenchmarkValidateCLI(b *testing.B) {
	bin := binary
	if v := os.Getenv(envBenchBinary); v != "" {
		bin = v
	}
	if bin == "" {
		b.Skip("no binary")
	}
	for _, n := range []int{1000, 2000, 4000, 10000} {
		b.Run(fmt.Sprintf("bindings=%d", n), func(b *testing.B) {
			var sb strings.Builder
			sb.WriteString("version: 1\nname: big\nnotify:\n  listen: 127.0.0.1:0\nexplorer: off\nbindings:\n")
			for i := range n {
				fmt.Fprintf(&sb, "  kv-%05d:\n    type: kv\n", i)
			}
			file := filepath.Join(b.TempDir(), "stack.yaml")
			if err := os.WriteFile(file, []byte(sb.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				out, err := exec.Command(bin, "validate", file).Output()
				if err != nil || strings.Count(string(out), "\n") != n+1 {
					b.Fatalf("validate: %v, %d lines", err, strings.Count(string(out), "\n"))
				}
			}
		})
	}
}
