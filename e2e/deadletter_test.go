package e2e

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/localcloud/localcloud/internal/testutil"
)

// Dead letters across restores and recreated stores, run with the real
// binary: a message id that comes back (a store restored from an older
// backup, or deleted and created again, rewinds AUTOINCREMENT) must never
// make a move skip its arrival.

const dlStackBindings = `  q:
    type: queue
    maxAttempts: 1
    deadLetter: dlq
    visibilityTimeout: 1s
  dlq:
    type: queue
`

// dlCLI runs one queue command of the stack and fails the test unless it
// exits 0.
func (s stack) dlCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, stderr := runCLI(t, append(args, "-f", s.file)...)
	// status exits 1 when up is not running or a binding is unhealthy.
	if code != 0 && !(args[0] == "status" && code == 1) {
		t.Fatalf("localcloud %v: exit %d\n%s%s", args, code, out, stderr)
	}
	return out
}

// dlStats returns the stats of queue binding name.
func (s stack) dlStats(t *testing.T, name string) (total, due int64) {
	t.Helper()
	var st struct {
		Total int64 `json:"total"`
		Due   int64 `json:"due"`
	}
	out := s.dlCLI(t, "queue", "stats", name, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stats %s: %v\n%s", name, err, out)
	}
	return st.Total, st.Due
}

// dlReceive receives up to 10 messages of name with a lease of vis and
// returns their receipts.
func (s stack) dlReceive(t *testing.T, name, vis string) []string {
	t.Helper()
	var r struct {
		Messages []struct {
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	out := s.dlCLI(t, "queue", "receive", name, "--max", "10", "--visibility", vis, "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("receive %s: %v\n%s", name, err, out)
	}
	var receipts []string
	for _, m := range r.Messages {
		receipts = append(receipts, m.Receipt)
	}
	return receipts
}

// dlKillAll delivers every message of q once (maxAttempts 1) and receives
// again once they are due, which moves them all to dlq.
func (s stack) dlKillAll(t *testing.T) {
	t.Helper()
	total, _ := s.dlStats(t, "q")
	if got := s.dlReceive(t, "q", "1ms"); int64(len(got)) != total {
		t.Fatalf("first delivery: %d messages of %d", len(got), total)
	}
	testutil.CheckFor(t, 10*time.Second, 5*time.Millisecond, "the leases to end", func() bool {
		_, due := s.dlStats(t, "q")
		return due == total
	})
	if got := s.dlReceive(t, "q", "1s"); len(got) != 0 {
		t.Fatalf("a receive past maxAttempts delivered %d messages", len(got))
	}
}

// dlAckAll receives and acks every message of name.
func (s stack) dlAckAll(t *testing.T, name string) int {
	t.Helper()
	receipts := s.dlReceive(t, name, "1m")
	for _, r := range receipts {
		s.dlCLI(t, "queue", "ack", name, r)
	}
	return len(receipts)
}

func (s stack) dlWant(t *testing.T, name string, want int64) {
	t.Helper()
	if total, _ := s.dlStats(t, name); total != want {
		t.Errorf("%s holds %d messages; want %d", name, total, want)
	}
}

// TestDeadLettersSurviveRestoredSource is the recipe of issue 11, item 1:
// after q is restored from an older backup its ids start over, and the
// messages that die with ids that died once before must still reach dlq.
func TestDeadLettersSurviveRestoredSource(t *testing.T) {
	t.Parallel()
	s := newStack(t, dlStackBindings)
	backup := filepath.Join(s.dir, "q.sqlite")
	s.dlCLI(t, "queue", "send", "q", "A")
	s.dlCLI(t, "backup", "q", backup)
	s.dlCLI(t, "queue", "send", "q", "B")
	s.dlKillAll(t)
	s.dlWant(t, "dlq", 2)
	if n := s.dlAckAll(t, "dlq"); n != 2 {
		t.Fatalf("acked %d dead letters; want 2", n)
	}
	s.dlCLI(t, "restore", "q", backup) // q holds A again, as id 1
	s.dlCLI(t, "queue", "send", "q", "C")
	s.dlKillAll(t)
	s.dlWant(t, "q", 0)
	s.dlWant(t, "dlq", 2) // A (again) and C
}

// TestDeadLettersSurviveRecreatedSource: q's directory is deleted and
// created again by the next send.
func TestDeadLettersSurviveRecreatedSource(t *testing.T) {
	t.Parallel()
	s := newStack(t, dlStackBindings)
	s.dlCLI(t, "queue", "send", "q", "A")
	s.dlKillAll(t)
	s.dlWant(t, "dlq", 1)
	if err := os.RemoveAll(filepath.Join(s.dataDir(), "queue", "q")); err != nil {
		t.Fatal(err)
	}
	s.dlCLI(t, "queue", "send", "q", "C") // id 1 again
	s.dlKillAll(t)
	s.dlWant(t, "q", 0)
	s.dlWant(t, "dlq", 2)
}

// TestRedriveSurvivesRestoredDLQ: dlq is restored from a backup that holds
// a dead letter already redriven once; the next redrive must bring it back
// again rather than drop it.
func TestRedriveSurvivesRestoredDLQ(t *testing.T) {
	t.Parallel()
	s := newStack(t, dlStackBindings)
	backup := filepath.Join(s.dir, "dlq.sqlite")
	for i := range 3 {
		s.dlCLI(t, "queue", "send", "q", "m"+strconv.Itoa(i))
	}
	s.dlKillAll(t)
	s.dlCLI(t, "backup", "dlq", backup)
	s.dlCLI(t, "queue", "redrive", "dlq")
	if n := s.dlAckAll(t, "q"); n != 3 {
		t.Fatalf("acked %d redriven messages; want 3", n)
	}
	s.dlCLI(t, "restore", "dlq", backup)
	s.dlCLI(t, "queue", "redrive", "dlq")
	s.dlWant(t, "dlq", 0)
	s.dlWant(t, "q", 3)
}

// craftMoves writes intents into the queue database file at path, as a
// hostile or careless writer could: message id i+1 is hidden and recorded
// as being moved to dests[i].
func craftMoves(t *testing.T, path string, dests ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: path}).String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UnixMilli()
	for i, d := range dests {
		if _, err := db.Exec(`UPDATE messages SET visible_at = ?1 WHERE id = ?2`, now+3600000, i+1); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO lc_moves (message_id, token, dest, kind, binding, attempts, last_receipt, started_at)
VALUES (?1, ?2, ?3, 'dead-letter', 'q', 1, NULL, ?4)`, i+1, fmt.Sprintf("crafted-%d", i), d, now-60000); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCraftedMovesRefusedAndReported is issue 11, item 2: a backup whose
// lc_moves send messages to /any/dir and to memory:void is refused by
// restore, naming both; the same rows written into the live store make
// no write anywhere: receive and up leave them in place, and check,
// status and up's health report them.
func TestCraftedMovesRefusedAndReported(t *testing.T) {
	t.Parallel()
	s := newStack(t, dlStackBindings)
	s.dlCLI(t, "queue", "send", "q", "one")
	s.dlCLI(t, "queue", "send", "q", "two")
	backup := filepath.Join(s.dir, "q.sqlite")
	s.dlCLI(t, "backup", "q", backup)
	craftMoves(t, backup, "/any/dir", "memory:void")

	code, out, stderr := runCLI(t, "restore", "q", backup, "-f", s.file)
	if code != 1 || !strings.Contains(stderr, `"/any/dir"`) || !strings.Contains(stderr, `"memory:void"`) || !strings.Contains(stderr, "nothing was changed") {
		t.Fatalf("restore of the crafted backup: exit %d\n%s%s; want exit 1 naming /any/dir and memory:void", code, out, stderr)
	}
	if total, due := s.dlStats(t, "q"); total != 2 || due != 2 {
		t.Fatalf("after the refused restore q holds %d messages, %d due; want 2, 2 (unchanged)", total, due)
	}

	// The same rows in the live store, toward a directory outside dataDir
	// and toward memory.
	elsewhere := filepath.Join(s.dir, "elsewhere")
	_, file := s.storeFile("queue", "q")
	craftMoves(t, file, elsewhere, "memory:void")
	if got := s.dlReceive(t, "q", "1s"); len(got) != 0 {
		t.Fatalf("receive delivered %d messages being moved", len(got))
	}
	code, out, stderr = runCLI(t, "check", "-f", s.file)
	if code != 1 || !strings.Contains(out, "q: move:") || !strings.Contains(out, elsewhere) || !strings.Contains(out, "memory:void") {
		t.Errorf("check: exit %d\n%s%s; want exit 1 and a move problem naming both destinations", code, out, stderr)
	}
	if out := s.dlCLI(t, "status"); !strings.Contains(out, "unfinished dead-letter move(s) toward "+elsewhere) {
		t.Errorf("status does not report the moves:\n%s", out)
	}
	p, _ := s.up(t)
	if h := s.runtime(t).health("q"); !strings.Contains(h, elsewhere) || !strings.Contains(h, "memory:void") {
		t.Errorf("up's health of q = %q; want the moves toward %s and memory:void", h, elsewhere)
	}
	p.waitLine(0, eventTimeout, "left in place", elsewhere)
	p.signal(syscall.SIGTERM)
	if code := p.waitExit(stopLimit); code != 0 {
		t.Fatalf("up exited %d:\n%s", code, p.stderr())
	}
	if _, err := os.Stat(elsewhere); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (%v): a crafted move steered a write", elsewhere, err)
	}
	s.dlWant(t, "q", 2) // left in place
	s.dlWant(t, "dlq", 0)
}
