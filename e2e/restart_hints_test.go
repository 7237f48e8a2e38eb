package e2e

import (
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

	"github.com/localcloud/localcloud/internal/testutil"
)

// hintWake bounds, per message, the time from a send to its delivery that
// only a hint explains: the consumers poll every slowPoll (30 s). It is a
// correctness bound (woken by a hint, not the poll), not a speed goal.
const hintWake = 50 * time.Millisecond

// restartUp stops up with SIGTERM and starts it again on the same stack.
func restartUp(t *testing.T, s stack, up *proc) *proc {
	t.Helper()
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d:\n%s", code, up.stderr())
	}
	next, _ := s.up(t)
	return next
}

// runUnder starts cmd under `localcloud run -f file`. When the test ends,
// run gets SIGTERM, which it forwards to cmd's process group; whatever is
// left after stopLimit is SIGKILLed: run, and cmd's group (run puts cmd in
// a group of its own, which SIGKILL of run cannot reach).
func runUnder(t *testing.T, file string, env []string, cmd ...string) *proc {
	t.Helper()
	c := exec.Command(binary, append([]string{"run", "-f", file, "--"}, cmd...)...)
	c.Env = environ(env...)
	p := startCmd(t, c)
	t.Cleanup(func() {
		if p.exited() {
			return
		}
		children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid(), p.pid()))
		_ = syscall.Kill(p.pid(), syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopLimit):
		}
		for _, c := range strings.Fields(string(children)) {
			if pid, err := strconv.Atoi(c); err == nil {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		_ = syscall.Kill(p.pid(), syscall.SIGKILL)
	})
	return p
}

// TestHintsSurviveRestartsOfUp: a Consume app under localcloud run, with a
// 30 s fallback poll, is still woken by hints after up is restarted twice:
// on a fixed port, on port 0 (a new port at every start, which the app
// learns only from runtime.json) and on the stack's default port. After
// each start the first message proves the app reconnected (the poll would
// take 24 s or more), the second that a hint, not the reconnection, woke
// it: handled within hintWake of its send.
func TestHintsSurviveRestartsOfUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, notify string }{
		{"fixed port", "notify:\n  listen: 127.0.0.1:PORT\n"},
		{"port 0", "notify:\n  listen: 127.0.0.1:0\n"},
		{"default port", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, ordersStack)
			text := "version: 1\nname: shop\n" + strings.ReplaceAll(c.notify, "PORT", strconv.Itoa(testutil.FreePort(t))) +
				"explorer: off\nbindings:\n" + ordersStack
			writeRaw(t, s.file, text)
			up, _ := s.up(t)
			consumer := runUnder(t, s.file, []string{envAppMode + "=hints-consume", envPoll + "=" + slowPoll.String()},
				os.Args[0], "-test.run=^$")
			waitStdout(t, consumer, eventTimeout, "consuming")
			var urls []string
			for round := range 3 {
				if round > 0 {
					up = restartUp(t, s, up)
				}
				urls = append(urls, s.runtime(t).NATSURL)
				env := appEnvOf(t, s)
				for i, limit := range []time.Duration{hintLatency, hintWake} {
					prefix := fmt.Sprintf("r%d%c", round, 'a'+i)
					p := startApp(t, env, "hints-produce", envCount+"=1", envIDPrefix+"="+prefix)
					exitOK(t, p, "producer")
					handledWithin(t, consumer, prefix+"-1", atOf(t, waitStdout(t, p, 0, "sent id="+prefix+"-1")), limit)
				}
			}
			consumer.signal(syscall.SIGTERM)
			exitOK(t, consumer, "consumer under run")
			t.Logf("NATS URLs of the three ups: %v", urls)
			if c.name == "port 0" && (urls[0] == urls[1] || urls[1] == urls[2]) {
				t.Logf("port 0 gave a port twice in a row: %v (the test still passed)", urls)
			}
			if c.name != "port 0" && (urls[0] != urls[1] || urls[1] != urls[2]) {
				t.Errorf("a fixed or default port moved across restarts: %v", urls)
			}
		})
	}
}

// needPython returns python3 with SQLite 3.35 or newer (RETURNING) for the
// Python example, or skips: with CI=true it fails instead (.ci/run
// installs python3 when it is missing).
func needPython(t *testing.T) string {
	t.Helper()
	miss := t.Skipf
	if os.Getenv("CI") == "true" {
		miss = t.Fatalf
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		miss("python3 not found on PATH; the Python example needs it (.ci/run installs it)")
	}
	if out, err := exec.Command(python, "-c",
		"import sqlite3, sys; sys.exit(sqlite3.sqlite_version_info < (3, 35, 0))").CombinedOutput(); err != nil {
		miss("python3's sqlite3 is older than SQLite 3.35 (no RETURNING): %v %s", err, out)
	}
	return python
}

var subscribedLine = regexp.MustCompile(`(?m)^worker: hints subscribed$`)

// TestPythonWorkerSurvivesRestartsOfUp: examples/python's worker, under
// localcloud run on a stack on port 0 with a 30 s poll, follows up through
// two restarts (each on a new port, found in runtime.json) and is woken by
// a hint for a message the Python producer sends after each start.
func TestPythonWorkerSurvivesRestartsOfUp(t *testing.T) {
	t.Parallel()
	python := needPython(t)
	dir, err := filepath.Abs(filepath.Join("..", "examples", "python"))
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, "  orders:\n    type: queue\n    visibilityTimeout: 5s\n")
	up, _ := s.up(t)
	pyEnv := []string{"PYTHONDONTWRITEBYTECODE=1"}
	w := runUnder(t, s.file, pyEnv, python, filepath.Join(dir, "worker.py"), "--poll", strconv.Itoa(int(pythonPoll.Seconds())))
	for round := range 3 {
		if round > 0 {
			up = restartUp(t, s, up)
		}
		testutil.CheckFor(t, eventTimeout, 5*time.Millisecond, fmt.Sprintf("subscription %d of the worker", round+1), func() bool {
			return len(subscribedLine.FindAllString(w.stdout.String(), -1)) > round
		})
		p := runUnder(t, s.file, pyEnv, python, filepath.Join(dir, "producer.py"), "-n", "1")
		exitOK(t, p, "producer")
		var lines []string
		testutil.CheckFor(t, eventTimeout, 5*time.Millisecond, fmt.Sprintf("message %d handled", round+1), func() bool {
			lines = lines[:0]
			for _, l := range strings.Split(w.stdout.String(), "\n") {
				if handledLine.MatchString(l) {
					lines = append(lines, l)
				}
			}
			return len(lines) > round
		})
		m := handledLine.FindStringSubmatch(lines[round])
		if len(lines) != round+1 || m[3] != "hint" {
			t.Fatalf("after start %d: handled lines %q, want one more, woken by a hint", round+1, lines)
		}
		t.Logf("start %d (%s): %s", round+1, s.runtime(t).NATSURL, lines[round])
	}
	w.signal(syscall.SIGTERM)
	exitOK(t, w, "python worker")
	if out := w.stdout.String(); strings.Count(out, "hints disconnected") != 2 {
		t.Errorf("the worker reported other than one disconnection per restart:\n%s", out)
	}
}
