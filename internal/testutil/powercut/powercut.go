// Package powercut is a test file system that simulates a power cut: a FUSE
// passthrough over a real directory which remembers, for every write, what
// it replaced, and forgets that the moment the file is fsynced. Names work
// the same way: a create, rename or unlink is durable only once its
// directory is fsynced. Cut stops the file system and puts the real
// directory back to what the last fsyncs made durable, dropping every write
// and every name change that was not synced, and optionally tearing the last
// unsynced write of each file at a 512-byte sector boundary (the model of
// Jepsen's lazyfs, built as an undo log instead of a page cache).
//
// It is for tests only: nothing outside _test.go files may import it, so no
// app that links the bindings links go-fuse.
package powercut

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// SectorSize is the unit a torn write is cut at.
const SectorSize = 512

// FS is one mounted power-cut file system.
type FS struct {
	real  string // the directory the data lives in
	grave string // same file system: unlinked names that are still durable
	mnt   string

	server *fuse.Server

	mu     sync.Mutex
	frozen bool
	files  map[uint64]*fileState        // inode -> unsynced writes
	dirs   map[uint64]map[string]uint64 // directory inode -> durable entries
	kinds  map[uint64]bool              // inode -> is a directory (for durable entries)
	stats  Stats
}

// Stats counts what the file system saw since it was mounted.
type Stats struct {
	Writes, FileSyncs, DirSyncs int
}

type fileState struct {
	fd         int   // read-write descriptor on the real file, -1 until needed
	syncedSize int64 // size at the last fsync
	undo       []undoRecord
	last       *undoRecord // the last unsynced write: offset and the bytes written
}

type undoRecord struct {
	off  int64
	data []byte
}

// Available reports why the file system cannot be mounted here, or "" when
// it can: it needs /dev/fuse.
func Available() string {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Sprintf("powercut needs /dev/fuse: %v", err)
	}
	return ""
}

// Mount creates a fresh real directory and mounts the file system over it.
// It skips the test when /dev/fuse is missing and fails it on any other
// mount error. The unmount is registered with t.Cleanup before mounting.
func Mount(t testing.TB) *FS {
	t.Helper()
	if why := Available(); why != "" {
		t.Skip(why)
	}
	base := t.TempDir()
	p := &FS{
		real:  filepath.Join(base, "real"),
		grave: filepath.Join(base, "grave"),
		mnt:   filepath.Join(base, "mnt"),
		files: map[uint64]*fileState{},
		dirs:  map[uint64]map[string]uint64{},
		kinds: map[uint64]bool{},
	}
	for _, d := range []string{p.real, p.grave, p.mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { p.unmount(); p.closeFds() })
	if err := p.mount(); err != nil {
		t.Fatalf("powercut: mount %s: %v", p.mnt, err)
	}
	return p
}

// Dir is the mount point: put the stores under test here.
func (p *FS) Dir() string { return p.mnt }

// RealDir is the directory underneath; after Cut it holds what survived.
func (p *FS) RealDir() string { return p.real }

// Stats returns the counters so far.
func (p *FS) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

func (p *FS) mount() error {
	if err := p.snapshotDir(p.real); err != nil {
		return err
	}
	rootEmb, err := fs.NewLoopbackRoot(p.real)
	if err != nil {
		return err
	}
	root := &node{LoopbackNode: rootEmb.(*fs.LoopbackNode), p: p}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "powercut",
			Name:        "powercut",
			DirectMount: true,
			MaxWrite:    fuse.MAX_KERNEL_WRITE,
		},
	}
	server, err := fs.Mount(p.mnt, root, opts)
	if err != nil {
		return err
	}
	p.server = server
	return nil
}

// snapshotDir records the directory tree under dir as durable (the state
// before the mount is what a disk holds).
func (p *FS) snapshotDir(dir string) error {
	st, err := lstat(dir)
	if err != nil {
		return err
	}
	p.kinds[st.Ino] = true
	entries, err := readEntries(dir)
	if err != nil {
		return err
	}
	p.dirs[st.Ino] = entries
	for name, ino := range entries {
		cst, err := lstat(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		p.kinds[ino] = cst.Mode&syscall.S_IFMT == syscall.S_IFDIR
		if p.kinds[ino] {
			if err := p.snapshotDir(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

func readEntries(dir string) (map[string]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(des))
	for _, de := range des {
		st, err := lstat(filepath.Join(dir, de.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, err
		}
		out[de.Name()] = st.Ino
	}
	return out, nil
}

func lstat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return &st, nil
}

func (p *FS) unmount() {
	if p.server == nil {
		return
	}
	if err := p.server.Unmount(); err != nil {
		// A busy mount (a process still holds a file) is detached lazily
		// so that it never stays.
		_ = exec.Command("umount", "-l", p.mnt).Run()
	}
	p.server.Wait()
	p.server = nil
}

func (p *FS) closeFds() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.files {
		if f.fd >= 0 {
			_ = syscall.Close(f.fd)
			f.fd = -1
		}
	}
}

// Freeze is the moment the power goes: every later change through the
// mount fails with EIO and reaches nothing. A test that must close what it
// holds in the mount before Cut (Cut needs every file closed) freezes
// first, so that the closing writes nothing durable.
func (p *FS) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// CutOptions says how a cut treats the last unsynced write of each file.
type CutOptions struct {
	// Tear writes a sector-aligned prefix of each file's last unsynced
	// write (at least one sector, never all of it) after dropping the rest:
	// the part of a page that reached the disk before the power went. A
	// torn write that grew the file leaves it at its new size, zeros after
	// the prefix.
	Tear bool
	// Rand picks where writes tear; nil uses a fixed seed.
	Rand *rand.Rand
}

// CutReport says what a cut dropped.
type CutReport struct {
	FilesReverted int      // files with unsynced writes
	BytesDropped  int64    // bytes of unsynced writes undone
	NamesChanged  int      // directory entries put back or removed
	NamesDropped  []string // the names removed (created or renamed there, never synced)
	Torn          int      // writes torn
}

// Cut is the power cut: from now on every change through the mount fails,
// the mount goes away (the processes using it must be gone: kill them
// first), and the real directory is put back to its durable state. The
// report says what was dropped.
func (p *FS) Cut(opts CutOptions) (CutReport, error) {
	p.Freeze()
	p.unmount()
	p.mu.Lock()
	defer p.mu.Unlock()
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(1, 2))
	}
	var rep CutReport
	// File contents first, through the descriptors held (a file may have
	// no name left at all).
	inos := make([]uint64, 0, len(p.files))
	for ino := range p.files {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		f := p.files[ino]
		if f.fd < 0 {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(f.fd, &st); err != nil {
			return rep, fmt.Errorf("powercut: fstat inode %d: %w", ino, err)
		}
		if len(f.undo) == 0 && st.Size == f.syncedSize {
			continue
		}
		rep.FilesReverted++
		for i := len(f.undo) - 1; i >= 0; i-- {
			u := f.undo[i]
			rep.BytesDropped += int64(len(u.data))
			if _, err := syscall.Pwrite(f.fd, u.data, u.off); err != nil {
				return rep, fmt.Errorf("powercut: undo inode %d: %w", ino, err)
			}
		}
		if err := syscall.Ftruncate(f.fd, f.syncedSize); err != nil {
			return rep, fmt.Errorf("powercut: truncate inode %d: %w", ino, err)
		}
		if opts.Tear && f.last != nil {
			if n := tearLength(f.last.off, len(f.last.data), opts.Rand); n > 0 {
				if _, err := syscall.Pwrite(f.fd, f.last.data[:n], f.last.off); err != nil {
					return rep, fmt.Errorf("powercut: tear inode %d: %w", ino, err)
				}
				// A torn write that grew the file keeps its whole size,
				// the sectors that did not arrive reading as zeros (the
				// size reached the disk, part of the data did not).
				if end := f.last.off + int64(len(f.last.data)); end > f.syncedSize {
					if err := syscall.Ftruncate(f.fd, end); err != nil {
						return rep, fmt.Errorf("powercut: tear inode %d: %w", ino, err)
					}
				}
				rep.Torn++
			}
		}
		f.undo, f.last = nil, nil
	}
	n, dropped, err := p.restoreNames()
	rep.NamesChanged, rep.NamesDropped = n, dropped
	if err != nil {
		return rep, err
	}
	return rep, nil
}

// tearLength is how many bytes of a write at off of n bytes reach the disk
// when it tears: up to a sector boundary strictly inside the write, 0 when
// the write has none.
func tearLength(off int64, n int, r *rand.Rand) int {
	first := (off/SectorSize + 1) * SectorSize // first boundary after off
	end := off + int64(n)
	if first >= end {
		return 0
	}
	count := (end - 1 - first) / SectorSize // boundaries in (off, end) minus one
	b := first + r.Int64N(count+1)*SectorSize
	return int(b - off)
}

// restoreNames makes the real tree's names the durable ones: every live
// entry goes to the grave (named by its inode), then the durable entries are
// put back from there, from the root down.
func (p *FS) restoreNames() (int, []string, error) {
	rootSt, err := lstat(p.real)
	if err != nil {
		return 0, nil, err
	}
	live := map[string]liveEntry{} // "dirIno/name" -> entry, to count changes
	if err := p.flatten(p.real, rootSt.Ino, live); err != nil {
		return 0, nil, err
	}
	changed := 0
	placed := map[uint64]string{}
	if err := p.place(p.real, rootSt.Ino, live, placed, &changed); err != nil {
		return changed, nil, err
	}
	changed += len(live) // entries that were live and are not durable
	var dropped []string
	for _, e := range live {
		dropped = append(dropped, e.path)
	}
	sort.Strings(dropped)
	des, err := os.ReadDir(p.grave)
	if err != nil {
		return changed, dropped, err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(p.grave, de.Name())); err != nil {
			return changed, dropped, err
		}
	}
	return changed, dropped, nil
}

// liveEntry is a name the tree had at the cut.
type liveEntry struct {
	ino  uint64
	path string // relative to the real directory
}

func (p *FS) graveName(ino uint64) string {
	return filepath.Join(p.grave, strconv.FormatUint(ino, 10))
}

func (p *FS) flatten(dir string, dirIno uint64, live map[string]liveEntry) error {
	entries, err := readEntries(dir)
	if err != nil {
		return err
	}
	for name, ino := range entries {
		path := filepath.Join(dir, name)
		st, err := lstat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(p.real, path)
		live[fmt.Sprintf("%d/%s", dirIno, name)] = liveEntry{ino: ino, path: rel}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if err := p.flatten(path, ino, live); err != nil {
				return err
			}
		}
		if _, err := lstat(p.graveName(ino)); err == nil {
			// Another name of the same inode is in the grave already.
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		if err := os.Rename(path, p.graveName(ino)); err != nil {
			return err
		}
	}
	return nil
}

func (p *FS) place(dir string, dirIno uint64, live map[string]liveEntry, placed map[uint64]string, changed *int) error {
	names := make([]string, 0, len(p.dirs[dirIno]))
	for name := range p.dirs[dirIno] {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ino := p.dirs[dirIno][name]
		key := fmt.Sprintf("%d/%s", dirIno, name)
		if e, ok := live[key]; ok && e.ino == ino {
			delete(live, key)
		} else {
			*changed++
		}
		dst := filepath.Join(dir, name)
		if prev, ok := placed[ino]; ok {
			if p.kinds[ino] {
				return fmt.Errorf("powercut: directory inode %d durable at both %s and %s", ino, prev, dst)
			}
			if err := os.Link(prev, dst); err != nil {
				return err
			}
			continue
		}
		if err := os.Rename(p.graveName(ino), dst); err != nil {
			return fmt.Errorf("powercut: durable entry %s (inode %d) has no data: %w", dst, ino, err)
		}
		placed[ino] = dst
		if p.kinds[ino] {
			if err := p.place(dst, ino, live, placed, changed); err != nil {
				return err
			}
		}
	}
	return nil
}

// durableRef reports whether some durable directory entry names ino.
// Callers hold p.mu.
func (p *FS) durableRef(ino uint64) bool {
	for _, entries := range p.dirs {
		for _, e := range entries {
			if e == ino {
				return true
			}
		}
	}
	return false
}

// state is the undo state of the real file open as fd (or at path when fd
// is -1). Callers hold p.mu.
func (p *FS) state(ino uint64, fd int, path string) (*fileState, error) {
	f := p.files[ino]
	if f == nil {
		f = &fileState{fd: -1, syncedSize: -1}
		p.files[ino] = f
	}
	if f.fd < 0 {
		src := path
		if fd >= 0 {
			src = fmt.Sprintf("/proc/self/fd/%d", fd)
		}
		nfd, err := syscall.Open(src, syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		f.fd = nfd
	}
	if f.syncedSize < 0 {
		var st syscall.Stat_t
		if err := syscall.Fstat(f.fd, &st); err != nil {
			return nil, err
		}
		f.syncedSize = st.Size
	}
	return f, nil
}

// saveRange records the bytes in [off, off+n) the coming change replaces.
// Callers hold p.mu.
func (f *fileState) saveRange(off, n int64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return err
	}
	end := min(off+n, st.Size, f.syncedSize)
	if end <= off {
		return nil // beyond the synced size: the truncate at the cut drops it
	}
	buf := make([]byte, end-off)
	got, err := syscall.Pread(f.fd, buf, off)
	if err != nil {
		return err
	}
	f.undo = append(f.undo, undoRecord{off: off, data: buf[:got]})
	return nil
}

// synced makes the file's current content durable. Callers hold p.mu.
func (p *FS) synced(ino uint64, fd int) error {
	p.stats.FileSyncs++
	f := p.files[ino]
	if f == nil {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	f.syncedSize = st.Size
	f.undo, f.last = nil, nil
	return nil
}

// dirSynced makes the directory's current entries durable. Callers hold
// p.mu.
func (p *FS) dirSynced(path string) error {
	p.stats.DirSyncs++
	st, err := lstat(path)
	if err != nil {
		return err
	}
	entries, err := readEntries(path)
	if err != nil {
		return err
	}
	p.dirs[st.Ino] = entries
	for name, ino := range entries {
		if _, ok := p.kinds[ino]; ok {
			continue
		}
		cst, err := lstat(filepath.Join(path, name))
		if err != nil {
			return err
		}
		p.kinds[ino] = cst.Mode&syscall.S_IFMT == syscall.S_IFDIR
	}
	return nil
}

// removeName takes the entry path out of the live tree: into the grave
// when a durable entry still names its inode, for good otherwise. Callers
// hold p.mu.
func (p *FS) removeName(path string, dir bool) error {
	st, err := lstat(path)
	if err != nil {
		return err
	}
	if p.durableRef(st.Ino) {
		if _, err := lstat(p.graveName(st.Ino)); err != nil {
			if dir {
				return os.Rename(path, p.graveName(st.Ino))
			}
			if err := os.Link(path, p.graveName(st.Ino)); err != nil {
				return err
			}
		}
	}
	if dir {
		return syscall.Rmdir(path)
	}
	if err := syscall.Unlink(path); err != nil {
		return err
	}
	if st.Nlink == 1 && !p.durableRef(st.Ino) {
		if f := p.files[st.Ino]; f != nil {
			if f.fd >= 0 {
				_ = syscall.Close(f.fd)
			}
			delete(p.files, st.Ino)
		}
	}
	return nil
}

var errFrozen = syscall.EIO

// do runs a change under the lock, refusing it after a cut.
func (p *FS) do(fn func() error) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return errFrozen
	}
	return fs.ToErrno(fn())
}
