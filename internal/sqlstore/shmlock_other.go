//go:build !unix

package sqlstore

// shmInUse cannot ask for SQLite's -shm locks on this platform: a -wal is
// then trusted only through its -shm index (see checkWAL).
func shmInUse(string) (bool, error) { return false, nil }
