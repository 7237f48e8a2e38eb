package sqlitetools_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/queue"
	"github.com/localcloud/localcloud/config"
	"github.com/localcloud/localcloud/internal/engine"
	"github.com/localcloud/localcloud/internal/engine/sqlitetools"
)

func queueBinding(dir string) config.Binding {
	return config.Binding{Name: "orders", Type: config.TypeQueue, Engine: config.EngineSQLite, Path: dir, Durability: "normal"}
}

// TestOpenCreatesOnlyWhenAsked: Read and Write open only a store that
// exists (the error says up creates it, and nothing is created); Create
// creates it.
func TestOpenCreatesOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "queue", "orders")
	b := queueBinding(dir)
	env := &engine.Env{}
	for _, a := range []engine.Access{engine.Read, engine.Write} {
		_, err := sqlitetools.Tools{}.Open(ctx, env, b, a)
		var he *engine.HintError
		if !errors.As(err, &he) || !strings.Contains(err.Error(), "has no store yet") || !strings.Contains(he.Try, "localcloud up") {
			t.Errorf("open %v of a missing store: %v; want a hint that up creates it", a, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("open %v created %s (%v)", a, dir, err)
		}
	}
	if ok, err := (sqlitetools.Tools{}).Exists(ctx, env, b); ok || err != nil {
		t.Errorf("Exists before Create = %v, %v", ok, err)
	}
	h, err := sqlitetools.Tools{}.Open(ctx, env, b, engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	if h.Queue() == nil || h.KV() != nil || h.Describe() != "file (localqueue.v1)" || h.Health() != engine.HealthOK {
		t.Errorf("handle: queue %v kv %v describe %q health %q", h.Queue(), h.KV(), h.Describe(), h.Health())
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := (sqlitetools.Tools{}).Exists(ctx, env, b); !ok || err != nil {
		t.Errorf("Exists after Create = %v, %v", ok, err)
	}
	mem, err := sqlitetools.Tools{}.Open(ctx, env, queueBinding(queue.MemoryPrefix+"tools"), engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if mem.Describe() != "memory" {
		t.Errorf("Describe of a memory store = %q", mem.Describe())
	}
	if _, err := mem.Probe(ctx); !errors.Is(err, engine.ErrNoProbe) {
		t.Errorf("Probe of a memory store = %v; want ErrNoProbe", err)
	}
}

// TestTailClaimsNothing: Tail reads what arrived after an id, in arrival
// order, and leaves every message as it was: a receive still gets the
// first on its first delivery.
func TestTailClaimsNothing(t *testing.T) {
	ctx := context.Background()
	h, err := sqlitetools.Tools{}.Open(ctx, &engine.Env{}, queueBinding(t.TempDir()), engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	last, err := h.LastID(ctx)
	if err != nil || last != 0 {
		t.Fatalf("LastID of an empty queue = %d, %v", last, err)
	}
	q := h.Queue()
	for _, s := range []string{"a", "b", "c"} {
		if err := q.Send(ctx, queue.Text(s)); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := h.Tail(ctx, 0, 2)
	if err != nil || len(ms) != 2 || ms[0].Payload.Data != "a" || ms[1].Payload.Data != "b" || ms[0].Attempt != 0 || ms[0].VisibleAt.IsZero() {
		t.Fatalf("Tail(0, 2) = %+v, %v", ms, err)
	}
	rest, err := h.Tail(ctx, ms[1].ID, 10)
	if err != nil || len(rest) != 1 || rest[0].Payload.Data != "c" {
		t.Fatalf("Tail after b = %+v, %v", rest, err)
	}
	if last, err := h.LastID(ctx); err != nil || last != rest[0].ID {
		t.Errorf("LastID = %d, %v; want %d", last, err, rest[0].ID)
	}
	got, err := q.Receive(ctx, 1)
	if err != nil || len(got) != 1 || got[0].Payload.Data != "a" || got[0].Attempt != 1 {
		t.Errorf("receive after tail: %+v, %v; want a on its first delivery", got, err)
	}
}

// TestHealthAndCloseOfAReplacedStore: the health of an open store names a
// database file replaced under it, and Close leaves such a handle open
// (engine.ErrReplaced) instead of touching the new file.
func TestHealthAndCloseOfAReplacedStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, err := sqlitetools.Tools{}.Open(ctx, &engine.Env{}, queueBinding(dir), engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, filepath.Join(dir, "localqueue.sqlite"))
	if got := h.Health(); !strings.Contains(got, "database file replaced") {
		t.Errorf("Health = %q; want the file named replaced", got)
	}
	if err := h.Close(); !errors.Is(err, engine.ErrReplaced) {
		t.Errorf("Close = %v; want ErrReplaced", err)
	}
}

// TestValidReceipt: the engine's receipt rule, "{id}:{uuid}".
func TestValidReceipt(t *testing.T) {
	b := queueBinding(t.TempDir())
	if err := (sqlitetools.Tools{}).ValidReceipt(b, "17:0b6f4f7e-8d2c-4c39-9d0e-2b9f4c1a7e55"); err != nil {
		t.Errorf("a receipt of the form: %v", err)
	}
	for _, r := range []string{"", "17", "17:0B6F4F7E-8D2C-4C39-9D0E-2B9F4C1A7E55", "js1:1:2:$JS.ACK.x"} {
		if err := (sqlitetools.Tools{}).ValidReceipt(b, r); !errors.Is(err, bindings.ErrInvalidInput) {
			t.Errorf("ValidReceipt(%q) = %v; want INVALID_INPUT", r, err)
		}
	}
}

// TestReopenOnlyTheStoreFirstOpened: a closed KV handle still reports its
// health and opens again with what its store holds; once the store's file
// is replaced or its directory deleted, Reopen refuses (ErrReplaced) and
// creates nothing. A queue handle is never reopened (ErrNoReopen).
func TestReopenOnlyTheStoreFirstOpened(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "carts")
	b := config.Binding{Name: "carts", Type: config.TypeKV, Engine: config.EngineSQLite, Path: dir, Durability: "normal"}
	h, err := sqlitetools.Tools{}.Open(ctx, &engine.Env{}, b, engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.KV().Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := h.Health(); got != engine.HealthOK {
		t.Errorf("Health of the closed handle = %q", got)
	}
	h2, err := h.Reopen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok, err := h2.KV().Get(ctx, "k"); err != nil || !ok || string(v) != "v" {
		t.Errorf("Get after Reopen = %q, %v, %v", v, ok, err)
	}
	if err := h2.Close(); err != nil {
		t.Fatal(err)
	}

	replaceFile(t, sqlitetools.File(b))
	if _, err := h2.Reopen(ctx); !errors.Is(err, engine.ErrReplaced) || !strings.Contains(err.Error(), "database file replaced") {
		t.Errorf("Reopen of a replaced file = %v; want ErrReplaced naming the file", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Reopen(ctx); !errors.Is(err, engine.ErrReplaced) || !strings.Contains(err.Error(), "store directory deleted") {
		t.Errorf("Reopen of a deleted store = %v; want ErrReplaced naming the directory", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Reopen recreated the deleted store: %v", err)
	}

	q, err := sqlitetools.Tools{}.Open(ctx, &engine.Env{}, queueBinding(t.TempDir()), engine.Create)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Reopen(ctx); !errors.Is(err, engine.ErrNoReopen) {
		t.Errorf("Reopen of a queue = %v; want ErrNoReopen", err)
	}
}

// replaceFile puts a copy of file in its place (a new inode with the same
// bytes), as a program that rewrites a store through a rename does.
func replaceFile(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file+".new", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}
