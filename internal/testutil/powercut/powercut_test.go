package powercut_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/internal/testutil/powercut"
)

func write(t *testing.T, path string, data []byte, off int64, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of directory %s: %v", dir, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s exists after the cut (err %v): its name was never synced", path, err)
	}
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), " "+dir+" ")
}

// prepare writes the durable starting state: files a, c, e and dir sub with
// file s, all synced.
func prepare(t *testing.T, m string) {
	write(t, filepath.Join(m, "a"), []byte("synced-a"), 0, true)
	write(t, filepath.Join(m, "c"), []byte("synced-c"), 0, true)
	write(t, filepath.Join(m, "e"), []byte("synced-e"), 0, true)
	write(t, filepath.Join(m, "cfg"), []byte("old-config"), 0, true)
	if err := os.Mkdir(filepath.Join(m, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(m, "sub", "s"), []byte("synced-s"), 0, true)
	syncDir(t, filepath.Join(m, "sub"))
	syncDir(t, m)
}

// change makes unsynced changes of every kind; with sync it syncs them all.
func change(t *testing.T, m string, sync bool) {
	write(t, filepath.Join(m, "a"), []byte("SYNCED-A-and-more"), 0, sync)
	write(t, filepath.Join(m, "b"), []byte("new-b"), 0, true) // data synced, name maybe not
	if err := os.Rename(filepath.Join(m, "c"), filepath.Join(m, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(m, "e")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(m, "cfg.tmp"), []byte("new-config"), 0, true)
	if err := os.Rename(filepath.Join(m, "cfg.tmp"), filepath.Join(m, "cfg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(m, "sub", "s"), 3); err != nil {
		t.Fatal(err)
	}
	if sync {
		f, err := os.OpenFile(filepath.Join(m, "sub", "s"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		syncDir(t, m)
	}
}

func TestCutDropsWhatWasNotSynced(t *testing.T) {
	p := powercut.Mount(t)
	m := p.Dir()
	prepare(t, m)
	change(t, m, false)
	if got := mustRead(t, filepath.Join(m, "a")); string(got) != "SYNCED-A-and-more" {
		t.Fatalf("read through the mount: %q", got)
	}
	rep, err := p.Cut(powercut.CutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mounted(t, m) {
		t.Errorf("%s still mounted after Cut", m)
	}
	r := p.RealDir()
	for name, want := range map[string]string{"a": "synced-a", "c": "synced-c", "e": "synced-e", "cfg": "old-config", "sub/s": "synced-s"} {
		if got := mustRead(t, filepath.Join(r, name)); string(got) != want {
			t.Errorf("%s after the cut = %q, want the synced %q", name, got, want)
		}
	}
	mustNotExist(t, filepath.Join(r, "b"))
	mustNotExist(t, filepath.Join(r, "d"))
	mustNotExist(t, filepath.Join(r, "cfg.tmp"))
	if rep.FilesReverted < 2 || rep.NamesChanged < 4 {
		t.Errorf("report %+v: expected at least 2 files reverted and 4 names changed", rep)
	}
}

func TestCutKeepsWhatWasSynced(t *testing.T) {
	p := powercut.Mount(t)
	m := p.Dir()
	prepare(t, m)
	change(t, m, true)
	if _, err := p.Cut(powercut.CutOptions{}); err != nil {
		t.Fatal(err)
	}
	r := p.RealDir()
	for name, want := range map[string]string{"a": "SYNCED-A-and-more", "b": "new-b", "d": "synced-c", "cfg": "new-config", "sub/s": "syn"} {
		if got, err := os.ReadFile(filepath.Join(r, name)); err != nil || string(got) != want {
			t.Errorf("%s after the cut = %q (%v), want the synced %q", name, got, err, want)
		}
	}
	mustNotExist(t, filepath.Join(r, "c"))
	mustNotExist(t, filepath.Join(r, "e"))
	mustNotExist(t, filepath.Join(r, "cfg.tmp"))
}

// A new directory with a synced file in it survives only when both the
// directory and its parent were synced.
func TestCutNewDirectoryNeedsParentSync(t *testing.T) {
	for _, parentSync := range []bool{false, true} {
		p := powercut.Mount(t)
		m := p.Dir()
		if err := os.Mkdir(filepath.Join(m, "store"), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(m, "store", "f"), []byte("data"), 0, true)
		syncDir(t, filepath.Join(m, "store"))
		if parentSync {
			syncDir(t, m)
		}
		if _, err := p.Cut(powercut.CutOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(p.RealDir(), "store", "f"))
		if parentSync && (err != nil || string(got) != "data") {
			t.Errorf("parent synced: store/f = %q, %v", got, err)
		}
		if !parentSync {
			mustNotExist(t, filepath.Join(p.RealDir(), "store"))
		}
	}
}

func TestCutTearsAtASectorBoundary(t *testing.T) {
	p := powercut.Mount(t)
	m := p.Dir()
	old := bytes.Repeat([]byte{'o'}, 12288)
	write(t, filepath.Join(m, "f"), old, 0, true)
	syncDir(t, m)
	write(t, filepath.Join(m, "f"), bytes.Repeat([]byte{'x'}, 100), 0, false) // dropped whole
	// One page, page-aligned: the kernel sends it as one write, the last.
	const off = 4096
	nw := bytes.Repeat([]byte{'n'}, 4096)
	write(t, filepath.Join(m, "f"), nw, off, false)
	rep, err := p.Cut(powercut.CutOptions{Tear: true, Rand: rand.New(rand.NewPCG(7, 7))})
	if err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, filepath.Join(p.RealDir(), "f"))
	if len(got) != len(old) || rep.Torn != 1 {
		t.Fatalf("size %d torn %d, want %d and 1", len(got), rep.Torn, len(old))
	}
	if !bytes.Equal(got[:off], old[:off]) {
		t.Errorf("bytes before the torn write changed: the earlier unsynced write was kept")
	}
	k := bytes.IndexByte(got[off:], 'o')
	if k <= 0 || k >= len(nw) || (off+k)%powercut.SectorSize != 0 {
		t.Fatalf("torn write kept %d bytes: want a prefix ending at a sector boundary, not all, not none", k)
	}
	if !bytes.Equal(got[off:off+k], nw[:k]) || !bytes.Equal(got[off+k:], old[off+k:]) {
		t.Errorf("torn file is not old data + a prefix of the write + old data")
	}
}

// Writes made after a cut fail; nothing reaches the real directory.
func TestCutStopsTheMount(t *testing.T) {
	p := powercut.Mount(t)
	m := p.Dir()
	write(t, filepath.Join(m, "f"), []byte("x"), 0, true)
	if _, err := p.Cut(powercut.CutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m, "f"), []byte("y"), 0o600); err == nil {
		if _, err := os.Stat(filepath.Join(p.RealDir(), "f")); err == nil {
			t.Fatalf("the real file exists and a write after the cut succeeded")
		}
	}
	mustNotExist(t, filepath.Join(p.RealDir(), "f")) // name never synced
}

// A write through a descriptor opened with O_SYNC is durable when it
// returns, without an fsync.
func TestCutKeepsOSyncWrites(t *testing.T) {
	p := powercut.Mount(t)
	m := p.Dir()
	write(t, filepath.Join(m, "f"), []byte("old"), 0, true)
	syncDir(t, m)
	f, err := os.OpenFile(filepath.Join(m, "f"), os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("NEW"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(t, filepath.Join(m, "g"), []byte("plain"), 0, false) // neither data nor name synced
	if _, err := p.Cut(powercut.CutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(p.RealDir(), "f")); string(got) != "NEW" {
		t.Errorf("O_SYNC write lost: f = %q", got)
	}
	mustNotExist(t, filepath.Join(p.RealDir(), "g"))
}
