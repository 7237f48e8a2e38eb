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
)

// MountSmallDisk mounts a tmpfs of size bytes (mode 0700) at dir, created
// if needed, and unmounts it when the test ends. It skips the test when this
// process may not mount (not root, or no tmpfs).
func MountSmallDisk(t testing.TB, dir string, size int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
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
