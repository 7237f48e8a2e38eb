package testutil

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unmountWait bounds how long the unmount at a test's end waits for the
// descriptors on the disk to go: a store closed just before may still be
// letting go of a connection (database/sql closes one that was in use when
// it comes back), and on a loaded machine that can take a while.
const unmountWait = 30 * time.Second

// MountSmallDisk mounts a tmpfs of size bytes (mode 0700) at dir, created
// if needed, and unmounts it when the test ends, on every path: the
// cleanup is registered before the mount. It skips the test when this
// process may not mount (not root, or no tmpfs).
//
// The unmount needs every file on the disk closed, in this process and in
// every other: a test must close its stores and stop the processes it
// started on the disk before it ends (t.Cleanup functions registered after
// MountSmallDisk run before the unmount). While the disk is busy the
// unmount is retried for up to unmountWait; if it stays busy, the test
// fails naming each process and file still open there, and the disk is
// detached (a lazy unmount) so that nothing stays mounted.
func MountSmallDisk(t testing.TB, dir string, size int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	mounted := false
	t.Cleanup(func() {
		if mounted {
			unmount(t, dir)
		}
	})
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	mounted = true
}

// unmount unmounts dir, waiting while it is busy; see MountSmallDisk.
func unmount(t testing.TB, dir string) {
	t.Helper()
	deadline := time.Now().Add(unmountWait)
	for {
		err := syscall.Unmount(dir, 0)
		if err == nil {
			return
		}
		if errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		open := OpenUnder(dir)
		derr := syscall.Unmount(dir, syscall.MNT_DETACH)
		t.Errorf("unmount %s: %v (after %s); still open there: %s; detached it: %v",
			dir, err, unmountWait, strings.Join(open, "; "), derr)
		return
	}
}

// OpenUnder lists what keeps files under dir in use, one entry per process
// and file: open descriptors, memory mappings (a -shm index) and working
// directories, as "pid N (COMM): PATH". Processes of other users are not
// visible to a non-root caller.
func OpenUnder(dir string) []string {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"cannot list /proc: " + err.Error()}
	}
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	var out []string
	for _, pe := range procs {
		pid := pe.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		base := filepath.Join("/proc", pid)
		comm, _ := os.ReadFile(filepath.Join(base, "comm"))
		seen := map[string]bool{}
		add := func(what, p string) {
			if under(p) && !seen[what+p] {
				seen[what+p] = true
				out = append(out, fmt.Sprintf("pid %s (%s): %s%s", pid, strings.TrimSpace(string(comm)), what, p))
			}
		}
		fds, _ := os.ReadDir(filepath.Join(base, "fd"))
		for _, fd := range fds {
			if p, err := os.Readlink(filepath.Join(base, "fd", fd.Name())); err == nil {
				add("", strings.TrimSuffix(p, " (deleted)"))
			}
		}
		if p, err := os.Readlink(filepath.Join(base, "cwd")); err == nil {
			add("cwd ", p)
		}
		if maps, err := os.ReadFile(filepath.Join(base, "maps")); err == nil {
			for _, l := range strings.Split(string(maps), "\n") {
				if i := strings.IndexByte(l, '/'); i >= 0 {
					add("mapped ", strings.TrimSuffix(l[i:], " (deleted)"))
				}
			}
		}
	}
	if len(out) == 0 {
		return []string{"nothing found (a mount below it, or a process of another user)"}
	}
	return out
}

// FillDisk writes a file of zeros at path until the disk is full or max
// bytes are written, and returns its size.
func FillDisk(t testing.TB, path string, max int) int {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf := make([]byte, 4096)
	n := 0
	for n < max {
		w, err := fh.Write(buf)
		n += w
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// StoreHashes is the sha256 of every file in a store directory, by name,
// but the lock files (which hold no data).
func StoreHashes(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][32]byte{}
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		out[e.Name()] = HashFile(t, filepath.Join(dir, e.Name()))
	}
	return out
}

// HashFile is the sha256 of the file at path. Never call it on a database
// a connection of this process has open: reading it through a descriptor
// of its own and closing that drops SQLite's POSIX locks.
func HashFile(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
