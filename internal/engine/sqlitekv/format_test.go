package sqlitekv_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/clock"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

// What the SQLite engine stores, beyond what the conformance suite
// (kvtest) can see through the public API: the spec's columns and rows.

// store is the public handle with the engine's own beside it.
type store struct {
	*kv.Store
	e *sqlitekv.Store
}

func rawCount(t *testing.T, s store, where string, args ...any) int {
	t.Helper()
	var n int
	if err := s.e.DB().R.QueryRow("SELECT COUNT(*) FROM kv WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func open(t *testing.T, c *clock.Fake) store {
	t.Helper()
	cfg, err := kv.EngineConfig(filepath.Join(t.TempDir(), "kv"), kv.WithClock(c.Now))
	if err != nil {
		t.Fatal(err)
	}
	e, err := sqlitekv.OpenConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kv.New(e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return store{s, e}
}

func TestExpiresAtInMillis(t *testing.T) {
	t.Parallel()
	c := clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := open(t, c)
	if _, err := s.Put(ctx, "session", []byte("v"), kv.WithTTL(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	var exp int64
	if err := s.e.DB().R.QueryRow("SELECT expires_at FROM kv WHERE key = 'session'").Scan(&exp); err != nil {
		t.Fatal(err)
	}
	if want := c.Now().UnixMilli() + 1500; exp != want {
		t.Fatalf("expires_at = %d, want now+1500 ms = %d", exp, want)
	}
}

func TestGetAndExistsDeleteExpiredRows(t *testing.T) {
	t.Parallel()
	c := clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := open(t, c)
	for _, k := range []string{"a", "b"} {
		if _, err := s.Put(ctx, k, []byte("v"), kv.WithTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Second)
	if _, ok, err := s.Get(ctx, "a"); err != nil || ok {
		t.Fatalf("Get after expiry = %v, %v", ok, err)
	}
	if n := rawCount(t, s, "key = 'a'"); n != 0 {
		t.Fatalf("Get left the expired row in place (%d rows)", n)
	}
	if ok, err := s.Exists(ctx, "b"); err != nil || ok {
		t.Fatalf("Exists after expiry = %v, %v", ok, err)
	}
	if n := rawCount(t, s, "key = 'b'"); n != 0 {
		t.Fatalf("Exists left the expired row in place (%d rows)", n)
	}
}

func TestScanKeepsExpiredRows(t *testing.T) {
	t.Parallel()
	c := clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := open(t, c)
	if _, err := s.Put(ctx, "p:short", []byte("v"), kv.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	if p, err := s.Scan(ctx, "p:", 10, ""); err != nil || len(p.Items) != 0 {
		t.Fatalf("scan = %+v, %v; want nothing", p, err)
	}
	if n := rawCount(t, s, "key = 'p:short'"); n != 1 {
		t.Fatalf("scan deleted the expired row; want it kept (count %d)", n)
	}
}

func TestRefusedKeysWriteNoRow(t *testing.T) {
	t.Parallel()
	s := open(t, clock.New(time.Unix(0, 0)))
	for _, k := range []string{"with space", "a/b", "ké", strings.Repeat("k", kv.MaxKeyBytes+1)} {
		if _, err := s.Put(ctx, k, []byte("x")); err == nil {
			t.Fatalf("Put(%q) succeeded", k)
		}
	}
	if n := rawCount(t, s, "1=1"); n != 0 {
		t.Fatalf("store holds %d rows after refused puts, want 0", n)
	}
}
