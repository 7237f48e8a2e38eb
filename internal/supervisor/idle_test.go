package supervisor

import (
	"log/slog"

	"errors"
	"fmt"
	"github.com/localcloud/localcloud/config"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/testutil"
)

// fdChildEnv runs TestUpServesMoreKVStoresThanItHasDescriptors as the
// re-executed child that lowers its own open-file limit.
const fdChildEnv = "LOCALCLOUD_TEST_FD_CHILD"

// fdCount counts this process's open descriptors.
func fdCount(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// kvStack is a stack of n KV bindings kv-000... and one queue.
func kvStack(n int) string {
	lines := []string{"  orders:\n    type: queue"}
	for i := range n {
		lines = append(lines, fmt.Sprintf("  kv-%03d:\n    type: kv", i))
	}
	return stackText(lines...)
}

// TestUpServesMoreKVStoresThanItHasDescriptors: in a child process whose
// open-file limit (soft and hard) is 256, up serves 120 KV bindings, which
// held open would take about 720 descriptors. Its descriptors stay bounded
// by the cap of idle open stores, not by the binding count, while every
// store is written and read through KV (opened again on demand); a store
// in use is not closed under its user, by idleness or by a reload that
// drops it; an idle one is closed; a store deleted while closed is not
// recreated, and its health says so.
func TestUpServesMoreKVStoresThanItHasDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc/self/fd")
	}
	if os.Getenv(fdChildEnv) == "" {
		t.Parallel()
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestUpServesMoreKVStoresThanItHasDescriptors$", "-test.count=1", "-test.v", "-test.timeout=5m")
		cmd.Env = append(os.Environ(), fdChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child process: %v\n%s", err, out)
		}
		t.Logf("child process:\n%s", out)
		return
	}

	const (
		limit    = 256
		bindings = 120
		maxIdle  = 4
	)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		t.Fatal(err)
	}
	base := fdCount(t)
	s, file, _ := start(t, kvStack(bindings), Options{NoWatch: true, MaxIdleStores: maxIdle, StoreIdleTimeout: -1})
	started := fdCount(t)
	t.Logf("descriptors: %d before up, %d with up serving %d KV bindings and a queue (limit %d)", base, started, bindings, limit)
	if started-base > 10*storeFDs {
		t.Errorf("up holds %d descriptors after its start; want them bounded, not growing with %d KV bindings", started-base, bindings)
	}
	if n := s.openLazy(); n != 0 {
		t.Errorf("%d KV stores open after the start, want 0", n)
	}

	bound := started + (maxIdle+1)*storeFDs
	peak := 0
	for i := range bindings {
		name := fmt.Sprintf("kv-%03d", i)
		k, release, err := s.KV(ctx, name)
		if err != nil {
			t.Fatalf("KV(%s): %v", name, err)
		}
		if _, err := k.Put(ctx, "k", []byte(name)); err != nil {
			t.Fatalf("put into %s: %v", name, err)
		}
		peak = max(peak, fdCount(t))
		release()
	}
	t.Logf("descriptors: peak %d while each store was written in turn, bound %d", peak, bound)
	if peak > bound {
		t.Errorf("peak of %d descriptors, want at most %d (the cap of %d idle stores)", peak, bound, maxIdle)
	}
	if n := s.openLazy(); n != maxIdle {
		t.Errorf("%d KV stores open after use, want the cap of %d", n, maxIdle)
	}
	for i := range bindings {
		name := fmt.Sprintf("kv-%03d", i)
		k, release, err := s.KV(ctx, name)
		if err != nil {
			t.Fatalf("KV(%s) again: %v", name, err)
		}
		if v, ok, err := k.Get(ctx, "k"); err != nil || !ok || string(v) != name {
			t.Errorf("%s holds %q, %v, %v; want %q", name, v, ok, err, name)
		}
		release()
	}
	// What status reads: runtime.json, with every closed store healthy.
	s.CheckHealth()
	rt, err := ReadRuntime(s.Stack().DataDir)
	if err != nil || len(rt.Bindings) != bindings+1 {
		t.Fatalf("runtime.json: %+v, %v", rt, err)
	}
	for _, b := range rt.Bindings {
		if b.Health != HealthOK {
			t.Errorf("%s health %q", b.Name, b.Health)
		}
	}
	if d := s.Describe("kv-050"); d != "file (localkv.v1)" {
		t.Errorf("Describe of a closed store = %q", d)
	}

	// In use: neither an idle close nor a reload closes it under its
	// user; the last release does.
	k0, release0, err := s.KV(ctx, "kv-000")
	if err != nil {
		t.Fatal(err)
	}
	k1, release1, err := s.KV(ctx, "kv-001")
	if err != nil {
		t.Fatal(err)
	}
	s.closeIdle(time.Now().Add(time.Hour))
	if n := s.openLazy(); n != 2 {
		t.Errorf("%d KV stores open after closing the idle ones, want the 2 in use", n)
	}
	if _, err := k0.Put(ctx, "after", []byte("idle close")); err != nil {
		t.Errorf("put into a store in use after an idle close: %v", err)
	}
	writeFile(t, file, strings.Replace(kvStack(bindings), "  kv-001:\n    type: kv\n", "", 1))
	if d, err := s.Reload(ctx, "test"); err != nil || strings.Join(d.Removed, ",") != "kv-001" {
		t.Fatalf("reload = %+v, %v", d, err)
	}
	if _, err := k1.Put(ctx, "after", []byte("reload")); err != nil {
		t.Errorf("put into a store in use after a reload dropped it: %v", err)
	}
	release1()
	if _, err := k1.Put(ctx, "late", []byte("x")); err == nil {
		t.Error("the handle of a dropped store still works after its release")
	}
	release0()
	release0() // a second release is a no-op
	if n := s.openLazy(); n != 1 {
		t.Errorf("%d KV stores open after the releases, want kv-000 (idle)", n)
	}
	s.closeIdle(time.Now().Add(time.Hour))
	if n := s.openLazy(); n != 0 {
		t.Errorf("%d KV stores open after the idle close, want 0", n)
	}
	if n := fdCount(t); n > started+storeFDs {
		t.Errorf("%d descriptors with every KV store closed, %d after the start", n, started)
	}

	// Deleted while closed: not recreated, refused, reported.
	kv2, _ := s.Stack().Binding("kv-002")
	if err := os.RemoveAll(kv2.Path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.KV(ctx, "kv-002"); !errors.Is(err, engine.ErrReplaced) || !strings.Contains(err.Error(), "store directory deleted") {
		t.Errorf("KV of a deleted store = %v; want ErrReplaced naming the deletion", err)
	}
	if _, err := os.Stat(filepath.Join(kv2.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted store was recreated: %v", err)
	}
	s.CheckHealth()
	rt, _ = ReadRuntime(s.Stack().DataDir)
	if b, _ := rt.Binding("kv-002"); b.Health != "store directory deleted" {
		t.Errorf("health of the deleted store in runtime.json = %q", b.Health)
	}
	if _, _, err := s.KV(ctx, "orders"); !errors.Is(err, ErrNotServed) {
		t.Errorf("KV of a queue = %v; want ErrNotServed", err)
	}
}

// TestIdleStoreClosesAfterTheTimeout: the idle loop closes a KV store
// once unused for StoreIdleTimeout, and the next use opens it again.
func TestIdleStoreClosesAfterTheTimeout(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, kvStack(2), Options{NoWatch: true, StoreIdleTimeout: 20 * time.Millisecond})
	k, release, err := s.KV(ctx, "kv-000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if n := s.openLazy(); n != 1 {
		t.Errorf("%d KV stores open while one is used, want 1", n)
	}
	release()
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, "the idle store to close", func() bool { return s.openLazy() == 0 })
	k, release, err = s.KV(ctx, "kv-000")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if v, ok, err := k.Get(ctx, "k"); err != nil || !ok || string(v) != "v" {
		t.Errorf("get after the reopen = %q, %v, %v", v, ok, err)
	}
}

// TestKVInUseIsNeverClosedUnderItsUser: goroutines use four KV stores
// through KV while the cap keeps one idle store open and idle closes run
// all along: every operation between KV and its release succeeds.
func TestKVInUseIsNeverClosedUnderItsUser(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, kvStack(4), Options{NoWatch: true, MaxIdleStores: 1, StoreIdleTimeout: -1})
	stop := make(chan struct{})
	closerDone := make(chan struct{})
	go func() {
		defer close(closerDone)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
				s.closeIdle(time.Now().Add(time.Hour))
			}
		}
	}()
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			defer func() { errs <- err }()
			for i := range 50 {
				name := fmt.Sprintf("kv-%03d", (g+i)%4)
				k, release, kerr := s.KV(ctx, name)
				if kerr != nil {
					err = kerr
					return
				}
				key := fmt.Sprintf("g%d", g)
				if _, err = k.Put(ctx, key, []byte(name)); err == nil {
					_, _, err = k.Get(ctx, key)
				}
				release()
				if err != nil {
					err = fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	<-closerDone
	if n := s.openLazy(); n > 1 {
		t.Errorf("%d KV stores open with none in use, want at most the cap of 1", n)
	}
}

// TestCloseEndsEveryUse: Close closes a KV store in use too (its user gets
// errors, and its release does nothing more); KV after Close is refused.
func TestCloseEndsEveryUse(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, kvStack(1), Options{NoWatch: true})
	k, release, err := s.KV(ctx, "kv-000")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Put(ctx, "k", []byte("v")); err == nil {
		t.Error("a put through a handle Close closed succeeded")
	}
	release()
	if n := s.openLazy(); n != 0 {
		t.Errorf("%d KV stores open after Close", n)
	}
	if _, _, err := s.KV(ctx, "kv-000"); !errors.Is(err, ErrNotServed) {
		t.Errorf("KV after Close = %v; want ErrNotServed", err)
	}
}

// BenchmarkKVStats is what the explorer pays for the counts of one KV
// binding: KV, Stats, release; open=kept with the store left open
// between reads (within the cap), open=never with every read opening it
// again (MaxIdleStores -1).
func BenchmarkKVStats(b *testing.B) {
	for _, keep := range []bool{true, false} {
		name, maxIdle := "open=kept", 0
		if !keep {
			name, maxIdle = "open=never", -1
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			file := filepath.Join(dir, "stack.yaml")
			if err := os.WriteFile(file, []byte(kvStack(1)), 0o600); err != nil {
				b.Fatal(err)
			}
			st, err := config.Load(file)
			if err != nil {
				b.Fatal(err)
			}
			s, err := Start(ctx, st, Options{Logger: slog.New(slog.DiscardHandler), HealthInterval: -1, NoWatch: true, MaxIdleStores: maxIdle})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for b.Loop() {
				k, release, err := s.KV(ctx, "kv-000")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := k.Stats(ctx); err != nil {
					b.Fatal(err)
				}
				release()
			}
		})
	}
}
