//go:build !linux

package hintsrc

import "time"

// preciseSleep sleeps for d. Elsewhere than Linux it is time.Sleep, which
// may round a sub-millisecond d up to about a millisecond.
func preciseSleep(d time.Duration) { time.Sleep(d) }
