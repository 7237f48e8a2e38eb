package kvtest

import (
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
)

// testScanEveryKey: prefix "" lists every live key, in pages, with a
// cursor bound to "" like any prefix.
func testScanEveryKey(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	for _, k := range []string{"b:1", "A", "z.last", "a-1", "m_9"} {
		mustPut(t, s, k, "v"+k)
	}
	mustPut(t, s, "gone", "x", kv.WithTTL(time.Second))
	tl.past(time.Second)
	var keys []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := s.Scan(ctx, "", 2, cursor)
		if err != nil {
			t.Fatalf("Scan(\"\") page %d: %v", pages, err)
		}
		for _, it := range p.Items {
			keys = append(keys, it.Key)
			if string(it.Value) != "v"+it.Key {
				t.Errorf("key %s has value %q", it.Key, it.Value)
			}
		}
		if p.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("Scan(\"\") does not end")
		}
		if _, err := s.Scan(ctx, "a", 2, p.NextCursor); err == nil {
			t.Error("a cursor of prefix \"\" was accepted for prefix \"a\"")
		}
		cursor = p.NextCursor
	}
	if got := join(keys); got != "A,a-1,b:1,m_9,z.last" {
		t.Fatalf("every key: %s; want A,a-1,b:1,m_9,z.last (expired gone filtered)", got)
	}
}

// testExpiresAtShown: Scan and Lookup give each key's expiry, zero for
// a key without TTL.
func testExpiresAtShown(t *testing.T, h Harness) {
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
	before := time.Now()
	if tl.fake != nil {
		before = tl.fake.Now()
	}
	mustPut(t, s, "ttl:a", "1", kv.WithTTL(2*time.Second))
	mustPut(t, s, "ttl:b", "2")
	p, err := s.Scan(ctx, "ttl:", 10, "")
	if err != nil || len(p.Items) != 2 {
		t.Fatalf("scan: %+v %v", p, err)
	}
	check := func(what string, got time.Time) {
		t.Helper()
		want := before.Add(2 * time.Second)
		lo, hi := want, want
		if tl.fake == nil {
			lo, hi = want.Add(-tl.slack), want.Add(tl.slack)
		}
		if got.Before(lo.Truncate(time.Millisecond)) || got.After(hi) {
			t.Errorf("%s: expires at %s; want %s", what, got, want)
		}
	}
	check("scan ttl:a", p.Items[0].ExpiresAt)
	if !p.Items[1].ExpiresAt.IsZero() {
		t.Errorf("scan ttl:b (no TTL): expires at %s; want zero", p.Items[1].ExpiresAt)
	}
	it, ok, err := s.Lookup(ctx, "ttl:a")
	if err != nil || !ok || string(it.Value) != "1" {
		t.Fatalf("Lookup: %+v %v %v", it, ok, err)
	}
	check("Lookup ttl:a", it.ExpiresAt)
	if it, ok, err := s.Lookup(ctx, "ttl:b"); err != nil || !ok || !it.ExpiresAt.IsZero() {
		t.Errorf("Lookup ttl:b: %+v %v %v; want no expiry", it, ok, err)
	}
	if _, ok, err := s.Lookup(ctx, "ttl:none"); err != nil || ok {
		t.Errorf("Lookup of a missing key: %v %v", ok, err)
	}
	_, _, err = s.Lookup(ctx, "bad key")
	wantInvalid(t, err, "key")
	tl.past(2 * time.Second)
	if _, ok, err := s.Lookup(ctx, "ttl:a"); err != nil || ok {
		t.Errorf("Lookup after expiry: %v %v; want absent", ok, err)
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}
