//go:build unix

package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/config"
)

// TestLoadRefusesNonRegular checks that Load and ReadFile refuse a FIFO, a
// device and a directory without reading them: a FIFO without a writer
// would otherwise block the open forever, /dev/zero never ends.
func TestLoadRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "stack.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		want fs.FileMode
		msg  string
	}{
		{fifo, fs.ModeNamedPipe, "stack file " + fifo + " is a named pipe (FIFO), not a regular file"},
		{"/dev/zero", fs.ModeCharDevice, "stack file /dev/zero is a character device, not a regular file"},
		{dir, fs.ModeDir, "stack file " + dir + " is a directory, not a regular file"},
	}
	for _, c := range cases {
		for name, read := range map[string]func(string) error{
			"Load":     func(p string) error { _, err := config.Load(p); return err },
			"ReadFile": func(p string) error { _, err := config.ReadFile(p); return err },
		} {
			err := read(c.path)
			var nr *config.NotRegularError
			if !errors.As(err, &nr) {
				t.Errorf("%s(%s) = %v, want a *NotRegularError", name, c.path, err)
				continue
			}
			if nr.Mode&c.want == 0 {
				t.Errorf("%s(%s): mode %s, want %s", name, c.path, nr.Mode, c.want)
			}
			if err.Error() != c.msg {
				t.Errorf("%s(%s) = %q, want %q", name, c.path, err, c.msg)
			}
		}
	}
}

// TestLoadFollowsSymlinkToRegular checks that the regular-file rule looks
// through a symlink: a stack file may be a link to one.
func TestLoadFollowsSymlinkToRegular(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.yaml")
	if err := os.WriteFile(real, []byte("version: 1\nname: shop\nbindings:\n  carts:\n    type: kv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "stack.yaml")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(link); err != nil {
		t.Fatalf("Load(symlink to a regular file) = %v", err)
	}
	if _, err := config.ReadFile(link); err != nil {
		t.Fatalf("ReadFile(symlink to a regular file) = %v", err)
	}
}

// TestLoadSwapRaceNeverBlocks swaps the stack file between a regular file
// and a FIFO while Load reads it: the path may pass the stat as a regular
// file and be a FIFO by the open. Every Load must return at once, either
// the stack or a *NotRegularError. It runs until the swapper has made 400
// swaps, so the window between stat and open is hit many times.
func TestLoadSwapRaceNeverBlocks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stack.yaml")
	regular, fifo := filepath.Join(dir, "regular.tmp"), filepath.Join(dir, "fifo.tmp")
	text := []byte("version: 1\nname: shop\nbindings:\n  carts:\n    type: kv\n")
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for i := range 400 {
			var err error
			if i%2 == 0 {
				if err = syscall.Mkfifo(fifo, 0o644); err == nil {
					err = os.Rename(fifo, path)
				}
			} else if err = os.WriteFile(regular, text, 0o644); err == nil {
				err = os.Rename(regular, path)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}()
	results := make(chan error)
	go func() {
		defer close(results)
		for {
			select {
			case <-swapped:
				return
			default:
			}
			_, err := config.Load(path)
			results <- err
		}
	}()
	var fifos, stacks int
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case err, ok := <-results:
			var nr *config.NotRegularError
			switch {
			case !ok:
				t.Logf("%d loads saw the stack, %d a FIFO", stacks, fifos)
				return
			case err == nil:
				stacks++
			case errors.As(err, &nr):
				fifos++
			default:
				t.Errorf("Load = %v, want the stack or a *NotRegularError", err)
			}
		case <-timeout.C:
			// A blocked open: give it a writer so the goroutine ends.
			if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("Load blocked after %d stacks and %d FIFOs", stacks, fifos)
		}
	}
}
