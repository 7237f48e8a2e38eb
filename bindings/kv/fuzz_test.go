package kv_test

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/bindings"
	"github.com/localcloud/localcloud/bindings/kv"
)

// keyRule is the README's key rule written out on its own: 1..512 bytes of
// A-Z a-z 0-9 - _ : .
var keyRule = regexp.MustCompile(`^[A-Za-z0-9_:.-]{1,512}$`)

// openFuzzStore opens one real store for a fuzz worker; every input of the
// worker uses it.
func openFuzzStore(f *testing.F) *kv.Store {
	f.Helper()
	s, err := kv.Open(ctx, filepath.Join(f.TempDir(), "store"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	return s
}

// wantInvalid checks that err is an *bindings.Error with code INVALID_INPUT
// whose message starts with "field: ".
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var be *bindings.Error
	if !errors.As(err, &be) || be.Code != bindings.CodeInvalidInput || !errors.Is(err, bindings.ErrInvalidInput) {
		t.Fatalf("error %T %v; want an *bindings.Error with code INVALID_INPUT", err, err)
	}
	if !strings.HasPrefix(be.Msg, field+": ") {
		t.Fatalf("message %q does not start with the field %q", be.Msg, field)
	}
}

// FuzzKey checks that the key rule accepts exactly the keys keyRule allows,
// for keys (Get, Exists, Put, Delete) and scan prefixes alike, and that an
// accepted key round-trips through a real store.
func FuzzKey(f *testing.F) {
	for _, seed := range []string{
		"a", "A-Z_a:z.0-9", ".", "-", strings.Repeat("k", kv.MaxKeyBytes), strings.Repeat("k", kv.MaxKeyBytes+1),
		"", " ", "a b", "a/b", "ä", "a\x00", "\xff", "key\n", "%", "*", "a'b", "😀",
	} {
		f.Add(seed)
	}
	s := openFuzzStore(f)
	f.Fuzz(func(t *testing.T, key string) {
		want := keyRule.MatchString(key)
		err := kv.ExportValidKey("key", key)
		if want != (err == nil) {
			t.Fatalf("validKey(%q) = %v; the rule says valid=%v", key, err, want)
		}
		if !want {
			wantInvalid(t, err, "key")
			if len(key) >= 1 && len(key) <= kv.MaxKeyBytes && !strings.Contains(err.Error(), "byte ") {
				t.Fatalf("error %v does not say which byte is wrong", err)
			}
			// Every entry point refuses it before touching the store.
			_, _, err := s.Get(ctx, key)
			wantInvalid(t, err, "key")
			_, err = s.Exists(ctx, key)
			wantInvalid(t, err, "key")
			_, err = s.Put(ctx, key, []byte("v"))
			wantInvalid(t, err, "key")
			wantInvalid(t, s.Delete(ctx, key), "key")
			// The prefix "" is valid: it scans every key (issue 15).
			if key != "" {
				_, err = s.Scan(ctx, key, 10, "")
				wantInvalid(t, err, "prefix")
			}
			return
		}
		if _, err := s.Put(ctx, key, []byte(key)); err != nil {
			t.Fatalf("Put(%q): %v", key, err)
		}
		v, ok, err := s.Get(ctx, key)
		if err != nil || !ok || string(v) != key {
			t.Fatalf("Get(%q) = %q, %v, %v; want the value put", key, v, ok, err)
		}
		page, err := s.Scan(ctx, key, 1, "")
		if err != nil || len(page.Items) != 1 || page.Items[0].Key != key {
			t.Fatalf("Scan(%q, 1) = %+v, %v; want the key itself first", key, page, err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Fatalf("Delete(%q): %v", key, err)
		}
		if ok, err := s.Exists(ctx, key); err != nil || ok {
			t.Fatalf("Exists(%q) after Delete = %v, %v", key, ok, err)
		}
	})
}

// FuzzScanCursor checks the opaque start-after cursor: every cursor Scan can
// issue decodes to the key it names; any other string either decodes and
// re-encodes to exactly itself or is INVALID_INPUT naming the cursor, and a
// real store's Scan agrees with the codec.
func FuzzScanCursor(f *testing.F) {
	for _, seed := range []struct{ prefix, last, cursor string }{
		{"a", "ab", ""},
		{"a", "a", "c1.YQBh"},
		{"user:", "user:42", "c1.dXNlcjoAdXNlcjo0Mg"},
		{"a", "ab", "c1.YQBhYg=="},
		{"a", "ab", "c1.YQBh\nYg"},
		{"a", "ab", "c1.YQBhYh"},
		{"a", "ab", "c2.YQBhYg"},
		{"a", "b", "c1.YgBi"},
		{"k", strings.Repeat("k", kv.MaxKeyBytes), "c1."},
		{"x", "x\xff", "c1.eAB4"},
		{"x", "x", "c1.eAB4AHg"},
	} {
		f.Add(seed.prefix, seed.last, seed.cursor)
	}
	s := openFuzzStore(f)
	f.Fuzz(func(t *testing.T, prefix, last, cursor string) {
		if kv.ExportValidKey("prefix", prefix) != nil {
			return // FuzzKey covers prefixes; Scan checks the prefix first
		}
		// A cursor Scan issues names a key with the prefix: it decodes back.
		if strings.HasPrefix(last, prefix) {
			c := kv.ExportEncodeCursor(prefix, last)
			got, err := kv.ExportDecodeCursor(prefix, c)
			if err != nil || got != last {
				t.Fatalf("decode(encode(%q, %q)) = %q, %v", prefix, last, got, err)
			}
			if _, err := s.Scan(ctx, prefix, 1, c); err != nil {
				t.Fatalf("Scan with an issued cursor %q: %v", c, err)
			}
			// Bound to its prefix: another prefix refuses it.
			if other := prefix + "x"; !strings.HasPrefix(last, other) {
				_, err := kv.ExportDecodeCursor(other, c)
				wantInvalid(t, err, "cursor")
			}
		}
		// Any string: a canonical cursor for this prefix, or INVALID_INPUT.
		got, err := kv.ExportDecodeCursor(prefix, cursor)
		_, scanErr := s.Scan(ctx, prefix, 1, cursor)
		if (err == nil) != (scanErr == nil) {
			t.Fatalf("decode(%q, %q) = %v but Scan = %v", prefix, cursor, err, scanErr)
		}
		if err != nil {
			wantInvalid(t, err, "cursor")
			wantInvalid(t, scanErr, "cursor")
			return
		}
		if cursor == "" {
			if got != "" {
				t.Fatalf("empty cursor decoded to %q", got)
			}
			return
		}
		if !strings.HasPrefix(got, prefix) {
			t.Fatalf("cursor %q for prefix %q decoded to %q, outside the prefix", cursor, prefix, got)
		}
		if re := kv.ExportEncodeCursor(prefix, got); re != cursor {
			t.Fatalf("cursor %q decodes to %q, which re-encodes to %q: a cursor Scan never issued is accepted", cursor, got, re)
		}
	})
}
