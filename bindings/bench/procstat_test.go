package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procStat is what the process used so far: read system calls (pread
// included, from /proc/self/io; -1 where there is none) and CPU time. A
// point read whose page is not in SQLite's page cache costs one pread, so
// reads per op count page misses, independent of the machine's load.
type procStat struct {
	reads int64
	cpu   time.Duration
}

func readProcStat() procStat {
	st := procStat{reads: -1}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		st.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return st
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscr: "); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				st.reads = n
			}
		}
	}
	return st
}
