package kvtest

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
)

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
	tl := newTimeline(h)
	a, b := h.Open(t, tl.opts()...), h.Open(t, tl.opts()...)
	if !mustPut(t, a, "ttl-race", "A", kv.IfNotExists(), kv.WithTTL(300*time.Millisecond)) {
		t.Fatal("A lost on an empty key")
	}
	if mustPut(t, b, "ttl-race", "B", kv.IfNotExists()) {
		t.Fatal("B won while A's key is live")
	}
	tl.past(450 * time.Millisecond)
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
