package powercut

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose changes go through the undo log.
type node struct {
	*fs.LoopbackNode
	p *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.FileWriter         = (*file)(nil)
	_ fs.FileWritever       = (*file)(nil)
	_ fs.FileFsyncer        = (*file)(nil)
	_ fs.FileAllocater      = (*file)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
)

// WrapChild makes every node of the tree a powercut node.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	if lb, ok := ops.(*fs.LoopbackNode); ok {
		return &node{LoopbackNode: lb, p: n.p}
	}
	return ops
}

// realPath is the node's path in the real directory.
func (n *node) realPath() string {
	return filepath.Join(n.p.real, n.Path(nil))
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.frozen {
		return nil, nil, 0, errFrozen
	}
	path := filepath.Join(n.realPath(), name)
	existed := false
	if st, err := lstat(path); err == nil {
		existed = true
		if flags&syscall.O_TRUNC != 0 {
			if errno := n.p.truncating(st.Ino, path, 0); errno != 0 {
				return nil, nil, 0, errno
			}
		}
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return ch, fh, fl, errno
	}
	f, errno := n.p.wrapFile(fh, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		if old := n.p.files[f.ino]; old != nil && old.fd >= 0 {
			_ = syscall.Close(old.fd)
		}
		n.p.files[f.ino] = &fileState{fd: -1, syncedSize: 0}
	}
	return ch, f, fl, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	writable := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if writable && n.p.frozen {
		return nil, 0, errFrozen
	}
	if writable && flags&syscall.O_TRUNC != 0 {
		path := n.realPath()
		st, err := lstat(path)
		if err != nil {
			return nil, 0, fs.ToErrno(err)
		}
		if errno := n.p.truncating(st.Ino, path, 0); errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	f, errno := n.p.wrapFile(fh, flags)
	return f, fl, errno
}

// truncating records what a truncate of the file to size drops. Callers
// hold p.mu.
func (p *FS) truncating(ino uint64, path string, size int64) syscall.Errno {
	st, err := lstat(path)
	if err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Size <= size {
		return 0
	}
	f, err := p.state(ino, -1, path)
	if err != nil {
		return fs.ToErrno(err)
	}
	f.last = nil
	return fs.ToErrno(f.saveRange(size, st.Size-size))
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.frozen {
		return nil, errFrozen
	}
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return ch, errno
	}
	st, err := lstat(filepath.Join(n.realPath(), name))
	if err != nil {
		return ch, fs.ToErrno(err)
	}
	n.p.dirs[st.Ino] = map[string]uint64{}
	n.p.kinds[st.Ino] = true
	return ch, 0
}

func (n *node) Unlink(_ context.Context, name string) syscall.Errno {
	return n.p.do(func() error { return n.p.removeName(filepath.Join(n.realPath(), name), false) })
}

func (n *node) Rmdir(_ context.Context, name string) syscall.Errno {
	return n.p.do(func() error { return n.p.removeName(filepath.Join(n.realPath(), name), true) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	return n.p.do(func() error {
		if flags&unix.RENAME_EXCHANGE == 0 {
			src, err := lstat(filepath.Join(n.realPath(), name))
			if err != nil {
				return err
			}
			target := filepath.Join(np.realPath(), newName)
			if st, err := lstat(target); err == nil && st.Ino != src.Ino {
				// The replaced inode keeps its data while a durable
				// entry names it.
				if n.p.durableRef(st.Ino) {
					if _, err := lstat(n.p.graveName(st.Ino)); err != nil {
						if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
							if err := syscall.Rename(target, n.p.graveName(st.Ino)); err != nil {
								return err
							}
						} else if err := syscall.Link(target, n.p.graveName(st.Ino)); err != nil {
							return err
						}
					}
				}
			}
		}
		if errno := n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags); errno != 0 {
			return errno
		}
		return nil
	})
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	var ch *fs.Inode
	errno := n.p.do(func() error {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Link(ctx, t.LoopbackNode, name, out)
		if e != 0 {
			return e
		}
		return nil
	})
	return ch, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var ch *fs.Inode
	errno := n.p.do(func() error {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Symlink(ctx, target, name, out)
		if e != 0 {
			return e
		}
		return nil
	})
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var ch *fs.Inode
	errno := n.p.do(func() error {
		var e syscall.Errno
		ch, e = n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
		if e != 0 {
			return e
		}
		return nil
	})
	return ch, errno
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.frozen {
		return errFrozen
	}
	if size, ok := in.GetSize(); ok {
		path := n.realPath()
		st, err := lstat(path)
		if err != nil {
			return fs.ToErrno(err)
		}
		if errno := n.p.truncating(st.Ino, path, int64(size)); errno != 0 {
			return errno
		}
	}
	if f, ok := fh.(*file); ok {
		fh = f.LoopbackFile
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// Tmpfile is not offered: an unnamed file has no durable name to model.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOSYS
}

// CopyFileRange is refused so that the kernel copies through Read and Write.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	return &dirHandle{h: fh, n: n}, fl, 0
}

// file is an open file whose writes and syncs go through the undo log.
type file struct {
	*fs.LoopbackFile
	p   *FS
	ino uint64
	fd  int
	// dsync: opened with O_SYNC or O_DSYNC, so every write is durable
	// when it returns (nats-server writes its meta files and compacted
	// blocks so). The model then makes the whole file durable, as an
	// fsync would: at most more durable than a disk, never less.
	dsync bool
}

func (p *FS) wrapFile(fh fs.FileHandle, flags uint32) (*file, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, ok := lf.PassthroughFd() // the loopback's own descriptor, never handed to the kernel
	if !ok {
		return nil, syscall.EIO
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return &file{LoopbackFile: lf, p: p, ino: st.Ino, fd: fd, dsync: flags&syscall.O_DSYNC != 0}, 0
}

// PassthroughFd hides the loopback's descriptor: with FUSE passthrough the
// kernel would write the real file itself and the log would never see it.
func (f *file) PassthroughFd() (int, bool) { return -1, false }

// writing records what a write of n bytes at off replaces. Callers hold
// p.mu.
func (f *file) writing(data [][]byte, off int64) syscall.Errno {
	if f.p.frozen {
		return errFrozen
	}
	st, err := f.p.state(f.ino, f.fd, "")
	if err != nil {
		return fs.ToErrno(err)
	}
	var all []byte
	for _, d := range data {
		all = append(all, d...)
	}
	if err := st.saveRange(off, int64(len(all))); err != nil {
		return fs.ToErrno(err)
	}
	st.last = &undoRecord{off: off, data: all}
	f.p.stats.Writes++
	return 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if errno := f.writing([][]byte{data}, off); errno != 0 {
		return 0, errno
	}
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	return n, f.wrote(errno)
}

// wrote makes a write through an O_SYNC or O_DSYNC descriptor durable.
// Callers hold p.mu.
func (f *file) wrote(errno syscall.Errno) syscall.Errno {
	if errno != 0 || !f.dsync {
		return errno
	}
	return fs.ToErrno(f.p.synced(f.ino, f.fd))
}

func (f *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if errno := f.writing(data, off); errno != 0 {
		return 0, errno
	}
	n, errno := f.LoopbackFile.Writev(ctx, data, off)
	return n, f.wrote(errno)
}

// Fsync makes the file durable. The real file is not fsynced: the model,
// not the disk, decides what survives.
func (f *file) Fsync(context.Context, uint32) syscall.Errno {
	return f.p.do(func() error { return f.p.synced(f.ino, f.fd) })
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if f.p.frozen {
		return errFrozen
	}
	if mode != 0 {
		return syscall.EOPNOTSUPP // punching holes would change data the log does not see
	}
	if _, err := f.p.state(f.ino, f.fd, ""); err != nil {
		return fs.ToErrno(err)
	}
	return f.LoopbackFile.Allocate(ctx, off, size, mode)
}

// dirHandle is an open directory; its fsync makes its entries durable.
type dirHandle struct {
	h fs.FileHandle
	n *node
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if r, ok := d.h.(fs.FileReaddirenter); ok {
		return r.Readdirent(ctx)
	}
	return nil, syscall.ENOTSUP
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.h.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.h.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

func (d *dirHandle) Fsyncdir(context.Context, uint32) syscall.Errno {
	return d.n.p.do(func() error { return d.n.p.dirSynced(d.n.realPath()) })
}
