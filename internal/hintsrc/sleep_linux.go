package hintsrc

import (
	"errors"
	"syscall"
	"time"
)

// preciseSleep sleeps for d with nanosleep: the thread blocks in the kernel
// (high-resolution timer) instead of in the Go runtime's poller, whose
// timeouts are whole milliseconds. See settleStep.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		err := syscall.Nanosleep(&ts, &left)
		if !errors.Is(err, syscall.EINTR) {
			return
		}
		ts = left
	}
}
