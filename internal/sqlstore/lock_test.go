package sqlstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// lockHelperEnv switches TestLockHelper into the helper process; its value
// is the lock file the helper works on.
const lockHelperEnv = "LOCALCLOUD_TEST_LOCK_FILE"

// TestLockHelper is a helper process holding or probing the flock of the
// file in $LOCALCLOUD_TEST_LOCK_FILE, as another localcloud process would.
// Commands on stdin, one answer line each: "lock" (blocks until the lock
// is taken, "locked"), "unlock" ("unlocked"), "try" (a non-blocking try:
// "got", released again at once, or "held").
func TestLockHelper(t *testing.T) {
	path := os.Getenv(lockHelperEnv)
	if path == "" {
		t.Skip("helper process of the lock tests")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fd := int(f.Fd())
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "lock":
			if err := flock(fd, syscall.LOCK_EX); err != nil {
				fmt.Println("lock:", err)
				os.Exit(1)
			}
			fmt.Println("locked")
		case "unlock":
			if err := flock(fd, syscall.LOCK_UN); err != nil {
				fmt.Println("unlock:", err)
				os.Exit(1)
			}
			fmt.Println("unlocked")
		case "try":
			err := flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
			switch {
			case err == nil:
				_ = flock(fd, syscall.LOCK_UN)
				fmt.Println("got")
			case errors.Is(err, syscall.EWOULDBLOCK):
				fmt.Println("held")
			default:
				fmt.Println("try:", err)
				os.Exit(1)
			}
		}
	}
	os.Exit(0)
}

// lockHelper starts a TestLockHelper process on the lock file path.
func lockHelper(t *testing.T, name, path string) *testutil.Child {
	t.Helper()
	c := testutil.StartChild(t, name, "TestLockHelper", lockHelperEnv+"="+path)
	c.Expect(t, "ready", time.Minute)
	return c
}

// reuseFd opens the lock of store name in dir, retrying until its lock
// file got the descriptor number fd (the lowest free one, once the holes
// below it are filled with /dev/null); the fillers are closed at cleanup.
func reuseFd(t *testing.T, dir, name string, fd uintptr) *writeLock {
	t.Helper()
	for range 64 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		if f.Fd() < fd {
			t.Cleanup(func() { f.Close() })
			continue
		}
		reused := f.Fd() == fd
		f.Close()
		if !reused {
			break
		}
		l, err := acquireLock(dir, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l.file.Fd() == fd {
			return l
		}
		l.release()
	}
	t.Skipf("could not get descriptor %d back for the second store's lock file", fd)
	return nil
}

// TestAbandonedLockWaitLeavesOtherLocksAlone: a writer gives up waiting for
// the lock file (its ctx ends) while another process holds it, and its
// store is closed; a second store's lock file gets the same descriptor
// number and its writer takes its lock. When the first lock file is freed,
// the abandoned wait must not unlock the second store's lock: another
// process still cannot take it.
func TestAbandonedLockWaitLeavesOtherLocksAlone(t *testing.T) {
	const name = "localqueue.sqlite"
	dirA, dirB := t.TempDir(), t.TempDir()
	holder := lockHelper(t, "holder of A", filepath.Join(dirA, LockFileName(name)))
	holder.Send(t, "lock")
	holder.Expect(t, "locked", time.Minute)
	probe := lockHelper(t, "probe of B", filepath.Join(dirB, LockFileName(name)))

	la, err := acquireLock(dirA, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	fdA := la.file.Fd()
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := la.acquire(ctx, log); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire while another process holds the lock: %v; want the deadline", err)
	}
	la.release() // the store closes; its lock file's descriptor is free

	lb := reuseFd(t, dirB, name, fdA)
	defer lb.release()
	unlockB, err := lb.acquire(t.Context(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockB()
	probe.Send(t, "try")
	probe.Expect(t, "held", time.Minute)

	// The abandoned wait on A's lock file now gets its lock and ends.
	holder.Send(t, "unlock")
	holder.Expect(t, "unlocked", time.Minute)
	testutil.CheckFor(t, 10*time.Second, 5*time.Millisecond, "the abandoned lock waiter to end", func() bool {
		return lockWaiters.Load() == 0
	})
	for range 20 {
		probe.Send(t, "try")
		if got := probe.Expect(t, "", time.Minute); got != "held" {
			t.Fatalf("another process's try of B's lock: %q; want held (the abandoned wait on A unlocked B's lock through the reused descriptor %d)", got, fdA)
		}
	}
	holder.Send(t, "try")
	holder.Expect(t, "got", time.Minute) // the abandoned waiter released A
}
