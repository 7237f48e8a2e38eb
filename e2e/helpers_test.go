package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// Timeouts of the waits. They are generous: they only bound a failing test.
const (
	readyTimeout = 15 * time.Second
	eventTimeout = 10 * time.Second
	// stopLimit is the promise: up exits within 5 s of SIGTERM.
	stopLimit = 5 * time.Second
)

// proc is a localcloud (or app) process. Its stderr is read line by line so
// tests can wait for a line; stdout is collected.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *testutil.SyncBuffer

	mu      sync.Mutex
	lines   []string      // stderr lines so far
	changed chan struct{} // closed and replaced when a line arrives or the process ends

	done     chan struct{} // closed once the process has exited and stderr is drained
	exitCode int
}

// environ is the test process's environment without the variables that
// would change what localcloud reads.
func environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LOCALCLOUD_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// start runs the localcloud binary with args. The process is killed (by
// pid) when the test ends if it is still running.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(binary, args...))
}

func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	if cmd.Env == nil {
		cmd.Env = environ()
	}
	p := &proc{t: t, cmd: cmd, stdout: &testutil.SyncBuffer{}, changed: make(chan struct{}), done: make(chan struct{})}
	cmd.Stdout = p.stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(stderr)
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(cmd.Path), p.stderr())
		}
	})
	return p
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
	err := p.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		code = -1
	}
	p.mu.Lock()
	p.exitCode = code
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	close(p.done)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// mark returns the number of stderr lines so far, for waitLine's from.
func (p *proc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits for a stderr line at index from or later that contains
// every one of subs, and returns it. It fails the test on timeout or when
// the process ends first.
func (p *proc) waitLine(from int, timeout time.Duration, subs ...string) string {
	p.t.Helper()
	l, ok := p.awaitLine(from, timeout, subs...)
	if !ok {
		p.t.Fatalf("process exited (code %d) before a line with %q; stderr:\n%s", p.exitCode, subs, p.stderr())
	}
	return l
}

// awaitLine is waitLine that reports a process ending first with false
// instead of failing the test. It still fails the test on timeout.
func (p *proc) awaitLine(from int, timeout time.Duration, subs ...string) (string, bool) {
	p.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if containsAll(p.lines[i], subs) {
				l := p.lines[i]
				p.mu.Unlock()
				return l, true
			}
		}
		from = len(p.lines)
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.done:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if from == n { // nothing new arrived with the exit
				return "", false
			}
		case <-deadline.C:
			p.t.Fatalf("no stderr line with %q within %s; stderr:\n%s", subs, timeout, p.stderr())
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// waitExit waits for the process to end and returns its exit code (128+N
// when killed by signal N).
func (p *proc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.exitCode
	case <-time.After(timeout):
		p.t.Fatalf("process %d still running after %s; stderr:\n%s", p.pid(), timeout, p.stderr())
		return -1
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.pid(), sig); err != nil {
		p.t.Fatalf("signal %d: %v", p.pid(), err)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// runCLI runs localcloud to completion and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, args...)
	code = p.waitExit(eventTimeout)
	return code, p.stdout.String(), p.stderr()
}

// stack is a stack file in its own temp dir.
type stack struct {
	dir, file string
}

func (s stack) dataDir() string { return filepath.Join(s.dir, ".localcloud") }

// newStack writes a stack file named shop with the given bindings section
// (already indented by two spaces) into a new temp dir.
func newStack(t *testing.T, bindings string) stack {
	t.Helper()
	// Resolve symlinks so paths compare equal to what localcloud prints.
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := stack{dir: dir, file: filepath.Join(dir, "stack.yaml")}
	s.write(t, bindings)
	return s
}

func stackText(bindings string) string {
	return "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\nexplorer:\n  listen: 127.0.0.1:0\nbindings:\n" + bindings
}

func (s stack) write(t *testing.T, bindings string) {
	t.Helper()
	if err := os.WriteFile(s.file, []byte(stackText(bindings)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace saves the stack file as editors do: a temp file renamed over it.
func (s stack) replace(t *testing.T, bindings string) {
	t.Helper()
	tmp := filepath.Join(s.dir, ".stack.yaml.swp")
	if err := os.WriteFile(tmp, []byte(stackText(bindings)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.file); err != nil {
		t.Fatal(err)
	}
}

// up starts localcloud up on the stack and waits for its ready line.
func (s stack) up(t *testing.T) (*proc, string) {
	t.Helper()
	p := start(t, "up", "-f", s.file)
	line := p.waitLine(0, readyTimeout, "msg=ready")
	return p, line
}

// runtimeFile mirrors runtime.json as documented in the supervisor package.
type runtimeFile struct {
	PID             int       `json:"pid"`
	StartedAt       time.Time `json:"startedAt"`
	NATSURL         string    `json:"natsUrl"`
	ExplorerURL     string    `json:"explorerUrl"`
	SQSEndpoint     string    `json:"sqsEndpoint"`
	Stack           string    `json:"stack"`
	StackFile       string    `json:"stackFile"`
	DataDir         string    `json:"dataDir"`
	Health          string    `json:"health"`
	LastReloadError string    `json:"lastReloadError"`
	Bindings        []struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Path    string `json:"path"`
		Subject string `json:"subject"`
		Health  string `json:"health"`
	} `json:"bindings"`
}

func (s stack) runtime(t *testing.T) runtimeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "runtime.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rt runtimeFile
	if err := json.Unmarshal(b, &rt); err != nil {
		t.Fatalf("runtime.json: %v\n%s", err, b)
	}
	return rt
}

func (rt runtimeFile) names() string {
	var n []string
	for _, b := range rt.Bindings {
		n = append(n, b.Name)
	}
	return strings.Join(n, ",")
}

func (rt runtimeFile) health(name string) string {
	for _, b := range rt.Bindings {
		if b.Name == name {
			return b.Health
		}
	}
	return "<not served>"
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// statusJSON runs status --json.
type statusOut struct {
	Running   bool   `json:"running"`
	PID       int    `json:"pid"`
	NATSURL   string `json:"natsUrl"`
	Explorer  string `json:"explorerUrl"`
	Stack     string `json:"stack"`
	Bindings  []statusBinding
	LastError string `json:"lastReloadError"`
	// Code is status's exit code: 1 when up is not running or a binding
	// is not healthy.
	Code int `json:"-"`
}

type statusBinding struct {
	Name          string `json:"name"`
	Type          string `json:"type"`
	Path          string `json:"path"`
	Health        string `json:"health"`        // a kind: ok, missing, replaced, loose-modes, ...
	HealthMessage string `json:"healthMessage"` // what exactly; "" when ok
	KV            *struct {
		Live    int64 `json:"live"`
		Expired int64 `json:"expired"`
	} `json:"kv"`
	Queue *struct {
		Due             int64 `json:"due"`
		InFlight        int64 `json:"inFlight"`
		OldestAgeMillis int64 `json:"oldestAgeMillis"`
	} `json:"queue"`
}

func (s stack) status(t *testing.T) statusOut {
	t.Helper()
	code, stdout, stderr := runCLI(t, "status", "-f", s.file, "--json")
	if code != 0 && code != 1 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	var st statusOut
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	st.Code = code
	return st
}

func (s statusOut) binding(name string) statusBinding {
	for _, b := range s.Bindings {
		if b.Name == name {
			return b
		}
	}
	return statusBinding{}
}

func hashOf(b []byte) [32]byte { return sha256.Sum256(b) }

// writeRaw writes a whole stack file as given.
func writeRaw(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
