package kvtest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
)

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
	if n := countAll(t, s); n != 5 {
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
	// "" is every key (Scan/EveryKeyWithoutPrefix); a bad prefix is not.
	_, err := s.Scan(ctx, "a/b", 10, "")
	wantInvalid(t, err, "prefix")
	_, err = s.Scan(ctx, "a", -1, "")
	wantInvalid(t, err, "limit", "-1")
	_, err = s.Scan(ctx, "a", kv.MaxScanLimit+1, "")
	wantInvalid(t, err, "limit", "1001")
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
