// Package kvtest is the conformance suite of the localkv.v1 binding. Every
// store mode's tests call Run, so a semantic change goes here, not into one
// mode's tests.
package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/clock"
)

// Harness gives the suite one fresh store.
type Harness struct {
	// Open opens a new handle on the harness's store; every call names the
	// same store. The suite closes the handles it opens.
	Open func(t *testing.T, opts ...kv.Option) *kv.Store
	// Persistent is true when data survives closing every handle (files).
	Persistent bool
}

// Run runs every case, each on a store from newHarness.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Basic/PutGetExistsDelete", testBasic},
		{"Limits/Key", testKeyLimits},
		{"Limits/Value", testValueLimits},
		{"Limits/ScanInput", testScanInput},
		{"PutIfNotExists/FirstWins", testPutIfNotExists},
		{"TTL/ExpiresInMillis", testTTL},
		{"TTL/ZeroIsExpired", testTTLZero},
		{"TTL/ExpiredTakeover", testExpiredTakeover},
		{"TTL/ScanFiltersButKeeps", testScanFiltersExpired},
		{"Persistence/Reopen", testPersistence},
		{"Scan/Pages", testScanPages},
		{"Scan/DeleteBetweenPages", testScanDeleteBetweenPages},
		{"Scan/CursorBoundToPrefix", testCursorBinding},
		{"Scan/ExpiringMidScan", testScanExpiringMidScan},
		{"Scan/LimitZeroAndMax", testScanLimits},
		{"Concurrency/SixteenRacers", testRacers},
		{"Concurrency/TTLRace", testTTLRace},
		{"Concurrency/InterleavedHandles", testInterleaved},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h = withCleanup(t, h)
			c.fn(t, h)
		})
	}
}

// withCleanup closes every handle the case opens and checks the store's
// integrity afterwards.
func withCleanup(t *testing.T, h Harness) Harness {
	open := h.Open
	h.Open = func(t *testing.T, opts ...kv.Option) *kv.Store {
		t.Helper()
		s := open(t, opts...)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Cleanup(func() {
		s := open(t)
		defer s.Close()
		var res string
		if err := s.DB().R.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
			t.Errorf("integrity_check = %q, %v; want ok", res, err)
		}
	})
	return h
}

var ctx = context.Background()

func newClock() *clock.Fake { return clock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

func mustPut(t *testing.T, s *kv.Store, key, value string, opts ...kv.PutOption) bool {
	t.Helper()
	ok, err := s.Put(ctx, key, []byte(value), opts...)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return ok
}

func wantValue(t *testing.T, s *kv.Store, key, want string) {
	t.Helper()
	got, ok, err := s.Get(ctx, key)
	if err != nil || !ok || string(got) != want {
		t.Fatalf("Get(%q) = %q, %v, %v; want %q, true, nil", key, got, ok, err, want)
	}
}

func wantAbsent(t *testing.T, s *kv.Store, key string) {
	t.Helper()
	got, ok, err := s.Get(ctx, key)
	if err != nil || ok || got != nil {
		t.Fatalf("Get(%q) = %q, %v, %v; want absent", key, got, ok, err)
	}
	ex, err := s.Exists(ctx, key)
	if err != nil || ex {
		t.Fatalf("Exists(%q) = %v, %v; want false", key, ex, err)
	}
}

func wantInvalid(t *testing.T, err error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("err = %v; want INVALID_INPUT", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func rawCount(t *testing.T, s *kv.Store, where string, args ...any) int {
	t.Helper()
	var n int
	if err := s.DB().R.QueryRow("SELECT COUNT(*) FROM kv WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func testBasic(t *testing.T, h Harness) {
	s := h.Open(t)
	if !mustPut(t, s, "valid_key-123", "v1") {
		t.Fatal("Put returned false")
	}
	wantValue(t, s, "valid_key-123", "v1")
	if ex, err := s.Exists(ctx, "valid_key-123"); err != nil || !ex {
		t.Fatalf("Exists = %v, %v", ex, err)
	}
	wantAbsent(t, s, "missing")
	if err := s.Delete(ctx, "missing"); err != nil {
		t.Fatalf("Delete(missing) = %v", err)
	}
	mustPut(t, s, "valid_key-123", "v2")
	wantValue(t, s, "valid_key-123", "v2")
	if err := s.Delete(ctx, "valid_key-123"); err != nil {
		t.Fatal(err)
	}
	wantAbsent(t, s, "valid_key-123")
}

func testKeyLimits(t *testing.T, h Harness) {
	s := h.Open(t)
	for _, k := range []string{"valid_key-123", "domain.com:8080", "valid-key_123:test.path.ext", "A", strings.Repeat("k", kv.MaxKeyBytes)} {
		mustPut(t, s, k, "x")
		wantValue(t, s, k, "x")
	}
	long := strings.Repeat("k", kv.MaxKeyBytes+1)
	_, err := s.Put(ctx, long, []byte("x"))
	wantInvalid(t, err, "key", "512", "513")
	_, err = s.Put(ctx, "", []byte("x"))
	wantInvalid(t, err, "key", "0 bytes")
	for _, k := range []string{"with space", "a/b", `a\b`, "a#b", "a?b", "a@b", "a$b", "a%b", "a\nb", "ké"} {
		_, err := s.Put(ctx, k, []byte("x"))
		wantInvalid(t, err, "key")
		_, _, err = s.Get(ctx, k)
		wantInvalid(t, err, "key")
		_, err = s.Exists(ctx, k)
		wantInvalid(t, err, "key")
		wantInvalid(t, s.Delete(ctx, k), "key")
	}
	if n := rawCount(t, s, "1=1"); n != 5 {
		t.Fatalf("store holds %d keys, want the 5 valid ones", n)
	}
}

func testValueLimits(t *testing.T, h Harness) {
	s := h.Open(t)
	max := bytes.Repeat([]byte{0xAB}, kv.MaxValueBytes)
	if _, err := s.Put(ctx, "max", max); err != nil {
		t.Fatalf("Put of %d bytes: %v", len(max), err)
	}
	_, err := s.Put(ctx, "over", append(max, 1))
	wantInvalid(t, err, "value", "24576", "24577")
	wantAbsent(t, s, "over")

	all := make([]byte, 256*3)
	for i := range all {
		all[i] = byte(i)
	}
	mustPut(t, s, "binary", string(all))
	got, ok, err := s.Get(ctx, "binary")
	if err != nil || !ok || !bytes.Equal(got, all) {
		t.Fatalf("binary value did not round-trip: ok=%v err=%v len=%d", ok, err, len(got))
	}
	mustPut(t, s, "empty", "")
	got, ok, err = s.Get(ctx, "empty")
	if err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("empty value: %q %v %v", got, ok, err)
	}
	_, err = s.Put(ctx, "neg", []byte("x"), kv.WithTTL(-time.Second))
	wantInvalid(t, err, "ttl")
}

func testScanInput(t *testing.T, h Harness) {
	s := h.Open(t)
	_, err := s.Scan(ctx, "", 10, "")
	wantInvalid(t, err, "prefix")
	_, err = s.Scan(ctx, "a/b", 10, "")
	wantInvalid(t, err, "prefix")
	_, err = s.Scan(ctx, "a", -1, "")
	wantInvalid(t, err, "limit", "-1")
	_, err = s.Scan(ctx, "a", kv.MaxScanLimit+1, "")
	wantInvalid(t, err, "limit", "1001")
}

func testPutIfNotExists(t *testing.T, h Harness) {
	s := h.Open(t)
	if !mustPut(t, s, "lock", "first", kv.IfNotExists()) {
		t.Fatal("first put-if-not-exists lost")
	}
	if mustPut(t, s, "lock", "second", kv.IfNotExists()) {
		t.Fatal("second put-if-not-exists won")
	}
	wantValue(t, s, "lock", "first")
	if !mustPut(t, s, "lock", "third") {
		t.Fatal("plain put returned false")
	}
	wantValue(t, s, "lock", "third")
}

func testTTL(t *testing.T, h Harness) {
	c := newClock()
	s := h.Open(t, kv.WithClock(c.Now))
	mustPut(t, s, "session", "v", kv.WithTTL(1500*time.Millisecond))
	var exp int64
	if err := s.DB().R.QueryRow("SELECT expires_at FROM kv WHERE key = 'session'").Scan(&exp); err != nil {
		t.Fatal(err)
	}
	if want := c.Now().UnixMilli() + 1500; exp != want {
		t.Fatalf("expires_at = %d, want now+1500 ms = %d", exp, want)
	}
	c.Advance(1499 * time.Millisecond)
	wantValue(t, s, "session", "v")
	c.Advance(time.Millisecond) // expires_at <= now: expired
	if got, ok, err := s.Get(ctx, "session"); err != nil || ok || got != nil {
		t.Fatalf("Get after expiry = %q, %v, %v", got, ok, err)
	}
	if n := rawCount(t, s, "key = 'session'"); n != 0 {
		t.Fatalf("Get left the expired row in place (%d rows)", n)
	}
	mustPut(t, s, "other", "v", kv.WithTTL(time.Second))
	c.Advance(time.Second)
	if ex, err := s.Exists(ctx, "other"); err != nil || ex {
		t.Fatalf("Exists after expiry = %v, %v", ex, err)
	}
	if n := rawCount(t, s, "key = 'other'"); n != 0 {
		t.Fatalf("Exists left the expired row in place (%d rows)", n)
	}
	mustPut(t, s, "forever", "v")
	c.Advance(1000 * time.Hour)
	wantValue(t, s, "forever", "v")
}

func testTTLZero(t *testing.T, h Harness) {
	c := newClock()
	s := h.Open(t, kv.WithClock(c.Now))
	mustPut(t, s, "gone", "v", kv.WithTTL(0))
	wantAbsent(t, s, "gone")
}

func testExpiredTakeover(t *testing.T, h Harness) {
	c := newClock()
	s := h.Open(t, kv.WithClock(c.Now))
	mustPut(t, s, "lease", "a", kv.IfNotExists(), kv.WithTTL(time.Second))
	if mustPut(t, s, "lease", "b", kv.IfNotExists()) {
		t.Fatal("put-if-not-exists won over a live key")
	}
	c.Advance(time.Second)
	if !mustPut(t, s, "lease", "b", kv.IfNotExists()) {
		t.Fatal("put-if-not-exists lost on an expired key")
	}
	wantValue(t, s, "lease", "b")
}

func testScanFiltersExpired(t *testing.T, h Harness) {
	c := newClock()
	s := h.Open(t, kv.WithClock(c.Now))
	mustPut(t, s, "p:live", "1")
	mustPut(t, s, "p:short", "2", kv.WithTTL(time.Second))
	c.Advance(2 * time.Second)
	page, err := s.Scan(ctx, "p:", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(page); keys != "p:live" || page.NextCursor != "" {
		t.Fatalf("scan = %q cursor %q; want p:live and no cursor", keys, page.NextCursor)
	}
	if n := rawCount(t, s, "key = 'p:short'"); n != 1 {
		t.Fatalf("scan deleted the expired row; want it kept (count %d)", n)
	}
}

func testPersistence(t *testing.T, h Harness) {
	s := h.Open(t)
	mustPut(t, s, "keep", "me")
	s2 := h.Open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if h.Persistent {
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		s2 = h.Open(t)
	}
	wantValue(t, s2, "keep", "me")
}

func keysOf(p kv.Page) string {
	var ks []string
	for _, it := range p.Items {
		ks = append(ks, it.Key)
	}
	return strings.Join(ks, ",")
}

func testScanPages(t *testing.T, h Harness) {
	s := h.Open(t)
	for _, k := range []string{"prefix:key3", "other:key", "prefix:key1", "prefix:key2"} {
		mustPut(t, s, k, "v-"+k)
	}
	p1, err := s.Scan(ctx, "prefix:", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if keysOf(p1) != "prefix:key1,prefix:key2" || p1.NextCursor == "" {
		t.Fatalf("page 1 = %q cursor %q", keysOf(p1), p1.NextCursor)
	}
	if string(p1.Items[0].Value) != "v-prefix:key1" {
		t.Fatalf("page 1 value = %q", p1.Items[0].Value)
	}
	p2, err := s.Scan(ctx, "prefix:", 2, p1.NextCursor)
	if err != nil {
		t.Fatal(err)
	}
	if keysOf(p2) != "prefix:key3" || p2.NextCursor != "" {
		t.Fatalf("page 2 = %q cursor %q", keysOf(p2), p2.NextCursor)
	}
	all, err := s.Scan(ctx, "prefix:", 3, "")
	if err != nil || keysOf(all) != "prefix:key1,prefix:key2,prefix:key3" || all.NextCursor != "" {
		t.Fatalf("exact-fit page = %q cursor %q err %v; want no cursor", keysOf(all), all.NextCursor, err)
	}
}

func testScanDeleteBetweenPages(t *testing.T, h Harness) {
	s := h.Open(t)
	for _, k := range []string{"prefix:key1", "prefix:key2", "prefix:key3"} {
		mustPut(t, s, k, "v")
	}
	p1, err := s.Scan(ctx, "prefix:", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "prefix:key1"); err != nil {
		t.Fatal(err)
	}
	p2, err := s.Scan(ctx, "prefix:", 2, p1.NextCursor)
	if err != nil || keysOf(p2) != "prefix:key3" {
		t.Fatalf("page 2 after delete = %q, %v; want prefix:key3", keysOf(p2), err)
	}
}

func testCursorBinding(t *testing.T, h Harness) {
	s := h.Open(t)
	for i := range 3 {
		mustPut(t, s, fmt.Sprintf("first:%d", i), "v")
		mustPut(t, s, fmt.Sprintf("second:%d", i), "v")
	}
	p, err := s.Scan(ctx, "first:", 1, "")
	if err != nil || p.NextCursor == "" {
		t.Fatalf("scan first: %v cursor %q", err, p.NextCursor)
	}
	for _, limit := range []int{0, 2} {
		_, err = s.Scan(ctx, "second:", limit, p.NextCursor)
		wantInvalid(t, err, "cursor")
		_, err = s.Scan(ctx, "first:", limit, "not-a-cursor")
		wantInvalid(t, err, "cursor")
	}
	// A longer prefix that the cursor's key also starts with is still
	// another prefix.
	_, err = s.Scan(ctx, "first:0", 2, p.NextCursor)
	wantInvalid(t, err, "cursor")
}

func testScanExpiringMidScan(t *testing.T, h Harness) {
	c := newClock()
	s := h.Open(t, kv.WithClock(c.Now))
	want := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("mid:%02d", i)
		if i%5 == 2 { // 8 keys expire while the scan runs
			mustPut(t, s, k, "v", kv.WithTTL(time.Second))
			continue
		}
		mustPut(t, s, k, "v")
		want[k] = true
	}
	seen := map[string]bool{}
	cursors := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages == 1 {
			c.Advance(time.Second)
		}
		if pages > 40 {
			t.Fatal("scan does not end")
		}
		p, err := s.Scan(ctx, "mid:", 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			if seen[it.Key] {
				t.Fatalf("key %s returned twice", it.Key)
			}
			seen[it.Key] = true
		}
		if p.NextCursor == "" {
			break
		}
		if cursors[p.NextCursor] {
			t.Fatalf("cursor %q repeated", p.NextCursor)
		}
		cursors[p.NextCursor] = true
		cursor = p.NextCursor
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("live key %s missing from the scan", k)
		}
	}
	// The first page may hold expiring keys (they were live then); after
	// it, none may appear.
	extra := 0
	for k := range seen {
		if !want[k] {
			extra++
		}
	}
	if extra > 3 {
		t.Errorf("scan returned %d expired keys", extra)
	}
}

func testScanLimits(t *testing.T, h Harness) {
	s := h.Open(t)
	mustPut(t, s, "lim:a", "v")
	p, err := s.Scan(ctx, "lim:", 0, "")
	if err != nil || len(p.Items) != 0 || p.NextCursor != "" {
		t.Fatalf("limit 0 = %+v, %v; want nothing", p, err)
	}
	p, err = s.Scan(ctx, "lim:", kv.MaxScanLimit, "")
	if err != nil || keysOf(p) != "lim:a" {
		t.Fatalf("limit max = %q, %v", keysOf(p), err)
	}
}

func testRacers(t *testing.T, h Harness) {
	a, b := h.Open(t), h.Open(t)
	var wins atomic.Int32
	var winner atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v := fmt.Sprintf("racer-%d", i)
			ok, err := s.Put(ctx, "race", []byte(v), kv.IfNotExists())
			if err != nil {
				t.Errorf("racer %d: %v", i, err)
				return
			}
			if ok {
				wins.Add(1)
				winner.Store(v)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners, want exactly 1", wins.Load())
	}
	w, _ := winner.Load().(string)
	wantValue(t, a, "race", w)
	wantValue(t, b, "race", w)
}

func testTTLRace(t *testing.T, h Harness) {
	c := newClock()
	a, b := h.Open(t, kv.WithClock(c.Now)), h.Open(t, kv.WithClock(c.Now))
	if !mustPut(t, a, "ttl-race", "A", kv.IfNotExists(), kv.WithTTL(300*time.Millisecond)) {
		t.Fatal("A lost on an empty key")
	}
	if mustPut(t, b, "ttl-race", "B", kv.IfNotExists()) {
		t.Fatal("B won while A's key is live")
	}
	c.Advance(450 * time.Millisecond)
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 12 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := s.Put(ctx, "ttl-race", []byte(fmt.Sprint(i)), kv.IfNotExists())
			if err != nil {
				t.Errorf("racer %d: %v", i, err)
			}
			if ok {
				wins.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d winners after expiry, want exactly 1", wins.Load())
	}
}

func testInterleaved(t *testing.T, h Harness) {
	a, b := h.Open(t), h.Open(t)
	var wg sync.WaitGroup
	for _, s := range []*kv.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				k := fmt.Sprintf("inter:%p:%02d", s, i)
				k = strings.ReplaceAll(k, "0x", "")
				if _, err := s.Put(ctx, k, []byte("v")); err != nil {
					t.Errorf("put: %v", err)
					return
				}
				if _, _, err := s.Get(ctx, k); err != nil {
					t.Errorf("get: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range []*kv.Store{a, b} {
		p, err := s.Scan(ctx, "inter:", kv.MaxScanLimit, "")
		if err != nil || len(p.Items) != 100 {
			t.Fatalf("scan = %d items, %v; want 100", len(p.Items), err)
		}
	}
}
