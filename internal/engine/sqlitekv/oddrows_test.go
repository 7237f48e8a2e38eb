package sqlitekv_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
)

// TestOddRows writes kv rows the way another program using the spec's SQL
// may (Python's sqlite3: a REAL expires_at from time.time()*1000, a str
// value stored as TEXT, a number stored in the BLOB column, an expires_at
// that is not a number) through a raw connection to the real file, and
// checks what Get, Exists, Scan and Format().CheckRows make of them.
func TestOddRows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := openKV(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Put(ctx, "clean", []byte("v")); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitekv.FileName)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	past := float64(time.Now().Add(-time.Minute).UnixMilli()) + 0.5 // always a fraction (see queue oddrows_test.go pyNow)
	future := float64(time.Now().Add(time.Hour).UnixMilli()) + 0.5
	for _, r := range []struct {
		key        string
		value, exp any
	}{
		{"odd:expired-real", []byte("gone"), past},
		{"odd:live-real", []byte("here"), future},
		{"odd:text", "text value", nil},
		{"odd:int", int64(42), nil},
		{"odd:real", 1.5, nil},
		{"odd:text-expiry", []byte("kept"), "tomorrow"},
	} {
		if _, err := db.Exec(`INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3)`, r.key, r.value, r.exp); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]string{
		"odd:live-real": "here", "odd:text": "text value", "odd:int": "42", "odd:real": "1.5",
		// The spec's expiry test (expires_at <= now) is never true for TEXT.
		"odd:text-expiry": "kept",
	} {
		v, ok, err := s.Get(ctx, key)
		if err != nil || !ok || string(v) != want {
			t.Errorf("get %s = %q, %v, %v; want %q", key, v, ok, err, want)
		}
		if ok, err := s.Exists(ctx, key); err != nil || !ok {
			t.Errorf("exists %s = %v, %v; want true", key, ok, err)
		}
	}
	if v, ok, err := s.Get(ctx, "odd:expired-real"); err != nil || ok {
		t.Errorf("get of a key whose REAL expires_at passed = %q, %v, %v; want absent", v, ok, err)
	}
	var left int
	if err := db.QueryRow(`SELECT COUNT(*) FROM kv WHERE key = 'odd:expired-real'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("the expired row is still there (%d, %v): get deletes the expired row it meets", left, err)
	}
	page, err := s.Scan(ctx, "odd:", 100, "")
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	var got []string
	for _, it := range page.Items {
		got = append(got, it.Key+"="+string(it.Value))
	}
	if strings.Join(got, ",") != "odd:int=42,odd:live-real=here,odd:real=1.5,odd:text=text value,odd:text-expiry=kept" {
		t.Errorf("scan gave %q", got)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	probs, err := sqlitekv.Format().CheckRows(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range probs {
		lines = append(lines, p.Message)
	}
	text := strings.Join(lines, "\n")
	if len(probs) != 5 {
		t.Errorf("CheckRows found %d odd rows, want 5:\n%s", len(probs), text)
	}
	for _, want := range []string{`key "odd:live-real"`, "REAL", `key "odd:text"`, "TEXT", `key "odd:int"`, "INTEGER", `key "odd:text-expiry"`, "never expires"} {
		if !strings.Contains(text, want) {
			t.Errorf("CheckRows does not mention %q:\n%s", want, text)
		}
	}
}
