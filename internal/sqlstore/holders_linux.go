//go:build linux

package sqlstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// holders returns the other processes (pid and command name) that have
// path open, found among the /proc/<pid>/fd/<n> links this user may read:
// a link whose target has the store's file name is stat(2)ed and compared
// by device and inode. Other links are only read (readlink answers from the
// kernel's name cache), never stat'ed: a stat follows the link into the
// file's own file system, and one of a FUSE file system whose server is
// stopped (a power-cut test's, in another test process) blocks for good.
// path is never opened. Processes of other users are not visible.
func holders(path string) ([]holder, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	target, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	base := filepath.Base(path)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []holder
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == self {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range fds {
			link := filepath.Join(fdDir, fd.Name())
			name, err := os.Readlink(link)
			if err != nil || filepath.Base(name) != base {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(link, &st) != nil {
				continue
			}
			if st.Dev == target.Dev && st.Ino == target.Ino {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				out = append(out, holder{pid: pid, name: strings.TrimSpace(string(comm)), child: parentPid(p.Name()) == self})
				break
			}
		}
	}
	return out, nil
}

// parentPid is the parent's pid from /proc/<pid>/stat, or -1. The command
// name (field 2) is in parentheses and may hold spaces or ')', so the
// fields are read after the last ')'.
func parentPid(pid string) int {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return -1
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return ppid
}
