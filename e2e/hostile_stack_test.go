package e2e

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of a refused stack. They are generous: a refusal takes
// milliseconds and a few MB; the bounds only catch a parser that expands,
// reads or loops without limit.
const (
	hostileTimeout = 20 * time.Second
	hostileMaxRSS  = 200 << 20 // bytes
)

// hostileCase is a stack file that localcloud must refuse.
type hostileCase struct {
	name string
	// setup writes the stack file into dir and shapes the tree under root
	// (dir's parent, which also holds out, a folder outside dataDir). It
	// returns the environment to run with, if any.
	setup func(t *testing.T, root, dir, out string) []string
	// want are strings the error must hold: the field and the problem.
	// The first one must be in the first problem line.
	want []string
}

// hostileRun is what one command did with a hostile stack.
type hostileRun struct {
	code    int
	stderr  string
	first   string // the first problem line (or the only error line)
	elapsed time.Duration
	// maxRSS is the child's peak resident set, in bytes. Linux may carry
	// the parent's peak into a child across vfork and exec, so it is an
	// upper bound; the test keeps its own memory small.
	maxRSS int64
}

// TestHostileStackFiles runs validate and up on stack files an attacker or
// a careless edit could produce. Each must be refused with a problem that
// names the field and what is wrong, in bounded time and memory, without
// creating or changing anything (up does not even create dataDir).
func TestHostileStackFiles(t *testing.T) {
	t.Parallel()
	cases := []hostileCase{
		{name: "path with .. out of dataDir",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, stackText("  orders:\n    type: queue\n    path: ../../out/orders\n"))
				return nil
			},
			want: []string{"bindings.orders.path:", "must stay inside dataDir", `"../../out/orders"`}},
		{name: "path with .. hidden in a folder and ${VAR}",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, stackText("  orders:\n    type: queue\n    path: queues/${SUB}\n"))
				return []string{"SUB=x/../../../out"}
			},
			want: []string{"bindings.orders.path:", "must stay inside dataDir", `"queues/x/../../../out"`}},
		{name: "path and dataDir both with ..",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, "version: 1\nname: shop\ndataDir: ../data\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n  carts:\n    type: kv\n    path: ../out\n")
				return nil
			},
			want: []string{"bindings.carts.path:", "must stay inside dataDir", `"../out"`}},
		{name: "binding folder is a symlink out of dataDir",
			setup: func(t *testing.T, root, dir, out string) []string {
				mustMkdir(t, filepath.Join(dir, ".localcloud", "queue"))
				if err := os.Symlink(out, filepath.Join(dir, ".localcloud", "queue", "orders")); err != nil {
					t.Fatal(err)
				}
				writeStackFile(t, dir, stackText("  orders:\n    type: queue\n"))
				return nil
			},
			want: []string{"bindings.orders.path:", "resolves through a symlink to " + "{out}", "outside dataDir"}},
		{name: "folder on the path is a symlink out of dataDir",
			setup: func(t *testing.T, root, dir, out string) []string {
				mustMkdir(t, filepath.Join(dir, ".localcloud"))
				if err := os.Symlink("../../out", filepath.Join(dir, ".localcloud", "link")); err != nil {
					t.Fatal(err)
				}
				writeStackFile(t, dir, stackText("  carts:\n    type: kv\n    path: link/carts\n"))
				return nil
			},
			want: []string{"bindings.carts.path:", "resolves through a symlink to {out}/carts", "outside dataDir"}},
		{name: "YAML alias bomb (billion laughs)",
			setup: func(t *testing.T, root, dir, out string) []string {
				// Ten levels of ten aliases: *x9 stands for 10^10 lols.
				var b strings.Builder
				b.WriteString("version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\n")
				b.WriteString("bindings:\n  orders:\n    type: queue\n    deadLetter: [&x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]")
				for i := 1; i <= 9; i++ {
					fmt.Fprintf(&b, ", &x%d [", i)
					for j := 0; j < 10; j++ {
						if j > 0 {
							b.WriteString(", ")
						}
						fmt.Fprintf(&b, "*x%d", i-1)
					}
					b.WriteString("]")
				}
				b.WriteString("]\n    maxAttempts: *x9\n  dlq: *x9\n")
				writeStackFile(t, dir, b.String())
				return nil
			},
			want: []string{"bindings.orders.deadLetter: must be a queue binding name, got a list",
				"bindings.orders.maxAttempts: must be an integer between 1 and 1000, got a list",
				"bindings.dlq: must be a mapping with type and the binding's settings, got a list"}},
		{name: "1 MB of deeply nested [ ]",
			setup: func(t *testing.T, root, dir, out string) []string {
				// yaml.v3's time is quadratic in the depth of a nest:
				// before the depth limit this took ~10 s and ~100 MB.
				nest := strings.Repeat("[", 9000) + strings.Repeat("]", 9000)
				writeStackFile(t, dir, "version: 1\nname: shop\nx: ["+strings.Repeat(nest+",", 55)+"1]\n")
				return nil
			},
			want: []string{"[ ] and { } nest 9001 levels deep, more than the limit of 100"}},
		{name: "100 MB stack file",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, stackText("  orders:\n    type: queue\n"))
				// Sparse: the size is there, the disk blocks are not.
				if err := os.Truncate(filepath.Join(dir, "stack.yaml"), 100<<20); err != nil {
					t.Fatal(err)
				}
				return nil
			},
			want: []string{"file is 104857600 bytes", "larger than the limit of 1048576 bytes"}},
		{name: "binary garbage (random bytes)",
			setup: func(t *testing.T, root, dir, out string) []string {
				garbage := make([]byte, 256<<10)
				rand.New(rand.NewSource(7)).Read(garbage)
				writeStackFile(t, dir, string(garbage))
				return nil
			},
			want: []string{"invalid YAML", "not UTF-8"}},
		{name: "binary garbage (an ELF executable)",
			setup: func(t *testing.T, root, dir, out string) []string {
				// The first 512 KiB of localcloud itself, read without
				// growing this process (see hostileRun.maxRSS).
				f, err := os.Open(binary)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				exe, err := io.ReadAll(io.LimitReader(f, 512<<10))
				if err != nil {
					t.Fatal(err)
				}
				writeStackFile(t, dir, string(exe))
				return nil
			},
			want: []string{"invalid YAML", "control character 0x7f is not allowed"}},
		{name: "listen on 0.0.0.0 without a token",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, "version: 1\nname: shop\nnotify:\n  listen: 0.0.0.0:0\nbindings:\n  orders:\n    type: queue\n")
				return nil
			},
			want: []string{"notify.listen:", "0.0.0.0 is not a loopback address", "set notify.token"}},
		{name: "listen on [::] with an empty token",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, "version: 1\nname: shop\nnotify:\n  listen: \"[::]:0\"\n  token: ${TOKEN}\nbindings:\n  orders:\n    type: queue\n")
				return []string{"TOKEN="}
			},
			want: []string{"notify.listen:", ":: is not a loopback address", "set notify.token"}},
		{name: "listen on a LAN address without a token",
			setup: func(t *testing.T, root, dir, out string) []string {
				// Never bound: the check refuses it before anything listens.
				writeStackFile(t, dir, "version: 1\nname: shop\nnotify:\n  listen: 192.168.1.20:0\nbindings:\n  orders:\n    type: queue\n")
				return nil
			},
			want: []string{"notify.listen:", "192.168.1.20 is not a loopback address", "set notify.token"}},
		{name: "listen on every interface (no host)",
			setup: func(t *testing.T, root, dir, out string) []string {
				writeStackFile(t, dir, "version: 1\nname: shop\nnotify:\n  listen: \":0\"\nbindings:\n  orders:\n    type: queue\n")
				return nil
			},
			want: []string{"notify.listen:", "host is missing", "every interface"}},
	}

	var table []string
	t.Cleanup(func() {
		// Logged even when the test passes: the figures are part of its
		// report.
		var self syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		t.Logf("hostile stack files (command: exit code, time, max RSS, first problem); this test process's own max RSS is %.1f MB (Linux may carry part of it into a child's figure):\n%s",
			float64(self.Maxrss)/(1<<10), strings.Join(table, "\n"))
	})
	for _, c := range cases {
		root := t.TempDir()
		dir, out := filepath.Join(root, "stack"), filepath.Join(root, "out")
		mustMkdir(t, dir)
		mustMkdir(t, out)
		env := c.setup(t, root, dir, out)
		want := make([]string, len(c.want))
		for i, w := range c.want {
			want[i] = strings.ReplaceAll(w, "{out}", out)
		}
		before := treeSnapshot(t, root)
		_, dataBefore := os.Lstat(filepath.Join(dir, ".localcloud"))
		for _, cmd := range []string{"validate", "up"} {
			r := runHostile(t, env, cmd, "-f", filepath.Join(dir, "stack.yaml"))
			table = append(table, fmt.Sprintf("  %-45s %-8s exit %d  %6.0f ms  %5.1f MB  %s",
				c.name, cmd, r.code, float64(r.elapsed)/float64(time.Millisecond), float64(r.maxRSS)/(1<<20), truncateLine(r.first, 140)))
			if r.code != 1 {
				t.Errorf("%s: %s exited %d; want 1 (refused)", c.name, cmd, r.code)
			}
			if !strings.Contains(r.first, want[0]) {
				t.Errorf("%s: %s: first problem %q does not say %q", c.name, cmd, r.first, want[0])
			}
			for _, w := range want[1:] {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("%s: %s: stderr does not say %q:\n%s", c.name, cmd, w, truncateLine(r.stderr, 2000))
				}
			}
			if n := strings.Count(r.stderr, "\n") + 1; n > 20 {
				t.Errorf("%s: %s: %d lines of errors; want a short list:\n%s", c.name, cmd, n, truncateLine(r.stderr, 2000))
			}
			if r.maxRSS <= 0 {
				t.Errorf("%s: %s: max RSS %d bytes; want 1..%d", c.name, cmd, r.maxRSS, hostileMaxRSS)
			} else if r.maxRSS > hostileMaxRSS {
				// The child's figure is the larger of its own peak and this
				// process's peak when it started (hostileRun.maxRSS); at or
				// below this process's own peak it may be only that, which
				// says nothing of the child (seen when other tests of the
				// package had grown this process past the limit).
				var self syscall.Rusage
				if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err == nil && r.maxRSS <= self.Maxrss<<10 {
					t.Logf("%s: %s: max RSS %d bytes is not above this test process's own peak (%d): not a measure of the child", c.name, cmd, r.maxRSS, self.Maxrss<<10)
				} else {
					t.Errorf("%s: %s: max RSS %d bytes; want 1..%d", c.name, cmd, r.maxRSS, hostileMaxRSS)
				}
			}
			if diff := diffTrees(before, treeSnapshot(t, root)); diff != "" {
				t.Errorf("%s: %s changed the tree:\n%s", c.name, cmd, diff)
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, ".localcloud")); dataBefore != nil && err == nil {
			t.Errorf("%s: up created dataDir for a refused stack", c.name)
		}
	}
}

// TestDataDirOutsideStackFolder pins a choice: dataDir, like a binding's
// absolute path, is the user's to place, so a relative dataDir may climb out
// of the stack file's folder (a stack in deploy/ keeping its data in
// ../.localcloud). What the stores may not do is leave dataDir: up creates
// everything inside it and nothing elsewhere.
func TestDataDirOutsideStackFolder(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, data := filepath.Join(root, "deploy", "stack"), filepath.Join(root, "data")
	mustMkdir(t, dir)
	writeStackFile(t, dir, "version: 1\nname: shop\ndataDir: ../../data\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n  carts:\n    type: kv\n  orders:\n    type: queue\n")
	file := filepath.Join(dir, "stack.yaml")
	before := treeSnapshot(t, root)

	code, stdout, stderr := runCLI(t, "validate", "-f", file)
	if code != 0 || !strings.Contains(stdout, "data dir "+data) {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q; want ok with data dir %s", code, stdout, stderr, data)
	}
	up := start(t, "up", "-f", file)
	up.waitLine(0, readyTimeout, "msg=ready")
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit + eventTimeout); code != 0 {
		t.Fatalf("up exited %d", code)
	}
	after := treeSnapshot(t, root)
	created := 0
	for p := range after {
		if _, ok := before[p]; ok {
			continue
		}
		created++
		if p != data && !strings.HasPrefix(p, data+string(filepath.Separator)) {
			t.Errorf("up created %s outside dataDir %s", p, data)
		}
	}
	for _, want := range []string{filepath.Join(data, "kv", "carts"), filepath.Join(data, "queue", "orders")} {
		if _, ok := after[want]; !ok {
			t.Errorf("up did not create %s", want)
		}
	}
	t.Logf("up created %d entries, all inside %s", created, data)
}

// runHostile runs localcloud with the extra environment to completion and
// measures it. up is not expected to start: a refused stack ends it at once.
func runHostile(t *testing.T, env []string, args ...string) hostileRun {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ(env...)
	p := startCmd(t, cmd)
	began := time.Now()
	code := p.waitExit(hostileTimeout)
	r := hostileRun{code: code, elapsed: time.Since(began)}
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10 // kilobytes on Linux
	}
	r.stderr = p.stderr()
	lines := strings.Split(r.stderr, "\n")
	r.first = lines[0]
	if strings.HasPrefix(r.first, "Error: invalid stack file:") && len(lines) > 1 {
		r.first = lines[1]
	}
	return r
}

// treeSnapshot records every entry under root: kind, mode, size and, for
// symlinks, the target.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// diffTrees lists what was added, removed or changed between two snapshots.
func diffTrees(before, after map[string]string) string {
	var lines []string
	for p, v := range after {
		if old, ok := before[p]; !ok {
			lines = append(lines, "  created "+p)
		} else if old != v {
			lines = append(lines, fmt.Sprintf("  changed %s: %s -> %s", p, old, v))
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			lines = append(lines, "  removed "+p)
		}
	}
	return strings.Join(lines, "\n")
}

func writeStackFile(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "stack.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func truncateLine(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
