package e2e

// The CLI list of issue 17, each item driven through the built binary.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lcIn runs localcloud in dir with stdin (nil for none) to completion.
func lcIn(t *testing.T, dir string, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	p := startCmd(t, cmd)
	code = p.waitExit(eventTimeout)
	return code, p.stdout.String(), p.stderr()
}

// cliStack is a stack with a kv binding, a queue with a dead-letter queue
// and a plain queue.
const cliStack = `  carts:
    type: kv
  orders:
    type: queue
    maxAttempts: 3
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
  emails:
    type: queue
`

// allCommands is every subcommand the top-level help and README must list.
var allCommands = []string{"init", "up", "validate", "env", "run", "status", "kv", "queue", "check", "backup",
	"restore", "migrate", "bench", "asyncapi", "completion", "version"}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	code, v1, stderr := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(v1, "localcloud ") || !strings.Contains(v1, " go1.") {
		t.Fatalf("version: exit %d %q %s", code, v1, stderr)
	}
	if code, v2, _ := runCLI(t, "--version"); code != 0 || v2 != v1 {
		t.Errorf("--version = %d %q, want %q", code, v2, v1)
	}
	var v struct {
		Version, GoVersion, Module string
	}
	code, out, _ := runCLI(t, "version", "--json")
	decode(t, "version", out, &v)
	if code != 0 || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go1.") || v.Module != "github.com/localcloud/localcloud" {
		t.Errorf("version --json: %d %+v", code, v)
	}
}

func TestCLICompletion(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		code, script, stderr := runCLI(t, "completion", sh)
		if code != 0 || len(script) < 200 {
			t.Fatalf("completion %s: exit %d, %d bytes: %s", sh, code, len(script), stderr)
		}
		for _, c := range allCommands {
			if !strings.Contains(script, c) {
				t.Errorf("completion %s lacks %s", sh, c)
			}
		}
		if path, err := exec.LookPath(sh); err == nil {
			if out, err := exec.Command(path, "-n", "-c", script).CombinedOutput(); err != nil && sh != "fish" {
				t.Errorf("%s -n: %v\n%s", sh, err, out)
			}
		} else {
			t.Logf("%s not installed; its script is not syntax-checked", sh)
		}
	}
	if code, _, stderr := runCLI(t, "completion", "tcsh"); code != 2 || !strings.Contains(stderr, `unknown shell "tcsh"`) {
		t.Errorf("completion tcsh: %d %s", code, stderr)
	}

	// bash: run the completion function as bash would.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
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
	if got := complete("localcloud", "qu"); got != "queue" {
		t.Errorf("complete qu = %q, want queue", got)
	}
	if got := complete("localcloud", "queue", "pe"); got != "peek" {
		t.Errorf("complete queue pe = %q, want peek", got)
	}
	if got := complete("localcloud", "queue", "peek", "-f", s.file, "or"); got != "orders orders-dlq" {
		t.Errorf("complete binding names = %q, want orders orders-dlq", got)
	}
	if got := complete("localcloud", "validate", "-f", s.dir+"/sta"); got != s.file {
		t.Errorf("complete -f = %q, want %s", got, s.file)
	}
}

func TestCLIJSONAndFlagErrors(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	var v struct {
		OK       bool `json:"ok"`
		Bindings []struct {
			Name string `json:"name"`
		} `json:"bindings"`
	}
	code, out, _ := runCLI(t, "validate", "-f", s.file, "--json")
	decode(t, "validate", out, &v)
	if code != 0 || !v.OK || len(v.Bindings) != 4 {
		t.Errorf("validate --json: %d %s", code, out)
	}
	var env map[string]string
	for _, args := range [][]string{{"env", "-f", s.file, "--json"}, {"env", "-f", s.file, "--format", "json"}} {
		code, out, _ := runCLI(t, args...)
		decode(t, "env", out, &env)
		if code != 0 || env["LOCALCLOUD_STACK_NAME"] != "shop" {
			t.Errorf("%q: %d %s", args, code, out)
		}
	}
	for _, args := range [][]string{{"asyncapi", "-f", s.file, "--json"}, {"asyncapi", "-f", s.file}} {
		var doc map[string]any
		code, out, _ := runCLI(t, args...)
		decode(t, "asyncapi", out, &doc)
		if code != 0 || doc["asyncapi"] != "3.0.0" {
			t.Errorf("%q: %d %.200s", args, code, out)
		}
	}
	if code, out, _ := runCLI(t, "asyncapi", "-f", s.file, "--format", "yaml"); code != 0 || !strings.HasPrefix(out, "asyncapi: 3.0.0") {
		t.Errorf("asyncapi --format yaml: %d %.100s", code, out)
	}
	// Mistakes in our own words, exit 2, with a Try line.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "put", "carts", "k", "v", "--ttl", "banana"}, `Error: --ttl: "banana" is not a duration, e.g. 30s`},
		{[]string{"queue", "peek", "orders", "--limit", "many"}, `Error: --limit: "many" is not a whole number, e.g. 10`},
		{[]string{"status", "--bogus"}, "Error: unknown flag --bogus"},
		{[]string{"env", "--json", "--format", "sh"}, "contradict"},
		{[]string{"asyncapi", "--json", "--format", "yaml"}, "contradict"},
		{[]string{"queue", "receive", "orders", "--visibility", "0s"}, "--visibility must be between 1ms and 12h0m0s, got 0s"},
	} {
		code, stdout, stderr := runCLI(t, append(c.args, "-f", s.file)...)
		if code != 2 || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "Try: ") || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

func TestCLIQueueAndKVOutput(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	run := func(stdin []byte, args ...string) (int, string, string) {
		t.Helper()
		return lc(t, stdin, append(args, "-f", s.file)...)
	}
	// Confirmations on stderr, data on stdout; plurals.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "put", "carts", "k", "v"}, "stored k in carts (1 byte)"},
		{[]string{"queue", "send", "orders", `{"n":1}`, "--json-payload"}, "sent a json message to orders (7 bytes)"},
		{[]string{"queue", "send", "orders", "x"}, "sent a text message to orders (1 byte)"},
		{[]string{"queue", "send", "orders", "later", "--delay", "1h"}, "due in 1h0m0s"},
	} {
		code, stdout, stderr := run(nil, c.args...)
		if code != 0 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the confirmation %q on stderr only", c.args, code, stdout, stderr, c.want)
		}
	}
	// One message in flight, one delayed, one due: stats counts them apart.
	code, out, _ := run(nil, "queue", "receive", "orders", "--json")
	var recv queueMsgsOut
	decode(t, "receive", out, &recv)
	if code != 0 || len(recv.Messages) != 1 {
		t.Fatalf("receive: %d %s", code, out)
	}
	var st struct {
		Due, InFlight, Delayed, Total int64
	}
	_, out, _ = run(nil, "queue", "stats", "orders", "--json")
	decode(t, "stats", out, &st)
	if st.Due != 1 || st.InFlight != 1 || st.Delayed != 1 || st.Total != 3 {
		t.Errorf("stats = %+v, want due 1, in flight 1, delayed 1, total 3", st)
	}
	if _, out, _ := run(nil, "queue", "stats", "orders"); !regexp.MustCompile(`DELAYED`).MatchString(out) {
		t.Errorf("stats text lacks DELAYED:\n%s", out)
	}
	// peek shows a JSON payload as JSON.
	if _, out, _ := run(nil, "queue", "peek", "orders"); !strings.Contains(out, `{"n":1}`) || strings.Contains(out, `\"n\"`) {
		t.Errorf("peek text shows the JSON payload quoted:\n%s", out)
	}
	// The purge prompt counts delayed apart from in flight.
	code, _, stderr := run([]byte("no\n"), "queue", "purge", "orders")
	if code != 1 || !strings.Contains(stderr, "Delete all 3 messages of queue orders (1 due, 1 in flight, 1 delayed)?") {
		t.Errorf("purge prompt: %d %s", code, stderr)
	}
	// Purge of an empty queue says so without asking.
	if code, _, _ := run(nil, "queue", "send", "emails", "x"); code != 0 {
		t.Fatal("send to emails")
	}
	if code, _, _ := run(nil, "queue", "purge", "emails", "--yes"); code != 0 {
		t.Fatal("purge emails")
	}
	code, stdout, stderr := run(nil, "queue", "purge", "emails")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "queue emails is empty; nothing to purge") || strings.Contains(stderr, "Type yes") {
		t.Errorf("purge of an empty queue: %d %q %q", code, stdout, stderr)
	}
	// Redrive of a queue that is nobody's dead-letter queue.
	code, _, stderr = run(nil, "queue", "redrive", "emails")
	if code != 1 || !strings.Contains(stderr, "queue emails is no binding's dead-letter queue") || !strings.Contains(stderr, "Try: ") {
		t.Errorf("redrive of a non-DLQ: %d %s", code, stderr)
	}
	if code, _, _ := run(nil, "queue", "send", "orders-dlq", "direct"); code != 0 {
		t.Fatal("send to orders-dlq")
	}
	if code, _, stderr := run(nil, "queue", "redrive", "orders-dlq"); code != 0 || !strings.Contains(stderr, "redrove 0 messages") {
		t.Errorf("redrive of the DLQ: %d %s", code, stderr)
	}
	// An oversize value gives its real size, from stdin too.
	big := bytes.Repeat([]byte("a"), 30000)
	code, _, stderr = run(big, "kv", "put", "carts", "big", "-")
	if code != 2 || !strings.Contains(stderr, "must be at most 24576 bytes, got 30000 bytes") {
		t.Errorf("oversize value: %d %s", code, stderr)
	}
	code, _, stderr = run(bytes.Repeat([]byte("a"), 70000), "queue", "send", "emails", "-")
	if code != 2 || !strings.Contains(stderr, "must be at most 65536 bytes, got 70000 bytes") {
		t.Errorf("oversize payload: %d %s", code, stderr)
	}
}

func TestCLIStatusExitAndHealthEnum(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	code, stdout, stderr := runCLI(t, "status", "-f", s.file)
	if code != 1 || !strings.Contains(stdout, "up: not running") || !strings.Contains(stderr, "localcloud up is not running") {
		t.Errorf("status without up: exit %d\n%s\n%s", code, stdout, stderr)
	}
	st := s.status(t)
	if st.Code != 1 || st.binding("carts").Health != "not-provisioned" || st.binding("carts").HealthMessage == "" {
		t.Errorf("status --json without up: exit %d, carts %+v", st.Code, st.binding("carts"))
	}
	s.up(t)
	if st := s.status(t); st.Code != 0 || !st.Running || st.binding("orders").Health != "ok" || st.binding("orders").HealthMessage != "" {
		t.Errorf("status with up: exit %d, %+v", st.Code, st.binding("orders"))
	}
	// Group-writable: refused by the file-mode policy (readable only is a warning).
	if err := os.Chmod(filepath.Join(s.dataDir(), "kv", "carts"), 0o775); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(eventTimeout)
	for {
		st := s.status(t)
		if b := st.binding("carts"); b.Health == "loose-modes" && st.Code == 1 && strings.Contains(b.HealthMessage, "0775") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never reported loose-modes with exit 1: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestCLIRun(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	code, _, stderr := runCLI(t, "run", "-f", s.file, "--", "no-such-command-localcloud")
	if code != 127 || !strings.Contains(stderr, "command not found: no-such-command-localcloud") {
		t.Errorf("run of a missing command: exit %d %s", code, stderr)
	}
	// A signal to run reaches the command's children: sh starts sleep in
	// the background and waits; without the process group, SIGTERM killed
	// sh only and sleep lived on as an orphan.
	pidFile := filepath.Join(s.dir, "sleep.pid")
	p := start(t, "run", "-f", s.file, "--", "sh", "-c", "sleep 120 & echo $! > "+pidFile+"; wait")
	var pid int
	deadline := time.Now().Add(eventTimeout)
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never wrote its child's pid")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(eventTimeout); code != 128+int(syscall.SIGTERM) {
		t.Errorf("run after SIGTERM: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	deadline = time.Now().Add(eventTimeout)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child (pid %d) outlived SIGTERM to run", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCLIEnvWarnsOnAFixedPortWithoutUp(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	text := strings.Replace(stackText(cliStack), "127.0.0.1:0", "127.0.0.1:1", 1)
	writeRaw(t, s.file, text)
	code, stdout, stderr := runCLI(t, "env", "-f", s.file)
	if code != 0 || !strings.Contains(stdout, "LOCALCLOUD_NATS_URL='nats://127.0.0.1:1'") ||
		!strings.Contains(stderr, "localcloud up is not running") || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("env with a fixed port and no up: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

func TestCLIValidateFileForms(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	for _, args := range [][]string{{"validate", s.file}, {"validate", "-f", s.file}, {"validate", "--file", s.file}} {
		if code, out, stderr := runCLI(t, args...); code != 0 || !strings.HasPrefix(out, "ok: stack shop") || !strings.Contains(out, "4 bindings") {
			t.Errorf("%q: %d %s %s", args, code, out, stderr)
		}
	}
	code, _, stderr := runCLI(t, "validate", "-f", s.dir)
	if code != 1 || strings.Count(stderr, "is a directory") != 1 || !strings.Contains(stderr, "Try: -f "+s.file) {
		t.Errorf("validate -f DIR: %d\n%s", code, stderr)
	}
	// stack.yml is found when there is no stack.yaml.
	dir := t.TempDir()
	writeRaw(t, filepath.Join(dir, "stack.yml"), stackText("  one:\n    type: kv\n"))
	if code, out, stderr := lcIn(t, dir, nil, "validate"); code != 0 || !strings.Contains(out, "stack.yml: 1 binding,") {
		t.Errorf("validate with stack.yml: %d %s %s", code, out, stderr)
	}
}

func TestCLIHelp(t *testing.T) {
	t.Parallel()
	code, top, _ := runCLI(t, "-h")
	if code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range allCommands {
		if !regexp.MustCompile(`(?m)^  ` + c + ` `).MatchString(top) {
			t.Errorf("top-level help does not list %s", c)
		}
		if !strings.Contains(string(readme), "| `localcloud "+c) {
			t.Errorf("README's CLI table does not list %s", c)
		}
		code, help, stderr := runCLI(t, c, "-h")
		if code != 0 || !strings.Contains(help, "Example") {
			t.Errorf("%s -h: exit %d, no example:\n%s%s", c, code, help, stderr)
		}
		// One flag style: no single-dash long flags.
		if m := regexp.MustCompile(`(?m)^\s+-[a-z][a-z-]+\b`).FindString(help); m != "" {
			t.Errorf("%s -h shows a long flag with one dash: %q", c, m)
		}
	}
	for _, sub := range []string{"extend", "redrive", "tail"} {
		if !strings.Contains(top, sub) {
			t.Errorf("top-level help does not mention queue %s", sub)
		}
	}
}

func TestCLIInit(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "My Shop")
	code, stdout, stderr := runCLI(t, "init", dir)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "wrote ") {
		t.Fatalf("init: %d %q %s", code, stdout, stderr)
	}
	file := filepath.Join(dir, "stack.yaml")
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(before, []byte("\n# ")) || !bytes.Contains(before, []byte("name: my-shop\n")) {
		t.Errorf("the starter stack has no comments or not the folder's name:\n%s", before)
	}
	if code, out, stderr := runCLI(t, "validate", file); code != 0 || !strings.Contains(out, "3 bindings") {
		t.Errorf("the starter stack does not validate: %d %s %s", code, out, stderr)
	}
	code, _, stderr = runCLI(t, "init", dir)
	if code != 1 || !strings.Contains(stderr, "already exists") {
		t.Errorf("second init: %d %s", code, stderr)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, before) {
		t.Error("a second init changed the stack file")
	}
}

func TestCLIQueueTail(t *testing.T) {
	t.Parallel()
	s := newStack(t, cliStack)
	s.up(t)
	lcOK(t, nil, "queue", "send", "orders", "before", "-f", s.file)
	tail := start(t, "queue", "tail", "orders", "--json", "--max", "2", "-f", s.file)
	tail.waitLine(0, eventTimeout, "tailing queue orders")
	lcOK(t, nil, "queue", "send", "orders", `{"n":1}`, "--json-payload", "-f", s.file)
	lcOK(t, nil, "queue", "send", "orders", "second", "-f", s.file)
	if code := tail.waitExit(eventTimeout); code != 0 {
		t.Fatalf("tail --max 2: exit %d: %s", code, tail.stderr())
	}
	lines := strings.Split(strings.TrimSpace(tail.stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("tail printed %d lines, want 2 (only the new messages):\n%s", len(lines), tail.stdout)
	}
	var first, second queueMsgOut
	decode(t, "tail line 1", lines[0], &first)
	decode(t, "tail line 2", lines[1], &second)
	if string(first.JSON) != `{"n":1}` || second.Payload != "second" || first.Attempt != 0 {
		t.Errorf("tail lines: %s", lines)
	}
	// tail claimed nothing: every message is due, never delivered.
	var peek queueMsgsOut
	decode(t, "peek", lcOK(t, nil, "queue", "peek", "orders", "--json", "-f", s.file), &peek)
	for _, m := range peek.Messages {
		if m.State != "due" || m.Attempt != 0 {
			t.Errorf("after tail: %+v", m)
		}
	}
	// --existing starts at the first message.
	code, out, _ := runCLI(t, "queue", "tail", "orders", "--existing", "--max", "1", "-f", s.file)
	if code != 0 || !strings.Contains(out, "\nbefore\n") {
		t.Errorf("tail --existing: %d %q", code, out)
	}
}
