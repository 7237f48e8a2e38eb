package kvtest

import (
	"testing"

	"github.com/localcloud/localcloud/bindings/kv"
)

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
