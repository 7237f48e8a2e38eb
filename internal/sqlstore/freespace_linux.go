package sqlstore

import (
	"os"
	"syscall"
)

// freeBytes returns the space this process may still write on the
// filesystem of dir (root may use the blocks reserved for it).
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	blocks := st.Bavail
	if os.Geteuid() == 0 {
		blocks = st.Bfree
	}
	return int64(blocks) * st.Bsize, true
}
