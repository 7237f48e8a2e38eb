package sqlstore_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
)

// bootTime reads btime of /proc/stat; the test skips without it.
func bootTime(t *testing.T) time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return time.Unix(s, 0)
		}
	}
	t.Skip("no btime in /proc/stat")
	return time.Time{}
}

// TestWALFromBeforeTheBootOpens: after a power cut the -shm beside a -wal
// holds whatever reached the disk (here: nothing). The same files are
// refused while their -wal is from this boot (it could be a copy) and
// opened, with every committed send, once the -wal predates the boot.
func TestWALFromBeforeTheBootOpens(t *testing.T) {
	boot := bootTime(t)
	ctx := context.Background()
	dir := crashedQueue(t)
	path := filepath.Join(dir, sqlitequeue.FileName)
	if err := os.Remove(path + "-shm"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Open(ctx, dir); err == nil || !strings.Contains(err.Error(), "cannot be shown to belong") {
		t.Fatalf("a -wal of this boot without its -shm opened: %v", err)
	}
	before := boot.Add(-time.Minute)
	for _, f := range []string{path, path + "-wal"} {
		if err := os.Chtimes(f, before, before); err != nil {
			t.Fatal(err)
		}
	}
	q, err := queue.Open(ctx, dir)
	if err != nil {
		t.Fatalf("a -wal from before the boot (a power cut's) was refused: %v", err)
	}
	defer q.Close()
	st, err := q.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Total != int64(crashSends) {
		t.Errorf("after the replay the queue holds %d messages, want the %d sends the crashed writer committed", st.Total, crashSends)
	}
}
