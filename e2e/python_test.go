package e2e

import (
	"encoding/json"
	"fmt"
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

// pythonPoll is the Python workers' fallback poll: far longer than the test
// waits for the messages, so only hints can have woken them in time.
const pythonPoll = 30 * time.Second

// handledLine is a line of examples/python/worker.py for one message.
var handledLine = regexp.MustCompile(`^handled id=(\d+) attempt=(\d+) woke=(\S+) payload=(.*)$`)

// pyStatement is one STMT_ constant of lcqueue.py, a plain or triple-quoted
// string.
var pyStatement = regexp.MustCompile(`(?ms)^(STMT_\w+) = (?:"""(.*?)"""|"([^"\n]*)")$`)

// TestPythonExampleUsesTheDocumentedStatements: the Python example is
// written from docs/FORMAT.md, so each statement it runs is quoted there
// byte for byte (STMT_DUE_UNSPENT is the documented select plus the
// attempt filter FORMAT.md describes). Needs no python3.
func TestPythonExampleUsesTheDocumentedStatements(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "FORMAT.md"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("..", "examples", "python", "lcqueue.py"))
	if err != nil {
		t.Fatal(err)
	}
	found := pyStatement.FindAllStringSubmatch(string(src), -1)
	for _, m := range found {
		stmt := m[2] + m[3]
		if !strings.Contains(string(doc), stmt) {
			t.Errorf("lcqueue.py %s is not quoted in docs/FORMAT.md:\n%s", m[1], stmt)
		}
	}
	if len(found) < 7 {
		t.Errorf("found %d STMT_ constants in lcqueue.py, want the 7 of send, any, due, claim, ack, nack, exists", len(found))
	}
}

// TestPythonExampleAgainstUp runs examples/python, written from
// docs/FORMAT.md with Python's standard library only, against up: two
// workers and a producer, each under localcloud run. Every message must be
// handled exactly once, on its first delivery, woken by up's hint for the
// producer's foreign write (their poll is 30 s).
func TestPythonExampleAgainstUp(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	dir, err := filepath.Abs(filepath.Join("..", "examples", "python"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "  orders:\n    type: queue\n    visibilityTimeout: 5s\n")
	s.up(t)

	pyEnv := environ("PYTHONDONTWRITEBYTECODE=1")
	var workers []*proc
	for range 2 {
		cmd := exec.Command(binary, "run", "-f", s.file, "--", python, filepath.Join(dir, "worker.py"),
			"--poll", strconv.FormatFloat(pythonPoll.Seconds(), 'f', -1, 64))
		cmd.Env = pyEnv
		// run forwards SIGTERM but cannot forward SIGKILL: a process group
		// of their own, killed at the end whatever happened.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		w := startCmd(t, cmd)
		t.Cleanup(func() { _ = syscall.Kill(-w.pid(), syscall.SIGKILL) })
		workers = append(workers, w)
	}
	for _, w := range workers {
		waitStdout(t, w, eventTimeout, "worker: hints subscribed")
	}

	const n = 30
	prod := exec.Command(binary, "run", "-f", s.file, "--", python, filepath.Join(dir, "producer.py"), "-n", strconv.Itoa(n))
	prod.Env = pyEnv
	p := startCmd(t, prod)
	exitOK(t, p, "producer")
	if !strings.Contains(p.stdout.String(), fmt.Sprintf("sent %d messages", n)) {
		t.Fatalf("producer stdout:\n%s", p.stdout)
	}
	sent := time.Now()

	// Every message handled once, well before any worker's poll is due.
	seen := map[string]string{} // payload id -> the line that handled it
	var lines []string
	deadline := sent.Add(eventTimeout)
	for {
		lines = lines[:0]
		for _, w := range workers {
			for _, l := range strings.Split(w.stdout.String(), "\n") {
				if handledLine.MatchString(l) {
					lines = append(lines, l)
				}
			}
		}
		if len(lines) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages handled within %s (poll %s):\n%s\nworker stderr:\n%s\n%s",
				len(lines), n, eventTimeout, pythonPoll, strings.Join(lines, "\n"), workers[0].stderr(), workers[1].stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d messages handled %s after the producer exited", n, time.Since(sent).Round(time.Millisecond))
	hinted := 0
	for _, l := range lines {
		m := handledLine.FindStringSubmatch(l)
		var payload struct{ ID string }
		if err := json.Unmarshal([]byte(m[4]), &payload); err != nil {
			t.Fatalf("payload of %q: %v", l, err)
		}
		if prev, dup := seen[payload.ID]; dup {
			t.Errorf("%s handled twice:\n%s\n%s", payload.ID, prev, l)
		}
		seen[payload.ID] = l
		if m[2] != "1" {
			t.Errorf("redelivered (attempt %s): %s", m[2], l)
		}
		switch m[3] {
		case "hint":
			hinted++
		case "more": // claimed right after a full claim, itself woken by a hint
		default:
			t.Errorf("woken by %s, want a hint: %s", m[3], l)
		}
	}
	for i := 1; i <= n; i++ {
		if _, ok := seen[fmt.Sprintf("py-%d", i)]; !ok {
			t.Errorf("py-%d never handled", i)
		}
	}
	if hinted == 0 {
		t.Errorf("no message handled after a hint:\n%s", strings.Join(lines, "\n"))
	}

	// Acked, not just leased: nothing is left, due or in flight. A worker
	// prints "handled" before its ack, so the last acks may still be on
	// their way when the last line is read: look until eventTimeout.
	var st struct{ Due, InFlight, Total int }
	for deadline := time.Now().Add(eventTimeout); ; time.Sleep(50 * time.Millisecond) {
		code, out, stderr := runCLI(t, "queue", "stats", "orders", "-f", s.file, "--json")
		if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
			t.Fatalf("queue stats: exit %d, %v: %s %s", code, err, out, stderr)
		}
		if st.Total == 0 || time.Now().After(deadline) {
			break
		}
	}
	if st.Total != 0 {
		t.Errorf("queue stats %s after the workers' last line: %+v, want empty", eventTimeout, st)
	}
	for _, w := range workers {
		w.signal(syscall.SIGTERM)
		exitOK(t, w, "python worker")
		if !strings.Contains(w.stdout.String(), "worker: stopped") {
			t.Errorf("worker did not stop cleanly:\n%s", w.stdout)
		}
	}
}
