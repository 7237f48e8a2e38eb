package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/localcloud/localcloud/internal/testutil"
)

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		pos  []string
		json bool
		f    string
	}{
		{[]string{"b", "k"}, []string{"b", "k"}, false, ""},
		{[]string{"--json", "b", "k"}, []string{"b", "k"}, true, ""},
		{[]string{"b", "--json", "k", "-f", "x.yaml"}, []string{"b", "k"}, true, "x.yaml"},
		{[]string{"b", "k", "-f=y.yaml", "--json"}, []string{"b", "k"}, true, "y.yaml"},
		{[]string{"b", "--", "-5", "--json"}, []string{"b", "-5", "--json"}, false, ""},
		{[]string{"b", "-", "--json"}, []string{"b", "-"}, true, ""},
	}
	for _, c := range cases {
		fs := newFlagSet("t")
		f := stackFlag(fs)
		j := jsonFlag(fs)
		pos, err := parseArgs(fs, c.args)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !reflect.DeepEqual(pos, c.pos) || *j != c.json || *f != c.f {
			t.Errorf("%q: pos %q json %v f %q; want %q %v %q", c.args, pos, *j, *f, c.pos, c.json, c.f)
		}
	}
	fs := newFlagSet("t")
	if _, err := parseArgs(fs, []string{"b", "--nope"}); err == nil {
		t.Error("unknown flag after a positional argument was accepted")
	}
	if _, err := parseArgs(newFlagSet("t"), []string{"b", "-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h after a positional argument: %v", err)
	}
}

func TestOpsCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"kv", "-h"}, {"kv", "get", "-h"}, {"kv", "scan", "k", "--help"}, {"help", "kv"},
		{"queue", "--help"}, {"queue", "receive", "-h"}, {"check", "-h"}, {"backup", "-h"},
		{"restore", "-h"}, {"migrate", "-h"}, {"bench", "-h"}, {"bench", "queue", "-h"},
	} {
		code, stdout, stderr := runApp(t, nil, args...)
		if code != exitOK || !strings.Contains(stdout, "Usage:") || !strings.Contains(stdout, "Example") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	_, stdout, _ := runApp(t, nil, "-h")
	for _, w := range []string{"kv ", "queue ", "check ", "backup ", "restore ", "bench "} {
		if !strings.Contains(stdout, "\n  "+w) {
			t.Errorf("usage lacks %q", w)
		}
	}
	if strings.Contains(stdout, benchWorkerName) {
		t.Error("usage lists the hidden bench-worker")
	}
}

func TestOpsUsageMistakesExit2(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"kv"}, "kv needs a subcommand: delete, exists, get, put, scan"},
		{[]string{"kv", "fetch"}, `unknown kv subcommand "fetch"`},
		{[]string{"kv", "get", "-f", stack, "carts"}, "kv get needs BINDING KEY"},
		{[]string{"kv", "get", "-f", stack, "carts", "a", "b"}, `extra argument "b"`},
		{[]string{"kv", "put", "-f", stack, "carts", "k", "v", "--ttl", "-1s"}, "--ttl must be positive"},
		{[]string{"kv", "scan", "-f", stack, "carts", "k", "--limit", "0"}, "--limit must be between 1 and 1000"},
		{[]string{"queue", "send", "-f", stack, "orders-dlq", "{", "--json-payload"}, "not valid JSON"},
		{[]string{"queue", "receive", "-f", stack, "orders-dlq", "--wait", "-1s"}, "--wait must not be negative"},
		{[]string{"queue", "peek", "-f", stack, "orders-dlq", "--limit", "5000"}, "--limit must be between 1 and 1000"},
		{[]string{"backup", "-f", stack, "carts"}, "backup needs BINDING DEST"},
		{[]string{"restore", "-f", stack}, "restore needs BINDING SRC"},
		{[]string{"migrate", "-f", stack}, "migrate needs BINDING --to ENGINE"},
		{[]string{"migrate", "-f", stack, "carts", "--to", "postgres"}, `--to must be jetstream or sqlite, got "postgres"`},
		{[]string{"migrate", "-f", stack, "carts", "--to", "jetstream", "--batch", "0"}, "--batch must be between 1 and 1000, got 0"},
		{[]string{"migrate", "-f", stack, "carts", "--to", "jetstream", "--wait", "-1s"}, "--wait must be between 0 and 12h, got -1s"},
		{[]string{"bench", "disk"}, `bench runs kv or queue, got "disk"`},
		{[]string{"bench", "kv", "--batch", "5"}, "--batch applies to the queue bench only"},
		{[]string{"bench", "--workers", "0"}, "--workers must be 1-1024"},
		{[]string{"bench", "--durability", "weak"}, "--durability"},
	} {
		code, _, stderr := runApp(t, nil, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, "Try: ") {
			t.Errorf("%q: exit %d, stderr %q, want exit 2 with %q", c.args, code, stderr, c.want)
		}
	}
}

// runIn runs the app with stdin and returns exit code and output.
func runIn(t *testing.T, stdin []byte, args ...string) (int, []byte, string) {
	t.Helper()
	var stdout, stderr testutil.SyncBuffer
	a := newApp(bytes.NewReader(stdin), &stdout, &stderr)
	a.lookupEnv = func(string) (string, bool) { return "", false }
	code := a.main(context.Background(), args)
	return code, []byte(stdout.String()), stderr.String()
}

func TestKVCommandsInProcess(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	value := make([]byte, 4096)
	for i := range value {
		value[i] = byte(rand.IntN(256))
	}
	value[0], value[1] = 0, '\n'
	if code, _, stderr := runIn(t, nil, "kv", "get", "carts", "k", "-f", stack); code != 1 || !strings.Contains(stderr, "has no store yet") {
		t.Errorf("get before any store: %d %s", code, stderr)
	}
	if code, _, stderr := runIn(t, value, "kv", "put", "-f", stack, "carts", "bin:1", "-"); code != 0 {
		t.Fatalf("put: %d %s", code, stderr)
	}
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "bad key!"); code != exitUsage || !strings.Contains(stderr, "INVALID_INPUT: key") {
		t.Errorf("bad key: exit %d, %s", code, stderr)
	}
	code, out, stderr := runIn(t, nil, "kv", "get", "-f", stack, "carts", "bin:1")
	if code != 0 || !bytes.Equal(out, value) {
		t.Fatalf("get: exit %d, %d bytes (want %d), %s", code, len(out), len(value), stderr)
	}
	code, out, _ = runIn(t, nil, "kv", "get", "-f", stack, "carts", "missing", "--json")
	var g struct {
		Found bool `json:"found"`
	}
	if code != 1 || json.Unmarshal(out, &g) != nil || g.Found {
		t.Errorf("get missing --json: %d %s", code, out)
	}
	for i := range 5 {
		if code, _, stderr := runIn(t, nil, "kv", "put", "-f", stack, "carts", "page:"+string(rune('a'+i)), "v"); code != 0 {
			t.Fatal(stderr)
		}
	}
	code, out, stderr = runIn(t, nil, "kv", "scan", "-f", stack, "carts", "page:", "--limit", "2")
	if code != 0 || strings.Count(string(out), "\n") != 3 || !strings.Contains(stderr, "--cursor c1.") {
		t.Errorf("scan one page: %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = runIn(t, nil, "kv", "scan", "-f", stack, "carts", "page:", "--limit", "2", "--all", "--json")
	var sc kvScanJSON
	if code != 0 || json.Unmarshal(out, &sc) != nil || len(sc.Items) != 5 || sc.NextCursor != "" || *sc.Items[4].ValueText != "v" {
		t.Errorf("scan --all: %d %s", code, out)
	}
	if code, out, _ := runIn(t, nil, "kv", "exists", "-f", stack, "carts", "page:a"); code != 0 || string(out) != "true\n" {
		t.Errorf("exists: %d %q", code, out)
	}
	if code, _, _ := runIn(t, nil, "kv", "put", "-f", stack, "carts", "page:a", "x", "--if-not-exists"); code != 1 {
		t.Errorf("put --if-not-exists on a live key: exit %d", code)
	}
	if code, _, _ := runIn(t, nil, "kv", "delete", "-f", stack, "carts", "page:a"); code != 0 {
		t.Error("delete failed")
	}
	if code, out, stderr := runIn(t, nil, "kv", "exists", "-f", stack, "carts", "page:a"); code != 1 || string(out) != "false\n" || stderr != "" {
		t.Errorf("exists after delete: %d %q %q", code, out, stderr)
	}
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "orders-dlq", "k"); code != 1 || !strings.Contains(stderr, "is a queue, not a kv") {
		t.Errorf("kv on a queue: %d %s", code, stderr)
	}
	if code, _, stderr := runIn(t, nil, "kv", "get", "-f", stack, "nope", "k"); code != 1 || !strings.Contains(stderr, `no kv binding called "nope"; it has carts`) {
		t.Errorf("unknown binding: %d %s", code, stderr)
	}
}

func TestQueueCommandsInProcess(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	run := func(stdin string, args ...string) (int, string, string) {
		code, out, errOut := runIn(t, []byte(stdin), append([]string{"queue"}, append(args, "-f", stack)...)...)
		return code, string(out), errOut
	}
	if code, _, stderr := run("", "send", "orders-dlq", "first"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := run(`{"n": 2}`, "send", "orders-dlq", "-", "--json-payload"); code != 0 {
		t.Fatal(stderr)
	}
	var recv queueReceiveJSON
	code, out, stderr := run("", "receive", "orders-dlq", "--json", "--visibility", "1m")
	if code != 0 || json.Unmarshal([]byte(out), &recv) != nil || len(recv.Messages) != 1 || recv.Messages[0].Payload != "first" || recv.Messages[0].Attempt != 1 {
		t.Fatalf("receive: %d %s %s", code, out, stderr)
	}
	first := recv.Messages[0].Receipt
	var peek queuePeekJSON
	code, out, _ = run("", "peek", "orders-dlq", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &peek) != nil || len(peek.Messages) != 2 {
		t.Fatalf("peek: %d %s", code, out)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, peek.Messages[1].JSON)
	if m := peek.Messages; m[0].State != stateInFlight || m[0].Attempt != 1 || m[1].State != stateDue || compact.String() != `{"n":2}` {
		t.Errorf("peek = %+v", m)
	}
	// nack makes it due again; the old receipt then goes stale on the next delivery.
	if code, _, stderr := run("", "nack", "orders-dlq", first); code != 0 {
		t.Fatal(stderr)
	}
	code, out, _ = run("", "receive", "orders-dlq", "--max", "10")
	if code != 0 || !strings.Contains(out, "attempt=2 type=text") || !strings.Contains(out, "attempt=1 type=json") {
		t.Errorf("receive after nack:\n%s", out)
	}
	code, _, stderr = run("", "ack", "orders-dlq", first)
	if code != 1 || !strings.Contains(stderr, "stale receipt") {
		t.Errorf("ack of a stale receipt: %d %s", code, stderr)
	}
	// Not a receipt: the library's no-op, which the CLI must not report
	// as an ack.
	code, _, stderr = run("", "ack", "orders-dlq", "not-a-receipt")
	if code != 1 || !strings.Contains(stderr, "not a receipt this store issues") || !strings.Contains(stderr, "nothing acked") {
		t.Errorf("ack of junk: %d %s", code, stderr)
	}
	var st queueStatsJSON
	code, out, _ = run("", "stats", "orders-dlq", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Total != 2 || st.InFlight != 2 || st.Due != 0 {
		t.Errorf("stats: %d %s", code, out)
	}
	if code, _, stderr := run("no\n", "purge", "orders-dlq"); code != 1 || !strings.Contains(stderr, "not confirmed") {
		t.Errorf("purge answered no: %d %s", code, stderr)
	}
	if code, out, stderr := run("yes\n", "purge", "orders-dlq"); code != 0 || out != "" || !strings.Contains(stderr, "held 2 messages") {
		t.Errorf("purge answered yes: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := run("", "receive", "orders-dlq"); code != 0 || !strings.Contains(stderr, "no message due") {
		t.Errorf("receive on empty: %d %s", code, stderr)
	}
}

func TestCheckBackupRestoreInProcess(t *testing.T) {
	t.Parallel()
	stack := writeStack(t, goodStack)
	dir := filepath.Dir(stack)
	// Nothing provisioned: check passes and says so.
	code, out, stderr := runIn(t, nil, "check", "-f", stack)
	if code != 0 || !strings.Contains(string(out), "carts: not provisioned yet") {
		t.Fatalf("check of an empty stack: %d %s %s", code, out, stderr)
	}
	if code, _, stderr := runIn(t, nil, "kv", "put", "-f", stack, "carts", "k", "one"); code != 0 {
		t.Fatal(stderr)
	}
	backups := filepath.Join(dir, "backups")
	if err := os.Mkdir(backups, 0o700); err != nil {
		t.Fatal(err)
	}
	var b backupJSON
	code, out, stderr = runIn(t, nil, "backup", "-f", stack, "carts", backups, "--json")
	if code != 0 || json.Unmarshal(out, &b) != nil || filepath.Dir(b.Backup) != backups || !strings.HasPrefix(filepath.Base(b.Backup), "carts-") {
		t.Fatalf("backup into a folder: %d %s %s", code, out, stderr)
	}
	if code, _, _ := runIn(t, nil, "kv", "put", "-f", stack, "carts", "k", "two"); code != 0 {
		t.Fatal("put")
	}
	var r restoreJSON
	code, out, stderr = runIn(t, nil, "restore", "carts", b.Backup, "-f", stack, "--json")
	if code != 0 || json.Unmarshal(out, &r) != nil || !strings.Contains(r.Replaced, ".replaced-") {
		t.Fatalf("restore: %d %s %s", code, out, stderr)
	}
	if code, out, _ := runIn(t, nil, "kv", "get", "-f", stack, "carts", "k"); code != 0 || string(out) != "one" {
		t.Errorf("after restore: %q", out)
	}
	// A queue backup into a kv binding is refused before anything changes.
	if code, _, _ := runIn(t, nil, "queue", "send", "-f", stack, "orders-dlq", "m"); code != 0 {
		t.Fatal("send")
	}
	qb := filepath.Join(dir, "q.sqlite")
	if code, _, stderr := runIn(t, nil, "backup", "-f", stack, "orders-dlq", qb); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr = runIn(t, nil, "restore", "-f", stack, "carts", qb)
	if code != 1 || !strings.Contains(stderr, `foreign format marker "localqueue.v1"`) || !strings.Contains(stderr, "nothing was changed") {
		t.Errorf("queue backup into kv: %d %s", code, stderr)
	}
	code, out, _ = runIn(t, nil, "check", "-f", stack, "--json")
	var c checkJSON
	if code != 0 || json.Unmarshal(out, &c) != nil || !c.OK || len(c.Stores) != 2 {
		t.Errorf("check: %d %s", code, out)
	}
}
