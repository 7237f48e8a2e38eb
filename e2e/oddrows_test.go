package e2e

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOddRowsCLI puts rows another program wrote the spec's SQL into the
// stores of a stack (REAL timestamps as Python's time.time()*1000 gives
// them, a json payload that is not JSON, an unknown payload_type, an
// enqueued_at that is not a number, numbers and TEXT in the kv value
// column) and drives the built binary: check reports every such row by id
// or key, peek and stats work, receive --json prints a receipt for every
// message it claimed (and claims nothing it does not print), the
// undeliverable row goes to the dead-letter queue with its reason, and kv
// get and scan read what is there.
func TestOddRowsCLI(t *testing.T) {
	t.Parallel()
	s := newStack(t, `  orders:
    type: queue
    maxAttempts: 3
    deadLetter: orders-dlq
  orders-dlq:
    type: queue
  carts:
    type: kv
`)
	if code, _, stderr := runCLI(t, "queue", "send", "orders", "first", "-f", s.file); code != 0 {
		t.Fatalf("send: %s", stderr)
	}
	if code, _, stderr := runCLI(t, "kv", "put", "carts", "clean", "v", "-f", s.file); code != 0 {
		t.Fatalf("kv put: %s", stderr)
	}
	_, qfile := s.storeFile("queue", "orders")
	_, kfile := s.storeFile("kv", "carts")
	qdb := rawDB(t, qfile)
	now := time.Now()
	py := func(back time.Duration) float64 { return float64(now.Add(-back).UnixMilli()) + 0.25 } // always a fraction
	for _, r := range [][]any{
		{"json", `{"n":1}`, py(4 * time.Second), py(4 * time.Second)},
		{"json", `{not json`, now.UnixMilli() - 3000, now.UnixMilli() - 3000},
		{"xml", `<a/>`, now.UnixMilli() - 2000, now.UnixMilli() - 2000},
		{"text", "bad time", "yesterday", now.UnixMilli() - 1000},
	} {
		if _, err := qdb.Exec(`INSERT INTO messages (payload_type, payload_data, enqueued_at, visible_at, attempt) VALUES (?1, ?2, ?3, ?4, 0)`, r...); err != nil {
			t.Fatal(err)
		}
	}
	kdb := rawDB(t, kfile)
	for _, r := range [][]any{
		{"o:n", int64(42), nil},
		{"o:t", "text value", nil},
		{"o:r", []byte("real expiry"), py(-time.Hour)},
		{"o:gone", []byte("expired"), py(time.Minute)},
	} {
		if _, err := kdb.Exec(`INSERT INTO kv (key, value, expires_at) VALUES (?1, ?2, ?3)`, r...); err != nil {
			t.Fatal(err)
		}
	}

	code, out, stderr := runCLI(t, "check", "-f", s.file)
	if code != 1 {
		t.Fatalf("check exited %d, want 1 (odd rows):\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"orders: row: row 2:", "enqueued_at is REAL", "row 3:", "not valid JSON", "row 4:", `"xml"`,
		"row 5:", `enqueued_at is TEXT "yesterday", not a number`, `carts: row: key "o:n": value is INTEGER 42`, `key "o:t": value is TEXT`, `key "o:r": expires_at is REAL`} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	code, out, stderr = runCLI(t, "queue", "peek", "orders", "--json", "-f", s.file)
	if code != 0 {
		t.Fatalf("peek: %d %s", code, stderr)
	}
	var peek struct {
		Messages []struct {
			ID      int64    `json:"id"`
			Payload string   `json:"payload"`
			Odd     []string `json:"odd"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &peek); err != nil || len(peek.Messages) != 5 {
		t.Fatalf("peek --json (%v): %s", err, out)
	}
	if code, out, stderr = runCLI(t, "queue", "stats", "orders", "--json", "-f", s.file); code != 0 || !strings.Contains(out, `"total": 5`) {
		t.Fatalf("stats: %d %s %s", code, out, stderr)
	}

	code, out, stderr = runCLI(t, "queue", "receive", "orders", "--max", "10", "--json", "-f", s.file)
	if code != 0 {
		t.Fatalf("receive: %d %s %s", code, out, stderr)
	}
	var recv struct {
		Messages []struct {
			ID      int64  `json:"id"`
			Receipt string `json:"receipt"`
			Type    string `json:"type"`
			Payload string `json:"payload"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &recv); err != nil {
		t.Fatalf("receive --json is not JSON (%v): %s", err, out)
	}
	var got []string
	printed := map[string]bool{}
	for _, m := range recv.Messages {
		got = append(got, m.Type+":"+m.Payload)
		printed[m.Receipt] = true
	}
	if strings.Join(got, ",") != `json:{"n":1},json:{not json,xml:<a/>,text:first` {
		t.Errorf("received %q", got)
	}
	// Every row claimed (a receipt in the file) has its receipt printed.
	rows, err := qdb.Query(`SELECT id, receipt_handle FROM messages WHERE attempt > 0`)
	if err != nil {
		t.Fatal(err)
	}
	claimed := 0
	for rows.Next() {
		var id int64
		var u string
		if err := rows.Scan(&id, &u); err != nil {
			t.Fatal(err)
		}
		claimed++
		if r := fmt.Sprintf("%d:%s", id, u); !printed[r] {
			t.Errorf("message %d was claimed (receipt %s) but receive did not print it", id, r)
		}
	}
	rows.Close()
	if claimed != len(recv.Messages) {
		t.Errorf("%d rows claimed, %d printed", claimed, len(recv.Messages))
	}

	// The row with enqueued_at "yesterday" went to the dead-letter queue,
	// with its reason.
	code, out, stderr = runCLI(t, "queue", "peek", "orders-dlq", "-f", s.file)
	if code != 0 || !strings.Contains(out, "bad time") || !strings.Contains(out, `moved here undelivered: enqueued_at is TEXT "yesterday"`) {
		t.Errorf("peek orders-dlq: %d\n%s%s", code, out, stderr)
	}

	for key, want := range map[string]string{"o:n": "42", "o:t": "text value", "o:r": "real expiry"} {
		if code, out, stderr := runCLI(t, "kv", "get", "carts", key, "-f", s.file); code != 0 || out != want {
			t.Errorf("kv get %s: %d %q %s, want %q", key, code, out, stderr, want)
		}
	}
	if code, out, _ := runCLI(t, "kv", "get", "carts", "o:gone", "-f", s.file); code != 1 {
		t.Errorf("kv get of a key whose REAL expires_at passed: %d %q, want absent (exit 1)", code, out)
	}
	code, out, stderr = runCLI(t, "kv", "scan", "carts", "o:", "--json", "-f", s.file)
	if code != 0 || !strings.Contains(out, `"o:n"`) || !strings.Contains(out, `"o:t"`) || !strings.Contains(out, `"o:r"`) || strings.Contains(out, `"o:gone"`) {
		t.Errorf("kv scan: %d %s %s", code, out, stderr)
	}
}

// rawDB opens a store file as another program would.
func rawDB(t *testing.T, file string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Clean(file)+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
