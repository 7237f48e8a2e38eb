package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/testutil"
)

var ctx = context.Background()

// stackText is a stack file with the given bindings section lines.
func stackText(bindingLines ...string) string {
	return "version: 1\nname: shop\nnotify:\n  listen: 127.0.0.1:0\nbindings:\n" + strings.Join(bindingLines, "\n") + "\n"
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func load(t *testing.T, path string) *config.Stack {
	t.Helper()
	st, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start writes a stack file into a new temp dir and starts a supervisor on
// it with the loops off unless opts turn them on.
func start(t *testing.T, text string, opts Options) (*Supervisor, string, *testutil.SyncBuffer) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeFile(t, file, text)
	logs := &testutil.SyncBuffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	if opts.HealthInterval == 0 {
		opts.HealthInterval = -1
	}
	s, err := Start(ctx, load(t, file), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, file, logs
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestStartProvisionsAndCloseCleansUp(t *testing.T) {
	t.Parallel()
	s, file, _ := start(t, stackText("  carts:\n    type: kv", "  orders:\n    type: queue\n    visibilityTimeout: 45s"), Options{NoWatch: true})
	st := s.Stack()
	for _, b := range st.Bindings {
		if m := mode(t, b.Path); m != 0o700 {
			t.Errorf("%s directory mode %04o, want %04o", b.Name, m, 0o700)
		}
		if m := mode(t, dbFile(b)); m != 0o600 {
			t.Errorf("%s file mode %04o, want %04o", b.Name, m, 0o600)
		}
	}
	if m := mode(t, st.DataDir); m != 0o700 {
		t.Errorf("data dir mode %04o", m)
	}
	rt, running, err := Probe(st.DataDir)
	if err != nil || !running || rt == nil {
		t.Fatalf("Probe = %v, %v, %v", rt, running, err)
	}
	if rt.PID != os.Getpid() || rt.NATSURL != s.URL() || rt.Stack != "shop" || rt.StackFile != file || rt.Health != HealthOK {
		t.Errorf("runtime = %+v", rt)
	}
	q, ok := rt.Binding("orders")
	if !ok || q.Subject != "localcloud.shop.orders.available" || q.VisibilityTimeout != "45s" || q.Health != HealthOK || q.Path != filepath.Join(st.DataDir, "queue", "orders") {
		t.Errorf("orders = %+v", q)
	}
	// Programs in any language read the lease in milliseconds from the file.
	raw, err := os.ReadFile(filepath.Join(st.DataDir, RuntimeFileName))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk struct {
		Bindings []map[string]any `json:"bindings"`
	}
	if err := json.Unmarshal(raw, &onDisk); err != nil {
		t.Fatal(err)
	}
	for _, b := range onDisk.Bindings {
		ms, has := b["visibilityTimeoutMs"]
		switch b["name"] {
		case "orders":
			if ms != float64(45000) {
				t.Errorf("runtime.json orders visibilityTimeoutMs = %v, want 45000:\n%s", ms, raw)
			}
		case "carts":
			if has {
				t.Errorf("runtime.json carts (kv) has visibilityTimeoutMs %v", ms)
			}
		}
	}
	if m := mode(t, filepath.Join(st.DataDir, RuntimeFileName)); m != 0o600 {
		t.Errorf("runtime.json mode %04o", m)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(st.DataDir, RuntimeFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("runtime.json after Close: %v", err)
	}
	if _, running, _ := Probe(st.DataDir); running {
		t.Error("Probe says running after Close")
	}
	// The lock is free again.
	s2, err := Start(ctx, st, Options{NoWatch: true, HealthInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

func TestSecondStartIsRefusedNamingThePID(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, stackText("  carts:\n    type: kv"), Options{NoWatch: true})
	began := time.Now()
	_, err := Start(ctx, s.Stack(), Options{NoWatch: true, HealthInterval: -1})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second Start: %v", err)
	}
	if le.PID != os.Getpid() {
		t.Errorf("PID = %d, want %d", le.PID, os.Getpid())
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("refusal took %s", d)
	}
	// The first one is untouched.
	if _, running, _ := Probe(s.Stack().DataDir); !running {
		t.Error("first supervisor no longer owns the data dir")
	}
}

func TestProbeIgnoresAStaleRuntimeFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := writeRuntime(dir, &Runtime{PID: 1, NATSURL: "nats://stale"}); err != nil {
		t.Fatal(err)
	}
	if rt, running, err := Probe(dir); running || rt != nil || err != nil {
		t.Fatalf("Probe without a lock file = %v, %v, %v", rt, running, err)
	}
	writeFile(t, filepath.Join(dir, LockFileName), "1\n")
	if rt, running, err := Probe(dir); running || rt != nil || err != nil {
		t.Fatalf("Probe with a free lock = %v, %v, %v", rt, running, err)
	}
}

func TestStartRefusesAStoreOfAnotherFormat(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "stack.yaml")
	writeFile(t, file, stackText("  carts:\n    type: kv", "  orders:\n    type: queue"))
	st := load(t, file)
	// A queue store where the carts KV store belongs.
	b, _ := st.Binding("carts")
	q, err := queue.Open(ctx, b.Path)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := os.Rename(filepath.Join(b.Path, sqlitequeue.FileName), filepath.Join(b.Path, sqlitekv.FileName)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(b.Path, sqlitekv.FileName))
	_, err = Start(ctx, st, Options{NoWatch: true, HealthInterval: -1})
	if !errors.Is(err, bindings.ErrBindingSetupFailed) || !strings.Contains(err.Error(), "localqueue.v1") {
		t.Fatalf("Start = %v, want a format error", err)
	}
	after, _ := os.ReadFile(filepath.Join(b.Path, sqlitekv.FileName))
	if !bytes.Equal(before, after) {
		t.Error("the foreign store was changed")
	}
	if _, running, _ := Probe(st.DataDir); running {
		t.Error("the lock is still held after a failed start")
	}
	if _, err := os.Stat(filepath.Join(st.DataDir, RuntimeFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("runtime.json after a failed start: %v", err)
	}
}

func TestApplyDiff(t *testing.T) {
	t.Parallel()
	s, file, logs := start(t, stackText(
		"  carts:\n    type: kv",
		"  orders:\n    type: queue",
		"  gone:\n    type: kv",
		"  sessions:\n    type: kv",
	), Options{NoWatch: true})
	before := map[string]*store{}
	for n, x := range s.stores {
		before[n] = x
	}
	gonePath := before["gone"].cfg.Path

	// carts unchanged (moved in the file), orders gets a new timeout,
	// sessions a new durability, gone is removed, fresh is added.
	writeFile(t, file, stackText(
		"  fresh:\n    type: queue",
		"  sessions:\n    type: kv\n    durability: full",
		"  orders:\n    type: queue\n    visibilityTimeout: 2m",
		"  carts:\n    type: kv",
	))
	d, err := s.Reload(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	want := Diff{Added: []string{"fresh"}, Removed: []string{"gone"}, Reopened: []string{"sessions"}, Updated: []string{"orders"}}
	if strings.Join(d.Added, ",") != "fresh" || strings.Join(d.Removed, ",") != "gone" ||
		strings.Join(d.Reopened, ",") != "sessions" || strings.Join(d.Updated, ",") != "orders" || d.Renamed {
		t.Errorf("diff = %+v, want %+v", d, want)
	}
	if s.stores["carts"] != before["carts"] || s.stores["orders"] != before["orders"] {
		t.Error("an unchanged or settings-only binding was reopened")
	}
	if s.stores["sessions"] == before["sessions"] {
		t.Error("a durability change kept the old handle")
	}
	if _, ok := s.stores["gone"]; ok {
		t.Error("removed binding still served")
	}
	if _, err := os.Stat(filepath.Join(gonePath, sqlitekv.FileName)); err != nil {
		t.Errorf("files of a removed binding: %v", err)
	}
	rt := s.Runtime()
	if o, _ := rt.Binding("orders"); o.VisibilityTimeout != "2m0s" {
		t.Errorf("orders timeout in runtime = %q", o.VisibilityTimeout)
	}
	if _, ok := rt.Binding("fresh"); !ok {
		t.Error("fresh missing from runtime")
	}
	onDisk, err := ReadRuntime(s.Stack().DataDir)
	if err != nil || len(onDisk.Bindings) != 4 {
		t.Fatalf("runtime.json = %+v, %v", onDisk, err)
	}
	// carts is still served.
	k, release, err := s.KV(ctx, "carts")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := k.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "added=fresh") {
		t.Errorf("log lacks the diff:\n%s", logs)
	}
}

func TestReloadKeepsTheLastGoodStack(t *testing.T) {
	t.Parallel()
	s, file, logs := start(t, stackText("  carts:\n    type: kv"), Options{NoWatch: true})
	writeFile(t, file, "version: 1\nname: Shop\nbindings:\n  x:\n    type: nope\n")
	if _, err := s.Reload(ctx, "test"); !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Reload = %v", err)
	}
	for _, w := range []string{"stack.yaml:2:7", "stack.yaml:5:11", "keeping the last good stack"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, logs)
		}
	}
	rt, _ := ReadRuntime(s.Stack().DataDir)
	if rt.LastReloadError == "" || len(rt.Bindings) != 1 || rt.Stack != "shop" {
		t.Errorf("runtime after a bad edit = %+v", rt)
	}

	// A change of dataDir needs a restart.
	writeFile(t, file, stackText("  carts:\n    type: kv")+"dataDir: elsewhere\n")
	if _, err := s.Reload(ctx, "test"); !errors.Is(err, ErrNeedsRestart) {
		t.Fatalf("Reload with a new dataDir = %v", err)
	}

	// A new binding whose store has another format: nothing is applied.
	dir := filepath.Dir(file)
	q, err := queue.Open(ctx, filepath.Join(dir, ".localcloud", "kv", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	os.Rename(filepath.Join(dir, ".localcloud", "kv", "bad", sqlitequeue.FileName), filepath.Join(dir, ".localcloud", "kv", "bad", sqlitekv.FileName))
	writeFile(t, file, stackText("  bad:\n    type: kv", "  more:\n    type: kv"))
	if _, err := s.Reload(ctx, "test"); !errors.Is(err, bindings.ErrBindingSetupFailed) {
		t.Fatalf("Reload with a foreign store = %v", err)
	}
	if got := s.Bindings(); strings.Join(got, ",") != "carts" {
		t.Errorf("bindings after a failed apply = %v", got)
	}

	// Fixing the file clears the error.
	writeFile(t, file, stackText("  carts:\n    type: kv"))
	if _, err := s.Reload(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	if rt := s.Runtime(); rt.LastReloadError != "" {
		t.Errorf("LastReloadError after a good edit = %q", rt.LastReloadError)
	}
}

func TestWatcherReloadsAfterAnEditorReplace(t *testing.T) {
	t.Parallel()
	s, file, _ := start(t, stackText("  carts:\n    type: kv"), Options{ReloadDebounce: 20 * time.Millisecond})
	tmp := file + ".tmp"
	writeFile(t, tmp, stackText("  carts:\n    type: kv", "  orders:\n    type: queue"))
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, "orders to be served", func() bool {
		return strings.Join(s.Bindings(), ",") == "carts,orders"
	})
	// A plain overwrite works too, and the watch survived the rename.
	writeFile(t, file, stackText("  orders:\n    type: queue"))
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, "carts to be removed", func() bool {
		return strings.Join(s.Bindings(), ",") == "orders"
	})
}

func TestHealthReportsAndNeverRecreates(t *testing.T) {
	t.Parallel()
	s, _, logs := start(t, stackText("  carts:\n    type: kv", "  orders:\n    type: queue", "  loose:\n    type: kv"), Options{NoWatch: true})
	st := s.Stack()
	carts, _ := st.Binding("carts")
	orders, _ := st.Binding("orders")
	loose, _ := st.Binding("loose")

	if err := os.RemoveAll(carts.Path); err != nil {
		t.Fatal(err)
	}
	// Replace the queue's database file by a copy (a new inode).
	data, _ := os.ReadFile(dbFile(*orders))
	writeFile(t, dbFile(*orders)+".new", string(data))
	if err := os.Rename(dbFile(*orders)+".new", dbFile(*orders)); err != nil {
		t.Fatal(err)
	}
	// 0775: group can write, which open refuses too (0755 only warns).
	if err := os.Chmod(loose.Path, 0o775); err != nil {
		t.Fatal(err)
	}
	s.CheckHealth()
	rt, _ := ReadRuntime(st.DataDir)
	want := map[string]string{
		"carts":  "store directory deleted",
		"orders": "database file replaced",
		"loose":  "has mode 0775: group or others can write it",
	}
	for n, w := range want {
		b, _ := rt.Binding(n)
		if !strings.Contains(b.Health, w) {
			t.Errorf("%s health = %q, want %q", n, b.Health, w)
		}
	}
	s.CheckHealth() // logged once per change
	if n := strings.Count(logs.String(), "binding unhealthy"); n != 3 {
		t.Errorf("%d unhealthy lines, want 3:\n%s", n, logs)
	}
	if _, err := os.Stat(carts.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted store directory was recreated: %v", err)
	}

	if err := os.Chmod(loose.Path, 0o700); err != nil {
		t.Fatal(err)
	}
	s.CheckHealth()
	if b, _ := s.Runtime().Binding("loose"); b.Health != HealthOK {
		t.Errorf("loose health after the fix = %q", b.Health)
	}
	if !strings.Contains(logs.String(), "binding healthy again") {
		t.Errorf("no recovery line:\n%s", logs)
	}

	s.Close()
	if _, err := os.Stat(carts.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Close recreated the deleted store directory: %v", err)
	}
	// Closing must not have touched the replacement file's siblings.
	if !bytes.Equal(data, mustRead(t, dbFile(*orders))) {
		t.Error("the replacement database file changed")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHealthLoopNoticesTheLockFile(t *testing.T) {
	t.Parallel()
	s, _, _ := start(t, stackText("  carts:\n    type: kv"), Options{NoWatch: true, HealthInterval: 10 * time.Millisecond})
	if err := os.Remove(filepath.Join(s.Stack().DataDir, LockFileName)); err != nil {
		t.Fatal(err)
	}
	testutil.CheckFor(t, 5*time.Second, 10*time.Millisecond, "the lock problem in runtime.json", func() bool {
		rt, err := ReadRuntime(s.Stack().DataDir)
		return err == nil && strings.Contains(rt.Health, "owner lock file")
	})
}
