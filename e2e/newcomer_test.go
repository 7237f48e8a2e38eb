package e2e

// The first hour of a new user (issue 26), each item driven through the
// built binary.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/chromedp/chromedp"
)

// TestNewcomerVersionRevision: the binary TestMain builds in this checkout
// carries the VCS revision; one built without it says how to get it.
func TestNewcomerVersionRevision(t *testing.T) {
	t.Parallel()
	build := func(vcs string) string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "localcloud")
		cmd := exec.Command("go", "build", "-buildvcs="+vcs, "-o", bin, "github.com/localcloud/localcloud/cmd/localcloud")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=%s: %v\n%s", vcs, err, b)
		}
		return bin
	}
	version := func(bin string) (stdout, stderr string) {
		t.Helper()
		p := startCmd(t, exec.Command(bin, "version"))
		if code := p.waitExit(eventTimeout); code != 0 {
			t.Fatalf("version: exit %d", code)
		}
		return p.stdout.String(), p.stderr()
	}
	out, stderr := version(build("false"))
	if !strings.Contains(stderr, "no VCS revision embedded") || !strings.Contains(stderr, "go install ./cmd/localcloud") {
		t.Errorf("version without a revision: stdout %q, stderr %q, want the note on how to get one", out, stderr)
	}
	// Stamped: Go stamps a clone, not a git worktree; test it where it can.
	bin := build("true")
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`vcs\.revision=([0-9a-f]{12})`).FindSubmatch(info)
	if m == nil {
		t.Logf("this checkout is not stamped by Go (a git worktree?); the stamped case is left to TestVersionFromBuildInfo")
		return
	}
	if out, stderr := version(bin); !strings.Contains(out, "("+string(m[1])) || stderr != "" {
		t.Errorf("version of a stamped build: stdout %q (want revision %s), stderr %q", out, m[1], stderr)
	}
}

// TestNewcomerSendJSONAsText: a JSON object sent without --json-payload is
// sent as text with a note naming the flag; -J is its short form.
func TestNewcomerSendJSONAsText(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	code, _, stderr := runCLI(t, "queue", "send", "-f", s.file, "orders", `{"id":1}`)
	if code != 0 || !strings.Contains(stderr, "sent a text message") || !strings.Contains(stderr, "add --json-payload (-J)") {
		t.Errorf("send of a JSON object as text: exit %d, stderr %q, want a note naming --json-payload", code, stderr)
	}
	code, _, stderr = runCLI(t, "queue", "send", "-f", s.file, "orders", "plain words [1]")
	if code != 0 || strings.Contains(stderr, "note:") {
		t.Errorf("send of plain text: exit %d, stderr %q, want no note", code, stderr)
	}
	code, _, stderr = runCLI(t, "queue", "send", "-f", s.file, "orders", `{"id":1}`, "--payload-json")
	if code != 2 || !strings.Contains(stderr, "Error: unknown flag --payload-json; did you mean --json-payload?") {
		t.Errorf("send --payload-json: exit %d, stderr %q, want the flag it means named", code, stderr)
	}
	code, _, stderr = runCLI(t, "queue", "send", "-f", s.file, "orders", "-J", `[1,2]`)
	if code != 0 || !strings.Contains(stderr, "sent a json message") || strings.Contains(stderr, "note:") {
		t.Errorf("send -J: exit %d, stderr %q", code, stderr)
	}
}

// TestNewcomerSecondAck: acking a receipt twice says the second time that
// the message was already gone, and exits 0.
func TestNewcomerSecondAck(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	if code, _, stderr := runCLI(t, "queue", "send", "-f", s.file, "orders", "x"); code != 0 {
		t.Fatalf("send: %d %s", code, stderr)
	}
	code, out, stderr := runCLI(t, "queue", "receive", "-f", s.file, "orders", "--json")
	var recv queueMsgsOut
	decode(t, "receive", out, &recv)
	if code != 0 || len(recv.Messages) != 1 {
		t.Fatalf("receive: %d %s %s", code, out, stderr)
	}
	r := recv.Messages[0].Receipt
	if code, _, stderr := runCLI(t, "queue", "ack", "-f", s.file, "orders", r); code != 0 || stderr != "acked "+r {
		t.Errorf("first ack: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "queue", "ack", "-f", s.file, "orders", r)
	if code != 0 || !strings.Contains(stderr, "already gone "+r) || strings.Contains(stderr, "acked "+r) {
		t.Errorf("second ack: exit %d, stderr %q, want already gone and exit 0", code, stderr)
	}
	code, out, _ = runCLI(t, "queue", "ack", "-f", s.file, "orders", r, "--json")
	if code != 0 || !regexp.MustCompile(`"gone":\s*true`).MatchString(out) {
		t.Errorf("second ack --json: exit %d, %s", code, out)
	}
}

// openPTY opens a pseudo-terminal pair: the master to read, the slave to
// give a process as its stdout.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	var unlock int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		m.Close()
		t.Fatalf("unlockpt: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, m.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		m.Close()
		t.Fatalf("ptsname: %v", e)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// TestNewcomerKVGetNewlineOnTerminal: kv get ends the value with a newline
// on a terminal, and writes the bytes exactly to a pipe.
func TestNewcomerKVGetNewlineOnTerminal(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	if code, _, stderr := runCLI(t, "kv", "put", "-f", s.file, "carts", "k", "v1"); code != 0 {
		t.Fatalf("put: %d %s", code, stderr)
	}
	if code, out, _ := runCLI(t, "kv", "get", "-f", s.file, "carts", "k"); code != 0 || out != "v1" {
		t.Errorf("kv get to a pipe: exit %d, %q, want exactly \"v1\"", code, out)
	}
	master, slave := openPTY(t)
	cmd := exec.Command(binary, "kv", "get", "-f", s.file, "carts", "k")
	cmd.Env = environ()
	cmd.Stdout = slave
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kv get on a terminal: %v %s", err, stderr.Bytes())
	}
	slave.Close()
	got, _ := io.ReadAll(master) // EIO once the slave side is closed
	// The terminal turns "\n" into "\r\n".
	if string(got) != "v1\r\n" {
		t.Errorf("kv get on a terminal printed %q, want \"v1\\r\\n\"", got)
	}
}

// TestNewcomerSubcommandHelp: "queue send -h" prints the help of send
// alone, with send's flags; "queue -h" still prints all of queue.
func TestNewcomerSubcommandHelp(t *testing.T) {
	t.Parallel()
	code, out, stderr := runCLI(t, "queue", "send", "-h")
	if code != 0 || stderr != "" || !strings.Contains(out, "localcloud queue send ") || !strings.Contains(out, "-J, --json-payload") ||
		!strings.Contains(out, "--dedup-key K") || strings.Contains(out, "queue receive") || strings.Contains(out, "--visibility") {
		t.Errorf("queue send -h: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	code, out, _ = runCLI(t, "kv", "scan", "--help")
	if code != 0 || !strings.Contains(out, "localcloud kv scan ") || !strings.Contains(out, "--cursor C") || strings.Contains(out, "kv put") {
		t.Errorf("kv scan --help: exit %d, stdout:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "queue", "-h")
	if code != 0 || !strings.Contains(out, "queue receive") || !strings.Contains(out, "queue send") {
		t.Errorf("queue -h: exit %d, stdout:\n%s", code, out)
	}
}

// TestNewcomerCompletionByType: bash completion offers queue bindings to
// queue commands and kv bindings to kv commands.
func TestNewcomerCompletionByType(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	s := newStack(t, "  carts:\n    type: kv\n  cache:\n    type: kv\n  orders:\n    type: queue\n  outbox:\n    type: queue\n")
	_, script, _ := runCLI(t, "completion", "bash")
	complete := func(words ...string) string {
		t.Helper()
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, strconv.Quote(w))
		}
		prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_localcloud\necho \"${COMPREPLY[*]}\"\n"
		cmd := exec.Command(bash, "-c", prog)
		cmd.Env = environ("PATH=" + filepath.Dir(binary) + ":" + os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"localcloud", "queue", "peek", "-f", s.file, ""}, "orders outbox"},
		{[]string{"localcloud", "kv", "get", "-f", s.file, "c"}, "cache carts"},
		{[]string{"localcloud", "kv", "scan", "-f", s.file, "o"}, ""},
		{[]string{"localcloud", "check", "-f", s.file, ""}, "cache carts orders outbox"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("complete %q = %q, want %q", c.words, got, c.want)
		}
	}
}

// TestNewcomerStackDiscovery: commands find the stack file in a parent
// folder; without one the hint names localcloud init.
func TestNewcomerStackDiscovery(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	sub := filepath.Join(s.dir, "services", "api")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := lcIn(t, sub, nil, "validate")
	if code != 0 || !strings.Contains(out, s.file) {
		t.Errorf("validate in a subfolder: exit %d, stdout %q, stderr %q; want it to find %s", code, out, stderr, s.file)
	}
	if code, _, stderr := lcIn(t, sub, nil, "queue", "send", "orders", "x"); code != 0 {
		t.Errorf("queue send in a subfolder: exit %d, %s", code, stderr)
	}
	// The search stops at the repository root: a stack above it is not used.
	repo := filepath.Join(s.dir, "repo")
	if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(repo, "a")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = lcIn(t, deep, nil, "validate")
	if code != 1 || !strings.Contains(stderr, "no stack.yaml or stack.yml in "+deep+" or its parent folders up to "+repo) ||
		!strings.Contains(stderr, "Try: localcloud init") {
		t.Errorf("validate in a repository without a stack: exit %d, stderr %q", code, stderr)
	}
}

// TestNewcomerInitGitignore: init adds .localcloud/ to .gitignore with
// --gitignore, after asking on a terminal, and only tips without either.
func TestNewcomerInitGitignore(t *testing.T) {
	t.Parallel()
	read := func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, ".gitignore"))
		return string(b)
	}
	// --gitignore keeps what was there.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("bin/"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := lcIn(t, dir, nil, "init", "--gitignore")
	if got := read(dir); code != 0 || !strings.HasPrefix(got, "bin/\n") || !strings.Contains(got, "\n.localcloud/\n") || !strings.Contains(stderr, "added .localcloud/") {
		t.Errorf("init --gitignore: exit %d, .gitignore %q, stderr %q", code, got, stderr)
	}
	// No terminal, no flag: a tip, no change.
	dir = t.TempDir()
	code, _, stderr = lcIn(t, dir, nil, "init")
	if code != 0 || read(dir) != "" || !strings.Contains(stderr, "localcloud init --gitignore") {
		t.Errorf("init without a terminal: exit %d, .gitignore %q, stderr %q", code, read(dir), stderr)
	}
	// A terminal: it asks; yes adds the line.
	dir = t.TempDir()
	master, slave := openPTY(t)
	if _, err := master.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "init")
	cmd.Dir, cmd.Env, cmd.Stdin = dir, environ(), slave
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("init on a terminal: %v %s", err, errOut.Bytes())
	}
	if got := read(dir); !strings.Contains(errOut.String(), "[Y/n]") || !strings.Contains(got, ".localcloud/\n") {
		t.Errorf("init on a terminal answered y: stderr %q, .gitignore %q", errOut.String(), got)
	}
}

// TestNewcomerYAMLSyntaxLineColumn: a syntax error names the line and
// column of the breaking token, not the parent key's line.
func TestNewcomerYAMLSyntaxLineColumn(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n   orders: x\n")
	// stackText puts 7 lines before the bindings: the bad line is 10.
	code, _, stderr := runCLI(t, "validate", "-f", s.file)
	if code != 1 || !strings.Contains(stderr, s.file+":10:4: invalid YAML: did not find expected key") {
		t.Errorf("validate of a bad indentation: exit %d, stderr %q, want %s:10:4", code, stderr, s.file)
	}
}

// TestNewcomerSignalDeliveredTwice: "timeout 1 localcloud up" (timeout(1)
// sends SIGTERM to up and then to its process group, so up gets it twice
// at once) stops up cleanly instead of taking the second-signal path.
func TestNewcomerSignalDeliveredTwice(t *testing.T) {
	t.Parallel()
	timeout, err := exec.LookPath("timeout")
	if err != nil {
		t.Skip("timeout(1) not installed")
	}
	s := newStack(t, cliStack)
	p := startCmd(t, exec.Command(timeout, "1", binary, "up", "-f", s.file))
	code := p.waitExit(readyTimeout + stopLimit)
	if out := p.stderr(); code != 124 || !strings.Contains(out, "msg=stopped") || strings.Contains(out, "second signal") {
		t.Errorf("timeout 1 localcloud up: exit %d (want timeout's 124 after a clean stop), stderr:\n%s", code, out)
	}
}

// TestNewcomerTakenDefaultPorts: one policy for taken default ports: NATS
// and the explorer both move to a free port, each with a warning and a
// summary line that says so.
func TestNewcomerTakenDefaultPorts(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "stack.yaml")
	if err := os.WriteFile(file, []byte("version: 1\nname: shop\nbindings:\n  carts:\n    type: kv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var v struct{ Listen string }
	code, out, _ := runCLI(t, "validate", "-f", file, "--json")
	decode(t, "validate", out, &v)
	if code != 0 || v.Listen == "" {
		t.Fatalf("validate: %d %s", code, out)
	}
	hold := func(addr string) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return // taken already: as good for this test
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	hold(v.Listen)
	hold("127.0.0.1:4280")
	p := start(t, "up", "-f", file)
	p.waitLine(0, readyTimeout, "msg=ready")
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	stderr, stdout := p.stderr(), p.stdout.String()
	for _, want := range []string{"the stack's default NATS port is taken; using a free port instead", "the default explorer port is taken; using a free port instead"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("up's log lacks %q:\n%s", want, stderr)
		}
	}
	for _, want := range []string{"(" + v.Listen + " was taken, so a free port was picked; set notify.listen", "(127.0.0.1:4280 was taken, so a free port was picked; set explorer.listen"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("up's summary lacks %q:\n%s", want, stdout)
		}
	}
}

// TestNewcomerStatusDelayed: status counts a delayed message apart from the
// in-flight ones, in text and JSON, as queue stats and the explorer do.
func TestNewcomerStatusDelayed(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	for _, args := range [][]string{{"x"}, {"y"}, {"later", "--delay", "1h"}} {
		if code, _, stderr := runCLI(t, append([]string{"queue", "send", "-f", s.file, "orders"}, args...)...); code != 0 {
			t.Fatalf("send: %s", stderr)
		}
	}
	if code, _, stderr := runCLI(t, "queue", "receive", "-f", s.file, "orders"); code != 0 {
		t.Fatalf("receive: %s", stderr)
	}
	type counts struct{ Due, InFlight, Delayed int64 }
	want := counts{Due: 1, InFlight: 1, Delayed: 1}
	p, _ := s.up(t)
	defer p.signal(syscall.SIGTERM)
	var st struct {
		Bindings []struct {
			Name  string
			Queue *counts
		}
	}
	_, out, _ := runCLI(t, "status", "-f", s.file, "--json")
	decode(t, "status", out, &st)
	for _, b := range st.Bindings {
		if b.Name == "orders" && (b.Queue == nil || *b.Queue != want) {
			t.Errorf("status --json orders = %+v, want %+v", b.Queue, want)
		}
	}
	if _, out, _ := runCLI(t, "status", "-f", s.file); !strings.Contains(out, "1 due, 1 in flight, 1 delayed") {
		t.Errorf("status text lacks 1 due, 1 in flight, 1 delayed:\n%s", out)
	}
	var qs counts
	_, out, _ = runCLI(t, "queue", "stats", "-f", s.file, "orders", "--json")
	decode(t, "queue stats", out, &qs)
	if qs != want {
		t.Errorf("queue stats = %+v, want %+v", qs, want)
	}
	rt := s.runtime(t)
	resp, err := http.Get(rt.ExplorerURL + "api/bindings/orders")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb struct{ Queue counts }
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || eb.Queue != want {
		t.Errorf("explorer /api/bindings/orders = %+v (%v), want %+v", eb.Queue, err, want)
	}
}

// TestNewcomerDataCommandsUseServedStack: while up runs, a broken edit of
// the stack file does not block the data commands: they use the stack up
// serves, after one warning naming file:line. Without up they fail.
func TestNewcomerDataCommandsUseServedStack(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n    dedupWindow: 10m\n")
	p, _ := s.up(t)
	for _, args := range [][]string{{"kv", "put", "carts", "k", "v"}, {"queue", "send", "orders", "x"}} {
		if code, _, stderr := runCLI(t, append(args, "-f", s.file)...); code != 0 {
			t.Fatalf("%q: %s", args, stderr)
		}
	}
	mark := p.mark()
	s.replace(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n    dedupWindow: 10m\n   oops: 1\n")
	p.waitLine(mark, eventTimeout, "keeping the last good stack")
	warning := "warning: " + s.file + ":13:4: invalid YAML"
	for _, c := range []struct {
		args []string
		out  string
	}{
		{[]string{"kv", "get", "carts", "k"}, "v"},
		{[]string{"queue", "stats", "orders", "--json"}, `"total": 1`},
		{[]string{"queue", "peek", "orders"}, "x"},
	} {
		code, out, stderr := runCLI(t, append(c.args, "-f", s.file)...)
		if code != 0 || !strings.Contains(out, c.out) || !strings.HasPrefix(stderr, warning) || strings.Count(stderr, "warning:") != 1 ||
			!strings.Contains(stderr, "using the last good stack, which localcloud up (pid ") {
			t.Errorf("%q with a broken stack file while up runs: exit %d, stdout %q, stderr %q", c.args, code, out, stderr)
		}
	}
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	code, _, stderr := runCLI(t, "queue", "stats", "orders", "-f", s.file)
	if code != 1 || !strings.Contains(stderr, "Error: invalid stack file") || strings.Contains(stderr, "warning:") {
		t.Errorf("queue stats with a broken stack file and no up: exit %d, stderr %q", code, stderr)
	}
}

// TestNewcomerExplorerActivityAndKV: in a real browser, the activity page
// opened after the user's commands shows them (recorded by up before any
// tab listened), one row each; the KV page shows a value preview and TTL.
func TestNewcomerExplorerActivityAndKV(t *testing.T) {
	ctx := newBrowser(t)
	s := newStack(t, "  carts:\n    type: kv\n  orders:\n    type: queue\n")
	s.up(t)
	base := strings.TrimSuffix(s.runtime(t).ExplorerURL, "/")
	// up's feed reads the counts once right after it starts serving: what
	// it finds then is the baseline, not activity. Give that read time on
	// a loaded machine (a wait, not an assertion).
	time.Sleep(time.Second)
	lc := func(args ...string) string {
		t.Helper()
		code, out, stderr := runCLI(t, append(args, "-f", s.file)...)
		if code != 0 {
			t.Fatalf("%q: exit %d %s", args, code, stderr)
		}
		return out
	}
	lc("queue", "send", "orders", `{"order":1}`, "-J")
	lc("kv", "put", "carts", "cart:1", `{"items":3,"note":"hello"}`, "--ttl", "1h")
	var recv queueMsgsOut
	decode(t, "receive", lc("queue", "receive", "orders", "--json"), &recv)
	if len(recv.Messages) != 1 {
		t.Fatalf("received %d messages", len(recv.Messages))
	}
	lc("queue", "ack", "orders", recv.Messages[0].Receipt)

	// Rows recorded before the tab opened have an earlier time than the
	// page's load. up reads the counts every second without a tab: open
	// the page until they are there (a feed that records only while a tab
	// listens never shows them that way).
	rowsBefore := `[...document.querySelectorAll('#activity tbody tr.ev')].filter(r => +r.dataset.at < performance.timeOrigin)`
	var kinds []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		run(t, ctx, "open activity", chromedp.Navigate(base+"/activity"), chromedp.WaitVisible(css(`#activity`)))
		time.Sleep(300 * time.Millisecond) // the stream's first burst; not asserted on
		kinds = eval[[]string](t, ctx, rowsBefore+`.map(r => r.className.replace("ev ", "") + ":" + (r.dataset.binding || ""))`)
		if slices.Contains(kinds, "removed:orders") && slices.Contains(kinds, "keys:carts") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity page opened after the commands shows %q, want the send, the ack and the key", kinds)
		}
	}
	count := func(kind string) int {
		n := 0
		for _, k := range kinds {
			if k == kind {
				n++
			}
		}
		return n
	}
	if count("sent:orders") != 1 || count("removed:orders") != 1 || count("keys:carts") != 1 || count("hint:orders") != 0 {
		t.Errorf("activity rows %q: want one sent, one removed, one keys row and no hint rows", kinds)
	}
	if hints := eval[int](t, ctx, `document.querySelectorAll('#activity tbody tr.ev.hint').length`); hints != 0 {
		t.Errorf("%d hint rows shown with the hints box unticked", hints)
	}

	run(t, ctx, "open the KV page", chromedp.Navigate(base+"/kv/carts"), chromedp.WaitVisible(css(`tr.key td.preview`)))
	preview := eval[string](t, ctx, `document.querySelector('tr.key td.preview').textContent`)
	ttl := eval[string](t, ctx, `document.querySelector('tr.key td.ttl').textContent`)
	if preview != `{"items":3,"note":"hello"}` || !regexp.MustCompile(`^(59m|1h)`).MatchString(ttl) {
		t.Errorf("KV page row: preview %q, TTL %q; want the value and about 1h", preview, ttl)
	}
}

// TestNewcomerInstallScript: scripts/install.sh, the README's first
// command, says what it does before go starts and where the binary went.
func TestNewcomerInstallScript(t *testing.T) {
	t.Parallel()
	gobin := t.TempDir()
	cmd := exec.Command("bash", "../scripts/install.sh")
	cmd.Env = environ("GOBIN=" + gobin)
	p := startCmd(t, cmd)
	if code := p.waitExit(5 * time.Minute); code != 0 {
		t.Fatalf("install.sh: exit %d\n%s", code, p.stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	if !strings.Contains(lines[0], "go install -v ./cmd/localcloud (the first build takes 3-8 minutes") {
		t.Errorf("install.sh's first line %q does not say what runs and why it is slow", lines[0])
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "localcloud: installed "+gobin+"/localcloud in ") }) {
		t.Errorf("install.sh does not say where the binary went:\n%s", p.stdout.String())
	}
	if out, err := exec.Command(filepath.Join(gobin, "localcloud"), "validate", "-f", "../examples/stack.yaml").CombinedOutput(); err != nil {
		t.Errorf("the installed binary: %v\n%s", err, out)
	}
}

// TestNewcomerReadmeQuickStart: the quick start runs the installed binary,
// never go run, and the "Use it from your module" recipe builds a module
// that imports the bindings through a replace line.
func TestNewcomerReadmeQuickStart(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Quick start")
	end := strings.Index(readme, "Run the tests (")
	if start < 0 || end < start {
		t.Fatal("no quick start in the README")
	}
	quick := readme[start:end]
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(quick, -1) {
		if strings.Contains(block[1], "go run") {
			t.Errorf("a quick-start command block uses go run:\n%s", block[1])
		}
	}
	for _, want := range []string{"scripts/install.sh", "### Use it from your module",
		"replace github.com/localcloud/localcloud => ../localcloud", "go mod edit -require=github.com/localcloud/localcloud@v0.0.0"} {
		if !strings.Contains(quick, want) {
			t.Errorf("the quick start lacks %q", want)
		}
	}
	// The recipe against this checkout. `go mod tidy` records every module
	// the app could need under any build tag (nats-server's Windows-only
	// TPM package brings github.com/google/go-tpm, modernc.org/libc's tests
	// bring more), which no build on this machine downloads: on a fresh
	// machine it fetches them through GOPROXY, as the newcomer's own tidy
	// does. localcloud itself comes from the replace: it is not published,
	// so a fetch of it would fail. The build after tidy is offline: it
	// needs nothing tidy did not record. GOSUMDB=off: where only the
	// module proxy is reachable, the checksum database is not.
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/app\n\ngo 1.26\n",
		"main.go": "package main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\n\t\"github.com/localcloud/localcloud/bindings/kv\"\n)\n\n" +
			"func main() {\n\ts, err := kv.Open(context.Background(), \"data\")\n\tif err != nil {\n\t\tpanic(err)\n\t}\n\tdefer s.Close()\n\tfmt.Println(\"ok\")\n}\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"go", "mod", "edit", "-require=github.com/localcloud/localcloud@v0.0.0", "-replace=github.com/localcloud/localcloud=" + repo},
		{"go", "mod", "tidy"},
		{"go", "run", "."},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.Env = environ("GOSUMDB=off", "GOFLAGS=-mod=mod")
		if args[2] != "tidy" {
			cmd.Env = append(cmd.Env, "GOPROXY=off")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		if args[1] == "run" && strings.TrimSpace(string(out)) != "ok" {
			t.Errorf("the module's program printed %q", out)
		}
	}
}
