package kv_test

import (
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestStatsAndLookup(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"file", "memory"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			clk := &fakeClock{now: time.UnixMilli(1_767_225_600_000)}
			var s *kv.Store
			var err error
			if engine == "file" {
				s, err = kv.Open(t.Context(), filepath.Join(t.TempDir(), "s"), kv.WithClock(clk.Now))
			} else {
				s, err = kv.OpenMemory(t.Context(), "stats-and-lookup", kv.WithClock(clk.Now))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := t.Context()
			mustPut := func(key, val string, opts ...kv.PutOption) {
				t.Helper()
				if _, err := s.Put(ctx, key, []byte(val), opts...); err != nil {
					t.Fatal(err)
				}
			}
			mustPut("a", "1")
			mustPut("b", "2", kv.WithTTL(time.Second))
			mustPut("c", "", kv.WithTTL(time.Hour))
			st, err := s.Stats(ctx)
			if err != nil || st != (kv.Stats{Live: 3}) {
				t.Fatalf("Stats = %+v, %v; want 3 live", st, err)
			}
			e, ok, err := s.Lookup(ctx, "b")
			if err != nil || !ok || string(e.Value) != "2" || !e.ExpiresAt.Equal(clk.Now().Add(time.Second)) {
				t.Fatalf("Lookup(b) = %+v, %v, %v", e, ok, err)
			}
			e, ok, err = s.Lookup(ctx, "a")
			if err != nil || !ok || !e.ExpiresAt.IsZero() {
				t.Fatalf("Lookup(a) = %+v, %v, %v; want no expiry", e, ok, err)
			}
			e, ok, err = s.Lookup(ctx, "c")
			if err != nil || !ok || e.Value == nil || len(e.Value) != 0 {
				t.Fatalf("Lookup(c) = %+v, %v, %v; want an empty, non-nil value", e, ok, err)
			}
			clk.Add(2 * time.Second)
			st, err = s.Stats(ctx)
			if err != nil || st != (kv.Stats{Live: 2, Expired: 1}) {
				t.Fatalf("after the TTL: Stats = %+v, %v; want 2 live, 1 expired", st, err)
			}
			if _, ok, err := s.Lookup(ctx, "b"); err != nil || ok {
				t.Fatalf("Lookup(expired b) = %v, %v; want absent", ok, err)
			}
			// Lookup never deletes: the expired row is still counted.
			if st, _ := s.Stats(ctx); st.Expired != 1 {
				t.Fatalf("Lookup deleted the expired row: %+v", st)
			}
			if _, ok, err := s.Lookup(ctx, "missing"); err != nil || ok {
				t.Fatalf("Lookup(missing) = %v, %v", ok, err)
			}
			if _, _, err := s.Lookup(ctx, "bad key"); !errors.Is(err, bindings.ErrInvalidInput) {
				t.Fatalf("Lookup(bad key) = %v, want INVALID_INPUT", err)
			}
		})
	}
}
