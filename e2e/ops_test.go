package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/bindings/kv"
	"github.com/localcloud/localcloud/internal/engine/sqlitekv"
	"github.com/localcloud/localcloud/internal/engine/sqlitequeue"
	"github.com/localcloud/localcloud/internal/sqlstore"
	"github.com/localcloud/localcloud/internal/testutil"
)

// Tests of the store commands: kv, queue, check, backup, restore, bench.

// envStoreDir tells the writer app which store to write.
const envStoreDir = "LOCALCLOUD_E2E_STORE_DIR"

// opsAppMain runs the app programs of this file; ok is false for a mode it
// does not know.
func opsAppMain(mode string) (code int, ok bool) {
	switch mode {
	case "kv-writer":
		return kvWriter(os.Getenv(envStoreDir)), true
	case "kv-hold":
		return kvHold(os.Getenv(envStoreDir)), true
	}
	return 0, false
}

// kvWriter writes the keys w0000001, w0000002, ... one by one into the KV
// store in dir and prints each key on stdout once its Put has returned (is
// acknowledged), until SIGTERM. Every key it committed is printed.
func kvWriter(dir string) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	ctx := context.Background()
	s, err := kv.Open(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		return 3
	}
	defer s.Close()
	deadline := time.Now().Add(60 * time.Second) // a bound for a lost test
	for i := 1; time.Now().Before(deadline); i++ {
		select {
		case <-stop:
			return 0
		default:
		}
		key := fmt.Sprintf("w%07d", i)
		if _, err := s.Put(ctx, key, []byte(key)); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			return 3
		}
		fmt.Println(key)
	}
	return 0
}

// kvHold opens (creating it) the KV store in dir, prints "open" and holds
// the handle, idle, until SIGTERM: a connection that switched a new file to
// WAL and did nothing since holds neither -wal, -shm nor a lock.
func kvHold(dir string) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	s, err := kv.Open(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 3
	}
	defer s.Close()
	fmt.Println("open")
	select {
	case <-stop:
		return 0
	case <-time.After(60 * time.Second): // a bound for a lost test
		return 1
	}
}

// lc runs localcloud with stdin (nil for none) to completion.
func lc(t *testing.T, stdin []byte, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	p := startCmd(t, cmd)
	code = p.waitExit(eventTimeout)
	return code, p.stdout.String(), p.stderr()
}

// lcOK runs localcloud and fails the test unless it exits 0.
func lcOK(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	code, stdout, stderr := lc(t, stdin, args...)
	if code != 0 {
		t.Fatalf("localcloud %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// decode parses a --json output: exactly one JSON value.
func decode(t *testing.T, what, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%s --json does not parse: %v\n%s", what, err, out)
	}
}

const opsBindings = `  carts:
    type: kv
  orders:
    type: queue
`

// JSON shapes as docs/CLI.md documents them.
type (
	kvValueOut struct {
		Binding     string  `json:"binding"`
		Key         string  `json:"key"`
		Found       bool    `json:"found"`
		Written     bool    `json:"written"`
		Deleted     bool    `json:"deleted"`
		Exists      bool    `json:"exists"`
		Bytes       int     `json:"bytes"`
		TTLMillis   *int64  `json:"ttlMillis"`
		ValueBase64 string  `json:"valueBase64"`
		ValueText   *string `json:"valueText"`
	}
	kvScanOut struct {
		Items      []kvValueOut `json:"items"`
		NextCursor string       `json:"nextCursor"`
	}
	queueMsgOut struct {
		ID        int64           `json:"id"`
		Receipt   string          `json:"receipt"`
		Attempt   int             `json:"attempt"`
		Type      string          `json:"type"`
		Payload   string          `json:"payload"`
		JSON      json.RawMessage `json:"json"`
		State     string          `json:"state"`
		VisibleAt string          `json:"visibleAt"`
	}
	queueMsgsOut struct {
		Binding  string        `json:"binding"`
		Messages []queueMsgOut `json:"messages"`
	}
	queueStatsOut struct {
		Due, InFlight, Total int64
		OldestAgeMillis      int64 `json:"oldestAgeMillis"`
	}
	receiptsOut struct {
		Results []struct {
			Receipt string `json:"receipt"`
			OK      bool   `json:"ok"`
		} `json:"results"`
	}
	checkOut struct {
		OK       bool `json:"ok"`
		Problems int  `json:"problems"`
		Stores   []struct {
			Binding  string `json:"binding"`
			OK       bool   `json:"ok"`
			Exists   bool   `json:"exists"`
			Problems []struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			} `json:"problems"`
		} `json:"stores"`
	}
	backupOut struct {
		Binding string `json:"binding"`
		Backup  string `json:"backup"`
		Bytes   int64  `json:"bytes"`
	}
	restoreOut struct {
		Binding  string `json:"binding"`
		Store    string `json:"store"`
		Replaced string `json:"replaced"`
	}
)

// TestStoreCommandsWithAndWithoutUp runs every kv and queue subcommand,
// check, backup and restore against a stack, once while up serves it and
// once without; every --json output must parse.
func TestStoreCommandsWithAndWithoutUp(t *testing.T) {
	t.Parallel()
	for _, withUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "without-up", true: "with-up"}[withUp], func(t *testing.T) {
			t.Parallel()
			s := newStack(t, opsBindings)
			var up *proc
			if withUp {
				up, _ = s.up(t)
			}
			f := []string{"-f", s.file}
			run := func(args ...string) string { t.Helper(); return lcOK(t, nil, append(args, f...)...) }

			// kv: a binary value round-trips byte for byte through stdin/stdout.
			value := make([]byte, kv.MaxValueBytes)
			for i := range value {
				value[i] = byte(rand.IntN(256))
			}
			copy(value, "\x00\r\n\xff-")
			// The confirmation goes to stderr, stdout stays empty.
			if code, out, stderr := lc(t, value, append([]string{"kv", "put", "carts", "blob:1", "-"}, f...)...); code != 0 || out != "" || !strings.Contains(stderr, "24576 bytes") {
				t.Errorf("put: exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			if got := run("kv", "get", "carts", "blob:1"); got != string(value) {
				t.Fatalf("binary value changed: got %d bytes, want %d (equal %v)", len(got), len(value), got == string(value))
			}
			var v kvValueOut
			decode(t, "kv get", run("kv", "get", "carts", "blob:1", "--json"), &v)
			if b, _ := base64.StdEncoding.DecodeString(v.ValueBase64); !v.Found || !bytes.Equal(b, value) || v.ValueText != nil || v.Bytes != len(value) {
				t.Errorf("kv get --json: found %v, %d bytes, text %v", v.Found, v.Bytes, v.ValueText != nil)
			}
			run("kv", "put", "carts", "cart:1", "three items", "--ttl", "1h")
			decode(t, "kv put", run("kv", "put", "--json", "carts", "cart:2", "two", "--ttl", "1h"), &v)
			if !v.Written || *v.TTLMillis != 3600000 || v.Key != "cart:2" {
				t.Errorf("kv put --json = %+v", v)
			}
			code, stdout, stderr := lc(t, nil, append([]string{"kv", "put", "carts", "cart:1", "x", "--if-not-exists", "--json"}, f...)...)
			decode(t, "kv put --if-not-exists", stdout, &v)
			if code != 1 || v.Written || !strings.Contains(stderr, "Error: key \"cart:1\" already exists") {
				t.Errorf("put --if-not-exists on a live key: exit %d, %+v, %s", code, v, stderr)
			}
			decode(t, "kv exists", run("kv", "exists", "carts", "cart:1", "--json"), &v)
			if !v.Exists {
				t.Error("kv exists: false for a live key")
			}
			var sc kvScanOut
			decode(t, "kv scan", run("kv", "scan", "carts", "cart:", "--limit", "1", "--all", "--json"), &sc)
			if len(sc.Items) != 2 || sc.Items[0].Key != "cart:1" || *sc.Items[1].ValueText != "two" || sc.NextCursor != "" {
				t.Errorf("kv scan --all: %+v", sc)
			}
			decode(t, "kv delete", run("kv", "delete", "carts", "cart:1", "--json"), &v)
			code, stdout, stderr = lc(t, nil, append([]string{"kv", "get", "carts", "cart:1"}, f...)...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, `Error: key "cart:1" not found in kv binding carts`) {
				t.Errorf("get of a deleted key: exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			if code, stdout, _ = lc(t, nil, append([]string{"kv", "exists", "carts", "cart:1"}, f...)...); code != 1 || stdout != "false\n" {
				t.Errorf("exists of a deleted key: exit %d, %q", code, stdout)
			}

			// queue: peek never changes attempt counts.
			run("queue", "send", "orders", "first")
			run("queue", "send", "orders", `{"order": 42}`, "--json-payload", "--json")
			var peek0, peek1, peek2 queueMsgsOut
			decode(t, "queue peek", run("queue", "peek", "orders", "--json"), &peek0)
			if len(peek0.Messages) != 2 || peek0.Messages[0].Attempt != 0 || peek0.Messages[0].State != "due" || peek0.Messages[1].Type != "json" {
				t.Fatalf("peek: %+v", peek0)
			}
			var got queueMsgsOut
			decode(t, "queue receive", run("queue", "receive", "orders", "--visibility", "1m", "--json"), &got)
			if len(got.Messages) != 1 || got.Messages[0].Attempt != 1 || got.Messages[0].Payload != "first" || got.Messages[0].Receipt == "" {
				t.Fatalf("receive: %+v", got)
			}
			decode(t, "queue peek", run("queue", "peek", "orders", "--json"), &peek1)
			decode(t, "queue peek", run("queue", "peek", "orders", "--json", "--limit", "5"), &peek2)
			if fmt.Sprint(peek1) != fmt.Sprint(peek2) {
				t.Errorf("a peek changed the queue:\n%+v\n%+v", peek1, peek2)
			}
			if m := peek1.Messages; len(m) != 2 || m[0].Attempt != 1 || m[0].State != "in-flight" || m[1].Attempt != 0 || m[1].State != "due" {
				t.Errorf("peek after one receive: %+v", m)
			}
			var st queueStatsOut
			decode(t, "queue stats", run("queue", "stats", "orders", "--json"), &st)
			if st.Total != 2 || st.Due != 1 || st.InFlight != 1 {
				t.Errorf("stats: %+v", st)
			}
			var rs receiptsOut
			decode(t, "queue nack", run("queue", "nack", "orders", got.Messages[0].Receipt, "--json"), &rs)
			if len(rs.Results) != 1 || !rs.Results[0].OK {
				t.Errorf("nack: %+v", rs)
			}
			decode(t, "queue receive", run("queue", "receive", "orders", "--max", "10", "--json"), &got)
			if len(got.Messages) != 2 || got.Messages[0].Attempt != 2 || got.Messages[1].Attempt != 1 {
				t.Fatalf("receive after peeks and a nack: attempts must be 2 and 1: %+v", got)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, got.Messages[1].JSON); err != nil || compact.String() != `{"order":42}` {
				t.Errorf("json payload %s", got.Messages[1].JSON)
			}
			decode(t, "queue ack", run("queue", "ack", "orders", got.Messages[0].Receipt, got.Messages[1].Receipt, "--json"), &rs)
			if len(rs.Results) != 2 || !rs.Results[0].OK || !rs.Results[1].OK {
				t.Errorf("ack: %+v", rs)
			}
			run("queue", "send", "orders", "doomed")
			var purge struct {
				Purged         bool  `json:"purged"`
				MessagesBefore int64 `json:"messagesBefore"`
			}
			decode(t, "queue purge", run("queue", "purge", "orders", "--yes", "--json"), &purge)
			decode(t, "queue stats", run("queue", "stats", "orders", "--json"), &st)
			if !purge.Purged || purge.MessagesBefore != 1 || st.Total != 0 {
				t.Errorf("purge %+v, then stats %+v", purge, st)
			}

			// check: every store is sound.
			var ck checkOut
			decode(t, "check", run("check", "--json"), &ck)
			if !ck.OK || len(ck.Stores) != 2 || !ck.Stores[0].Exists {
				t.Errorf("check: %+v", ck)
			}

			// backup, then restore: refused while up runs, done when it does not.
			run("kv", "put", "carts", "cart:9", "backed up")
			var b backupOut
			decode(t, "backup", run("backup", "carts", filepath.Join(s.dir, "carts.sqlite"), "--json"), &b)
			if m := mode(t, b.Backup); m != 0o600 || b.Bytes == 0 {
				t.Errorf("backup file mode %04o, %d bytes", m, b.Bytes)
			}
			run("kv", "put", "carts", "cart:9", "changed after the backup")
			if withUp {
				code, stdout, stderr := lc(t, nil, append([]string{"restore", "carts", b.Backup}, f...)...)
				if code != 1 || stdout != "" || !strings.Contains(stderr, fmt.Sprintf("Error: localcloud up (pid %d) serves stack shop", up.pid())) ||
					!strings.Contains(stderr, fmt.Sprintf("Try: stop localcloud up first (kill %d)", up.pid())) {
					t.Errorf("restore while up runs: exit %d\n%s", code, stderr)
				}
				if got := run("kv", "get", "carts", "cart:9"); got != "changed after the backup" {
					t.Errorf("the refused restore changed the store: %q", got)
				}
				up.signal(syscall.SIGTERM)
				if code := up.waitExit(stopLimit); code != 0 {
					t.Fatalf("up exit %d", code)
				}
			}
			var r restoreOut
			decode(t, "restore", run("restore", "carts", b.Backup, "--json"), &r)
			if !exists(r.Replaced) || !strings.HasPrefix(filepath.Base(r.Replaced), "localkv.sqlite.replaced-") {
				t.Errorf("restore: %+v", r)
			}
			if got := run("kv", "get", "carts", "cart:9"); got != "backed up" {
				t.Errorf("after restore: %q", got)
			}
			decode(t, "check", run("check", "--json"), &ck)
			if !ck.OK {
				t.Errorf("check after restore: %+v", ck)
			}
			if withUp { // up serves the restored store
				s.up(t)
				if h := s.status(t).binding("carts").Health; h != "ok" {
					t.Errorf("carts health after restore: %s", h)
				}
				if got := run("kv", "get", "carts", "cart:9"); got != "backed up" {
					t.Errorf("with up again: %q", got)
				}
			}
		})
	}
}

func TestBackupWhileAnotherProcessWrites(t *testing.T) {
	t.Parallel()
	s := newStack(t, opsBindings)
	up, _ := s.up(t)
	storeDir := filepath.Join(s.dataDir(), "kv", "carts")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = environ(envAppMode+"=kv-writer", envStoreDir+"="+storeDir)
	writer := startCmd(t, cmd)
	acked := func() int { return strings.Count(writer.stdout.String(), "\n") }
	testutil.CheckFor(t, eventTimeout, 2*time.Millisecond, "300 acknowledged writes", func() bool { return acked() >= 300 || writer.exited() })
	if writer.exited() {
		t.Fatalf("writer exited: %s", writer.stderr())
	}

	before := acked() // every one of these is committed before the backup starts
	var b backupOut
	decode(t, "backup", lcOK(t, nil, "backup", "carts", s.dir, "-f", s.file, "--json"), &b)
	during := acked()
	writer.signal(syscall.SIGTERM)
	if code := writer.waitExit(eventTimeout); code != 0 {
		t.Fatalf("writer exit %d: %s", code, writer.stderr())
	}
	total := acked()
	if during <= before {
		t.Fatalf("the writer did not write while the backup ran (%d acknowledged before, %d after)", before, during)
	}
	t.Logf("acknowledged: %d before the backup, %d when it returned, %d in all", before, during, total)

	// The backup is sound...
	v, err := sqlstore.Verify(context.Background(), b.Backup, sqlitekv.Format())
	if err != nil || !v.OK() {
		t.Fatalf("backup verification: %v %+v", err, v.Problems)
	}
	// ...and holds exactly w1..wn, a prefix of the acknowledged writes.
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: b.Backup, RawQuery: "mode=ro"}).String())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(`SELECT key, value FROM kv ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var key, value string
		if err := rows.Scan(&key, &value); err != nil {
			t.Fatal(err)
		}
		n++
		if want := fmt.Sprintf("w%07d", n); key != want || value != want {
			t.Fatalf("backup row %d is %s=%s, want %s: not a prefix of the writes", n, key, value, want)
		}
	}
	rows.Close()
	db.Close()
	if n < before || n > total {
		t.Fatalf("backup holds w1..w%d; %d were acknowledged before it began, %d in all", n, before, total)
	}

	// Restored into the stack (up stopped), it passes localcloud check.
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
	lcOK(t, nil, "restore", "carts", b.Backup, "-f", s.file)
	if out := lcOK(t, nil, "check", "carts", "-f", s.file); !strings.HasPrefix(out, "carts: ok (localkv.v1") {
		t.Errorf("check: %s", out)
	}
	if got := lcOK(t, nil, "kv", "get", "carts", fmt.Sprintf("w%07d", n), "-f", s.file); got != fmt.Sprintf("w%07d", n) {
		t.Errorf("restored store lacks the backup's last key: %q", got)
	}
	if n < total {
		if code, _, _ := lc(t, nil, "kv", "get", "carts", fmt.Sprintf("w%07d", n+1), "-f", s.file); code != 1 {
			t.Error("restored store holds a key the backup did not")
		}
	}
}

func TestCheckReportsEveryProblemOnItsOwnLine(t *testing.T) {
	t.Parallel()
	s := newStack(t, `  good:
    type: kv
  drift:
    type: kv
  foreign:
    type: kv
  loose:
    type: kv
  jobs:
    type: queue
`)
	up, _ := s.up(t) // provisions every store
	up.signal(syscall.SIGTERM)
	if code := up.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exit %d", code)
	}
	kvFile := func(name string) string { return filepath.Join(s.dataDir(), "kv", name, sqlitekv.FileName) }
	tamper := func(path string, stmts ...string) {
		t.Helper()
		db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, st := range stmts {
			if _, err := db.Exec(st); err != nil {
				t.Fatalf("%s: %v", st, err)
			}
		}
	}
	tamper(kvFile("drift"), "ALTER TABLE kv ADD COLUMN note TEXT")
	tamper(kvFile("foreign"), "UPDATE meta SET value = 'otherkv.v3' WHERE key = 'format'")
	tamper(filepath.Join(s.dataDir(), "queue", "jobs", sqlitequeue.FileName), "DROP INDEX idx_messages_visible", "CREATE TABLE extra (x)")
	// Group-writable: the file-mode policy refuses these (0644 and 0755
	// would only be notes, as at open).
	if err := os.Chmod(kvFile("loose"), 0o664); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(kvFile("loose")), 0o775); err != nil {
		t.Fatal(err)
	}
	before := testutil.HashFile(t, kvFile("drift"))

	code, stdout, stderr := lc(t, nil, "check", "-f", s.file)
	if code != 1 {
		t.Fatalf("check of tampered stores: exit %d\n%s%s", code, stdout, stderr)
	}
	want := []string{
		"drift: schema-changed: table kv differs from localkv.v1",
		`foreign: marker: foreign format marker "otherkv.v3", want "localkv.v1"`,
		"jobs: schema-missing: index idx_messages_visible of localqueue.v1 is missing",
		"jobs: schema-unknown: table extra is not part of localqueue.v1",
		"loose: mode: store directory " + filepath.Dir(kvFile("loose")) + " has mode 0775: group or others can write it",
		"loose: mode: " + kvFile("loose") + " has mode 0664: group or others can read and write it",
		// SQLite creates -wal and -shm with the database file's mode to read.
		"loose: mode: " + kvFile("loose") + "-wal has mode 0664",
		"loose: mode: " + kvFile("loose") + "-shm has mode 0664",
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var problems []string
	for _, l := range lines {
		if !strings.Contains(l, ": ok (") {
			problems = append(problems, l)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("%d problem lines, want %d:\n%s", len(problems), len(want), stdout)
	}
	for _, w := range want {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d lines start with %q:\n%s", n, w, stdout)
		}
	}
	if !strings.Contains(stdout, "good: ok (localkv.v1") || !strings.Contains(stderr, "Error: check found 8 problems in 4 of 5 stores") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
	if testutil.HashFile(t, kvFile("drift")) != before {
		t.Error("check changed a database file")
	}

	var ck checkOut
	code, stdout, _ = lc(t, nil, "check", "-f", s.file, "--json")
	decode(t, "check", stdout, &ck)
	if code != 1 || ck.OK || ck.Problems != 8 || len(ck.Stores) != 5 {
		t.Errorf("check --json: exit %d, %+v", code, ck)
	}
	// Named bindings only: the sound one passes.
	if out := lcOK(t, nil, "check", "good", "-f", s.file); !strings.HasPrefix(out, "good: ok") || strings.Count(out, "\n") != 1 {
		t.Errorf("check good: %s", out)
	}
	// A backup of a drifted store is refused and leaves nothing behind.
	code, _, stderr = lc(t, nil, "backup", "drift", filepath.Join(s.dir, "drift.sqlite"), "-f", s.file)
	if code != 1 || !strings.Contains(stderr, "failed verification, so no backup was written") || exists(filepath.Join(s.dir, "drift.sqlite")) {
		t.Errorf("backup of a drifted store: exit %d, %s", code, stderr)
	}
}

func TestReceiveWaitGetsAMessageSentWhileWaiting(t *testing.T) {
	t.Parallel()
	s := newStack(t, opsBindings)
	s.up(t)
	lcOK(t, nil, "queue", "send", "orders", "warm-up", "-f", s.file)
	lcOK(t, nil, "queue", "purge", "orders", "--yes", "-f", s.file)
	began := time.Now()
	recv := start(t, "queue", "receive", "orders", "--wait", "30s", "--json", "-f", s.file)
	lcOK(t, nil, "queue", "send", "orders", "late", "-f", s.file)
	if code := recv.waitExit(eventTimeout); code != 0 {
		t.Fatalf("receive --wait: exit %d: %s", code, recv.stderr())
	}
	var got queueMsgsOut
	decode(t, "queue receive --wait", recv.stdout.String(), &got)
	if len(got.Messages) != 1 || got.Messages[0].Payload != "late" {
		t.Errorf("got %+v", got)
	}
	t.Logf("receive --wait returned %s after it started", time.Since(began).Round(time.Millisecond))
}

func TestBenchJSON(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	for _, args := range [][]string{
		{"bench", "kv", "--duration", "300ms", "--workers", "2", "--json"},
		{"bench", "queue", "--duration", "300ms", "--workers", "2", "--processes", "2", "--batch", "5", "--json"},
		// The queue modes reach the load processes.
		{"bench", "queue", "--duration", "300ms", "--workers", "2", "--processes", "2", "--batch", "5", "--ack", "batch", "--senders", "1", "--json"},
	} {
		cmd := exec.Command(binary, args...)
		cmd.Env = environ("TMPDIR=" + tmp)
		p := startCmd(t, cmd)
		if code := p.waitExit(eventTimeout); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, p.stderr())
		}
		var out struct {
			Benches []struct {
				Kind      string `json:"kind"`
				Processes int    `json:"processes"`
				Ops       []struct {
					Op        string  `json:"op"`
					Count     uint64  `json:"count"`
					OpsPerSec float64 `json:"opsPerSec"`
					P50Micros float64 `json:"p50Micros"`
					P99Micros float64 `json:"p99Micros"`
					MaxMicros float64 `json:"maxMicros"`
					Errors    uint64  `json:"errors"`
				} `json:"ops"`
			} `json:"benches"`
		}
		decode(t, strings.Join(args, " "), p.stdout.String(), &out)
		if len(out.Benches) != 1 || out.Benches[0].Kind != args[1] {
			t.Fatalf("%q: %+v", args, out)
		}
		for _, o := range out.Benches[0].Ops {
			if o.Count == 0 || o.Errors != 0 || o.OpsPerSec <= 0 || o.P50Micros > o.P99Micros || o.P99Micros > o.MaxMicros {
				t.Errorf("%q: op %+v", args, o)
			}
		}
		if p.stderr() != "" {
			t.Errorf("%q: stderr (not a terminal) %q", args, p.stderr())
		}
	}
	if es, _ := os.ReadDir(tmp); len(es) != 0 {
		t.Errorf("bench left %v in its temp dir", es)
	}
}

func TestRestoreRefusedWhileAnAppHoldsTheStore(t *testing.T) {
	t.Parallel()
	s := newStack(t, opsBindings)
	storeDir := filepath.Join(s.dataDir(), "kv", "carts")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = environ(envAppMode+"=kv-hold", envStoreDir+"="+storeDir)
	app := startCmd(t, cmd)
	testutil.CheckFor(t, eventTimeout, 2*time.Millisecond, "the app to open the store", func() bool { return app.stdout.String() == "open\n" || app.exited() })
	if app.exited() {
		t.Fatalf("app exited: %s", app.stderr())
	}
	backup := filepath.Join(s.dir, "carts.sqlite")
	lcOK(t, nil, "backup", "carts", backup, "-f", s.file)
	before := testutil.HashFile(t, filepath.Join(storeDir, sqlitekv.FileName)) // the app has no SQLite lock to lose

	code, stdout, stderr := lc(t, nil, "restore", "carts", backup, "-f", s.file)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "store is open in another process") ||
		!strings.Contains(stderr, fmt.Sprintf("pid %d", app.pid())) || !strings.Contains(stderr, "Try: stop the apps that use carts") {
		t.Fatalf("restore while an app holds the store: exit %d\n%s", code, stderr)
	}
	if testutil.HashFile(t, filepath.Join(storeDir, sqlitekv.FileName)) != before {
		t.Error("the refused restore changed the database file")
	}
	if m, _ := filepath.Glob(filepath.Join(storeDir, "*replaced*")); len(m) != 0 {
		t.Errorf("the refused restore left %v", m)
	}

	app.signal(syscall.SIGTERM)
	if code := app.waitExit(eventTimeout); code != 0 {
		t.Fatalf("app exit %d: %s", code, app.stderr())
	}
	var r restoreOut
	decode(t, "restore", lcOK(t, nil, "restore", "carts", backup, "-f", s.file, "--json"), &r)
	if !exists(r.Replaced) {
		t.Errorf("restore after the app stopped: %+v", r)
	}
}
