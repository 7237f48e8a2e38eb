package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// testApp returns an app on buffers whose environment is env only.
func testApp(env map[string]string) (*app, *testutil.SyncBuffer, *testutil.SyncBuffer) {
	var stdout, stderr testutil.SyncBuffer
	a := newApp(nil, &stdout, &stderr)
	a.lookupEnv = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	a.environ = func() []string {
		var out []string
		for k, v := range env {
			out = append(out, k+"="+v)
		}
		return out
	}
	return a, &stdout, &stderr
}

func runApp(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	a, out, errOut := testApp(env)
	code = a.main(context.Background(), args)
	return code, out.String(), errOut.String()
}

const goodStack = `version: 1
name: shop
notify:
  listen: 127.0.0.1:0
explorer:
  listen: 127.0.0.1:0
bindings:
  carts:
    type: kv
  orders-dlq:
    type: queue
    visibilityTimeout: 45s
`

func writeStack(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stack.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUsageMistakesExit2(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	cases := []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"bogus"}, `Error: unknown command "bogus"`},
		{[]string{"validate", "-x"}, "Error: unknown flag -x"},
		{[]string{"validate", "-f", stack, "extra"}, "validate got two stack files"},
		{[]string{"up", "-f"}, "Error: -f needs a value"},
		{[]string{"env", "-f", stack, "--format", "xml"}, "--format must be sh or json"},
		{[]string{"run", "-f", stack}, "run needs a command"},
		{[]string{"run", "-f", stack, "--"}, "run needs a command"},
		{[]string{"status", "--json=maybe"}, `--json: "maybe" is not true or false`},
		{[]string{"kv", "put", "-f", stack, "carts", "k", "v", "--ttl", "banana"}, `Error: --ttl: "banana" is not a duration, e.g. 30s`},
		{[]string{"queue", "receive", "-f", stack, "orders", "--max", "x"}, `Error: --max: "x" is not a whole number, e.g. 10`},
		{[]string{"env", "-f", stack, "--json", "--format", "sh"}, "contradict"},
	}
	for _, c := range cases {
		code, stdout, stderr := runApp(t, nil, c.args...)
		if code != exitUsage {
			t.Errorf("%q: exit %d, want 2 (stderr %q)", c.args, code, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%q: stderr %q lacks %q", c.args, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q, want nothing", c.args, stdout)
		}
		if len(c.args) > 0 && !strings.Contains(stderr, "Try: ") {
			t.Errorf("%q: no Try: line in %q", c.args, stderr)
		}
	}
}

func TestHelpExits0(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"help"}, {"--help"}, {"help", "up"}, {"up", "-h"}, {"validate", "-h"},
		{"env", "--help"}, {"run", "-h"}, {"status", "-h"}} {
		code, stdout, stderr := runApp(t, nil, args...)
		if code != exitOK || !strings.Contains(stdout, "Usage:") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	_, stdout, _ := runApp(t, nil, "up", "-h")
	for _, w := range []string{"localcloud up [-f FILE]", "msg=ready", "-f FILE"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("up usage lacks %q:\n%s", w, stdout)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	code, stdout, stderr := runApp(t, nil, "validate", "-f", stack)
	if code != 0 || !strings.HasPrefix(stdout, "ok: stack shop") || stderr != "" {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	for _, w := range []string{"carts", "kv", "orders-dlq", "queue", "visibilityTimeout=45s", "durability=normal"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("summary lacks %q:\n%s", w, stdout)
		}
	}
	if n := strings.Count(stdout, "\n"); n != 3 {
		t.Errorf("%d lines, want ok + one per binding:\n%s", n, stdout)
	}

	// $LOCALCLOUD_STACK names the file when -f does not.
	code, stdout, _ = runApp(t, map[string]string{"LOCALCLOUD_STACK": stack}, "validate")
	if code != 0 || !strings.Contains(stdout, stack) {
		t.Errorf("with $LOCALCLOUD_STACK: exit %d, %s", code, stdout)
	}

	bad := writeStack(t, "version: 2\nname: Shop\nbindings:\n  a:\n    type: nope\n  b:\n    type: kv\n    maxAttempts: 3\n")
	code, stdout, stderr = runApp(t, nil, "validate", "-f", bad)
	if code != exitFailure || stdout != "" {
		t.Fatalf("bad file: exit %d, stdout %q", code, stdout)
	}
	for _, w := range []string{"Error: invalid stack file: 4 problems", bad + ":1:10:", bad + ":2:7:", bad + ":5:11:", bad + ":8:18:"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}

	code, _, stderr = runApp(t, nil, "validate", "-f", filepath.Join(t.TempDir(), "none.yaml"))
	if code != exitFailure || !strings.Contains(stderr, "not found") || !strings.Contains(stderr, "Try: ") {
		t.Errorf("missing file: exit %d, %s", code, stderr)
	}
}

func TestEnv(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	code, stdout, stderr := runApp(t, nil, "env", "-f", stack)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dir := filepath.Dir(stack)
	want := []string{
		"export LOCALCLOUD_STACK_NAME='shop'",
		`export LOCALCLOUD_BINDING_CARTS='{"service":"local-kv","dataDir":"` + filepath.Join(dir, ".localcloud", "kv", "carts") + `","durability":"normal"}'`,
		`export LOCALCLOUD_BINDING_ORDERS_DLQ='{"service":"local-queue","queuePath":"` + filepath.Join(dir, ".localcloud", "queue", "orders-dlq") +
			`","subject":"localcloud.shop.orders-dlq.available","visibilityTimeout":"45s","visibilityTimeoutMs":45000,"durability":"normal",` +
			`"retryDelay":"1s","retryDelayMs":1000,"maxRetryDelay":"5m0s","maxRetryDelayMs":300000,"dedupWindow":"5m0s","dedupWindowMs":300000}'`,
	}
	for _, w := range want {
		if !strings.Contains(stdout, w+"\n") {
			t.Errorf("stdout lacks %s\n%s", w, stdout)
		}
	}
	// Port 0 and no up: no URL, and a note on stderr.
	if strings.Contains(stdout, "LOCALCLOUD_NATS_URL") || !strings.Contains(stderr, "LOCALCLOUD_NATS_URL is not set") {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}

	fixed := writeStack(t, strings.Replace(goodStack, "127.0.0.1:0", "127.0.0.1:4999", 1))
	code, stdout, _ = runApp(t, nil, "env", "-f", fixed, "--format", "json")
	var m map[string]string
	if err := json.Unmarshal([]byte(stdout), &m); code != 0 || err != nil {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if m["LOCALCLOUD_NATS_URL"] != "nats://127.0.0.1:4999" || m["LOCALCLOUD_STACK_NAME"] != "shop" {
		t.Errorf("json = %v", m)
	}
	var kvb map[string]string
	if err := json.Unmarshal([]byte(m["LOCALCLOUD_BINDING_CARTS"]), &kvb); err != nil || kvb["service"] != "local-kv" {
		t.Errorf("carts = %q, %v", m["LOCALCLOUD_BINDING_CARTS"], err)
	}
}

func TestShQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":          `'plain'`,
		"":               `''`,
		"it's":           `'it'\''s'`,
		`$HOME "x" \n ;`: `'$HOME "x" \n ;'`,
	} {
		if got := shQuote(in); got != want {
			t.Errorf("shQuote(%q) = %s, want %s", in, got, want)
		}
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	// The shell reads back exactly what went in.
	in := `a'b"c$d\e` + "\nf"
	var out bytes.Buffer
	a, _, _ := testApp(nil)
	a.stdout = &out
	code := a.main(context.Background(), []string{"run", "-f", writeStack(t, goodStack), "--", "sh", "-c", "x=" + shQuote(in) + "; printf %s \"$x\""})
	if code != 0 || out.String() != in {
		t.Errorf("round trip: exit %d, %q", code, out.String())
	}
}

func TestRunPassesEnvironmentAndExitCode(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	stack := writeStack(t, goodStack)
	env := map[string]string{"PATH": os.Getenv("PATH"), "KEEP": "kept", "LOCALCLOUD_STACK_NAME": "overridden"}
	code, stdout, stderr := runApp(t, env, "run", "-f", stack, "--", "sh", "-c",
		`printf '%s|%s|%s' "$KEEP" "$LOCALCLOUD_STACK_NAME" "$LOCALCLOUD_BINDING_CARTS"; exit 7`)
	if code != 7 {
		t.Fatalf("exit %d, want 7; stderr %s", code, stderr)
	}
	if !strings.HasPrefix(stdout, `kept|shop|{"service":"local-kv"`) {
		t.Errorf("stdout %q", stdout)
	}
	code, _, _ = runApp(t, env, "run", "-f", stack, "--", "sh", "-c", "kill -TERM $$")
	if code != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: exit %d, want %d", code, 128+int(syscall.SIGTERM))
	}
	code, _, stderr = runApp(t, env, "run", "-f", stack, "--", "no-such-command-localcloud")
	if code != exitNotFound || !strings.Contains(stderr, "Error: command not found: no-such-command-localcloud") {
		t.Errorf("missing command: exit %d, %s", code, stderr)
	}
}

func TestUpInProcess(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	a, stdout, stderr := testApp(nil)
	sigs := make(chan chan<- os.Signal, 1)
	a.notify = func(c chan<- os.Signal, _ ...os.Signal) { sigs <- c }
	a.stopNotify = func(chan<- os.Signal) {}
	exited := make(chan int, 1)
	go func() { exited <- a.main(context.Background(), []string{"up", "-f", stack}) }()
	c := <-sigs
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "msg=ready") {
		select {
		case code := <-exited:
			t.Fatalf("up exited %d before ready: %s", code, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line: %s", stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, w := range []string{"bindings (2):", "carts", "orders-dlq", "NATS", "defaults applied: "} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, stdout)
		}
	}
	c <- syscall.SIGHUP
	c <- syscall.SIGTERM
	select {
	case code := <-exited:
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("up did not stop")
	}
	for _, w := range []string{"reason=SIGHUP", "msg=stopping", "msg=stopped"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(stack), ".localcloud", "runtime.json")); !os.IsNotExist(err) {
		t.Errorf("runtime.json after stop: %v", err)
	}
}

func TestUpSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	a, _, stderr := testApp(nil)
	sigs := make(chan chan<- os.Signal, 1)
	a.notify = func(c chan<- os.Signal, _ ...os.Signal) { sigs <- c }
	a.stopNotify = func(chan<- os.Signal) {}
	exitCodes := make(chan int, 1)
	a.exit = func(code int) { exitCodes <- code }
	exited := make(chan int, 1)
	go func() { exited <- a.main(context.Background(), []string{"up", "-f", stack}) }()
	c := <-sigs
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "msg=ready") {
		if time.Now().After(deadline) {
			t.Fatalf("no ready line: %s", stderr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Both are queued before up reads the first: the second arrives while
	// the stores and NATS are still closing, which takes milliseconds.
	c <- syscall.SIGTERM
	c <- syscall.SIGINT
	select {
	case code := <-exitCodes:
		if code != exitFailure {
			t.Errorf("exit(%d), want 1", code)
		}
	case code := <-exited:
		t.Fatalf("up finished its stop (exit %d) instead of exiting at once", code)
	case <-time.After(10 * time.Second):
		t.Fatal("no exit")
	}
	if code := <-exited; code != exitFailure {
		t.Errorf("main returned %d after the test exit", code)
	}
	if !strings.Contains(stderr.String(), "second signal; exiting at once") {
		t.Errorf("log lacks the second-signal line:\n%s", stderr)
	}
	// Let the abandoned stop finish before the temp dir goes away.
	rt := filepath.Join(filepath.Dir(stack), ".localcloud", "runtime.json")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(rt); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stop never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
