package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStackFileNotRegular runs validate and up on stack files that are not
// regular files. Each must be refused at once with an error that names the
// path and what it is; a FIFO without a writer must not block the open.
func TestStackFileNotRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stack.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "folder.yaml")
	mustMkdir(t, folder)
	cases := []struct {
		path string
		kind string
	}{
		{fifo, "a named pipe (FIFO)"},
		{"/dev/zero", "a character device"},
		{folder, "a directory"},
	}
	for _, c := range cases {
		for _, cmd := range []string{"validate", "up"} {
			t.Run(cmd+" "+filepath.Base(c.path), func(t *testing.T) {
				began := time.Now()
				code, stdout, stderr := runCLI(t, cmd, "-f", c.path)
				if elapsed := time.Since(began); elapsed > 5*time.Second {
					t.Errorf("took %s; a refusal takes milliseconds", elapsed)
				}
				if code != 1 {
					t.Errorf("exit %d, want 1; stdout:\n%s", code, stdout)
				}
				want := "Error: stack file " + c.path + " is " + c.kind + ", not a regular file"
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, stderr)
				}
			})
		}
	}
	if exists(filepath.Join(dir, ".localcloud")) {
		t.Error("up created a data dir for a stack file it could not read")
	}
}

// TestReloadStackFileBecomesFIFO replaces the stack file of a running up by
// a FIFO: the reload must fail at once and keep the last good stack, health
// checks must go on, and SIGTERM must still stop up cleanly.
func TestReloadStackFileBecomesFIFO(t *testing.T) {
	t.Parallel()
	s := newStack(t, "  orders:\n    type: queue\n  carts:\n    type: kv\n")
	p, _ := s.up(t)

	from := p.mark()
	tmp := filepath.Join(s.dir, ".stack.fifo")
	if err := syscall.Mkfifo(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.file); err != nil {
		t.Fatal(err)
	}
	p.waitLine(from, eventTimeout, "level=ERROR", "keeping the last good stack", "is a named pipe (FIFO), not a regular file")

	// The health loop still runs: a deleted store is noticed.
	from = p.mark()
	if err := os.RemoveAll(filepath.Join(s.dataDir(), "kv", "carts")); err != nil {
		t.Fatal(err)
	}
	p.waitLine(from, eventTimeout, "binding unhealthy", "binding=carts")
	if rt := s.runtime(t); !strings.Contains(rt.LastReloadError, "not a regular file") {
		t.Errorf("runtime.json lastReloadError = %q, want the FIFO refusal", rt.LastReloadError)
	}

	// SIGHUP reads the FIFO again on up's main loop; it must not block it.
	from = p.mark()
	p.signal(syscall.SIGHUP)
	p.waitLine(from, eventTimeout, "keeping the last good stack", "not a regular file")

	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exited %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(p.stderr(), "msg=stopped") {
		t.Error("no msg=stopped line: the stop was not clean")
	}
	if exists(filepath.Join(s.dataDir(), "runtime.json")) {
		t.Error("runtime.json left behind after SIGTERM")
	}
}
