package kvtest

import (
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
)

func testTTL(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	mustPut(t, s, "session", "v", kv.WithTTL(1500*time.Millisecond))
	tl.justBefore(1500 * time.Millisecond)
	wantValue(t, s, "session", "v")
	tl.justAfter() // expires_at <= now: expired
	if got, ok, err := s.Get(ctx, "session"); err != nil || ok || got != nil {
		t.Fatalf("Get after expiry = %q, %v, %v", got, ok, err)
	}
	mustPut(t, s, "other", "v", kv.WithTTL(time.Second))
	tl.past(time.Second)
	if ex, err := s.Exists(ctx, "other"); err != nil || ex {
		t.Fatalf("Exists after expiry = %v, %v", ex, err)
	}
	mustPut(t, s, "forever", "v")
	tl.aeon()
	wantValue(t, s, "forever", "v")
}

func testTTLZero(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	mustPut(t, s, "gone", "v", kv.WithTTL(0))
	wantAbsent(t, s, "gone")
}

func testExpiredTakeover(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	mustPut(t, s, "lease", "a", kv.IfNotExists(), kv.WithTTL(time.Second))
	if mustPut(t, s, "lease", "b", kv.IfNotExists()) {
		t.Fatal("put-if-not-exists won over a live key")
	}
	tl.past(time.Second)
	if !mustPut(t, s, "lease", "b", kv.IfNotExists()) {
		t.Fatal("put-if-not-exists lost on an expired key")
	}
	wantValue(t, s, "lease", "b")
}

func testScanFiltersExpired(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	mustPut(t, s, "p:live", "1")
	mustPut(t, s, "p:short", "2", kv.WithTTL(time.Second))
	tl.past(2 * time.Second)
	page, err := s.Scan(ctx, "p:", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(page); keys != "p:live" || page.NextCursor != "" {
		t.Fatalf("scan = %q cursor %q; want p:live and no cursor", keys, page.NextCursor)
	}
}
