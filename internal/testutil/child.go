package testutil

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// childLines is how many stdout lines a child may get ahead of its reader
// before its writes block.
const childLines = 1024

// Child is a re-executed copy of the test binary running one test function,
// which acts as a helper process: it reads commands on stdin and answers
// on stdout, a line each.
type Child struct {
	Name   string
	Cmd    *exec.Cmd
	Stdin  io.WriteCloser
	Lines  chan string   // stdout, line by line; closed at EOF
	Stderr *bytes.Buffer // read it only after Done is closed
	Done   chan struct{} // closed once the process was waited for
	Err    error         // of Wait, valid after Done
}

// StartChild re-executes the test binary (os.Args[0]) to run only the test
// function test, with env added to this process's environment; name is how
// failures call it. The child is killed (by its pid) when the test ends,
// should it still run.
func StartChild(t testing.TB, name, test string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env...)
	c := &Child{Name: name, Cmd: cmd, Lines: make(chan string, childLines), Stderr: new(bytes.Buffer), Done: make(chan struct{})}
	cmd.Stderr = c.Stderr
	var err error
	if c.Stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			c.Lines <- sc.Text()
		}
		close(c.Lines)
		// Wait only after stdout is drained (os/exec's rule for pipes).
		c.Err = cmd.Wait()
		close(c.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.Done:
		default:
			_ = cmd.Process.Kill()
			// Drain so the reader goroutine reaches Wait.
			for range c.Lines {
			}
			<-c.Done
		}
	})
	return c
}

// Expect waits up to timeout for the next stdout line, fails unless it
// starts with prefix, and returns it.
func (c *Child) Expect(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-c.Lines:
		if !ok {
			<-c.Done
			t.Fatalf("%s exited before saying %q: %v\nstderr:\n%s", c.Name, prefix, c.Err, c.Stderr)
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("%s said %q; want %q...", c.Name, line, prefix)
		}
		return line
	case <-time.After(timeout):
		t.Fatalf("%s did not say %q within %v", c.Name, prefix, timeout)
	}
	return ""
}

// Send writes line and a newline to the child's stdin.
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.Stdin, line+"\n"); err != nil {
		t.Fatalf("write to %s: %v", c.Name, err)
	}
}

// UntilExit yields the child's remaining stdout lines; it fails the test
// (and the child is killed at cleanup) if the output does not end within
// timeout.
func (c *Child) UntilExit(t testing.TB, timeout time.Duration) func(func(string) bool) {
	return func(yield func(string) bool) {
		deadline := time.NewTimer(timeout)
		defer deadline.Stop()
		for {
			select {
			case line, ok := <-c.Lines:
				if !ok {
					return
				}
				if !yield(line) {
					return
				}
			case <-deadline.C:
				t.Fatalf("%s still running after %v", c.Name, timeout)
			}
		}
	}
}

// WantSuccess waits up to timeout for the child's exit and fails unless it
// exited 0.
func (c *Child) WantSuccess(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-c.Done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", c.Name, timeout)
	}
	if c.Err != nil {
		t.Errorf("%s: %v\nstderr:\n%s", c.Name, c.Err, c.Stderr)
	}
}
