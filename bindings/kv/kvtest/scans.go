package kvtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
)

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
	tl := newTimeline(h)
	s := h.Open(t, tl.opts()...)
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
			tl.past(time.Second)
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
