//go:build !linux

package sqlstore

import "time"

// bootTime is unknown on this platform: a -wal whose -shm does not vouch
// for it is refused even after a restart.
func bootTime() time.Time { return time.Time{} }
