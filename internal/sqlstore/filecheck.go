package sqlstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The checks in this file look at a store's files with stat(2) and plain
// reads of the database header, the -wal header and the -shm header, before
// SQLite sees them. SQLite trusts whatever sits beside a database: it
// replays a -wal file on the first read whatever database it came from (a
// WAL carries no database identity) and writes its frames into the database
// file at the next checkpoint, which the last connection to close runs. So
// a store whose files cannot be trusted is refused before any SQLite
// connection opens it.
//
// Reading the database header opens a second descriptor on the database
// file, and closing it drops every POSIX lock this process holds on it
// (STYLE 10). Open therefore runs these checks only while no handle of this
// process has the store open (see acquireLock).

// Kinds of the file problems, also used as [Problem] kinds by [Verify].
const (
	// ProblemFile: the database file was cut short: mid-page, or shorter
	// than its header says. (A wiped or foreign header is a ProblemOpen.)
	ProblemFile = "file"
	// ProblemWAL: a non-empty -wal file beside the database cannot be shown
	// to belong to it.
	ProblemWAL = "wal"
	// ProblemMode: the store directory or a file of the store is open to
	// group or others.
	ProblemMode = "mode"
)

// fileProblem is one finding of the checks below.
type fileProblem struct {
	kind, path, msg string
	// unreadable: SQLite cannot read the file as a database at all.
	unreadable bool
}

func (p *fileProblem) Error() string { return p.msg }

// The file-mode policy of stores, the one every tool applies (open, up's
// health check, status, check): a store directory is created StoreDirMode
// and its files StoreFileMode. A mode that lets group or others WRITE is
// refused (they could plant a -wal or replace the database); one that lets
// them only read or enter is a warning (the data can be read, not changed);
// a mode that takes the owner's own access away is a problem for the tools
// that report (the store cannot be used), and fails open by itself.
const (
	StoreDirMode  fs.FileMode = 0o700
	StoreFileMode fs.FileMode = 0o600
)

// Short names inside this package.
const (
	storeDirMode  = StoreDirMode
	storeFileMode = StoreFileMode
)

// ModeVerdict is what the policy says about one mode.
type ModeVerdict int

// The verdicts of the file-mode policy.
const (
	ModeOK     ModeVerdict = iota
	ModeWarn               // group or others can read or enter: warn, keep going
	ModeRefuse             // group or others can write: refuse to open, report a problem
	ModeOwner              // the owner lacks access the store needs: report a problem
)

// DirModeVerdict judges the mode of a store directory at path and returns
// the message that explains a verdict other than ModeOK.
func DirModeVerdict(dir string, perm fs.FileMode) (ModeVerdict, string) {
	perm = perm.Perm()
	if p, w := checkDirModePerm(dir, perm); p != nil {
		return ModeRefuse, p.msg
	} else if w != "" {
		return ModeWarn, w
	}
	if perm&storeDirMode != storeDirMode {
		return ModeOwner, fmt.Sprintf("store directory %s has mode %04o: the owner lacks access localcloud needs (%04o): fix with chmod 700 %s", dir, perm, storeDirMode, dir)
	}
	return ModeOK, ""
}

// FileModeVerdict judges the mode of a database, -wal or -shm file at path
// and returns the message that explains a verdict other than ModeOK.
func FileModeVerdict(path string, perm fs.FileMode) (ModeVerdict, string) {
	perm = perm.Perm()
	if p, w := checkFileModePerm(path, perm); p != nil {
		return ModeRefuse, p.msg
	} else if w != "" {
		return ModeWarn, w
	}
	if perm&storeFileMode != storeFileMode {
		return ModeOwner, fmt.Sprintf("%s has mode %04o: the owner lacks access localcloud needs (%04o): fix with chmod 600 %s", path, perm, storeFileMode, path)
	}
	return ModeOK, ""
}

// sqliteMagic starts every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// headerInfo is what the 100-byte database header says.
type headerInfo struct {
	size     int64 // of the file
	pageSize int64 // 0 for an empty file
	// pages is the in-header database size, or -1 when SQLite would not
	// trust it either (change counter and version-valid-for differ).
	pages int64
}

// groupOtherWrite are the permission bits that let group or others write.
const groupOtherWrite fs.FileMode = 0o022

// checkDirMode refuses a store directory that group or others may write:
// they could plant a -wal (which SQLite would replay into the database) or
// replace the database. A directory they may only read or enter is a
// warning: the data can be read, but not changed.
func checkDirMode(dir string, fi fs.FileInfo) (*fileProblem, string) {
	return checkDirModePerm(dir, fi.Mode().Perm())
}

func checkDirModePerm(dir string, perm fs.FileMode) (*fileProblem, string) {
	if perm&groupOtherWrite != 0 {
		return &fileProblem{kind: ProblemMode, path: dir, msg: fmt.Sprintf(
			"store directory %s has mode %04o: group or others can write it, so they could plant or replace the store's files (a -wal SQLite would replay into the database); localcloud keeps it %04o: fix with chmod 700 %s",
			dir, perm, storeDirMode, dir)}, ""
	}
	if perm&^storeDirMode != 0 {
		return nil, fmt.Sprintf("store directory %s has mode %04o: group or others can %s it; localcloud keeps it %04o: fix with chmod 700 %s",
			dir, perm, access(perm), storeDirMode, dir)
	}
	return nil, ""
}

// checkFileMode refuses a database, -wal or -shm file that group or others
// may write, and warns about one they may only read.
func checkFileMode(path string, fi fs.FileInfo) (*fileProblem, string) {
	return checkFileModePerm(path, fi.Mode().Perm())
}

func checkFileModePerm(path string, perm fs.FileMode) (*fileProblem, string) {
	msg := fmt.Sprintf("%s has mode %04o: group or others can %s it; localcloud keeps store files %04o: fix with chmod 600 %s",
		path, perm, access(perm), storeFileMode, path)
	switch {
	case perm&groupOtherWrite != 0:
		return &fileProblem{kind: ProblemMode, path: path, msg: msg}, ""
	case perm&^storeFileMode != 0:
		return nil, msg
	}
	return nil, ""
}

func access(perm fs.FileMode) string {
	switch {
	case perm&0o022 != 0 && perm&0o044 != 0:
		return "read and write"
	case perm&0o022 != 0:
		return "write"
	case perm&0o044 != 0:
		return "read"
	}
	return "enter"
}

// checkModes checks the store directory, the database file and its -wal
// and -shm files, where they exist: a mode that lets group or others write
// is a problem, one that lets them only read is a warning.
func checkModes(dir, path string) (*fileProblem, []string) {
	var warns []string
	if di, err := os.Stat(dir); err == nil {
		p, w := checkDirMode(dir, di)
		if p != nil {
			return p, nil
		}
		if w != "" {
			warns = append(warns, w)
		}
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
			p, w := checkFileMode(f, fi)
			if p != nil {
				return p, nil
			}
			if w != "" {
				warns = append(warns, w)
			}
		}
	}
	return nil, warns
}

// readHeader reads and checks the database header. An empty file is a
// store not created yet.
func readHeader(path string) (headerInfo, *fileProblem) {
	var h headerInfo
	fh, err := os.Open(path)
	if err != nil {
		return h, &fileProblem{kind: ProblemFile, path: path, msg: fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	defer fh.Close()
	// The header first, then the journal, then the size: another process
	// creating the store writes it in rollback mode, the header with the
	// new page count before the pages after it, and always beside its
	// journal. Read in this order, a header from such a transaction is
	// seen with its journal, or with the size the finished transaction
	// left. (Size first, a second process opening a new store read a file
	// "truncated: it holds 11 pages but its header says 24"; the power-cut
	// tests, which start several processes on new stores, hit it.)
	// A header read short while the file then holds more was read while
	// its creator wrote it: read again.
	b := make([]byte, 100)
	var n int
	var hot bool
	for range 5 {
		var err error
		n, err = fh.ReadAt(b, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return h, &fileProblem{kind: ProblemFile, path: path, msg: fmt.Sprintf("cannot read the header of %s: %v", path, err)}
		}
		hot = hotJournal(path)
		fi, err := fh.Stat()
		if err != nil {
			return h, &fileProblem{kind: ProblemFile, path: path, msg: fmt.Sprintf("cannot stat %s: %v", path, err)}
		}
		h.size = fi.Size()
		if n == len(b) || h.size <= int64(n) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if h.size == 0 || hot {
		// A hot journal: a rollback-mode transaction (the creation of a
		// store) was cut short, or is running in another process, and
		// its pages may be anything; SQLite restores the file from the
		// journal on the next read-write open.
		return h, nil
	}
	if int64(n) > h.size {
		n = int(h.size) // the file shrank after the read: judge what it holds now
	}
	bad := func(format string, args ...any) (headerInfo, *fileProblem) {
		if h.pageSize == 0 {
			return h, &fileProblem{kind: ProblemOpen, path: path, msg: fmt.Sprintf(format, args...), unreadable: true}
		}
		return h, &fileProblem{kind: ProblemFile, path: path, msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case n == 100 && bytes.Equal(b, make([]byte, 100)):
		return bad("%s has its 100-byte SQLite header zeroed (%d bytes follow it): the file is damaged; restore a backup", path, h.size-100)
	case !bytes.HasPrefix(sqliteMagic, b[:min(n, len(sqliteMagic))]):
		return bad("%s is not a SQLite database (it starts with %q, want %q)", path, b[:min(n, 16)], sqliteMagic)
	case n < 100:
		return bad("%s is cut short: %d bytes, less than the 100-byte SQLite header", path, h.size)
	}
	h.pageSize = int64(binary.BigEndian.Uint16(b[16:18]))
	if h.pageSize == 1 {
		h.pageSize = 65536
	}
	if ps := h.pageSize; ps < 512 || ps&(ps-1) != 0 {
		h.pageSize = 0
		return bad("%s has an invalid page size %d in its header: the file is damaged", path, ps)
	}
	h.pages = -1
	if cc, vvf := binary.BigEndian.Uint32(b[24:28]), binary.BigEndian.Uint32(b[92:96]); cc == vvf {
		h.pages = int64(binary.BigEndian.Uint32(b[28:32]))
	}
	if h.size%h.pageSize != 0 {
		return bad("%s is cut mid-page: %d bytes is not a whole number of %d-byte pages (truncated or partly copied); restore a backup",
			path, h.size, h.pageSize)
	}
	return h, nil
}

// truncated reports a database file shorter than its header says, which is
// only legitimate while a -wal still holds the missing pages (a checkpoint
// cut short). (A -journal is dealt with in readHeader.)
func (h headerInfo) truncated(path string) *fileProblem {
	if h.pages > 0 && h.size < h.pages*h.pageSize {
		return &fileProblem{kind: ProblemFile, path: path, msg: fmt.Sprintf(
			"%s is truncated: it holds %d pages of %d bytes but its header says %d; restore a backup",
			path, h.size/h.pageSize, h.pageSize, h.pages)}
	}
	return nil
}

// walState is what checkWAL found.
type walState int

const (
	walNone   walState = iota // no -wal, or an empty one
	walLive                   // another process has the store open: its WAL is in use
	walOrphan                 // left by a process that ended; its -shm index matches it
)

// WAL and wal-index layouts (https://sqlite.org/walformat.html).
const (
	walHeaderSize = 32
	shmHeaderSize = 136 // two copies of the 48-byte index header, then checkpoint info
)

// checkWAL decides whether a non-empty -wal beside path belongs to the
// database. One that another process has open (it holds the -shm lock every
// connection keeps) is in use and trusted. Otherwise the -wal was left by a
// process that ended without checkpointing (a crash), and then SQLite's own
// -shm index, which that process kept up to date, must name the same WAL:
// equal salts (random per WAL generation) and page size. A -wal without its
// -shm, or with an -shm of another WAL, is refused: SQLite would replay it
// into the database whatever database it came from. Except after a restart:
// a -wal last written before the system booted was left by a power cut or an
// OS crash, and then its -shm, which SQLite never fsyncs, holds whatever
// reached the disk (nothing, zeros, an older WAL's salts) and proves
// nothing; such a -wal is the store's own unless someone copied it there
// keeping its old time, and it is taken as a crash's (the read-only
// replay of checkRecovered still checks marker, schema and quick_check
// before anything is checkpointed). The power-cut tests
// (internal/powercuttest) showed every store with a -wal refused after a
// cut without this. pageSize is the database's (0 for an empty file).
func checkWAL(path string, pageSize int64) (walState, *fileProblem) {
	walPath, shmPath := path+"-wal", path+"-shm"
	wi, err := os.Lstat(walPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return walNone, nil
	case err != nil:
		return walNone, &fileProblem{kind: ProblemWAL, path: walPath, msg: fmt.Sprintf("cannot stat %s: %v", walPath, err)}
	case !wi.Mode().IsRegular():
		return walNone, &fileProblem{kind: ProblemWAL, path: walPath, msg: fmt.Sprintf("%s is not a regular file (%s)", walPath, wi.Mode())}
	case wi.Size() == 0:
		return walNone, nil
	}
	if live, err := shmInUse(shmPath); err == nil && live {
		return walLive, nil
	}
	refuse := func(why string) (walState, *fileProblem) {
		return walNone, &fileProblem{kind: ProblemWAL, path: walPath, msg: fmt.Sprintf(
			"%s (%d bytes) cannot be shown to belong to %s: %s. SQLite would replay it into the database and checkpoint it there, so the store is not opened. "+
				"If it is another database's WAL, move it away (mv %s ELSEWHERE); if it is this store's own (copied without its -shm, or left by a power cut), "+
				"keep a copy of the directory and apply it with sqlite3 %s 'PRAGMA wal_checkpoint(TRUNCATE)', then run localcloud check",
			walPath, wi.Size(), filepath.Base(path), why, walPath, path)}
	}
	wh := make([]byte, walHeaderSize)
	if err := readAt(walPath, wh); err != nil {
		return refuse("its header cannot be read (" + err.Error() + ")")
	}
	magic := binary.BigEndian.Uint32(wh[0:4])
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return refuse(fmt.Sprintf("it has no SQLite WAL header (magic %08x)", magic))
	}
	walPage := int64(binary.BigEndian.Uint32(wh[8:12]))
	if pageSize != 0 && walPage != pageSize {
		return refuse(fmt.Sprintf("its page size is %d, the database's is %d", walPage, pageSize))
	}
	// Only the -shm's evidence is waived after a restart.
	unvouched := func(why string) (walState, *fileProblem) {
		if boot := bootTime(); !boot.IsZero() && wi.ModTime().Before(boot) {
			return walOrphan, nil
		}
		return refuse(why)
	}
	sh := make([]byte, shmHeaderSize)
	if err := readAt(shmPath, sh); errors.Is(err, fs.ErrNotExist) {
		return unvouched("there is no " + filepath.Base(shmPath) + " beside it, which every process that writes the WAL keeps until its WAL is checkpointed")
	} else if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		clear(sh) // shorter than its header: read as zeros, below
	} else if err != nil {
		return unvouched("its index " + filepath.Base(shmPath) + " cannot be read (" + err.Error() + ")")
	}
	// An index whose first header copy is not initialised (isInit, byte
	// 12, is not 1) is one the first connection of an open reset, as SQLite
	// does before it rebuilds the index from the WAL, and that died before
	// the rebuild finished (a process killed while opening the store after
	// a crash). The reset truncates the index to zeros; the rebuild writes
	// the header's second copy, then the first, each with isInit 1, and
	// nothing else clears isInit again, so a first copy without it has not
	// been written since the reset. Kills met: all zeros (or shorter than
	// the header), a torn second copy (isInit and mxFrame written, not yet
	// the salts) and a first copy holding only its version (localcloud
	// migrate, SIGKILLed at random points). Only SQLite resets the index,
	// and a localcloud open lets SQLite see a -wal only after this check
	// accepted it, so the WAL is the one an earlier open accepted; SQLite
	// rebuilds the index from it.
	if sh[12] != 1 {
		return walOrphan, nil
	}
	// The -shm holds two copies of the index header (the second written
	// first), in native byte order: isInit is byte 12, mxFrame bytes
	// 16-19, the salts bytes 32-39, copied byte for byte from the WAL
	// header. A copy with the WAL's salts indexes this WAL. A copy that
	// indexes no frame and has zero salts is of a WAL that was empty when
	// it was read: the writer that died wrote this WAL's header, with
	// fresh salts, and was killed before its first commit reached the index.
	known := false
	for _, c := range [][]byte{sh[0:48], sh[48:96]} {
		if c[12] != 1 {
			continue
		}
		fresh := binary.NativeEndian.Uint32(c[16:20]) == 0 && bytes.Equal(c[32:40], make([]byte, 8))
		if bytes.Equal(c[32:40], wh[16:24]) || fresh {
			known = true
		}
	}
	if !known {
		return unvouched(fmt.Sprintf("its salts %x are not the ones its index %s records (%x), so the index is of another WAL",
			wh[16:24], filepath.Base(shmPath), sh[32:40]))
	}
	return walOrphan, nil
}

// readAt fills b from the start of the file at path.
func readAt(path string, b []byte) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = io.ReadFull(fh, b)
	return err
}

// storeFiles is the result of inspect.
type storeFiles struct {
	header headerInfo
	wal    walState
}

// inspect runs the header and WAL checks of the database at path (which
// exists). It must not run while this process has the database open.
func inspect(path string) (storeFiles, *fileProblem) {
	var s storeFiles
	h, p := readHeader(path)
	if p != nil {
		return s, p
	}
	s.header = h
	w, p := checkWAL(path, h.pageSize)
	if p != nil {
		return s, p
	}
	s.wal = w
	if w == walNone {
		if p := h.truncated(path); p != nil {
			return s, p
		}
	}
	return s, nil
}

// checkUnopened runs the header and WAL checks on the database at path,
// unless a handle of this process has it open (its open ran them, and a
// plain descriptor would now drop SQLite's locks). For the tools that read
// or replace a store without opening it as a store: backup and restore.
func checkUnopened(path string) (headerInfo, walState, *fileProblem) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return headerInfo{}, walNone, nil
	}
	locks.Lock()
	defer locks.Unlock()
	if _, open := locks.m[abs]; open {
		return headerInfo{}, walLive, nil
	}
	h, hp := readHeader(abs)
	w, wp := checkWAL(abs, h.pageSize)
	if wp != nil {
		return h, w, wp
	}
	if hp == nil && w == walNone {
		hp = h.truncated(abs)
	}
	return h, w, hp
}

// hotJournal reports whether a non-empty rollback journal is beside path:
// a transaction in rollback mode was cut short and SQLite restores the
// file from the journal on the next read-write open.
func hotJournal(path string) bool {
	fi, err := os.Stat(path + "-journal")
	return err == nil && fi.Size() > 0
}
