package sqlstore

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// bootTime is when the running system started (btime of /proc/stat), or
// the zero time when it cannot be read.
func bootTime() time.Time {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}
			}
			return time.Unix(s, 0)
		}
	}
	return time.Time{}
}
