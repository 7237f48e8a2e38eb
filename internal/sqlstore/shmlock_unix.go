//go:build unix

package sqlstore

import (
	"os"
	"syscall"
)

// shmDMSByte is the byte of the -shm file on which every SQLite connection
// that has the wal-index mapped holds a shared lock for as long as it is
// open (UNIX_SHM_DMS in SQLite's os_unix.c).
const shmDMSByte = 128

// shmInUse reports whether a process other than this one has the wal-index
// at path open, by asking the kernel (F_GETLK) whether a write lock on its
// DMS byte would conflict. Nothing is locked or written. Closing the
// descriptor drops this process's own locks on the file, so it must not run
// while this process has the database open.
func shmInUse(path string) (bool, error) {
	fh, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer fh.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: shmDMSByte, Len: 1}
	if err := syscall.FcntlFlock(fh.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}
